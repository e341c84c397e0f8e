"""Pulls running at once split what they fetch (``agents.pull_claims``): a late joiner
connected to three holders of one backlog fetched, verified and stored it three times.

The ledger is tested alone with a clock the test sets; a member is tested on the
simulation's fabric with gossip lost (only pulls carry events) and holders whose frames
take a while, so that their pulls overlap.
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing

from agents.core.sync import EventIndex, SeqRange
from agents.member import Member
from agents.net.base import MAX_FRAME_BYTES, PeerStream, StreamClosed
from agents.pull_claims import FRESH_S, HOLD_S, PullClaims
from agents.store import EventStore
from agents.syncproto import serve_pull
from chaos.sim.identities import EPOCH_MS
from chaos.sim.network import SimFabric, SimNetwork
from tests.builders import Feed, credentials, goal, identity


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_two_pulls_of_one_backlog_take_disjoint_batches_and_count_what_they_skip() -> None:
    ledger = PullClaims(Clock())
    first, second = ledger.open(), ledger.open()
    wanted = [SeqRange("a", 1, 1000)]
    ids, ranges, ids_left, left = first.take(["x", "y"], wanted, 500)
    assert (ids, ranges, ids_left, left) == (["x", "y"], [SeqRange("a", 1, 498)], [], [SeqRange("a", 499, 1000)])
    ids, ranges, ids_left, left = second.take(["y", "z"], wanted, 500)
    # "y" and seqs 1-498 are the first pull's: skipped, and the rest is taken from 499 on
    assert ids == ["z"] and ranges == [SeqRange("a", 499, 997)] and left == [SeqRange("a", 998, 1000)]
    assert second.skipped == 1 + 498 and first.skipped == 0
    # the first pull's next batch leaves out what the second claimed
    ids, ranges, _, left = first.take([], [SeqRange("a", 499, 1000)], 500)
    assert ranges == [SeqRange("a", 998, 1000)] and left == [] and first.skipped == 499


def test_a_pull_claims_around_the_pieces_others_hold_and_a_hole_between_them() -> None:
    ledger = PullClaims(Clock())
    a, b, c = ledger.open(), ledger.open(), ledger.open()
    a.take([], [SeqRange("x", 10, 19)], 10)
    b.take([], [SeqRange("x", 30, 39)], 10)
    _, ranges, _, left = c.take([], [SeqRange("x", 1, 50), SeqRange("y", 1, 5)], 30)
    assert ranges == [SeqRange("x", 1, 9), SeqRange("x", 20, 29), SeqRange("x", 40, 50)]
    assert left == [SeqRange("y", 1, 5)] and c.skipped == 20


def test_claims_go_when_their_pull_ends_and_are_ignored_once_it_stops_moving() -> None:
    clock = Clock()
    ledger = PullClaims(clock)
    stalled, ended, late = ledger.open(), ledger.open(), ledger.open()
    stalled.take(["s"], [SeqRange("x", 1, 10)], 100)
    ended.take(["e"], [SeqRange("y", 1, 10)], 100)
    ended.close()
    ids, ranges, _, _ = late.take(["s", "e"], [SeqRange("x", 1, 10), SeqRange("y", 1, 10)], 100)
    assert ids == ["e"] and ranges == [SeqRange("y", 1, 10)] and late.skipped == 11
    # a pull that moves keeps its claims; one silent for FRESH_S no longer holds anyone back
    clock.now = FRESH_S - 0.5
    stalled.moved()
    clock.now = 2 * FRESH_S - 1
    assert late.take(["s"], [], 100)[0] == []
    clock.now = 2 * FRESH_S
    assert late.take(["s"], [SeqRange("x", 1, 10)], 100)[:2] == (["s"], [SeqRange("x", 1, 10)])


def test_a_pull_that_keeps_moving_holds_its_claims_for_hold_s_and_asking_again_does_not_renew_them() -> None:
    """A hostile server answering one event a frame, just often enough, keeps its pull
    moving; what that pull asked for is still fetched by the others ``HOLD_S`` later."""
    clock = Clock()
    ledger = PullClaims(clock)
    dripping, honest = ledger.open(), ledger.open()
    dripping.take(["i"], [SeqRange("x", 1, 500)], 501)
    clock.now = HOLD_S - 1
    dripping.moved()
    dripping.take(["i"], [SeqRange("x", 2, 500)], 501)  # what it left for later, asked again
    assert honest.take(["i"], [SeqRange("x", 1, 500)], 501)[:2] == ([], [])
    clock.now = HOLD_S + 0.5
    dripping.moved()
    assert honest.take(["i"], [SeqRange("x", 1, 500)], 501)[:2] == (["i"], [SeqRange("x", 1, 500)])


def _now_ms() -> int:
    return EPOCH_MS + int(trio.current_time() * 1000)


class Holder:
    """One holder's side of its sync streams: offers leave after ``offer_delay``, each events
    frame after ``delay``; after ``frames`` events frames the link goes dead for good. It counts
    the events it sends."""

    def __init__(self, name: str, held: EventIndex, *, delay: float, offer_delay: float = 0.0,
                 frames: int | None = None) -> None:
        self.name, self.peer_id = name, identity(name).peer_id
        self.held, self.delay, self.offer_delay, self.frames = held, delay, offer_delay, frames
        self.sent = 0

    async def serve(self, stream: PeerStream) -> None:
        holder = self

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


def _one_shot(tmp_path: Path, holders: list[Holder], monkeypatch) -> dict[str, object]:
    """A watcher whose only pulls are one ``sync_all`` round (its loops are idle, so the round's
    own pulls are the ones that overlap) with ``holders`` up; gossip is lost."""

    async def idle(self, nursery: trio.Nursery) -> None:
        await trio.sleep_forever()

    monkeypatch.setattr(Member, "_connection_loop", idle)
    monkeypatch.setattr(Member, "_sync_loop", idle)
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0
            network = SimNetwork(fabric, identity("watcher").peer_id)
            watcher = Member(credentials("watcher", "observer"), EventStore.open(tmp_path / "watcher"), network,
                             think_in_thread=False, now_ms=_now_ms)
            network.attach(nursery)
            await nursery.start(watcher.run)
            fabric.bring_up(network)
            for holder in holders:
                endpoint = fabric.endpoint(holder.peer_id)
                endpoint.serve(holder.serve)
                endpoint.attach(nursery)
                fabric.bring_up(endpoint)
            added = await watcher.sync_all()
            outcome.update(added=added, stored=len(watcher.index), goals=len(watcher.tree.goals),
                           sent=[holder.sent for holder in holders], skipped=watcher.stats.sync_skipped,
                           whole=watcher.stats.pulls_whole, timeouts=watcher.stats.sync_timeouts)
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
    3,000 events in all, not 9,000, and the round ends with all of them."""
    held = _backlog(3000)
    holders = [Holder(f"holder-{i}", held, delay=1.0) for i in range(3)]
    outcome = _one_shot(tmp_path, holders, monkeypatch)
    assert outcome["stored"] == outcome["goals"] == outcome["added"] == 3000, outcome
    assert sum(outcome["sent"]) == 3000, outcome  # type: ignore[arg-type]
    assert all(outcome["sent"]), outcome  # type: ignore[arg-type]  # the work was split, not left to one
    assert outcome["skipped"] and outcome["whole"], outcome


@pytest.mark.parametrize("dies_after", [0, 1])
def test_what_a_failed_pull_had_asked_for_is_fetched_before_the_round_ends(tmp_path: Path, monkeypatch,
                                                                             dies_after: int) -> None:
    """The first holder to answer (the others' offers come 0.5 s later) claims the first
    batches and its link dies after ``dies_after`` frames. The others skipped what it had
    claimed; the round pulls from them again, one at a time, once every pull has ended: it
    ends with every event, and whole."""
    held = _backlog(3000)
    holders = [Holder("dying", held, delay=1.0, frames=dies_after),
               *(Holder(f"holder-{i}", held, delay=1.0, offer_delay=0.5) for i in range(2))]
    outcome = _one_shot(tmp_path, holders, monkeypatch)
    assert outcome["stored"] == outcome["goals"] == 3000, outcome
    assert outcome["skipped"] and outcome["timeouts"] == 1 and outcome["whole"], outcome
    assert outcome["sent"][0] == 500 * dies_after, outcome  # type: ignore[index]
