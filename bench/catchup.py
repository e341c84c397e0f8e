"""A late joiner's catch-up by sync alone, and what bounds it on this machine.

A member holding N events serves a fresh ``swarm observe`` (a late joiner, one-shot,
from one holder on this machine). The figure is that command's wall time, from its
start to its whole, verified tree, beside:

* the same command against a one-event holder (process start, imports, dial: the
  baseline), and the sync bytes each way;
* the floor: the same events' signature checks alone on every core, measured in the
  run (PyNaCl drops the GIL, so threads use every core);
* the whole machine's CPU while the joiner ran, every core and every process together:
  on an otherwise idle machine (as ``make bench`` wants it), the joiner, its verifier
  children and the holder serving it. Divided by the cores (``os.cpu_count()``), it is the
  least wall time that work can take here: no schedule of the same work finishes sooner,
  only less work does. On two cores a 100k-event join took 10.2-12.3 CPU seconds, its
  start included (stop 53's note; the machine's speed varied through the day): 5.1-6.2 s
  at the least, against 7.4-9.1 s of wall, the cores 67-70% busy in every run (one of two
  idle through the start and the final fold).

``BENCH_LATE_JOIN=1000,10000`` picks the sizes.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from agents.cli.plan import Proc, free_port, start_agent, stop, swarm_command
from agents.clusterdir import write_ticket
from agents.core.admission import issue
from agents.core.decode import decode_unverified, signature_bytes
from agents.core.events import Event
from agents.core.fold import fold
from agents.core.identity import verify
from agents.keyfile import load_or_create
from agents.store import EventStore
from bench.synthetic import AUTHORITY, CLUSTER, plan_log

LATE_JOIN_SIZES = tuple(int(n) for n in os.environ.get("BENCH_LATE_JOIN", "1000,10000,100000,1000000").split(","))
SEVERAL_HOLDERS_EVENTS = 20_000  # a late joiner pulling from three holders at once, against one
CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class CatchUp:
    seconds: float  # the joiner's wall time, from its start to its whole, verified tree
    bytes_in: int  # sync frame bytes the joiner received
    bytes_out: int  # and sent
    same_digest: bool  # the joiner's tree is the holder's
    peak_mb: float  # the joiner's peak resident memory (ru_maxrss)
    machine_cpu_s: float  # CPU seconds the whole machine spent while the joiner ran, all cores

    @property
    def least_wall_s(self) -> float:
        """The least time the machine's work while the joiner ran can take on its cores."""
        return self.machine_cpu_s / CORES

    @property
    def busy(self) -> float:
        """The share of the machine's cores busy while the joiner ran."""
        return self.least_wall_s / self.seconds


def machine_cpu_seconds() -> float:
    """CPU seconds every core of this machine has spent working since it booted, every
    process's together (``/proc/stat``: user, nice, system, irq and softirq; not idle,
    iowait, nor steal, a hypervisor's time for others; guest time is inside user's)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def log_of(events: int) -> list[Event]:
    batch: list[Event] = []
    for event in plan_log(goals=max(1, events // 20_000), branch=6 if events > 5000 else 3,
                          depth=5 if events > 5000 else 4):
        batch.append(event)
        if len(batch) == events:
            break
    return batch


def signature_floor(events: list[Event]) -> float:
    """Seconds to check these events' signatures alone, on every core (PyNaCl drops the GIL):
    the floor a joiner that verifies everything cannot go below."""
    jobs = [(e.author, decode_unverified(e.to_wire())[1], signature_bytes(e)) for e in events]
    chunks = [jobs[i::CORES] for i in range(CORES)]

    def check(chunk: list) -> bool:
        return all(verify(*job) for job in chunk)

    with ThreadPoolExecutor(CORES) as pool:
        start = time.perf_counter()
        assert all(pool.map(check, chunks))
        return time.perf_counter() - start


def catch_up(batch: list[Event], holders: int = 1) -> CatchUp:
    """A late joiner (``swarm observe``) bootstrapped to ``holders`` members holding ``batch``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        digest = fold(batch).digest
        # the log's own cluster and authority admit the holders and the late joiner
        procs = []
        for number in range(holders):
            data_dir = root / f"holder{number}"
            with EventStore.open(data_dir) as store:
                store.add_many(batch)
            peer = load_or_create(data_dir).peer_id
            write_ticket(data_dir, issue(AUTHORITY, CLUSTER, peer, "observer"))
            procs.append(Proc(f"holder{number}", data_dir, free_port(), peer))
        write_ticket(root / "late", issue(AUTHORITY, CLUSTER, load_or_create(root / "late").peer_id, "observer"))
        try:  # a holder that fails to start stops those started before it
            for holder in procs:
                start_agent(holder, "observer", procs, cluster=CLUSTER)
            for holder in procs:
                while not (holder.data_dir / "addrs").exists():
                    time.sleep(0.1)
            with open(root / "late.err", "w+") as errors:
                start, cpu_before = time.perf_counter(), machine_cpu_seconds()
                joiner = subprocess.Popen([*swarm_command(), "observe", "--timeout", "600", "--cluster", CLUSTER,
                                           "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0",
                                           *(arg for holder in procs for arg in ("--bootstrap", holder.address)),
                                           "--data-dir", str(root / "late"), "--json", str(root / "late.json")],
                                          stdout=subprocess.DEVNULL, stderr=errors)
                try:
                    _, status, usage = os.wait4(joiner.pid, 0)  # its own peak RSS, not all children's
                except BaseException:  # an interrupted bench leaves no joiner behind
                    joiner.kill()
                    joiner.wait()
                    raise
                elapsed, machine_cpu = time.perf_counter() - start, machine_cpu_seconds() - cpu_before
                joiner.returncode = os.waitstatus_to_exitcode(status)
                errors.seek(0)
                if joiner.returncode != 0:
                    raise RuntimeError(errors.read()[-2000:])
        finally:
            stop(procs)
        with EventStore.open(root / "late") as store:
            assert store.count() == len(batch), (store.count(), len(batch))
        report = json.loads((root / "late.json").read_text())
        return CatchUp(elapsed, report["sync"]["bytes_in"], report["sync"]["bytes_out"], report["digest"] == digest,
                       usage.ru_maxrss / 1024, machine_cpu)


def late_joins() -> None:
    print("\n### late joiner catch-up by sync alone (`swarm observe`, one-shot, from one holder on this machine)")
    print("The floor: the same events' signature checks alone, on every core, measured in this run. Machine CPU: "
          "the whole machine's, every core's, while the joiner ran (on an idle machine: the joiner, its verifier "
          f"children, the holder serving it); divided by the {CORES} cores, the least time that work can take here, "
          "however it is scheduled.")
    base = catch_up(log_of(1))
    print("| events | joiner wall (s) | minus 1-event run (s) | signature floor (s) | vs floor | received (MB) "
          "| sent (KB) | joiner peak RSS (MB) | machine CPU (s) | cores busy | least wall for that CPU (s) "
          "| same digest |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    print(f"| 1 (baseline: start, dial, exit) | {base.seconds:.1f} | - | - | - | - | - | {base.peak_mb:.0f} "
          f"| {base.machine_cpu_s:.1f} | {base.busy:.0%} | {base.least_wall_s:.1f} | {base.same_digest} |",
          flush=True)
    for events in LATE_JOIN_SIZES:
        batch = log_of(events)
        floor = signature_floor(batch)
        run = catch_up(batch)
        net = max(run.seconds - base.seconds, 1e-3)
        print(f"| {events:,} | {run.seconds:.1f} | {net:.1f} | {floor:.2f} | {net / floor:.1f}x "
              f"| {run.bytes_in / 1e6:.1f} | {run.bytes_out / 1e3:.0f} | {run.peak_mb:.0f} | {run.machine_cpu_s:.1f} "
              f"| {run.busy:.0%} | {run.least_wall_s:.1f} | {run.same_digest} |", flush=True)
        assert run.same_digest, f"the late joiner's tree differs from the holder's at {events} events"
    print("\nFrom three holders at once (its pulls split the events: `agents/pull_claims.py`), against one, "
          f"{SEVERAL_HOLDERS_EVENTS:,} events:")
    print("| holders | joiner wall (s) | received (MB) | vs one holder (wall, bytes) | same digest |")
    print("|---:|---:|---:|---:|:---:|")
    batch = log_of(SEVERAL_HOLDERS_EVENTS)
    one = catch_up(batch)
    for holders, run in ((1, one), (3, catch_up(batch, holders=3))):
        print(f"| {holders} | {run.seconds:.1f} | {run.bytes_in / 1e6:.1f} | {run.seconds / one.seconds:.2f}x, "
              f"{run.bytes_in / one.bytes_in:.2f}x | {run.same_digest} |", flush=True)
        assert run.same_digest, f"the late joiner's tree differs from the holders' ({holders} holders)"
