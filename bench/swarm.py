"""Figures for the networked swarm (real processes, real libp2p on loopback).

* propagation: a client publishes goal events at a steady rate into a cluster of
  N silent observers; each observer logs when it admitted each event; the
  latency of an event is the time until the *last* member has it; the largest
  cluster again at lower rates (``BENCH_PROPAGATION_RATES=1,2``), since at 5 a
  second fifty members ask more CPU of two cores than they have.
* catch-up: a late joiner's ``swarm observe`` against members holding N events
  (``bench.catchup``).
* idle cost: N members of every role (scripted model, no goal) left to start, then
  the CPU each spends in a quiet window, its memory (PSS: the shared pages split
  among the processes that map them) and the peers dropped meanwhile; the 3-member
  cluster measured in the same run is the baseline.
* price of democracy: ``swarm plan --llm scripted`` with a fixed mean latency per
  model call, against the same model calls made one after another in one
  process (the accepted tree's splits, quorum votes and leaves, times the latency).
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import trio

from agents.cli.plan import Proc, free_port, provision, start_agent, stop, swarm_command
from agents.clusterdir import ClusterDir, credentials
from agents.core.events import GoalBody
from agents.keyfile import load_or_create
from agents.member import Member
from agents.net.p2p import MESH_LOG_INTERVAL, Libp2pNetwork
from agents.net.peer_book import ACTIVE_PEERS
from agents.store import EventStore
from bench.catchup import late_joins

PROPAGATION_SIZES = tuple(int(n) for n in os.environ.get("BENCH_PROPAGATION", "4,8,16,32,50").split(","))
PROPAGATION_RATE = 5.0  # probes a second at every size
PROPAGATION_DRAIN_S = 5.0  # seconds the members are left to take the last probes before they stop
PROPAGATION_RATES = tuple(float(r) for r in os.environ.get("BENCH_PROPAGATION_RATES", "1,2").split(","))
IDLE_SIZES = tuple(int(n) for n in os.environ.get("BENCH_IDLE", "3,9,21,30,50").split(","))


def _observers(root: Path, count: int, cluster: str) -> list[Proc]:
    admin = ClusterDir.init(root / "admin", cluster)
    procs = []
    for i in range(count):
        data_dir = root / f"observer-{i}"
        procs.append(Proc(f"observer-{i}", data_dir, free_port(), admin.admit_dir(data_dir, "observer").peer))
    admin.admit_dir(root / "publisher", "client")
    for proc in procs:
        start_agent_debug(proc, procs, cluster)
    deadline = time.monotonic() + max(60, 3 * count)  # 50 processes importing at once take a minute on 2 cores
    while not all((p.data_dir / "addrs").exists() for p in procs):
        if time.monotonic() > deadline:
            raise RuntimeError(f"observers did not start; see {root}/*/agent.log")
        time.sleep(0.1)
    return procs


def start_agent_debug(proc: Proc, peers: list[Proc], cluster: str) -> None:
    command = [*swarm_command(), "--log-level", "debug", "agent", "--role", "observer", "--data-dir",
               str(proc.data_dir), "--listen", f"/ip4/127.0.0.1/tcp/{proc.port}", "--cluster", cluster, "--no-mdns"]
    for peer in peers:
        if peer is not proc:
            command += ["--bootstrap", peer.address]
    log = open(proc.data_dir / "agent.log", "ab")  # noqa: SIM115
    proc.process = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def _members_cpu(procs: list[Proc]) -> float:
    return sum(_cpu_seconds(p.process.pid) for p in procs)


STEADY_WINDOW_S = 10.0  # a started cluster's CPU is read over windows this long
STEADY_CHANGE = 0.15  # and it has settled once one window is within this share of the one before
STEADY_FLOOR = 0.002  # or within this many cores per member (a small idle cluster's timers jitter more than 15%)
SATURATED = 0.9  # of the machine's cores: CPU this high reads steady while members are still starting
MOST_START_S = 240.0


def _steady(before: float, now: float, members: int, cores: int) -> bool:
    """Whether the members' CPU over a window (``now``, core-seconds per second) says they have
    started: close to the window before and below ``SATURATED`` (50 members on 2 cores take
    1.5-2 minutes to import, dial and form their meshes, all that time at 100%)."""
    return abs(now - before) <= max(STEADY_CHANGE * before, STEADY_FLOOR * members) and now < SATURATED * cores


class _Start:
    """Waiting until the members have started and formed their meshes: at least 3 + n/10 s
    (gossip heartbeats of 1 s), then until their CPU holds steady (``_steady``), or
    ``MOST_START_S`` has passed (a warning is printed then). A probe sent while dozens of
    processes start measures the start, not gossip; an idle reading then reads the start, not
    idling. ``pauses`` yields the sleeps, so that ``wait`` and trio's ``settle`` are one wait."""

    def __init__(self, procs: list[Proc]) -> None:
        self.procs = procs

    def pauses(self) -> Iterator[float]:
        began = time.monotonic()
        yield 3 + len(self.procs) / 10
        cores, before = len(os.sched_getaffinity(0)), None
        read = _members_cpu(self.procs)  # each reading ends one window and starts the next
        while time.monotonic() - began < MOST_START_S:
            yield STEADY_WINDOW_S
            last, read = read, _members_cpu(self.procs)
            now = (read - last) / STEADY_WINDOW_S
            if before is not None and _steady(before, now, len(self.procs), cores):
                return
            before = now
        self._warn()

    def wait(self) -> None:
        for pause in self.pauses():
            time.sleep(pause)

    async def settle(self) -> None:
        for pause in self.pauses():
            await trio.sleep(pause)

    def _warn(self) -> None:
        print(f"(warning: {len(self.procs)} members' CPU did not hold steady in {MOST_START_S:g} s; "
              "the next row reads a cluster still starting)", flush=True)


async def _publish(procs: list[Proc], cluster: str, count: int, rate: float,
                   root: Path) -> tuple[dict[str, float], float]:
    """Publish ``count`` probes at ``rate``; returns when each was sent and the CPU seconds the
    members spent on them: their CPU over the publishing window less their CPU over an idle
    window as long just before it."""
    creds = credentials(root / "publisher", load_or_create(root / "publisher"), "client")
    network = Libp2pNetwork(creds.identity, cluster, ["/ip4/127.0.0.1/tcp/0"], [p.address for p in procs], mdns=False,
                            credentials=creds)
    roster = (creds.identity.peer_id,)  # a roster is required; nobody votes on these probes
    sent: dict[str, float] = {}
    with EventStore.open(root / "publisher") as store:
        async with trio.open_nursery() as nursery:
            await nursery.start(network.run)
            member = Member(creds, store, network)
            await nursery.start(member.run)
            while len(network.connected_peers()) < min(len(procs), ACTIVE_PEERS):  # the bound (peer_book.py)
                await trio.sleep(0.1)
            await _Start(procs).settle()
            window = count / rate + 5
            start = _members_cpu(procs)
            await trio.sleep(window)
            idle = _members_cpu(procs) - start
            start = _members_cpu(procs)
            for i in range(count):
                event = await member.publish(GoalBody(text=f"probe {i}", scorers=roster, quorum=1, max_depth=1,
                                                      claim_lease_ms=1000, hold_limit_ms=1000, round_ms=1000))
                sent[event.id] = time.time()
                await trio.sleep(1 / rate)
            await trio.sleep(PROPAGATION_DRAIN_S)
            busy = _members_cpu(procs) - start
            nursery.cancel_scope.cancel()
    return sent, busy - idle


@dataclass(frozen=True)
class Propagation:
    """One ``propagation`` run: p50 and p99 (ms) of the time for a probe to reach every member,
    probes that never did, deliveries sync made (gossip had not brought them first), the most
    of those made to one member (all the probes when gossip brought a member none), members
    whose events-topic mesh was empty at one of their "gossip mesh" snapshots while the probes
    ran (one or two each: ``MESH_LOG_INTERVAL``), and the members' CPU per delivery (ms)."""

    p50: float
    p99: float
    missing: int
    by_sync: int
    most_by_sync_to_one: int
    out_of_mesh: int
    cpu_ms: float


def propagation(members: int, count: int = 40, rate: float = PROPAGATION_RATE) -> Propagation:
    """Publish ``count`` probes at ``rate`` into ``members`` observers and read from their logs
    when each member took each probe, and how."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cluster = f"bench-prop-{members}"
        procs = _observers(root, members, cluster)
        try:
            sent, cpu = trio.run(_publish, procs, cluster, count, rate, root)
        finally:
            stop(procs)
        # event -> member -> when it first took it, and how (a member logs its admissions in
        # the order it makes them): a member can log one event "admitted" twice (two pulls
        # from different peers running at once, each before the other stored it; a pull beside
        # gossip), and counting records, not members, called such an event seen by all, or
        # never, and one that gossip brought first a delivery sync made
        arrival: dict[str, dict[str, tuple[float, str]]] = {e: {} for e in sent}
        out_of_mesh: set[str] = set()
        # the probes' window, until the drain after the last ends (a member still running while
        # the others stop may well log an empty mesh after it)
        window = (min(sent.values(), default=0.0), max(sent.values(), default=0.0) + PROPAGATION_DRAIN_S)
        for proc in procs:
            for line in (proc.data_dir / "agent.log").read_text().splitlines():
                if '"admitted"' in line:
                    record = json.loads(line)
                    event_id = record.get("event_id")
                    if event_id in arrival:
                        at, times = datetime.fromisoformat(record["timestamp"]).timestamp(), arrival[event_id]
                        times.setdefault(proc.name, (at, str(record.get("via"))))
                elif '"gossip mesh"' in line:  # agents/net/p2p.py, every MESH_LOG_INTERVAL
                    record = json.loads(line)
                    at = datetime.fromisoformat(record["timestamp"]).timestamp()
                    if record["mesh"] == 0 and window[0] <= at <= window[1]:
                        out_of_mesh.add(proc.name)
        by_sync = collections.Counter(name for times in arrival.values()
                                      for name, (_, via) in times.items() if via == "sync")
        complete = sorted(max(at for at, _ in times.values()) - sent[e] for e, times in arrival.items()
                          if len(times) == members)
        deliveries = sum(len(times) for times in arrival.values())
        p50 = statistics.median(complete) * 1000 if complete else float("nan")
        p99 = complete[min(len(complete) - 1, int(len(complete) * 0.99))] * 1000 if complete else float("nan")
        return Propagation(p50, p99, len(sent) - len(complete), sum(by_sync.values()),
                           max(by_sync.values(), default=0), len(out_of_mesh),
                           cpu * 1000 / deliveries if deliveries else float("nan"))


def democracy(latency: float = 0.5) -> tuple[float, float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        run = subprocess.run([*swarm_command(), "plan", "Plan a two-week trip to Japan", "--out", tmp, "--llm", "scripted",
                              "--llm-latency", str(latency), "--timeout", "300"], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if run.returncode != 0:
            raise RuntimeError(run.stderr[-2000:])
        plan = json.loads((Path(tmp) / "plan.json").read_text())
    splits = sum(1 for n in plan["nodes"] if n["split"])
    leaves = sum(1 for n in plan["nodes"] if n["leaf"])
    needed = splits * (1 + plan["quorum"]) + leaves  # one proposal, quorum assessments per split; one run per leaf
    made = len(plan["proposals"]) + sum(len(p["approvals"]) + len(p["rejections"]) for p in plan["proposals"]) \
        + leaves + plan["duplicate_results"]
    return wall, needed * latency, needed, made


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _pss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


DROPS = ("peer unresponsive", "the connection is broken", "stream open wedged", "sync pull wedged")


def _drops(log: Path) -> int:
    text = log.read_text()
    return sum(text.count(kind) for kind in DROPS)


@dataclass(frozen=True)
class IdleCost:
    cpu_pct: float  # median CPU of one idle member, % of one core
    pss_mb: float  # median PSS of one member
    drops: int  # peers dropped in the window, all members together
    all_pct: float  # all members' CPU together, % of one core (200 is this whole 2-core machine)
    start_s: float  # from the first member's launch until its CPU held steady (the confirming window included)
    start_cpu_s: float  # median CPU seconds one member spent getting there


def idle_cost(members: int, window: float = 20.0) -> IdleCost:
    """N members of every role (no goal, scripted model) left to start (``_Start``), then
    read over ``window`` seconds."""
    roles = [(("decomposer", "scorer", "executor")[i % 3], i) for i in range(members)]
    with tempfile.TemporaryDirectory() as tmp:
        _, procs = provision(Path(tmp) / "members", "idle", roles)
        try:
            launched = time.monotonic()
            for (role, _), proc in zip(roles, procs, strict=True):
                start_agent(proc, role, procs, cluster="idle", llm="scripted")
            _Start(procs).wait()
            start_s = time.monotonic() - launched
            logs = [proc.data_dir / "agent.log" for proc in procs]
            drops_before = sum(_drops(log) for log in logs)
            before = [_cpu_seconds(proc.process.pid) for proc in procs]  # type: ignore[union-attr]
            time.sleep(window)
            after = [_cpu_seconds(proc.process.pid) for proc in procs]  # type: ignore[union-attr]
            pss = [_pss_mb(proc.process.pid) for proc in procs]  # type: ignore[union-attr]
            drops = sum(_drops(log) for log in logs) - drops_before
        finally:
            stop(procs)
    shares = [100 * (b - a) / window for a, b in zip(before, after, strict=True)]
    return IdleCost(statistics.median(shares), statistics.median(pss), drops, sum(shares), start_s,
                    statistics.median(before))


def main() -> None:
    from agents import logs

    logs.configure(level="warning")
    print("\n## networked swarm (processes on loopback)\n")
    print(f"### gossip propagation to every member (40 events at {PROPAGATION_RATE:g}/s, observers only)")
    print("Every member is given every other's address and dials while it has fewer than "
          f"{ACTIVE_PEERS} connections (agents/net/peer_book.py).")
    print("CPU per delivery: the members' CPU while the probes ran, less their CPU over an idle window as "
          "long just before, divided by the (member, probe) deliveries. The largest cluster again at "
          f"{', '.join(f'{r:g}' for r in PROPAGATION_RATES)} probes a second: at {PROPAGATION_RATE:g} a second its deliveries "
          "can ask for more CPU than the machine has.")
    print("Most by sync to one member: all 40 when gossip brought a member none (out of every mesh, told of "
          f"nothing). Out of the mesh: members whose events-topic mesh was empty at one of their {MESH_LOG_INTERVAL:g} s "
          "snapshots while the probes ran.")
    print("| members | probes a second | p50 to all (ms) | p99 to all (ms) | deliveries by sync (gossip lost) "
          "| most by sync to one member | out of the mesh | never seen by all | CPU per delivery (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs = [(members, PROPAGATION_RATE) for members in PROPAGATION_SIZES]
    runs += [(max(PROPAGATION_SIZES), rate) for rate in PROPAGATION_RATES if rate != PROPAGATION_RATE]
    for members, rate in runs:
        run = propagation(members, rate=rate)
        print(f"| {members} | {rate:g} | {run.p50:.0f} | {run.p99:.0f} | {run.by_sync} of {members * 40} "
              f"| {run.most_by_sync_to_one} | {run.out_of_mesh} | {run.missing} | {run.cpu_ms:.1f} |", flush=True)

    print("\n### idle cost per member (no goal; scripted model; every member bootstraps to all)")
    print(f"Read over 20 s once the members' CPU holds steady ({STEADY_WINDOW_S:g} s windows within "
          f"{STEADY_CHANGE:.0%} of the one before, under {SATURATED:.0%} of the machine); the start: from the first "
          "member's launch until then, the confirming window included.")
    print("| members | CPU per member (% of a core) | vs 3 members | all members (% of a core; 200 = both) "
          "| PSS per member (MB) | peers dropped in 20 s | start (s) | CPU to start, per member (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    base_cpu = None
    for members in IDLE_SIZES:
        idle = idle_cost(members)
        base_cpu = base_cpu or max(idle.cpu_pct, 0.1)
        print(f"| {members} | {idle.cpu_pct:.1f} | {idle.cpu_pct / base_cpu:.1f}x | {idle.all_pct:.0f} | "
              f"{idle.pss_mb:.0f} | {idle.drops} | {idle.start_s:.0f} | {idle.start_cpu_s:.1f} |", flush=True)

    late_joins()  # bench.catchup

    print("\n### price of democracy (`swarm plan`, 3/3/3, quorum 2, scripted 0.5 s mean per call)")
    wall, sequential, needed, made = democracy(0.5)
    print(f"swarm wall time {wall:.1f} s (includes starting 11 processes); the {needed} calls the accepted "
          f"plan needs, one after another: {sequential:.1f} s; ratio {wall / sequential:.2f}. "
          f"Model calls made by the swarm: about {made} ({made / needed:.1f}x the minimum).")


if __name__ == "__main__":
    main()
