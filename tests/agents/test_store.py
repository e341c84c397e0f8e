from __future__ import annotations

import sqlite3
import threading

import pytest

from agents.core.fold import fold
from agents.store import DiskFailed, EventStore, StoreError
from chaos.sim.plan import simulate_plan
from chaos.sim.world import SimConfig


def simulate_events():
    result = simulate_plan(SimConfig(goal="Move house", seed=5, model_latency_s=1.0))
    return list(result.events)


@pytest.fixture(scope="module")
def plan_events():
    return simulate_events()


def test_inserts_are_idempotent_and_a_reopened_store_folds_the_same_tree(tmp_path, plan_events) -> None:
    with EventStore.open(tmp_path) as store:
        assert store.add_many(plan_events) == len(plan_events)
        assert store.add_many(reversed(plan_events)) == 0
        assert not store.add(plan_events[0])
    with EventStore.open(tmp_path) as store:
        assert store.count() == len(plan_events)
        assert fold(store.events()).digest == fold(plan_events).digest
        author = plan_events[1].author
        assert [e.seq for e in store.events_by(author)] == sorted(e.seq for e in plan_events if e.author == author)


def test_local_counters_live_beside_the_events(tmp_path) -> None:
    with EventStore.open(tmp_path) as store:
        store.bump("refused")
        store.bump("refused", 2)
    with EventStore.open(tmp_path) as store:
        assert store.counters() == {"refused": 3}


def test_a_store_from_a_newer_version_is_refused_untouched(tmp_path, plan_events) -> None:
    with EventStore.open(tmp_path) as store:
        store.add_many(plan_events)
    db = sqlite3.connect(tmp_path / "events.sqlite3")
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(StoreError, match="newer than this program"):
        EventStore.open(tmp_path)
    db = sqlite3.connect(tmp_path / "events.sqlite3")
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == len(plan_events)


def test_a_file_that_is_not_a_store_gets_a_clear_error(tmp_path) -> None:
    (tmp_path / "events.sqlite3").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match=r"not a usable event store.*move it aside"):
        EventStore.open(tmp_path)


def test_a_new_store_opened_by_several_at_once_opens_for_all(tmp_path) -> None:
    """A member and a reader of its data directory (a test, ``swarm inspect``) opening a new
    store together: both read schema version 0 and the second failed on ``table events
    already exists``, or on ``database is locked`` while the first turned WAL on (17 of 30
    rounds of six openers here, before)."""
    import threading

    failures = []
    for round_ in range(10):
        directory = tmp_path / f"store-{round_}"
        start = threading.Barrier(6)

        def open_it(directory=directory, start=start) -> None:
            start.wait()
            try:
                EventStore.open(directory).close()
            except StoreError as exc:
                failures.append(str(exc))

        openers = [threading.Thread(target=open_it) for _ in range(6)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join()
    assert failures == []


def test_a_batch_larger_than_one_insert_statement_is_stored_whole_and_counted_once(tmp_path, plan_events) -> None:
    """A batch goes as INSERT statements of many rows each (one engine step, no GIL between
    rows); their chunks add up to the batch, duplicates inside it and already held not counted."""
    with EventStore.open(tmp_path) as store:
        store._rows_per_insert = 7  # several statements for the plan's events
        half = plan_events[: len(plan_events) // 2]
        assert store.add_many(half) == len(half)
        assert store.add_many(plan_events + plan_events[:9]) == len(plan_events) - len(half)
        assert store.count() == len(plan_events)
        assert fold(store.events()).digest == fold(plan_events).digest


def test_two_threads_writing_at_once_each_get_whole_transactions(tmp_path, plan_events) -> None:
    """A catch-up commits on the member's store thread while its event loop stores gossip and
    bumps counters on the same connection: each batch is its own transaction, none fails."""
    import threading

    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def write(events: list) -> None:
        start.wait()
        try:
            for event in events * 4:  # one transaction per event: many chances to interleave
                store.add_many([event])
                store.bump("written")
                store.count()
        except BaseException as exc:  # the test reports whatever broke
            errors.append(exc)

    with EventStore.open(tmp_path) as store:
        odd, even = plan_events[1::2], plan_events[::2]
        writers = [threading.Thread(target=write, args=(part,)) for part in (odd, even)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert not errors, errors[:3]
        assert store.count() == len(plan_events)
        assert store.counters() == {"written": 4 * len(plan_events)}


def test_a_commit_waits_for_the_disk_only_when_asked_and_sync_makes_the_rest_durable(tmp_path, plan_events) -> None:
    """What a power cut leaves (the simulation's store keeps its files as they were at the last
    fsync): the unsynced commits gone, a durable commit bringing every commit before it."""
    from chaos.sim.slot import SimStore
    from tests.agents.test_member_disk import on_disk_after_a_power_cut

    def after_power_cut(store: SimStore, name: str) -> set[str]:
        return on_disk_after_a_power_cut(store, tmp_path / name)

    first, second, third = plan_events[:5], plan_events[5:10], plan_events[10:15]
    with SimStore.open(tmp_path / "live") as store:
        assert store.add_many(first, durable=False) == 5 and store.unsynced
        assert store.count() == 5  # committed: readable, and a killed process keeps it
        assert after_power_cut(store, "cut1") == set()
        store.sync()
        assert not store.unsynced
        assert after_power_cut(store, "cut2") == {e.id for e in first}
        store.add_many(second, durable=False)
        store.add_many(third)  # durable: with it every commit before
        assert not store.unsynced
        assert after_power_cut(store, "cut3") == {e.id for e in first + second + third}


def test_a_commit_does_not_wait_for_a_sync_running_on_another_thread(tmp_path, plan_events, monkeypatch) -> None:
    """A member syncs on a thread before it serves a client a summary while its event loop commits what
    gossip brings: the commit goes on while the fsync runs (it waited for the whole fsync on
    the store's lock, the event loop with it), and the sync leaves ``unsynced`` set, since the
    commit made meanwhile may or may not be covered; the next sync covers it."""
    import agents.store.sqlite as store_module

    real = store_module.os.fsync
    entered, release = threading.Event(), threading.Event()

    def held_up(descriptor: int) -> None:
        entered.set()
        release.wait(30)
        real(descriptor)

    store = EventStore.open(tmp_path)
    store.add_many(plan_events[:5], durable=False)
    monkeypatch.setattr(store_module.os, "fsync", held_up)
    syncing = threading.Thread(target=store.sync)
    syncing.start()
    assert entered.wait(30)
    committing = threading.Thread(target=store.add_many, args=(plan_events[5:10], False))
    committing.start()
    committing.join(10)  # at once, unless it waits for the fsync held up
    waited = committing.is_alive()
    release.set()
    syncing.join()
    committing.join()
    assert not waited, "a commit waited for a sync running on another thread"
    assert store.unsynced and store.count() == 10
    store.sync()
    assert not store.unsynced
    store.close()


def test_an_fsync_that_failed_on_one_thread_fails_the_next_on_another(tmp_path, plan_events, monkeypatch) -> None:
    """An fsync error is told once, to descriptors open when it happened: a sync opening the log
    after another's fsync failed would pass, and take its commits for durable. So the first
    failure is recorded before another fsync starts, however slowly its thread gets to it."""
    import errno

    import agents.store.sqlite as store_module

    real = store_module.os.fsync
    failing, release = threading.Event(), threading.Event()

    def fails_once(descriptor: int) -> None:
        if not failing.is_set():
            failing.set()
            release.wait(30)  # failed, not yet recorded
            raise OSError(errno.EIO, "Input/output error")
        real(descriptor)

    store = EventStore.open(tmp_path)
    store.add_many(plan_events[:5], durable=False)
    monkeypatch.setattr(store_module.os, "fsync", fails_once)
    outcomes: dict[str, BaseException | None] = {}

    def sync(name: str) -> None:
        try:
            store.sync()
            outcomes[name] = None
        except DiskFailed as exc:
            outcomes[name] = exc

    first = threading.Thread(target=sync, args=("first",))
    first.start()
    assert failing.wait(30)
    second = threading.Thread(target=sync, args=("second",))
    second.start()
    second.join(2)  # (were it to fsync now, it would be done by then)
    release.set()
    first.join()
    second.join()
    assert isinstance(outcomes["first"], DiskFailed)
    assert isinstance(outcomes["second"], DiskFailed), "a sync after a failed fsync passed"
    store.close()


def test_a_durable_commit_that_adds_nothing_still_fsyncs_what_came_before(tmp_path, plan_events, monkeypatch) -> None:
    """SQLite writes (and fsyncs) nothing for a commit of events it already holds: the store
    fsyncs the log itself, or the unsynced commits before it would pass for durable. And a
    durable commit runs at ``synchronous=2`` (FULL), an unsynced one at 1 (NORMAL)."""
    import agents.store.sqlite as store_module

    fsyncs: list[str] = []  # the files fsynced: the log, and its directory once (tests/agents/test_durable.py)
    monkeypatch.setattr(store_module.os, "fsync",
                        lambda descriptor: fsyncs.append(store_module.os.readlink(f"/proc/self/fd/{descriptor}")))
    log = str(tmp_path / "events.sqlite3-wal")
    with EventStore.open(tmp_path) as store:
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        store.sync()  # what an earlier life committed (nothing here): once
        assert fsyncs.count(log) == 1 and not store.unsynced
        store.add_many(plan_events[:5], durable=True)
        assert statements[statements.index("COMMIT") - 3:] == ["PRAGMA synchronous=2", "BEGIN IMMEDIATE",
                                                              statements[-2], "COMMIT"], statements
        assert fsyncs.count(log) == 1  # SQLite fsynced that one itself
        statements.clear()
        store.add_many(plan_events[5:10], durable=False)
        assert statements[0] == "PRAGMA synchronous=1" and store.unsynced
        store.add_many(plan_events[:1], durable=True)  # already held: nothing written
        assert fsyncs.count(log) == 2 and not store.unsynced
        store.sync()  # nothing new since: no fsync
        assert fsyncs.count(log) == 2
