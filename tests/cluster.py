"""A swarm of real ``swarm agent`` processes on loopback, for the process-level tests.

Members are started, SIGKILLed and restarted from their data directories; the
tests read each member's state from its own store (SQLite in WAL mode reads
safely beside the running writer) and wait for conditions, never for time.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from agents.cli.plan import Proc, free_port, start_agent, stop, swarm_command
from agents.clusterdir import ClusterDir
from agents.core.fold import fold
from agents.core.tree import PlanTree
from agents.llm.scripted import STRATEGIES
from agents.store import EventStore
from tests.netns import NetnsLab


class LocalCluster:
    def __init__(self, root: Path, name: str, llm_latency: float = 0.2,
                 latency_by_role: dict[str, float] | None = None, mdns_only: bool = False) -> None:
        self.root = root
        self.name = name
        self.llm_latency = llm_latency
        self.latency_by_role = latency_by_role or {}
        self.mdns_only = mdns_only  # no bootstrap addresses: members must find each other by mDNS
        self.procs: dict[str, Proc] = {}
        self.extra_args: dict[str, tuple[str, ...]] = {}  # more `swarm agent` options, per member
        self.roles: dict[str, str] = {}
        self.admin = ClusterDir.init(root / "admin", name)  # the operator: authority and tickets

    def admit(self, name: str, role: str) -> Path:
        """An admitted data directory for a client, observer or any other member."""
        data_dir = self.root / name
        self.admin.admit_dir(data_dir, role, name)
        return data_dir

    def add(self, role: str, count: int, lab: NetnsLab | None = None) -> list[str]:
        """Add members; with a ``lab``, each runs in its own network namespace."""
        names = []
        for _ in range(count):
            index = sum(1 for r in self.roles.values() if r == role)
            name = f"{role}-{index}"
            data_dir = self.root / name
            peer_id = self.admin.admit_dir(data_dir, role, name).peer
            if lab is None:
                self.procs[name] = Proc(name, data_dir, free_port(), peer_id)
            else:
                ip, prefix = lab.add_host(name)
                self.procs[name] = Proc(name, data_dir, 4001, peer_id, ip=ip, prefix=prefix)
            self.roles[name] = role
            names.append(name)
        return names

    def shape(self, decomposers: int, scorers: int, executors: int, lab: NetnsLab | None = None) -> list[str]:
        """Add that many members of each role; returns their names."""
        return (self.add("decomposer", decomposers, lab) + self.add("scorer", scorers, lab)
                + self.add("executor", executors, lab))

    def start(self, *names: str) -> None:
        """Start members and return once each is listening (it has written a fresh addrs file)."""
        chosen = names or tuple(self.procs)
        for name in chosen:
            proc = self.procs[name]
            if proc.process is not None and proc.process.poll() is None:
                continue
            (proc.data_dir / "addrs").unlink(missing_ok=True)
            strategy = STRATEGIES[int(name.rsplit("-", 1)[1]) % len(STRATEGIES)]
            peers = [] if self.mdns_only else list(self.procs.values())
            start_agent(proc, self.roles[name], peers, cluster=self.name, mdns=self.mdns_only,
                        llm_latency=self.latency_by_role.get(self.roles[name], self.llm_latency),
                        strategy=strategy, llm_extra=self.extra_args.get(name, ()))
        for name in chosen:
            proc = self.procs[name]
            self.wait_for(f"{name} to listen", lambda proc=proc: (proc.data_dir / "addrs").exists()
                          or (proc.process is not None and proc.process.poll() is not None))
            assert proc.process is not None and proc.process.poll() is None, \
                f"{name} exited with {proc.process.returncode if proc.process else None}; see {proc.data_dir}/agent.log"

    def kill(self, name: str) -> None:
        process = self.procs[name].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait()

    def bootstrap_args(self, names: list[str] | None = None) -> list[str]:
        chosen = names or list(self.procs)
        return ["--cluster", self.name, "--no-mdns", "--listen", "/ip4/0.0.0.0/tcp/0",
                *[a for n in chosen for a in ("--bootstrap", self.procs[n].address)]]

    def submit(self, goal: str, quorum: int = 2, max_depth: int = 2, lease: float = 10.0,
               round_s: float = 5.0) -> str:
        client = self.admit("client", "client")
        run = subprocess.run(
            [*swarm_command(), "submit", goal, "--quorum", str(quorum), "--max-depth", str(max_depth),
             "--claim-lease", str(lease), "--round", str(round_s), "--timeout", "30", "--data-dir", str(client),
             "--roster", str(self.admin.path / "members.json"), *self.bootstrap_args()],
            capture_output=True, text=True, timeout=60,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout.split()[1]

    def tree(self, name: str) -> PlanTree:
        with EventStore.open(self.procs[name].data_dir) as store:
            return fold(store.events())

    def event_ids(self, name: str) -> set[str]:
        with EventStore.open(self.procs[name].data_dir) as store:
            return {e.id for e in store.events()}

    def log_records(self, name: str) -> list[dict]:
        """The JSON records of ``name``'s agent.log (lines that are not JSON are skipped)."""
        records = []
        for line in (self.procs[name].data_dir / "agent.log").read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
        return records

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; logs in {self.root}")
            time.sleep(0.2)

    def digests(self, names: list[str] | None = None) -> dict[str, str]:
        return {n: self.tree(n).digest for n in names or list(self.procs)}

    def wait_converged(self, names: list[str] | None = None, timeout: float = 60.0) -> str:
        """Wait until every member holds one digest; returns it (from that same snapshot)."""
        seen: list[str] = []

        def one_digest() -> bool:
            digests = set(self.digests(names).values())
            seen[:] = list(digests)
            return len(digests) == 1

        self.wait_for("one digest on every member", one_digest, timeout)
        return seen[0]

    def stop(self) -> None:
        stop(list(self.procs.values()))
