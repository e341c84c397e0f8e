"""A real member process whose disk starts failing its fsyncs while it runs.

The failure is real to the process: a shim preloaded into it (``chaos/lab/disk.py``, the
lab's own, built with the system's C compiler) makes libc's ``fsync`` and
``fdatasync`` fail with EIO, for SQLite and Python alike, from the moment a flag
file exists. The member starts on a working disk, its store holding the goal, and pulls a
draft from one peer, the flag is set, then a peer holding a decided split comes up: the
member pulls the split, is about to show it, and its fsync fails. It must stop with the store's message (no traceback), show
nothing, and keep what it committed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agents.cli.plan import Proc, end_processes, free_port, start_agent
from agents.clusterdir import ClusterDir
from agents.keyfile import load_or_create
from agents.store import EventStore
from chaos.lab.disk import failing_fsync_shim
from tests.agents.test_rounds import Board
from tests.builders import AUTHORITY, CLUSTER


@pytest.fixture(scope="module")
def fsync_shim(tmp_path_factory) -> Path:
    return failing_fsync_shim(tmp_path_factory.mktemp("shim"))


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_member_whose_disk_fails_while_it_runs_stops_shows_nothing_and_keeps_its_events(
        tmp_path: Path, fsync_shim: Path, monkeypatch) -> None:
    board = Board(tag="eio-process")
    board.accept(("Kyoto lodging", "Tokyo rail pass"), "eio-process")  # a split, decided
    admin = ClusterDir.init(tmp_path / "cluster", CLUSTER, authority=AUTHORITY)
    holder, goal_holder, member = (Proc(name, tmp_path / name, free_port(), load_or_create(tmp_path / name).peer_id)
                                   for name in ("holder", "goal-holder", "member"))
    for proc in (holder, goal_holder, member):
        admin.admit_dir(proc.data_dir, "observer")
    with EventStore.open(holder.data_dir) as store:
        store.add_many(board.events)
    with EventStore.open(goal_holder.data_dir) as store:
        store.add_many(board.events[:2])
    # the goal on the disk while it works: else the summary the member serves the holder waits
    # for the goal's fsync, which may fail first, and the member stops before it stores the split
    with EventStore.open(member.data_dir) as store:
        store.add_many(board.events[:1])
    flag = tmp_path / "disk-fails"
    log = member.data_dir / "agent.log"
    monkeypatch.setenv("LD_PRELOAD", str(fsync_shim))
    monkeypatch.setenv("SWARM_FSYNC_FAILS_WHEN", str(flag))
    start_agent(member, "observer", [goal_holder, holder], cluster=CLUSTER)  # its peers are not up yet
    monkeypatch.delenv("LD_PRELOAD")
    try:
        # started: its addrs written (and that write's fsyncs done) before it says so
        _wait_for(lambda: "member running" in log.read_text() or member.process.poll() is not None,
                  "the member to start")
        # a draft first, while the disk works (the store's log is begun on a working disk)
        start_agent(goal_holder, "observer", [member], cluster=CLUSTER)
        _wait_for(lambda: '"synced"' in log.read_text() or member.process.poll() is not None, "the draft")
        assert member.process.poll() is None, log.read_text()[-2000:]
        flag.touch()  # from now on its disk fails every fsync
        start_agent(holder, "observer", [member], cluster=CLUSTER)  # it dials the member at once
        _wait_for(lambda: member.process.poll() is not None, "the member to stop", timeout=90)
    finally:
        end_processes([p.process for p in (member, holder, goal_holder) if p.process is not None])
    said = log.read_text()
    assert member.process.returncode == 1, said[-2000:]
    assert "swarm agent: cannot flush" in said and "Input/output error; the member stops" in said, said[-2000:]
    assert "Traceback" not in said, said[-3000:]
    shown = [json.loads(line) for line in (member.data_dir / "transitions.jsonl").read_text().splitlines()]
    assert {s["kind"] for s in shown} <= {"start", "loaded"}, shown  # its start; never the split
    with EventStore.open(member.data_dir) as store:  # committed, not fsynced: a kill keeps it
        assert {e.id for e in store.events()} == {e.id for e in board.events}
