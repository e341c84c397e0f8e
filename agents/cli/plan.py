"""``swarm plan "GOAL"``: a whole swarm as local processes, no containers.

Makes a cluster (``OUT/members/cluster``: an authority and its tickets, as an
operator would with ``swarm cluster init`` and ``swarm admit``), starts every
decomposer, scorer and executor as its own ``swarm agent`` process (each with
its own data directory, identity, ticket and port on 127.0.0.1, and every
other member as a bootstrap address), submits the goal with the scorers as
its roster, follows it
with an observer process until the plan is complete, writes ``OUT/plan.json``
and ``OUT/plan.md``, waits (a little) until every member's own store holds the
decisions the observer wrote, so that ``swarm inspect`` on any member shows the
finished plan, and stops the processes. Nothing in this launcher takes part in
the plan: it only starts processes and reads files (the observer's, and the
members' stores, which SQLite lets a reader open beside their writer).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from agents.cli.errors import CommandError
from agents.clusterdir import ClusterDir
from agents.core.fold import fold
from agents.llm import SHARED_PARALLEL
from agents.llm.scripted import STRATEGIES
from agents.store import EventStore, StoreError


@dataclass
class Proc:
    name: str
    data_dir: Path
    port: int
    peer_id: str
    process: subprocess.Popen[bytes] | None = None
    ip: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()  # e.g. ("ip", "netns", "exec", NAME) to run it in a namespace

    @property
    def address(self) -> str:
        return f"/ip4/{self.ip}/tcp/{self.port}/p2p/{self.peer_id}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def swarm_command() -> list[str]:
    return [sys.executable, "-m", "agents.cli.main", "--log-json"]


def start_agent(
    proc: Proc, role: str, peers: list[Proc], *, cluster: str, llm: str = "scripted",
    llm_latency: float = 0.0, strategy: str = "activity", mdns: bool = False, llm_extra: tuple[str, ...] = (),
) -> None:
    """Start ``swarm agent`` for ``proc``, bootstrapping to every other peer; its output goes to agent.log."""
    command = [
        *proc.prefix, *swarm_command(), "agent", "--role", role, "--data-dir", str(proc.data_dir),
        "--listen", f"/ip4/{proc.ip}/tcp/{proc.port}", "--cluster", cluster,
        "--llm", llm, "--llm-latency", str(llm_latency), "--strategy", strategy, *llm_extra,
    ]
    if not mdns:
        command.append("--no-mdns")
    for peer in peers:
        if peer is not proc:
            command += ["--bootstrap", peer.address]
    log_file = open(proc.data_dir / "agent.log", "ab")  # noqa: SIM115 (owned by the child)
    proc.process = subprocess.Popen(command, stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL)


def stop(procs: list[Proc], grace: float = 5.0) -> None:
    end_processes([p.process for p in procs if p.process is not None], grace)


def end_processes(processes: list[subprocess.Popen], grace: float = 5.0) -> None:
    """SIGTERM every process still running, give them ``grace`` seconds together, then SIGKILL
    whichever has not exited; returns once all are reaped."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def preflight_model(model: str | None) -> None:
    """Resolve (join and verify) the weights once here, not in nine members at once."""
    from agents.llm.model_files import ModelFileError, resolve

    try:
        file = resolve(model)
    except ModelFileError as exc:
        raise CommandError(str(exc)) from None
    print(f"model {file.name} ({file.path}, sha256 {file.sha256[:16]}...)", flush=True)


@dataclass
class ServiceProc:
    url: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        end_processes([self.process])


SERVICE_READY_TIMEOUT = 120.0


def start_model_service(log_path: Path, model: str | None, threads: int, timeout: float,
                        listen: str = "127.0.0.1:0") -> ServiceProc:
    """Start ``swarm model-service`` (by default on a free local port) and wait for its ready line
    (the model is loaded by then). Its log goes to ``log_path``."""
    command = [*swarm_command(), "model-service", "--listen", listen, "--request-timeout", str(timeout),
               "--threads", str(threads),
               *(("--model", model) if model else ())]
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    deadline = time.monotonic() + SERVICE_READY_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        line = process.stdout.readline().decode(errors="replace") if ready else ""
        if line.startswith("model service ready at "):
            return ServiceProc(line.split()[4], process)
        if (ready and not line) or process.poll() is not None:
            break
    end_processes([process])
    raise CommandError(f"the shared model service did not start (see {log_path}); "
                       "or run each member with its own model: --model-per-member")


def model_usage(procs: list[Proc]) -> dict[str, int | float]:
    """Sum the "model usage" line each member logs when it stops."""
    total: dict[str, int | float] = {"calls": 0, "tokens": 0, "seconds": 0.0, "vague_retries": 0, "vague_answers": 0,
                                     "dropped": 0}
    for proc in procs:
        log_file = proc.data_dir / "agent.log"
        if not log_file.exists():
            continue
        for line in log_file.read_text(errors="replace").splitlines():
            if '"model usage"' in line:
                record = json.loads(line)
                for key in total:
                    total[key] += record.get(key, 0)
    return total


def check_quorum(quorum: int, scorers: int) -> None:
    """A quorum must be a majority of the scorers, so any two quorums share one."""
    if quorum > scorers:
        raise CommandError(f"quorum {quorum} can never be reached by {scorers} scorer(s); "
                           "lower --quorum or add --scorers")
    if 2 * quorum <= scorers:
        raise CommandError(f"quorum {quorum} is not a majority of {scorers} scorers: two quorums could accept "
                           f"different splits; use at least {scorers // 2 + 1}")


def provision(members_dir: Path, cluster: str, roles: list[tuple[str, int]]) -> tuple[ClusterDir, list[Proc]]:
    """A cluster directory and an admitted data directory per member, plus client and observer."""
    admin = ClusterDir.init(members_dir / "cluster", cluster)
    procs = []
    for role, i in roles:
        ticket = admin.admit_dir(members_dir / f"{role}-{i}", role)
        procs.append(Proc(f"{role}-{i}", members_dir / f"{role}-{i}", free_port(), ticket.peer))
    admin.admit_dir(members_dir / "client", "client")
    admin.admit_dir(members_dir / "observer", "observer")
    return admin, procs


def cmd_plan(args: argparse.Namespace) -> int:
    quorum = args.quorum or args.scorers // 2 + 1
    check_quorum(quorum, args.scorers)
    if (args.llm_parallel or 1) > 1 and args.llm == "llama" and args.model_per_member:
        raise CommandError("--llm-parallel is for members that share a server that batches calls; with "
                           "--model-per-member each member's own model answers one call at a time")
    out = Path(args.out)
    members_dir = out / "members"
    if members_dir.exists():
        # every run plans one goal with fresh members; keep the last run's stores one generation
        previous = out / "members.previous"
        if previous.exists():
            shutil.rmtree(previous)
        members_dir.rename(previous)
        print(f"moved the previous run's members to {previous}", flush=True)
    roles = ([("decomposer", i) for i in range(args.decomposers)]
             + [("scorer", i) for i in range(args.scorers)]
             + [("executor", i) for i in range(args.executors)])
    admin, procs = provision(members_dir, args.cluster, roles)
    llm_extra = ("--llm-threads", str(args.llm_threads), "--llm-timeout", str(args.llm_timeout),
                 *(("--model", args.model) if args.model else ()),
                 *(("--llm-url", args.llm_url) if args.llm_url else ()),
                 *(("--llm-parallel", str(args.llm_parallel)) if args.llm_parallel else ()))
    service = None
    if args.llm == "llama":
        preflight_model(args.model)
        if not args.model_per_member:
            service = start_model_service(members_dir / "model-service.log", args.model, threads=os.cpu_count() or 2,
                                          timeout=args.llm_timeout)
            llm_extra = ("--llm-url", service.url, "--llm-timeout", str(args.llm_timeout),
                         "--llm-parallel", str(args.llm_parallel or SHARED_PARALLEL))
            print(f"model service ready at {service.url}, shared by every member", flush=True)
    llm = "openai" if service is not None else args.llm
    started = time.monotonic()
    print(f"starting {len(procs)} members ({args.decomposers} decomposers, {args.scorers} scorers, "
          f"{args.executors} executors, quorum {quorum} of the scorers) in {members_dir}", flush=True)
    try:
        for (role, i), proc in zip(roles, procs, strict=True):
            start_agent(proc, role, procs, cluster=args.cluster, llm=llm,
                        llm_latency=args.llm_latency, strategy=STRATEGIES[i % len(STRATEGIES)],
                        llm_extra=llm_extra)
        bootstrap = [arg for p in procs for arg in ("--bootstrap", p.address)]
        common = ["--cluster", args.cluster, "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0", *bootstrap]
        submit = subprocess.run(
            [*swarm_command(), "submit", args.goal, "--quorum", str(quorum), "--max-depth",
             str(args.max_depth), "--claim-lease", str(args.claim_lease), "--round", str(args.round),
             "--timeout", "60", "--roster", str(admin.path / "members.json"),
             "--data-dir", str(members_dir / "client"), *common],
            capture_output=True, text=True,
        )
        if submit.returncode != 0:
            raise CommandError(f"could not submit the goal: {submit.stderr.strip().splitlines()[-1:]}")
        print(submit.stdout.strip(), flush=True)
        remaining = max(1.0, args.timeout - (time.monotonic() - started))
        observer = subprocess.run(
            [*swarm_command(), "observe", "--follow", "--until-complete", "--timeout", f"{remaining:.0f}",
             "--data-dir", str(members_dir / "observer"), "--json", str(out / "plan.json"),
             "--md", str(out / "plan.md"), *common],
            stderr=open(members_dir / "observer.log", "ab"),  # noqa: SIM115
        )
        if observer.returncode == 0:
            report_settled(procs, json.loads((out / "plan.json").read_text()))
    finally:
        stop(procs)
        if service is not None:
            service.stop()
    elapsed = time.monotonic() - started
    usage = model_usage(procs)
    if usage["calls"]:
        dropped = f" (and {usage['dropped']} dropped unfinished: no longer wanted)" if usage["dropped"] else ""
        print(f"model: {usage['calls']} calls{dropped}, {usage['tokens']} tokens generated in {elapsed:.0f} s "
              f"({usage['tokens'] / elapsed:.1f} tokens/s for the whole swarm)")
    plan_file = out / "plan.json"
    if plan_file.exists():
        record = json.loads(plan_file.read_text())
        record["model_usage"] = {**usage, "wall_seconds": round(elapsed, 1)}
        plan_file.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    if observer.returncode != 0:
        raise CommandError(f"the plan did not complete within {args.timeout:g} s (state above; member logs in "
                           f"{members_dir}/*/agent.log)")
    print(f"plan complete in {elapsed:.1f} s; wrote {out / 'plan.json'} and {out / 'plan.md'}")
    return 0


SETTLE_TIMEOUT = 15.0  # a few sync rounds: what gossip missed, sync brings


def decisions(nodes: list[dict]) -> dict[str, tuple[str | None, str | None]]:
    """Each node's accepted split and result event, from a plan's ``nodes`` (``plan.json``)."""
    return {n["id"]: (n["split"], n["result_event"]) for n in nodes}


def lagging(procs: list[Proc], decided: dict[str, tuple[str | None, str | None]]) -> list[str]:
    """The members whose own store does not yet fold to the ``decided`` decisions."""
    behind = []
    for proc in procs:
        try:
            with EventStore.open(proc.data_dir) as store:
                tree = fold(store.events())
        except (StoreError, sqlite3.Error):  # busy, or damaged: it counts as behind
            behind.append(proc.name)
            continue
        if {n.id: (n.split, n.result) for n in tree.walk()} != decided:
            behind.append(proc.name)
    return behind


def report_settled(procs: list[Proc], plan: dict, timeout: float = SETTLE_TIMEOUT) -> None:
    """Wait until every member holds the observer's decisions (gossip may have missed one
    that sync has not yet brought), at most ``timeout``; say which members it left behind."""
    decided = decisions(plan["nodes"])
    started = time.monotonic()
    behind = [proc.name for proc in procs]
    # decisions are final: a member that holds them keeps them, so only the others are read again
    while behind := lagging([proc for proc in procs if proc.name in behind], decided):
        if time.monotonic() - started > timeout:
            print(f"{len(behind)} members did not yet hold the whole plan when stopped ({', '.join(behind)}); "
                  "they fetch the rest from their peers when next started", flush=True)
            return
        time.sleep(0.5)
    print(f"every member holds the finished plan ({time.monotonic() - started:.1f} s after the observer)",
          flush=True)


def add_command(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("plan", help="run a whole swarm as local processes until the plan is complete")
    plan.add_argument("goal")
    plan.add_argument("--decomposers", type=int, default=3)
    plan.add_argument("--scorers", type=int, default=3)
    plan.add_argument("--executors", type=int, default=3)
    plan.add_argument("--quorum", type=int, help="approving scorers a decision needs (default: a majority)")
    plan.add_argument("--max-depth", type=int, default=3)
    plan.add_argument("--claim-lease", type=float, default=30.0, help="seconds")
    plan.add_argument("--round", type=float, default=30.0, help="seconds scorers wait in a round before the next")
    from agents.cli.network import add_llm_options

    add_llm_options(plan, latency_default=0.5)
    plan.add_argument("--model-per-member", action="store_true",
                      help="llama: load the model in every member (the default is one batched model service "
                           "shared by all, 'swarm model-service')")
    plan.add_argument("--out", default="out", help="where plan.json, plan.md and members/ go")
    plan.add_argument("--timeout", type=float, default=300.0)
    plan.add_argument("--cluster", default=f"plan-{os.getpid()}")
    plan.set_defaults(run=cmd_plan)
