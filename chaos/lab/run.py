"""Run one scenario against a container cluster and judge its recorded history.

The run, Jepsen-style: bring up the cluster, submit the goal, play the fault
timeline through the nemesis while a recorder (``chaos.lab.recorder``) samples
every member's store (from the host) once a second, end every fault, wait for the
plan to converge, then hand the history to the checkers. Everything is written
under the report directory: ``report.json``, ``report.md``, ``report.html``,
``history.json`` (faults and digest samples), ``logs/NAME.log`` and each member's
data directory.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import structlog

from agents.core.fold import fold
from agents.llm.scripted import STRATEGIES
from agents.syncing import LATEST_WAKE
from chaos.checkers import Verdict, check
from chaos.checkers.finality import revocations
from chaos.history import DiskFailure, History, MemberHistory, Restart
from chaos.lab.cluster import PAGE_PORT, LabCluster, LabError, MemberSpec
from chaos.lab.disk import ShimError, failing_fsync_shim
from chaos.lab.nemesis import Nemesis
from chaos.lab.recorder import (
    SAMPLE_S,
    Recorder,
    read_events,
    read_refused,
    read_shown,
    shows_complete,
)
from chaos.lab.scenario import Scenario, Step
from chaos.report_html import render as render_html
from chaos.windows import in_force

log = structlog.get_logger("chaos.run")
# a converged cluster's stores must hold still this long (same digest, complete, the same
# number of events in every store, unchanged) before they are read for the checkers: a vote
# published as the plan completed reached 9 of 10 stores between the settling sample and the
# final read, and event_sets failed on an event still in flight
QUIET_S = 2.0
TOXIPROXY_BINARY = Path.home() / ".cache" / "swarm-plan" / "bin" / "toxiproxy-server"
# how long a member whose disk failed may run on: its next own event or change shown fsyncs
# and must end it (a claim holder renews its claim well within this)
DISK_STOP_S = 60.0


class ScenarioRun:
    def __init__(self, scenario: Scenario, report_dir: Path, progress: Callable[[str], None] = print,
                 log_level: str = "info") -> None:
        self.scenario = scenario
        self.report_dir = report_dir
        self.say = progress
        run_id = re.sub(r"[^a-z0-9-]", "-", f"{scenario.name}-{scenario.seed}".lower())[:40]
        model_file = None
        if scenario.llm == "llama":
            from agents.llm.model_files import resolve

            model_file = resolve(None).path
        disk_shim = None
        if any(step.action in ("disk_fails", "disk_full") for step in scenario.timeline):
            try:
                disk_shim = failing_fsync_shim()
            except ShimError as exc:
                raise LabError(f"{scenario.name}: {exc}") from None
        self.cluster = LabCluster(
            run_id=run_id, root=report_dir, cluster=f"lab-{run_id}", llm=scenario.llm,
            llm_latency=scenario.llm_latency_s, model_file=model_file, log_level=log_level,
            toxiproxy_binary=TOXIPROXY_BINARY if TOXIPROXY_BINARY.exists() else None, disk_shim=disk_shim,
        )
        self.history = History(scenario=scenario.name, seed=scenario.seed, shape=dict(scenario.shape),
                               quorum=scenario.quorum, convergence_bound_s=scenario.complete_within_s,
                               show_within_s=2 * LATEST_WAKE + 2 * SAMPLE_S)
        self.t0 = time.monotonic()
        self.t0_wall_ms = time.time() * 1000
        self.nemesis = Nemesis(self.cluster, self._fault)
        self.recorder = Recorder(self.cluster, self.history, self.now)
        self._held_before: dict[str, set[str]] = {}
        self._wiped: set[str] = set()
        self._failing_disks: set[str] = set()  # replaced when the member restarts
        self._full_disks: dict[str, tuple[float, int]] = {}  # since when (and its log's length then)
        self.memory_mb: dict[str, float | None] = {}  # each member's container memory at the end
        self._chosen_holder: str | None = None
        self.page = {"told": 0, "failed": 0}  # times the observers' pages were sent the faults in force
        self._latest_faults = b"[]"
        self._page_wake = threading.Event()
        threading.Thread(target=self._page_teller, name="page-teller", daemon=True).start()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _fault(self, kind: str, detail: str) -> None:
        self.history.fault(self.now(), kind, detail)
        self.say(f"  {self.now():7.1f}s  {kind} {detail}".rstrip())
        self._tell_page()

    def _tell_page(self) -> None:
        """Queue the faults in force now for the observers' live pages: a thread of its own
        sends the newest list, so a slow or unreachable page never delays the nemesis."""
        self._latest_faults = json.dumps(in_force(self.history, self.now())).encode()
        self._page_wake.set()

    def _page_teller(self) -> None:
        while True:
            self._page_wake.wait()
            self._page_wake.clear()
            self._send_faults(self._latest_faults)

    def _send_faults(self, faults: bytes) -> None:
        """PUT ``faults`` to every running observer's page (best effort: a page that cannot be
        reached is counted, never fails the run)."""
        for name, member in list(self.cluster.members.items()):
            token_file = member.data_dir / "web.token"
            if member.spec.role != "observer" or member.state != "running" or not token_file.exists():
                continue
            try:
                request = urllib.request.Request(
                    f"http://{self.cluster.ip(name)}:{PAGE_PORT}/faults", data=faults, method="PUT",
                    headers={"Authorization": f"Bearer {token_file.read_text().strip()}"})
                with urllib.request.urlopen(request, timeout=2):
                    self.page["told"] += 1
            except Exception as exc:
                self.page["failed"] += 1
                log.info("could not tell the page the faults", observer=name, error=str(exc)[:200])

    # --- the run --------------------------------------------------------------

    def run(self) -> list[Verdict]:
        scenario = self.scenario
        for name in scenario.member_names():
            role = scenario.role_of(name)
            spec = MemberSpec(name, role, STRATEGIES[(int(name.rsplit("-", 1)[1]) - 1) % len(STRATEGIES)],
                              scenario.skew_ms.get(name, 0))
            member = self.cluster.add(spec)
            self.history.members[name] = MemberHistory(name, role, member.peer_id, late=name in scenario.late)
        for name in scenario.toxiproxy:
            self.nemesis.proxy(name)
        first = [n for n in scenario.member_names() if n not in scenario.late]
        for name in first:
            self.cluster.start(name)
            self.nemesis.after_start(name)
        self.cluster.wait_listening(first)
        self.say(f"  {len(first)} members up; submitting the goal")
        for name in first:
            if scenario.role_of(name) == "observer":
                self.say(f"  the live page: http://{self.cluster.ip(name)}:{PAGE_PORT}/ ({name})")
        answer = self.cluster.submit(scenario.goal, scenario.quorum, scenario.claim_lease_s, scenario.round_s)
        submitted = re.search(r"goal ([0-9a-f]{64}) submitted", answer)
        if submitted is None:  # durability judges the goal by its id: a run without it would not
            raise LabError(f"the goal's client did not say which goal it submitted: {answer[-300:]!r}")
        self.history.goal = submitted.group(1)
        by_peer = {m.peer_id: n for n, m in self.cluster.members.items()}
        held_by = re.search(r"held by (\w+(?:, \w+)*)", answer)
        holders = held_by.group(1).split(", ") if held_by else []
        if not holders or any(peer not in by_peer for peer in holders):  # durability holds them to their word
            raise LabError(f"the goal's client did not name the members that hold its goal: {answer[-300:]!r}")
        for peer in holders:
            self.history.goal_held_by[by_peer[peer]] = 0.0  # before any fault
        self.t0 = time.monotonic()
        self.t0_wall_ms = time.time() * 1000
        self._fault("submit", answer[:80])
        self.recorder.start()
        try:
            for step in scenario.timeline:
                self._wait_for(step)
                self._apply(step)
            for name in list(self._full_disks):  # disks the timeline left full or failing: working again
                self._free_disk(name)
            for name in [n for n in self._failing_disks if self.cluster.members[n].state == "running"]:
                self._failing_disks.discard(name)
                self.nemesis.replace_disk(name)
            self.nemesis.clear_all()
            for name, member in self.cluster.members.items():
                if member.state == "paused":
                    self.nemesis.unpause(name)
            self.history.last_fault_at = self.now()
            self._settle()
        finally:
            self.recorder.stop()
            self._finish()
        return check(self.history, scenario.invariants)

    def _wait_for(self, step: Step) -> None:
        if step.at == "complete":
            deadline = time.monotonic() + self.scenario.complete_within_s
            while self.recorder.first_complete is None and time.monotonic() < deadline:
                time.sleep(0.2)
        else:
            delay = float(step.at) - self.now()
            if delay > 0:
                time.sleep(delay)

    def _apply(self, step: Step) -> None:
        n, target = self.nemesis, step.target
        if step.action in ("kill", "stop", "pause", "unpause", "restart", "start", "disk_fails", "disk_full",
                           "disk_free") and target == "claim holder":
            target = self._claim_holder()
        if step.action in ("kill", "stop"):
            self._note_held(target)
            n.kill(target) if step.action == "kill" else n.stop(target)
        elif step.action == "pause":
            n.pause(target)
        elif step.action == "unpause":
            n.unpause(target)
        elif step.action in ("restart", "start"):
            self._start(target)
        elif step.action == "restart_all":
            running = self.cluster.running()
            for name in running:
                self._note_held(name)
                n.kill(name)
            for name in running:
                self._start(name)
        elif step.action == "partition":
            n.partition(target)
        elif step.action == "oneway":
            n.oneway(*target)
        elif step.action == "hostile":
            self.cluster.hostile(target)
            self.history.hostile = ("sybil", "garbage", "sync-garbage", "stall")
            self._fault("hostile", f"a never-admitted peer attacks for {target:.0f}s")
        elif step.action == "wipe":
            self._note_held(target)
            n.wipe(target)
            self._wiped.add(target)
        elif step.action == "disk_fails":
            self._fail_disk(target)
        elif step.action == "disk_full":
            if self.cluster.members[target].state != "running":
                raise LabError(f"the timeline fills the disk of {target}, which is not running")
            if target in self._full_disks:  # 'claim holder' and a name, the same member this run
                raise LabError(f"the timeline fills the disk of {target} again while it is full: the claim holder "
                               "turned out to be the member named by another disk_full; free it first")
            self._full_disks[target] = (self.now(), len(self.cluster.logs(target)))
            n.fill_disk(target)
        elif step.action == "disk_free":
            self._free_disk(target)
        elif step.action == "heal":
            n.heal()
        elif step.action == "loss":
            n.set_loss(target["member"], float(target.get("probability", 0.1)))
        elif step.action == "bandwidth":
            n.set_bandwidth(target["member"], target.get("rate"))
        elif step.action == "toxic":
            n.toxic(target["member"], str(target.get("type", "latency")), dict(target.get("attributes") or {}),
                    str(target.get("stream", "downstream")), float(target.get("toxicity", 1.0)))
        elif step.action == "untoxic":
            n.clear_toxics(target)

    def _fail_disk(self, name: str) -> None:
        """Fail the member's disk and wait for it to stop by itself (``DISK_STOP_S`` at most),
        recording how it ended for the ``disk_failure`` checker."""
        if self.cluster.members[name].state != "running":
            raise LabError(f"the timeline fails the disk of {name}, which is not running")
        said_before = len(self.cluster.logs(name))
        failed_at = self.now()
        self.nemesis.fail_disk(name)
        self._failing_disks.add(name)
        deadline = time.monotonic() + DISK_STOP_S
        while (code := self.cluster.exit_code(name)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        record = self.history.members[name]
        if code is None:
            record.disk_failures.append(DiskFailure(round(failed_at, 3), None))
            self._fault("note", f"{name} still running {DISK_STOP_S:.0f}s after its disk failed")
            return
        self._stopped_by_itself(name, failed_at, code, self.cluster.logs(name)[said_before:],
                                "its disk failed an fsync")

    def _free_disk(self, name: str) -> None:
        """Give the member's disk room again, recording whether the member ran on through the
        full disk (it must: a full disk refuses writes, and the member tries them again)."""
        if name not in self._full_disks:
            raise LabError(f"the timeline frees the disk of {name}, which no disk_full step filled")
        full_at, said_before = self._full_disks.pop(name)
        self.nemesis.free_disk(name)
        if self.cluster.members[name].state != "running":  # the nemesis stopped it meanwhile: nothing to judge
            return
        code = self.cluster.exit_code(name)
        words = self.cluster.logs(name)[said_before:]
        refused = words.count("store refused events")  # evidence that the full disk took effect
        if code is None:
            self.history.members[name].disk_failures.append(
                DiskFailure(round(full_at, 3), None, kind="full", refused=refused))
            return
        self._stopped_by_itself(name, full_at, code, words, "on a full disk", kind="full", refused=refused)

    def _note_held(self, name: str) -> None:
        """What the member's store holds as it goes down: its restart is judged against it."""
        self._held_before[name] = {e.id for e in read_events(self.cluster.members[name].data_dir)}

    def _stopped_by_itself(self, name: str, since: float, code: int, words: str, why: str, **kind: object) -> None:
        """Record a member whose process ended by itself after a disk fault at ``since``, having
        said ``words`` meanwhile: a stopped member from now on, for the checkers and its restart."""
        self.history.members[name].disk_failures.append(DiskFailure(
            round(since, 3), round(self.now(), 3), code, words[-3000:], "Traceback (most recent call last)" in words,
            **kind))  # type: ignore[arg-type]
        self._note_held(name)
        self.cluster.members[name].state = "stopped"
        self._fault("crash", f"{name} (it stopped itself: {why}; exit {code})")

    def _start(self, name: str) -> None:
        member = self.cluster.members[name]
        if name in self._failing_disks and member.state == "running":
            # it ran on (disk_failure says so): a failing disk is replaced with the machine off
            self._note_held(name)
            self.nemesis.kill(name)
        if member.state in ("running", "paused"):
            raise LabError(f"the timeline starts {name}, which is already running")
        restarting = member.state in ("killed", "stopped")
        if name in self._failing_disks:
            self._failing_disks.discard(name)
            self.nemesis.replace_disk(name)
        self.nemesis.start(name)
        if restarting and name in self._held_before:
            after = {e.id for e in read_events(member.data_dir)}
            before = self._held_before.pop(name)
            wiped = name in self._wiped
            self._wiped.discard(name)
            self.history.members[name].restarts.append(
                Restart(round(self.now(), 3), len(before), tuple(sorted(before - after)), "wipe" if wiped else ""))
        elif not restarting:
            self.history.members[name].started_at = round(self.now(), 3)

    def _claim_holder(self, timeout: float = 60.0) -> str:
        """The member that held a claim when the scenario first asked (waits for one); later
        steps naming the claim holder mean that same member (e.g. to restart it)."""
        if self._chosen_holder is not None:
            return self._chosen_holder
        by_peer = {m.peer_id: n for n, m in self.cluster.members.items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for tree in list(self.recorder.trees.values()):
                for node in tree.nodes.values():
                    if node.status == "claimed" and by_peer.get(node.executor) in self.cluster.running():
                        self._chosen_holder = by_peer[node.executor]
                        return self._chosen_holder
            time.sleep(0.2)
        raise LabError(f"no executor held a claim within {timeout:.0f}s; nothing to kill")

    def _settle(self) -> None:
        """Wait until every running member holds the same complete plan, every store has
        held still for ``QUIET_S`` (nothing in flight for the final read to catch half-way)
        and every running observer has shown the plan complete (a pull may leave its fold a
        sync interval behind its store; ``observer_truth`` judges what it showed), or the
        bound passes. ``converged_at`` is the first sample that agreed."""
        deadline = time.monotonic() + self.scenario.complete_within_s
        agreed: tuple | None = None
        agreed_at = 0.0
        while time.monotonic() < deadline:
            time.sleep(SAMPLE_S)  # the recorder thread samples meanwhile
            running = self.cluster.running()
            trees = [self.recorder.trees.get(n) for n in running]
            counts = {self.recorder.counts.get(n) for n in running}
            digests = {t.digest for t in trees if t is not None}
            if not (running and all(t is not None and t.complete for t in trees) and len(digests) == 1
                    and len(counts) == 1):
                agreed = None
                continue
            if self.history.converged_at is None:
                self.history.converged_at = round(self.now(), 3)
            state = (tuple(running), *digests, *counts)
            if state != agreed:
                agreed, agreed_at = state, time.monotonic()
            elif time.monotonic() - agreed_at >= QUIET_S and all(
                    shows_complete(self.cluster.members[n].data_dir) for n in running
                    if self.history.members[n].role == "observer"):
                return

    def _finish(self) -> None:
        self.history.ended_at = round(self.now(), 3)
        self.history.admitted = {m.peer_id for m in self.cluster.members.values()} | set(
            m["peer"] for m in self.cluster.admin.members())
        report = self.cluster.hostile_report()
        if report:
            self._fault("hostile-report", report[:200])
        logs = self.report_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for name, member in self.cluster.members.items():
            record = self.history.members[name]
            record.alive = member.state in ("running", "paused")
            if member.started_at is None:
                record.alive = False
                continue
            record.events = read_events(member.data_dir)
            record.shown = read_shown(member.data_dir, self.t0_wall_ms)
            record.refused = read_refused(member.data_dir)
            self.memory_mb[name] = self.cluster.memory_mb(name)
            tree = fold(record.events)
            record.digest, record.complete = tree.digest, tree.complete
            try:
                (logs / f"{name}.log").write_text(self.cluster.logs(name))
            except Exception as exc:
                log.warning("could not save log", member=name, error=str(exc)[:200])

    def close(self) -> None:
        self.cluster.close()


def write_reports(report_dir: Path, scenario: Scenario, history: History, verdicts: list[Verdict],
                  wall_s: float, memory_mb: dict[str, float | None] | None = None,
                  page: dict[str, int] | None = None) -> dict[str, object]:
    passed = all(v.passed for v in verdicts)
    report = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "passed": passed,
        "verdicts": [v.to_json() for v in verdicts],
        "description": scenario.description,
        "cluster": {**scenario.shape, "observer": scenario.observer, "quorum": scenario.quorum},
        "llm": {"backend": scenario.llm, "latency_s": scenario.llm_latency_s},
        "schedule": [{"at": s.at, "action": s.action, "target": s.target} for s in scenario.timeline],
        "faults": [{"at": f.at, "kind": f.kind, "detail": f.detail} for f in history.faults],
        "last_fault_at": round(history.last_fault_at, 3),
        "converged_at": history.converged_at,
        "ended_at": history.ended_at,
        "members": {n: {"peer": m.peer, "alive": m.alive, "late": m.late, "digest": m.digest,
                        "complete": m.complete, "completed_at": m.completed_at, "events": len(m.events),
                        "restarts": len(m.restarts), "shown": len(m.shown), "refused": m.refused,
                        "memory_mb": (memory_mb or {}).get(n)}
                    for n, m in history.members.items()},
        "revocations": revocations(history),
        "page": page or {},  # how often the observers' live pages were told the faults in force
        "wall_seconds": round(wall_s, 1),
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (report_dir / "history.json").write_text(json.dumps(
        {"faults": report["faults"], "samples": history.samples}, indent=1) + "\n")
    lines = [f"# Scenario {scenario.name} (seed {scenario.seed}): {'PASSED' if passed else 'FAILED'}", "",
             scenario.description, "",
             f"Cluster {scenario.shape['decomposer']}/{scenario.shape['scorer']}/{scenario.shape['executor']}"
             f"{' + observer' if scenario.observer else ''}, quorum {scenario.quorum}, model {scenario.llm}; "
             f"last fault ended at {history.last_fault_at:.1f}s, converged at "
             f"{history.converged_at if history.converged_at is not None else 'never'}s, run took {wall_s:.0f}s.",
             "", "| invariant | status | evidence |", "|---|---|---|"]
    lines += [f"| {v.invariant} | {v.status} | {v.evidence} |" for v in verdicts]
    lines += ["", "## Members", "", "| member | events stored | refused (by rule) | memory (MiB) |", "|---|---:|---|---:|"]
    lines += [f"| {n} | {len(m.events)} | {', '.join(f'{k} {v}' for k, v in sorted(m.refused.items())) or '-'} | "
              f"{(memory_mb or {}).get(n) or '-'} |" for n, m in sorted(history.members.items())]
    lines += ["", "## Faults", "", "| at (s) | fault | detail |", "|---:|---|---|"]
    lines += [f"| {f.at:.1f} | {f.kind} | {f.detail} |" for f in history.faults]
    (report_dir / "report.md").write_text("\n".join(lines) + "\n")
    (report_dir / "report.html").write_text(render_html(history, verdicts, f"Scenario {scenario.name} "
                                                        f"(seed {scenario.seed}): {'PASSED' if passed else 'FAILED'}"))
    return report
