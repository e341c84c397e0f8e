"""A hostile peer on the wire, against real member processes on loopback (PROTOCOL.md, section 11).

The peer (``chaos.lab.hostile_peer``, never admitted) announces 2^32-1-byte sync frames,
opens 32 streams per member that each send all but one byte of an almost-full opening
frame and stall, sends garbage and forged tickets, gossips sybil events, and accepts
every pull members open to it without ever answering. Members must drop it at their deadlines, keep
syncing with each other, complete the plan, and hold their memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agents.cli.plan import free_port
from agents.clusterdir import read_members
from agents.store import EventStore
from tests.cluster import LocalCluster

pytestmark = pytest.mark.slow
ATTACK_S = 20


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_peer_that_stalls_pulls_and_announces_huge_frames_costs_neither_memory_nor_progress(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, f"hostile-{tmp_path.name}")
    names = cluster.shape(1, 3, 1)
    hostile = None
    try:
        cluster.start()
        pids = {n: cluster.procs[n].process.pid for n in names}  # type: ignore[union-attr]
        before = {n: _rss_mb(pid) for n, pid in pids.items()}
        hostile = subprocess.Popen(
            [sys.executable, "-m", "chaos.lab.hostile_peer", "--cluster", cluster.name,
             "--listen", f"/ip4/127.0.0.1/tcp/{free_port()}", "--seconds", str(ATTACK_S),
             *[a for n in names for a in ("--bootstrap", cluster.procs[n].address)]],
            stdout=subprocess.PIPE, stderr=open(tmp_path / "hostile.log", "w"), text=True)  # noqa: SIM115
        peak = dict(before)
        stop_sampling = threading.Event()

        def sample() -> None:
            while not stop_sampling.wait(0.2):
                for name, pid in pids.items():
                    peak[name] = max(peak[name], _rss_mb(pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        cluster.submit("Plan a two-week trip to Japan")
        cluster.wait_for("the plan to complete under attack",
                         lambda: all(cluster.tree(n).complete for n in names), timeout=120)
        sent = json.loads(hostile.communicate(timeout=ATTACK_S + 60)[0].strip().splitlines()[-1])
        stop_sampling.set()
        sampler.join()
        cluster.wait_converged(names)

        assert sent["gossip"] > 0 and sent["sync"] + sent["sync_dropped"] > 0, sent
        assert sent["hoard"] + sent["hoard_dropped"] > 0, sent  # almost-full frames, then a stall
        records = [r for n in names for r in cluster.log_records(n)]
        # the pulls it accepted and never answered were dropped at the deadline
        assert any(r.get("event") == "sync pull timed out" for r in records), "no member dropped a stalled pull"
        # the frames announcing 2^32-1 bytes ended their streams before anything was read
        assert any("4294967295-byte frame" in json.dumps(r) for r in records), "no member saw the absurd frame"
        # streams beyond what a member serves at once were closed at once
        assert any(r.get("event") == "sync refused: too many streams at once" for r in records)
        print("hostile peer sent:", sent)
        print("RSS MB before -> peak under attack:",
              ", ".join(f"{n} {before[n]:.0f}->{peak[n]:.0f}" for n in names))
        admitted = {m["peer"] for m in read_members(cluster.admin.path / "members.json")}
        refused_sybils = {}
        for name in names:
            with EventStore.open(cluster.procs[name].data_dir) as store:
                refused_sybils[name] = store.counters().get("refused:ticket", 0)
                strangers = {e.author for e in store.events()} - admitted
            assert not strangers, f"{name} stored events of keys nobody admitted: {sorted(strangers)}"
            assert peak[name] - before[name] < 150, f"{name} grew from {before[name]:.0f} to {peak[name]:.0f} MB"
        # sybil events are counted where they arrive; refused, they are never forwarded, so a
        # member outside the hostile peer's gossip mesh may see none
        assert sum(refused_sybils.values()) > 0, refused_sybils
    finally:
        if hostile is not None and hostile.poll() is None:
            hostile.kill()
        cluster.stop()
