"""What outlives a power cut: a file's name as well as its data (``agents.durable``).

A power cut cannot be staged in a test, so these record the system calls instead, in
order: which file each fsync reached (read back from ``/proc/self/fd``) and each rename.
A new name is on the disk once its directory is fsynced after the rename; a log SQLite
created is named on the disk once its directory is fsynced after it appeared.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agents.clusterdir import ClusterDir
from agents.core.fold import fold
from agents.durable import replace_durably
from agents.keyfile import KEY_NAME, load_or_create
from agents.ownfeed import OwnFeed
from agents.store import EventStore
from tests.builders import Feed, goal


class Calls(list):
    """``("fsync", path)`` and ``("replace", destination)``, in the order they happened."""


@pytest.fixture
def calls(monkeypatch) -> Calls:
    recorded = Calls()
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        recorded.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        real_fsync(descriptor)

    def replace(source, destination) -> None:
        real_replace(source, destination)
        recorded.append(("replace", str(destination)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return recorded


def _written_durably(calls: Calls, path: Path) -> bool:
    """The data fsynced under another name, renamed to ``path``, then its directory fsynced."""
    at = calls.index(("replace", str(path)))
    before, after = calls[:at], calls[at + 1:]
    return (any(kind == "fsync" and Path(name).parent == path.parent and name != str(path) for kind, name in before)
            and ("fsync", str(path.parent)) in after)


def test_a_replaced_file_is_fsynced_renamed_then_its_directory_fsynced(tmp_path: Path, calls: Calls) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(b"old")
    replace_durably(target, b"new")
    assert target.read_bytes() == b"new"
    assert [kind for kind, _ in calls] == ["fsync", "replace", "fsync"]
    assert _written_durably(calls, target), calls
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "feed.head"
    target.write_bytes(b"3 old\n")

    def no_room(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(OSError, match="No space"):
        replace_durably(target, b"4 new\n")
    assert target.read_bytes() == b"3 old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["feed.head"]


def test_a_members_key_cluster_files_and_feed_head_outlive_a_power_cut(tmp_path: Path, calls: Calls) -> None:
    load_or_create(tmp_path / "member")
    assert _written_durably(calls, tmp_path / "member" / KEY_NAME), calls
    assert oct((tmp_path / "member" / KEY_NAME).stat().st_mode & 0o777) == "0o600"

    calls.clear()
    cluster = ClusterDir.init(tmp_path / "cluster", "durable")
    for name in os.listdir(cluster.path):
        assert _written_durably(calls, cluster.path / name), (name, calls)

    # the head of a member's own feed: were its rename taken back with the store lost, the
    # member could sign again at a seq it used
    feed = Feed("durable/c", "client")
    event = feed.at(1000, goal("Plan a day in Kyoto", [Feed("durable/s", "scorer").peer_id], 1))
    calls.clear()
    own = OwnFeed(feed.author, tmp_path / "member" / "feed.head")
    assert own.signed(event, fold([event]))
    assert _written_durably(calls, tmp_path / "member" / "feed.head"), calls
    assert (tmp_path / "member" / "feed.head").read_text() == f"1 {event.id}\n"


def test_the_store_fsyncs_its_directory_once_for_each_log_sqlite_creates(tmp_path: Path, calls: Calls) -> None:
    client, scorer = Feed("durable/c", "client"), Feed("durable/s", "scorer")
    plan_events = [client.at(1000 + n, goal(f"Plan day {n} in Kyoto", [scorer.peer_id], 1)) for n in range(9)]
    wal, directory = str(tmp_path / "events.sqlite3-wal"), str(tmp_path)
    with EventStore.open(tmp_path) as store:
        store.add_many(plan_events[:3], durable=False)
        store.sync()  # the log's first fsync: its name too
        assert calls == [("fsync", wal), ("fsync", directory)], calls
        calls.clear()
        store.add_many(plan_events[3:6], durable=False)
        store.sync()  # the same log: its name is on the disk already
        assert calls == [("fsync", wal)], calls
    calls.clear()
    # closing checkpointed the log and removed it: the next store's log is a new file
    with EventStore.open(tmp_path) as store:
        store.add_many(plan_events[6:9], durable=False)
        store.sync()
        assert calls == [("fsync", wal), ("fsync", directory)], calls
        assert store.count() == 9
