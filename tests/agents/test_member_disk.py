"""What a member's commits wait for: the disk, only where something depends on it.

Its own events are fsynced before anything else happens to them (nobody else may hold
them yet); goals before a summary it serves a client lists them (the client leaves once
members say they hold it: ``tests/agents/test_goal_durable.py``); others' events are committed without an fsync (a killed process keeps them;
a power cut may take the last few, which their authors still hold) until the member
is about to show a change of its tree, which is final: then everything is fsynced
first. The simulation's store keeps its files as of its last fsync (what a power cut
leaves), which is what these tests read. The simulated power cuts themselves
(``lostwrite``) and the checkers that judge them: ``tests/chaos/test_planted_bugs.py``.
"""

from __future__ import annotations

import errno
import json
import os
import random
import sqlite3
from pathlib import Path

import pytest
import trio

from agents.cli.errors import CommandError
from agents.cli.members import run_member_loop, write_addrs
from agents.core.events import Event, ProposalBody, Subgoal
from agents.core.transitions import Transition
from agents.llm.scripted import ScriptedBackend
from agents.member import Member
from agents.showlog import ShowLog
from agents.store import DiskFailed, EventStore, StoreError
from chaos.sim.network import SimFabric, SimNetwork
from chaos.sim.slot import SimStore, restore_image
from tests.agents.test_rounds import Board
from tests.builders import Feed, credentials, goal


def on_disk_after_a_power_cut(store: SimStore, where: Path) -> set[str]:
    """The ids a store would hold had a power cut struck now (opened from a copy in ``where``)."""
    where.mkdir()
    restore_image(where, store.durable)
    with EventStore.open(where) as survivor:
        return {e.id for e in survivor.events()}


def test_own_events_wait_for_the_disk_and_others_wait_until_a_decision_rests_on_them(tmp_path: Path) -> None:
    board = Board(tag="disk")
    store = SimStore.open(tmp_path / "member")
    member = Member(credentials("disk/x", "decomposer"), store, network=None,  # type: ignore[arg-type]
                    think_in_thread=False, store_in_thread=False, now_ms=lambda: 10_000)
    try:
        member._admit([board.goal], "gossip")  # a goal waits for the disk once a summary is to list it
        assert on_disk_after_a_power_cut(store, tmp_path / "cut") == set()
        trio.run(member.goals_on_disk)
        assert on_disk_after_a_power_cut(store, tmp_path / "cut0") == {board.goal.id}
        heard = list(board.events)  # and two drafts: nothing shown
        member._admit(heard[1:], "gossip")
        assert member.tree.nodes[board.node].split is None
        assert on_disk_after_a_power_cut(store, tmp_path / "cut1") == {board.goal.id}

        assert member.author is not None
        own: Event = member.author.sign(ProposalBody(node=board.node, strategy="mine", subgoals=(
            Subgoal(title="Book the ryokan", executable=True), Subgoal(title="Buy the rail pass", executable=True))))
        member._admit([own], "self")  # shows nothing either, and is on the disk with all before it
        assert on_disk_after_a_power_cut(store, tmp_path / "cut2") == {e.id for e in (*heard, own)}

        before = len(board.events)
        draft = board.accept(("Kyoto lodging", "Tokyo rail pass"), "disk")  # candidate and two ballots
        member._admit(board.events[before:-1], "gossip")  # one ballot short: nothing shown
        assert member.tree.nodes[board.node].split is None
        assert on_disk_after_a_power_cut(store, tmp_path / "cut3") == {e.id for e in (*heard, own)}
        member._admit(board.events[-1:], "gossip")  # the quorum: the split is shown, after an fsync
        assert member.tree.nodes[board.node].split == draft.id
        assert on_disk_after_a_power_cut(store, tmp_path / "cut4") == {e.id for e in (*board.events, own)}
    finally:
        member.close()
        store.close()


def test_a_goal_a_pull_brings_is_on_the_disk_once_a_summary_is_to_list_it(tmp_path: Path) -> None:
    """The pull's path: batches stored on the store thread (``store_behind``, then ``written``).
    Neither drafts nor the goal wait for an fsync; what a summary served to a client waits for
    (``goals_on_disk``, on a thread) does, and covers everything committed before it."""
    board = Board(tag="pullgoal")
    store = SimStore.open(tmp_path / "member")
    member = Member(credentials("pullgoal/x", "observer"), store, network=None,  # type: ignore[arg-type]
                    think_in_thread=False, store_in_thread=True, now_ms=lambda: 10_000)

    async def pull() -> None:
        drafts = board.events[1:]
        member.written(drafts, member.store_behind(drafts), "sync")
        assert on_disk_after_a_power_cut(store, tmp_path / "cut1") == set()
        member.written([board.goal], member.store_behind([board.goal]), "sync")
        assert board.goal.id in member.index
        assert on_disk_after_a_power_cut(store, tmp_path / "cut2") == set()
        await member.goals_on_disk()
        # the goal's fsync covers the log, the drafts committed before it included
        assert on_disk_after_a_power_cut(store, tmp_path / "cut3") == {e.id for e in board.events}

    try:
        trio.run(pull)
    finally:
        member.close()
        store.close()


def test_a_failed_fsync_stops_the_member_before_it_shows_what_rests_on_it(tmp_path: Path, monkeypatch) -> None:
    """An fsync the disk refuses may report success next time (the kernel dropped what it could
    not write), so the member shows nothing more: the quorum's split stays unshown, the store
    says why, and what was committed is kept for the member's next start."""
    board = Board(tag="eio")
    shown: list = []
    store = EventStore.open(tmp_path / "member")
    member = Member(credentials("eio/x", "decomposer"), store, network=None,  # type: ignore[arg-type]
                    think_in_thread=False, store_in_thread=False, now_ms=lambda: 10_000, on_transition=shown.append)
    try:
        board.accept(("Kyoto lodging", "Tokyo rail pass"), "eio")
        member._admit(board.events[:-1], "gossip")  # one ballot short: nothing shown
        assert member.tree.nodes[board.node].split is None

        def refused(descriptor: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", refused)
        with pytest.raises(DiskFailed, match="the member stops"):
            member._admit(board.events[-1:], "gossip")  # the quorum, which would show the split
        assert member.tree.nodes[board.node].split is None
        assert not [change for change in shown if change.kind == "split"]
    finally:
        monkeypatch.undo()
        store.close()
    with EventStore.open(tmp_path / "member") as reopened:  # committed: the next start has it all
        assert {e.id for e in reopened.events()} == {e.id for e in board.events}


class _CommitFails:
    """A store connection whose COMMIT fails with SQLite's error ``code``: after writing the
    transaction (``written``: an fsync that failed, the commit maybe in the log) or before.
    ``durable_only``: only a commit that waits for the disk (``synchronous=2``) fails."""

    def __init__(self, db: sqlite3.Connection, code: int, written: bool, durable_only: bool = False) -> None:
        self._db, self._code, self._written, self._durable_only = db, code, written, durable_only
        self._durable = False

    def execute(self, sql: str, *args):
        if sql.startswith("PRAGMA synchronous="):
            self._durable = sql.endswith("=2")
        if sql == "COMMIT" and (self._durable or not self._durable_only):
            if self._written:
                self._db.execute(sql)
            error = sqlite3.OperationalError("disk I/O error" if self._written else "database or disk is full")
            error.sqlite_errorcode = self._code
            raise error
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self._db, name)


@pytest.mark.parametrize(("code", "written", "refusal", "seq_reused"), [
    (sqlite3.SQLITE_FULL, False, StoreError, True),  # rolled back: nobody ever saw it
    (1034, True, DiskFailed, False),  # SQLITE_IOERR_FSYNC: it may be in the log, found at the next open
])
def test_an_own_event_a_failing_disk_may_hold_is_never_signed_over(tmp_path: Path, code: int, written: bool,
                                                                   refusal: type, seq_reused: bool) -> None:
    """A full disk refuses the commit: the event was never stored nor sent, and its seq is free
    again. A failed fsync leaves it maybe stored: signing another event at its seq would be a
    fork the moment SQLite recovers it, so the seq is never used again and the member stops."""
    store = EventStore.open(tmp_path / "member")
    member = Member(credentials("eio/p", "decomposer"), store, network=None,  # type: ignore[arg-type]
                    think_in_thread=False, store_in_thread=False, now_ms=lambda: 10_000)
    assert member.author is not None and member.own is not None
    member.own.ready.set()
    body = ProposalBody(node="ab" * 32, strategy="mine", subgoals=(
        Subgoal(title="Book the ryokan", executable=True), Subgoal(title="Buy the rail pass", executable=True)))
    real = store._db
    store._db = _CommitFails(real, code, written)  # type: ignore[assignment]
    try:
        with pytest.raises(refusal) as refused:
            trio.run(member.publish, body)
        assert (type(refused.value) is DiskFailed) == (refusal is DiskFailed)
    finally:
        store._db = real
    assert member.author.sign(body).seq == (1 if seq_reused else 2)
    store.close()
    with EventStore.open(tmp_path / "member") as reopened:
        assert [e.seq for e in reopened.events()] == ([] if seq_reused else [1])


def _scorer_with_a_draft(nursery: trio.Nursery, board: Board, me, tag: str, store: EventStore,
                         backend: ScriptedBackend) -> Member:
    """Scorer ``me`` of ``board`` (tagged ``tag``), ready to sign, the board's events delivered
    to it: it will vote on the draft once it runs. The goal is stored at once, the rest when it
    runs."""
    network = SimNetwork(SimFabric(random.Random(0), nursery), me.peer_id)
    member = Member(credentials(f"{tag}/s{board.scorers.index(me)}", "scorer"), store, network, backend=backend,
                    think_in_thread=False, now_ms=lambda: 150, new_key=True)
    assert member.own is not None and member.own.learned([], member.tree, "no peer here", 0)
    member._admit([board.goal], "gossip")
    for event in board.events[1:]:
        network.deliver(event.to_wire())
    network.attach(nursery)
    return member


def test_a_member_whose_disk_fails_its_own_vote_stops_and_says_why(tmp_path: Path) -> None:
    """The whole way: a scorer votes, the disk fails the vote's commit, the acting loop does not
    take it for a refusal to try again later (as a full disk is) but ends the member, and the
    command ends with the store's message, not a traceback."""
    board = Board(tag="eiov")
    me = board.others(1)[1]
    store = EventStore.open(tmp_path / "scorer")
    real = store._db

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member = _scorer_with_a_draft(nursery, board, me, "eiov", store, ScriptedBackend(seed=1, latency=0.01))
            store._db = _CommitFails(real, 1034, written=True, durable_only=True)  # type: ignore[assignment]
            await nursery.start(member.run)
            with trio.fail_after(20):  # ended by the failure, or the test fails here
                await trio.sleep_forever()

    with pytest.raises(CommandError, match=r"failed a write.*the member stops"):
        run_member_loop(main, store)
    store._db = real
    with EventStore.open(tmp_path / "scorer") as reopened:
        own = [e for e in reopened.events() if e.author == me.peer_id]
        assert [(e.seq, e.kind) for e in own] == [(1, "vote")]  # the one the disk may hold, nothing after
        assert len(reopened.events()) == len(board.events) + 1


def test_a_thought_a_full_disk_refused_is_published_once_the_disk_frees_without_thinking_again(
        tmp_path: Path) -> None:
    """A scorer votes while its disk is full: the vote's commit is refused (nothing stored or
    sent, its seq free again) and the member tries to publish it again, once a second
    while the disk stays full. The model is asked once: the retries publish the vote it
    already thought (a retry that thought again called the model back to back for as long as
    the disk was full, a shared model service's time taken from every other member). Once
    the disk has room the votes it thought are stored, each once."""
    board = Board(tag="fullv")
    me = board.others(1)[1]
    store = EventStore.open(tmp_path / "scorer")
    real = store._db
    voted: list[Event] = []
    asked: list[tuple[str, str]] = []  # every model call: (kind, what about)

    class Counted(ScriptedBackend):
        def latency_s(self, kind: str, key: str) -> float:
            asked.append((kind, key))
            return super().latency_s(kind, key)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member = _scorer_with_a_draft(nursery, board, me, "fullv", store, Counted(seed=1, latency=0.01))
            store._db = _CommitFails(real, sqlite3.SQLITE_FULL, written=False, durable_only=True)  # type: ignore[assignment]
            await nursery.start(member.run)
            with trio.fail_after(20):
                while member.stats.store_errors < 3:  # refused, and tried again twice (a second apart)
                    await trio.sleep(0.01)
                assert len(set(asked)) == len(asked), asked  # refused thrice, asked once (another draft's vote aside)
                assert not [e for e in store.events() if e.author == me.peer_id]
                store._db = real  # room on the disk again
                while len([e for e in store.events() if e.author == me.peer_id]) < len(asked):
                    await trio.sleep(0.01)  # every vote thought is stored (or the test times out)
            voted.extend(e for e in store.events() if e.author == me.peer_id)
            nursery.cancel_scope.cancel()

    trio.run(main)
    store.close()
    # each vote thought while the disk was full is stored once there is room, seqs in order,
    # and the model was asked about each draft once
    assert sorted(e.seq for e in voted) == list(range(1, len(voted) + 1)) and {e.kind for e in voted} == {"vote"}
    assert sorted(("score", e.body.proposal) for e in voted) == sorted(asked), (voted, asked)


class _FailingLog:
    """A transition log's file whose every write fails with ``code``."""

    def __init__(self, real, code: int) -> None:
        self.real, self.code = real, code

    def write(self, data: bytes) -> int:
        raise OSError(self.code, os.strerror(self.code))

    def __getattr__(self, name: str):
        return getattr(self.real, name)


def _observer_of_a_split(nursery: trio.Nursery, tmp_path: Path, shown: list[str],
                         store: EventStore) -> tuple[Member, Board]:
    """An observer logging what it shows to ``tmp_path``, about to be given a decided split."""
    board = Board(tag="showlog")
    board.accept(("Kyoto lodging", "Tokyo rail pass"), "showlog")
    network = SimNetwork(SimFabric(random.Random(0), nursery), "observer")
    member = Member(credentials("showlog/o", "observer"), store, network,
                    think_in_thread=False, now_ms=lambda: 150, transitions_path=tmp_path / "transitions.jsonl",
                    on_transition=lambda change: shown.append(change.kind))
    network.attach(nursery)
    return member, board


def test_a_member_whose_disk_has_no_room_for_its_log_shows_nothing_until_it_has(tmp_path: Path) -> None:
    """What a member showed is on record in its transition log (the checkers judge every moment
    from it), and a full disk must not stop the member (its store's refused writes are tried
    again): with the log on the kernel's own full disk (``/dev/full``: ENOSPC) a decided split
    is stored but not shown, and the member runs on; once the log has room the split is shown,
    on record first. (A crash here used a traceback: the log's write raised out of the fold.)"""
    shown: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member, board = _observer_of_a_split(nursery, tmp_path, shown, EventStore.open(tmp_path / "observer"))
            assert member._show_log is not None
            working = member._show_log._file
            member._show_log._file = open("/dev/full", "ab", buffering=0)  # noqa: SIM115
            await nursery.start(member.run)
            for event in board.events:
                member.network.deliver(event.to_wire())  # type: ignore[attr-defined]
            with trio.fail_after(20):
                while len(member.index) < len(board.events) or member.stats.folds < 3:
                    await trio.sleep(0.05)  # stored, and folded again (put off) at least once
                assert "split" not in shown, shown
                member._show_log._file.close()
                member._show_log._file = working  # room again
                while "split" not in shown:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()

    trio.run(main)
    logged = [json.loads(line)["kind"] for line in (tmp_path / "transitions.jsonl").read_text().splitlines()]
    assert logged[:2] == ["start", "loaded"] and "split" in logged[2:], logged
    assert shown == logged, (shown, logged)  # shown exactly what is on record, in its order


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS])
def test_a_member_whose_log_fails_otherwise_stops_and_says_why(tmp_path: Path, code: int) -> None:
    """Any other failure to write the log is a failing disk: the member stops with a message
    naming the log and the way out, not a traceback, before it shows the split."""
    shown: list[str] = []
    store = EventStore.open(tmp_path / "observer")
    given: list[Event] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member, board = _observer_of_a_split(nursery, tmp_path, shown, store)
            given.extend(board.events)
            assert member._show_log is not None
            member._show_log._file = _FailingLog(member._show_log._file, code)  # type: ignore[assignment]
            await nursery.start(member.run)
            for event in board.events:
                member.network.deliver(event.to_wire())  # type: ignore[attr-defined]
            with trio.fail_after(20):  # ended by the failure, or the test fails here
                await trio.sleep_forever()

    with pytest.raises(CommandError, match=rf"transitions\.jsonl: {os.strerror(code)}; the member stops"):
        run_member_loop(main, store)
    assert "split" not in shown
    with EventStore.open(tmp_path / "observer") as reopened:  # what it stored is kept
        assert {e.id for e in reopened.events()} == {e.id for e in given}


def test_listen_addresses_the_disk_cannot_take_end_the_command_with_a_message(tmp_path: Path) -> None:
    """The addresses file is written once the member runs; a disk that refuses it ends the
    command through ``run_member_loop`` like any failing write, not with a traceback."""
    not_a_directory = tmp_path / "data"
    not_a_directory.write_text("")
    store = EventStore.open(tmp_path / "store")

    async def main() -> None:
        async with trio.open_nursery():
            write_addrs(not_a_directory, ["/ip4/127.0.0.1/tcp/4001"])

    with pytest.raises(CommandError, match=r"listen addresses to .*data/addrs: .*then start it again"):
        run_member_loop(main, store)


def test_after_its_disk_failed_once_the_store_refuses_every_write_and_sync(tmp_path: Path, monkeypatch) -> None:
    """A later fsync (a new descriptor) never hears of the error reported on another, and
    would pass for the disk holding what it dropped: the store refuses from the first."""
    board = Board(tag="poison")
    with EventStore.open(tmp_path) as store:
        store.add_many(board.events[:2], durable=False)
        real_fsync = os.fsync

        def refused(descriptor: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", refused)
        with pytest.raises(DiskFailed):
            store.sync()
        monkeypatch.setattr(os, "fsync", real_fsync)  # "works" again
        for use in (store.sync, lambda: store.add_many(board.events[2:3], durable=False),
                    lambda: store.bump("refused")):
            with pytest.raises(DiskFailed, match="cannot flush"):
                use()
        assert store.count() == 2 and store.counters() == {}


@pytest.mark.parametrize("via", ["gossip", "sync"])
def test_others_events_a_failing_disk_refuses_stop_the_member_too(tmp_path: Path, via: str) -> None:
    """Gossip stored on the event loop, a pull's batch on the store thread: a full disk is
    counted and the events come again by sync; a failing disk stops the member."""
    board = Board(tag=f"eio-{via}")
    store = EventStore.open(tmp_path / "member")
    member = Member(credentials("eio/o", "observer"), store, network=None,  # type: ignore[arg-type]
                    think_in_thread=False, store_in_thread=via == "sync", now_ms=lambda: 10_000)
    real = store._db
    try:
        for code, refusal in ((sqlite3.SQLITE_FULL, None), (778, DiskFailed)):  # 778: SQLITE_IOERR_WRITE
            store._db = _CommitFails(real, code, written=False)  # type: ignore[assignment]
            if via == "gossip":
                stored = lambda: member._admit(board.events, "gossip")  # noqa: E731
            else:
                stored = lambda: member.written(board.events, member.store_behind(board.events), "sync")  # noqa: E731
            if refusal is None:
                assert stored() == 0 and member.stats.store_errors == 1
            else:
                with pytest.raises(refusal):
                    stored()
        assert len(member.index) == 0  # neither indexed nor folded
    finally:
        store._db = real
        member.close()
        store.close()


def test_a_feed_head_the_disk_refuses_stops_the_member(tmp_path: Path, monkeypatch) -> None:
    from agents.core.fold import fold
    from agents.ownfeed import OwnFeed

    client = Feed("eio/c", "client")
    event = client.at(1000, goal("Plan a day in Kyoto", [Feed("eio/s", "scorer").peer_id], 1))
    own = OwnFeed(client.author, tmp_path / "feed.head")

    def no_room(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(DiskFailed, match=r"feed head in .*feed.head: No space left on device; the member stops"):
        own.signed(event, fold([event]))


def test_a_log_an_earlier_life_left_torn_is_ended_before_the_next_record(tmp_path: Path) -> None:
    """A crash mid-line leaves the log's last record torn; the next life's first record must
    start a line of its own, or the reader loses it with the torn one (often its start)."""
    path = tmp_path / "transitions.jsonl"
    path.write_text('{"at_ms": 1, "kind": "start"}\n{"at_ms": 2, "ki')
    log = ShowLog(path, lambda: {"at_ms": 3})
    assert log.record([Transition("start")])
    log.close()
    lines = path.read_text().splitlines()
    assert lines[1] == '{"at_ms": 2, "ki' and json.loads(lines[2])["kind"] == "start", lines


def test_a_batch_the_full_disk_cut_short_leaves_no_trace_in_the_log(tmp_path: Path) -> None:
    """A disk filling mid-write takes part of a batch: it is cut back, and so is nothing more
    after a second refusal (a cut measured from a stale offset padded the log with zeros);
    the batch that finally goes in is the log's only line."""
    class Filling:
        def __init__(self, real) -> None:
            self.real, self.writes = real, 0

        def write(self, data: bytes) -> int:
            self.writes += 1
            if self.writes == 1:
                return self.real.write(data[:5])  # the disk filled after five bytes
            if self.writes == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.real.write(data)

        def __getattr__(self, name: str):
            return getattr(self.real, name)

    path = tmp_path / "transitions.jsonl"
    log = ShowLog(path, lambda: {"at_ms": 1})
    log._file = Filling(log._file)  # type: ignore[assignment]
    assert not log.record([Transition("start")]) and not log.record([Transition("start")])
    assert log.record([Transition("loaded")])
    log.close()
    assert [json.loads(line)["kind"] for line in path.read_bytes().decode().splitlines()] == ["loaded"]
