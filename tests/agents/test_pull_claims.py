"""Pulls running at once split what they fetch (``agents.pull_claims``): a late joiner
connected to three holders of one backlog fetched, verified and stored it three times.

The ledger is tested alone with a clock the test sets; a member is tested on the
simulation's fabric with gossip lost (only pulls carry events) and holders whose frames
take a while, so that their pulls overlap.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing

from agents.core.sync import EventIndex, SeqRange
from agents.member import Member
from agents.net.base import MAX_FRAME_BYTES, PeerStream, StreamClosed
from agents.pull_claims import FRESH_S, HOLD_S, PullClaims
from agents.syncproto import serve_pull
from chaos.sim.identities import EPOCH_MS
from tests.agents.watchers import watching
from tests.builders import Feed, credentials, goal, identity


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _feed(events: int) -> tuple[str, list]:
    feed = Feed("author", "client")
    return feed.peer_id, [feed.at(1_000 + i, goal(f"Goal {i}", [feed.peer_id], 1)) for i in range(events)]


def test_a_second_pull_puts_off_what_the_first_asked_for_and_drops_what_it_holds() -> None:
    author, events = _feed(1000)
    clock = Clock()
    ledger = PullClaims(clock)
    first, second = ledger.open(EventIndex()), ledger.open(EventIndex())
    wanted = [SeqRange(author, 1, 1000)]
    assert first.take(["x"], wanted, 500) == (["x"], [SeqRange(author, 1, 499)], [], [SeqRange(author, 500, 1000)])
    # "x" and 1-499 are the first pull's: put off; the second takes from 500 on
    ids, ranges, ids_left, left = second.take(["x", "y"], wanted, 500)
    assert (ids, ranges, ids_left, left) == (["y"], [SeqRange(author, 500, 998)], [], [SeqRange(author, 999, 1000)])
    assert second.pending() and second.left == 0
    # 1-499 came and were admitted (held: the first pull will store them); the second's end
    # game drops them, and waits on "x", still asked
    first.hold(events[:499])
    clock.now = 1.0
    first.moved()
    ids, ranges, _, left = second.take([], [SeqRange(author, 999, 1000)], 500)
    assert (ids, ranges, left) == ([], [SeqRange(author, 999, 1000)], [])
    assert second.left == 499 and second.pending()


def test_what_was_put_off_and_got_stored_is_not_fetched_and_what_is_still_asked_waits() -> None:
    author, events = _feed(30)
    index = EventIndex()
    ledger = PullClaims(Clock())
    first, second = ledger.open(index), ledger.open(index)
    first.take([], [SeqRange(author, 1, 20)], 20)
    assert second.take([], [SeqRange(author, 1, 30)], 500)[1] == [SeqRange(author, 21, 30)]
    # the end game found 1-20 still asked: they wait (the pull polls ``pending``)
    assert second.pending() and second.take([], [], 500)[:2] == ([], [])
    first.hold(events[:10])  # 1-10 came; 11-20 were left for later
    index.add_all(events[:10])  # and were stored
    first.stored()
    assert second.take([], [], 500)[:2] == ([], []) and second.pending()  # 11-20 still asked
    first.close()  # the first pull failed: nothing holds 11-20 back any longer
    assert second.take([], [], 500)[1] == [SeqRange(author, 11, 20)] and not second.pending()
    # 1-10 were stored by the other pull: left to it (a stored seq is not checked against
    # this peer's event there, a fork's other branch), so this pull is not whole
    assert second.left == 10


def test_a_pull_cuts_around_what_others_hold_and_ask() -> None:
    author, events = _feed(50)
    ledger = PullClaims(Clock())
    a, b, c = ledger.open(EventIndex()), ledger.open(EventIndex()), ledger.open(EventIndex())
    a.take([], [SeqRange(author, 10, 19)], 10)
    b.hold(events[29:39])  # seqs 30-39
    _, ranges, _, left = c.take([], [SeqRange(author, 1, 50), SeqRange("other", 1, 5)], 30)
    assert ranges == [SeqRange(author, 1, 9), SeqRange(author, 20, 29), SeqRange(author, 40, 50)]
    assert left == [SeqRange("other", 1, 5)] and c.left == 10 and c.pending()


def test_asks_are_honoured_while_their_pull_moves_and_for_hold_s_from_the_first_ask() -> None:
    """A hostile server answering one event a frame, just often enough, keeps its pull
    moving; what that pull asked for is taken by the others ``HOLD_S`` after it first asked:
    asking again for what it left for later does not renew the ask."""
    clock = Clock()
    ledger = PullClaims(clock)
    stalled, dripping, honest = (ledger.open(EventIndex()) for _ in range(3))
    stalled.take(["s"], [], 10)
    dripping.take(["d"], [SeqRange("x", 1, 500)], 501)
    clock.now = FRESH_S - 0.5
    dripping.moved()
    dripping.take(["d"], [SeqRange("x", 2, 500)], 501)  # what it left for later, asked again
    clock.now = FRESH_S + 0.5  # the stalled pull's asks no longer count; the dripping one's do
    dripping.moved()
    assert honest.take(["s", "d"], [SeqRange("x", 1, 500)], 501)[:2] == (["s"], [])
    assert honest.pending()
    clock.now = HOLD_S + 0.5
    dripping.moved()
    assert honest.take([], [], 501)[:2] == (["d"], [SeqRange("x", 1, 500)]) and not honest.pending()


def test_a_pull_waits_on_others_asks_hold_s_at_most_however_often_they_ask_again() -> None:
    clock = Clock()
    ledger = PullClaims(clock)
    asker, waiter = ledger.open(EventIndex()), ledger.open(EventIndex())
    asker.take(["e"], [], 10)
    clock.now = 1.0
    assert waiter.take(["e"], [], 10)[0] == [] and waiter.pending()  # the end game waits from here
    clock.now = HOLD_S + 0.9
    asker.moved()
    asker.take(["e"], [], 10)  # its first ask expired: a new pull's ask, say, from now
    assert waiter.take([], [], 10)[0] == []
    clock.now = HOLD_S + 1.0
    asker.moved()
    assert waiter.take([], [], 10)[0] == ["e"] and not waiter.pending()


def test_a_pull_keeps_the_asks_of_the_last_hold_s_only() -> None:
    clock = Clock()
    ledger = PullClaims(clock)
    pull = ledger.open(EventIndex())
    for step in range(100):
        clock.now = step
        pull.take([f"id-{step}-{i}" for i in range(500)], [SeqRange(f"author-{step}", 1, 100)], 600)
    assert len(pull._asked_ids) <= 500 * HOLD_S and len(pull._asked_runs) <= HOLD_S


class Holder:
    """One holder's side of its sync streams: offers leave after ``offer_delay``, each events
    frame after ``delay``; after ``frames`` events frames the link goes dead for good. It counts
    the events it sends."""

    def __init__(self, name: str, held: EventIndex, *, delay: float, offer_delay: float = 0.0,
                 frames: int | None = None) -> None:
        self.name, self.peer_id = name, identity(name).peer_id
        self.held, self.delay, self.offer_delay, self.frames = held, delay, offer_delay, frames
        self.sent = 0
        self.serves = 0

    async def serve(self, stream: PeerStream) -> None:
        holder = self
        self.serves += 1

        class Slow:
            peer = stream.peer

            async def send(self, frame: bytes) -> None:
                kind = orjson.loads(frame)["type"]
                if kind == "offer":
                    await trio.sleep(holder.offer_delay)
                elif kind == "events":
                    if holder.frames == 0:
                        await trio.sleep_forever()
                    if holder.frames is not None:
                        holder.frames -= 1
                    await trio.sleep(holder.delay)
                    holder.sent += len(orjson.loads(frame)["events"])
                await stream.send(frame)

            async def receive(self, limit: int = MAX_FRAME_BYTES) -> bytes:
                return await stream.receive(limit)

        with contextlib.suppress(StreamClosed):  # the puller gave up on a dead link
            await serve_pull(Slow(), self.held, credentials(self.name, "observer"))


def _one_shot(tmp_path: Path, holders: list[Holder], monkeypatch, loops: bool = False) -> dict[str, object]:
    """A watcher that runs one ``sync_all`` round (what ``swarm observe`` runs) as ``holders``
    come up; gossip is lost. Its own sync loops are idle unless ``loops``: then they pull from
    the new connections beside the round, as in a real observer."""

    async def idle(self, nursery: trio.Nursery) -> None:
        await trio.sleep_forever()

    if not loops:
        monkeypatch.setattr(Member, "_connection_loop", idle)
        monkeypatch.setattr(Member, "_sync_loop", idle)
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            watcher, _ = await watching(nursery, tmp_path, {holder.peer_id: holder.serve for holder in holders})
            added = await watcher.sync_all()
            outcome.update(added=added, stored=len(watcher.index), goals=len(watcher.tree.goals),
                           sent=[holder.sent for holder in holders], skipped=watcher.stats.sync_skipped,
                           whole=watcher.stats.pulls_whole, timeouts=watcher.stats.sync_timeouts,
                           folds=watcher.stats.folds)
            watcher.close()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return outcome


def _backlog(events: int) -> EventIndex:
    feed = Feed("holder", "client")
    holder_id = identity("holder").peer_id
    return EventIndex([feed.at(EPOCH_MS - 60_000 + i, goal(f"Goal number {i}", [holder_id], 1))
                       for i in range(events)])


def test_three_pulls_of_one_backlog_fetch_each_event_once(tmp_path: Path, monkeypatch) -> None:
    """Three holders of the same 3,000 events, pulled from at once: the three holders send
    3,000 events in all, not 9,000, the round ends with all of them, and folds them once."""
    held = _backlog(3000)
    holders = [Holder(f"holder-{i}", held, delay=1.0) for i in range(3)]
    outcome = _one_shot(tmp_path, holders, monkeypatch)
    assert outcome["stored"] == outcome["goals"] == outcome["added"] == 3000, outcome
    assert sum(outcome["sent"]) == 3000, outcome  # type: ignore[arg-type]
    assert all(outcome["sent"]), outcome  # type: ignore[arg-type]  # the work was split, not left to one
    # each left to the others what they fetched, so each was pulled from again, whole
    assert outcome["whole"] == 3, outcome
    # the three ended together, the last to end folded what all three stored (a fold of a
    # 100k-event store takes seconds); the second pulls found nothing to fold
    assert outcome["folds"] == 1, outcome


@pytest.mark.parametrize("dies_after", [0, 1])
def test_what_a_failed_pull_had_asked_for_is_fetched_before_the_round_ends(tmp_path: Path, monkeypatch,
                                                                             dies_after: int) -> None:
    """The first holder to answer (the others' offers come 0.5 s later) asks for the first
    batches and its link dies after ``dies_after`` frames. The others put off what it had
    asked for, waited on it (``HOLD_S`` at most), then fetched it: the round ends with every
    event, fetched about once (what the dying pull received but never checked, twice)."""
    held = _backlog(3000)
    holders = [Holder("dying", held, delay=1.0, frames=dies_after),
               *(Holder(f"holder-{i}", held, delay=1.0, offer_delay=0.5) for i in range(2))]
    outcome = _one_shot(tmp_path, holders, monkeypatch)
    assert outcome["stored"] == outcome["goals"] == 3000, outcome
    assert outcome["timeouts"] == 1 and outcome["whole"] >= 1, outcome
    assert outcome["sent"][0] == 500 * dies_after, outcome  # type: ignore[index]
    assert sum(outcome["sent"]) <= 3000 + 500 * dies_after, outcome  # type: ignore[arg-type]


def test_a_pull_that_left_events_to_another_is_repeated_once_all_have_ended(tmp_path: Path, monkeypatch) -> None:
    """The second holder's offer comes while the first pull holds events it has not stored
    yet: each pull leaves some events to the other (held, or stored while it put them off)
    and is not whole, so the round pulls from both again, one at a time, once both have
    ended; those pulls are whole and fetch nothing."""
    held = _backlog(2000)
    holders = [Holder("first", held, delay=0.3), Holder("second", held, delay=0.3, offer_delay=0.5)]
    outcome = _one_shot(tmp_path, holders, monkeypatch)
    assert outcome["stored"] == outcome["goals"] == 2000, outcome
    assert sum(outcome["sent"]) == 2000, outcome  # type: ignore[arg-type]
    assert outcome["skipped"] and outcome["whole"] == 2, outcome
    assert [holder.serves for holder in holders] == [2, 2], outcome


def test_a_one_shot_round_beside_the_members_own_pulls_ends_with_every_event(tmp_path: Path, monkeypatch) -> None:
    """``swarm observe`` runs the member's loops too: they pull from each new connection at
    once, and the round's pulls wait for those (one pull per peer) and then find nothing
    left. Every event is fetched once, and the round ends with all of them."""
    held = _backlog(3000)
    holders = [Holder(f"holder-{i}", held, delay=1.0) for i in range(3)]
    outcome = _one_shot(tmp_path, holders, monkeypatch, loops=True)
    assert outcome["stored"] == outcome["goals"] == 3000, outcome
    assert sum(outcome["sent"]) == 3000 and outcome["whole"] >= 1, outcome  # type: ignore[arg-type]
