"""A writer killed with SIGKILL mid-stream loses nothing it had acknowledged, whether its
commits waited for the disk or not (a killed process leaves the page cache behind: only a
power cut takes an unsynced commit, which ``chaos.sim``'s ``lostwrite`` plays)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.core.fold import fold
from agents.store import EventStore
from chaos.sim.plan import simulate_plan
from chaos.sim.world import SimConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", [1, 7, 23, 60])
@pytest.mark.parametrize("commits", ["durable", "unsynced"])
def test_sigkill_mid_stream_keeps_every_acknowledged_event(tmp_path, kill_after, commits) -> None:
    result = simulate_plan(SimConfig(goal="Write a research survey", seed=kill_after, executors=4,
                                     model_latency_s=1.0))
    events = list(result.events) * 3  # duplicates too: idempotent inserts under load
    random.Random(kill_after).shuffle(events)
    log = tmp_path / "events.jsonl"
    log.write_bytes(b"".join(e.to_wire() + b"\n" for e in events))
    data = tmp_path / "data"
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.agents.store_writer", str(data), str(log), commits],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )
    acked = []
    assert writer.stdout is not None
    for line in writer.stdout:
        acked.append(line.split()[1])
        if len(acked) == kill_after:
            os.kill(writer.pid, signal.SIGKILL)
            break
    writer.wait()
    assert writer.returncode == -signal.SIGKILL
    with EventStore.open(data) as store:
        stored = {e.id for e in store.events()}
        assert set(acked) <= stored
        # and a restarted member rebuilds the same tree from what it kept
        kept = [e for e in events if e.id in stored]
        assert fold(store.events()).digest == fold(kept).digest
