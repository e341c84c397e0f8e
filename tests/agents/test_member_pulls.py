"""A running member's pulls: a few peers per round, whatever the cluster's size; one pull that
can never be cancelled holds up its own peer, no other.

py-libp2p cleans up a failed stream open in a shielded scope with no deadline; a member
that awaited all its pulls together stopped syncing with everyone behind one such pull,
and a gap in a feed (an event gossip lost) was never repaired. Here an in-memory network
wedges every open to one peer the same way, and gossip loses every message, so the only
way an event can travel is a later pull from another peer.
"""

from __future__ import annotations

import random
import threading
from itertools import pairwise
from pathlib import Path

import pytest
import trio
import trio.testing

from agents.core.events import Event
from agents.core.sync import EventIndex
from agents.member import Member
from agents.net.base import MAX_FRAME_BYTES, PeerStream, StreamClosed
from agents.store import EventStore, StoreError
from agents.syncing import (
    LATEST_WAKE,
    PULL_DEADLINE,
    QUIET_AFTER,
    QUIET_SYNC_INTERVAL,
    SYNC_FANOUT,
    SYNC_INTERVAL,
    WAKE_JITTER,
    WEDGED_AFTER,
)
from agents.syncproto import serve_pull
from chaos.sim.identities import EPOCH_MS
from chaos.sim.network import SimFabric, SimNetwork
from tests.agents.watchers import now_ms as _now_ms
from tests.agents.watchers import watching
from tests.builders import Feed, credentials, goal, identity


class WedgingNetwork(SimNetwork):
    """Every open to ``wedged`` blocks, shielded from cancellation, until ``release`` is set."""

    def __init__(self, fabric: SimFabric, peer_id: str, wedged: str) -> None:
        super().__init__(fabric, peer_id)
        self.wedged = wedged
        self.release = trio.Event()
        self.opens_to_wedged = 0
        self.dropped: list[str] = []
        self.we_stalled = False

    async def open_stream(self, peer: str):
        if peer == self.wedged:
            self.opens_to_wedged += 1
            with trio.CancelScope(shield=True):
                await self.release.wait()
        return await super().open_stream(peer)

    def drop(self, peer: str) -> None:
        self.dropped.append(peer)

    def stalled_since(self, start: float) -> bool:
        return self.we_stalled


def _serving(held: EventIndex):
    """A stream handler that answers pulls with what ``held`` holds (now and later)."""

    async def serve(stream: PeerStream) -> None:
        await serve_pull(stream, held, credentials("holder", "client"))

    return serve


async def _watcher_and_holder(nursery: trio.Nursery, tmp_path: Path, network: SimNetwork, holder_id: str,
                              serve, store_in_thread: bool = True) -> tuple[Member, SimNetwork]:
    """An observer member on ``network`` (already attached to its fabric) and a holder endpoint
    that answers pulls with ``serve``; neither is brought up yet."""
    watcher = Member(credentials("watcher", "observer"), EventStore.open(tmp_path / "watcher"), network,
                     think_in_thread=False, now_ms=_now_ms, store_in_thread=store_in_thread)
    network.attach(nursery)
    await nursery.start(watcher.run)
    holder = network.fabric.endpoint(holder_id)
    holder.serve(serve)
    holder.attach(nursery)
    return watcher, holder


@pytest.mark.parametrize("we_stalled", [False, True], ids=["peer-wedged", "we-stalled"])
def test_a_pull_that_ignores_cancellation_does_not_stop_sync_with_other_peers(tmp_path: Path,
                                                                                  we_stalled: bool) -> None:
    """With ``we_stalled`` the process itself did not run meanwhile (as the adapter's stall
    watch reports): the old pull is not the peer's fault, and its connection is kept."""
    watcher_id, holder_id, silent_id = (identity(n).peer_id for n in ("watcher", "holder", "silent"))
    held = EventIndex()  # what the holder serves; the test adds to it
    feed = Feed("holder", "client")
    outcome: dict[str, object] = {}

    serve = _serving(held)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0  # no gossip at all: only pulls carry events
            network = WedgingNetwork(fabric, watcher_id, wedged=silent_id)
            network.we_stalled = we_stalled
            watcher, holder = await _watcher_and_holder(nursery, tmp_path, network, holder_id, serve)
            for endpoint in (network, holder, fabric.endpoint(silent_id)):  # the silent one never answers
                fabric.bring_up(endpoint)
            await trio.sleep(WEDGED_AFTER + 10)  # the first pull to the silent peer is still running
            event = feed.at(_now_ms(), goal("Plan a two-week trip to Japan", [holder_id], 1))
            held.add_all([event])
            with trio.move_on_after(60):
                while event.id not in watcher.index:
                    await trio.sleep(0.5)
            outcome.update(arrived=event.id in watcher.index, timeouts=watcher.stats.sync_timeouts,
                           opens=network.opens_to_wedged, dropped=list(network.dropped))
            network.release.set()
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome["arrived"], "the holder's event never reached the watcher: its sync stalled behind the wedged pull"
    assert outcome["opens"] == 1, "a second pull to the wedged peer started while the first was still running"
    if we_stalled:
        assert outcome["dropped"] == [] and outcome["timeouts"] == 0, "a peer was blamed for our own stall"
    else:
        assert outcome["dropped"] == [silent_id], "the wedged peer's connection was not dropped"
        assert outcome["timeouts"] == 1


class CountingNetwork(SimNetwork):
    """Records each stream it opens: (trio time, peer)."""

    def __init__(self, fabric: SimFabric, peer_id: str) -> None:
        super().__init__(fabric, peer_id)
        self.opens: list[tuple[float, str]] = []

    async def open_stream(self, peer: str):
        self.opens.append((trio.current_time(), peer))
        return await super().open_stream(peer)


TWENTY = [f"peer-{i}" for i in range(20)]


async def _watching_twenty(nursery: trio.Nursery, tmp_path: Path,
                           held: EventIndex) -> tuple[Member, CountingNetwork]:
    """A watcher connected to the twenty peers of ``TWENTY``, the last of which serves ``held``
    (the others nothing), with no gossip at all: only pulls carry events."""
    serving = {identity(name).peer_id: lambda stream, name=name: serve_pull(
        stream, held if name == TWENTY[-1] else EventIndex(), credentials(name, "client")) for name in TWENTY}
    watcher, network = await watching(nursery, tmp_path, serving, CountingNetwork)
    assert isinstance(network, CountingNetwork)
    return watcher, network


def test_a_member_pulls_from_a_few_peers_a_round_and_reaches_every_peer(tmp_path: Path) -> None:
    """Twenty connected peers: each round pulls from ``SYNC_FANOUT`` of them (not twenty), and
    an event that only one of them holds still arrives, within one turn of the rotation. The
    watcher has nothing new all along, so its rounds are ``QUIET_SYNC_INTERVAL`` apart."""
    interval = QUIET_SYNC_INTERVAL
    longest = QUIET_SYNC_INTERVAL + LATEST_WAKE  # a quiet round comes at the first wake past the interval
    peers = [identity(name).peer_id for name in TWENTY]
    feed = Feed("holder", "client")
    held = EventIndex()
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            watcher, network = await _watching_twenty(nursery, tmp_path, held)
            await trio.sleep(10 * SYNC_INTERVAL)
            event = feed.at(_now_ms(), goal("Plan a two-week trip to Japan", [peers[-1]], 1))
            held.add_all([event])
            posted = trio.current_time()
            with trio.move_on_after(200):
                while event.id not in watcher.index:
                    await trio.sleep(0.1)
            outcome.update(opens=list(network.opens), arrived_after=trio.current_time() - posted,
                           arrived=event.id in watcher.index)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    opens: list[tuple[float, str]] = outcome["opens"]  # type: ignore[assignment]
    assert outcome["arrived"], "an event held by one peer of twenty never arrived"
    turn = -(-len(peers) // SYNC_FANOUT)  # rounds for the rotation to come round
    assert outcome["arrived_after"] <= (turn + 1) * longest  # type: ignore[operator]
    # steady state (after the first connections): at most SYNC_FANOUT opens in any round
    start = opens[0][0] + SYNC_INTERVAL / 2  # past the connection's pulls; the watcher never heard news: rounds 12-16.5 s apart
    windows: dict[int, int] = {}
    for at, _ in opens:
        if at >= start:
            windows[int((at - start) // interval)] = windows.get(int((at - start) // interval), 0) + 1
    assert windows and max(windows.values()) <= SYNC_FANOUT, windows
    # and within one turn of the rotation every peer is pulled from
    first_turn = {peer for at, peer in opens if start <= at < start + turn * longest}
    assert first_turn == set(peers)


def test_a_quiet_member_pulls_at_once_from_a_peer_whose_status_says_it_holds_more(tmp_path: Path) -> None:
    """Twenty peers, no gossip, the watcher quiet (rounds ``QUIET_SYNC_INTERVAL`` apart): a
    member left behind when a plan went quiet waited for the rotation to reach the one peer
    holding what it lacked (at thirty members in containers, past the test's two minutes).
    A status saying that peer holds more brings a pull from it at once; one saying it holds
    no more brings none; a peer repeating itself gets at most one pull per ``SYNC_INTERVAL``;
    and peers that always say so (liars) never take all the rotation's places: every peer
    is still pulled from, within twenty rounds."""
    peers = [identity(name).peer_id for name in TWENTY]
    holder = peers[-1]
    feed = Feed("holder", "client")
    held = EventIndex()
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            watcher, network = await _watching_twenty(nursery, tmp_path, held)
            await trio.sleep(QUIET_AFTER + 2 * QUIET_SYNC_INTERVAL)
            held.add_all([feed.at(_now_ms(), goal("Plan a two-week trip to Japan", [holder], 1))])
            await trio.sleep(QUIET_SYNC_INTERVAL / 2)  # off the rounds' beat
            told = trio.current_time()
            watcher.peer_holds(peers[3], len(watcher.index))  # no more than the watcher: nothing
            await trio.sleep(SYNC_INTERVAL / 10)
            outcome["after_equal"] = [peer for at, peer in network.opens if at >= told]
            told = trio.current_time()
            for _ in range(3):  # a holder repeating its status
                watcher.peer_holds(holder, len(watcher.index) + 1)
            with trio.move_on_after(SYNC_INTERVAL):
                while len(watcher.index) == 0:
                    await trio.sleep(0.01)
            outcome["arrived_after"] = trio.current_time() - told
            outcome["first"] = [peer for at, peer in network.opens if at >= told]
            await trio.sleep(SYNC_INTERVAL / 2)  # the pull is over; the holder says so again, too soon
            again = trio.current_time()
            watcher.peer_holds(holder, len(watcher.index) + 1)
            await trio.sleep(SYNC_INTERVAL / 10)
            outcome["too_soon"] = [peer for at, peer in network.opens if at >= again]
            # from now on the holder and two more claim more every interval, as liars would
            lying_from = trio.current_time()
            for _ in range(20):
                await trio.sleep(SYNC_INTERVAL)
                for liar in (holder, peers[0], peers[1]):
                    watcher.peer_holds(liar, len(watcher.index) + 1)
            outcome["lying"] = [peer for at, peer in network.opens if at >= lying_from]
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome["after_equal"] == [], outcome
    assert outcome["arrived_after"] < SYNC_INTERVAL / 10, outcome  # at once, not a quiet round later
    first: list[str] = outcome["first"]  # type: ignore[assignment]
    assert first.count(holder) == 1 and len(first) <= SYNC_FANOUT, first  # in the same round as two others
    assert outcome["too_soon"] == [], outcome
    lying: list[str] = outcome["lying"]  # type: ignore[assignment]
    assert 15 <= lying.count(holder) <= 21, lying  # about one pull an interval, no more
    assert set(lying) == set(peers), set(peers) - set(lying)  # the rotation went on beside it


def test_a_member_whose_store_refuses_writes_pulls_only_at_the_quiet_interval(tmp_path: Path) -> None:
    """A full disk: what a member pulls cannot be stored, and its peers' statuses all say they
    hold more, each pulling at once (about five pulls a second in the lab's full-disk
    scenario, every one for nothing, every one served by a peer). While its store refuses
    writes it pulls only at the quiet rotation's pace, and statuses pull nothing, nor does a
    wake asked for (a gap); once the store takes writes again, the next status saying a peer
    holds more pulls at once."""
    peers = [identity(name).peer_id for name in TWENTY]
    holder = peers[-1]
    feed = Feed("holder", "client")
    held = EventIndex()
    outcome: dict[str, object] = {}

    def full(*args, **kwargs):
        raise StoreError("cannot write to the store: database or disk is full (this test's disk)")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            watcher, network = await _watching_twenty(nursery, tmp_path, held)
            wakes: list[float] = []
            every_wake = watcher._drop_wedged_pulls

            def woke() -> None:  # a loop that spins without time passing fails here, not hangs
                wakes.append(trio.current_time())
                assert len(wakes) < 1000 or wakes[-1000] != wakes[-1], "the sync loop spins"
                every_wake()

            watcher._drop_wedged_pulls = woke  # type: ignore[method-assign]
            await trio.sleep(QUIET_AFTER + 2 * QUIET_SYNC_INTERVAL)
            held.add_all([feed.at(_now_ms(), goal("Plan a two-week trip to Japan", [holder], 1))])
            free = watcher.store.add_many
            watcher.store.add_many = full  # type: ignore[method-assign]
            watcher.peer_holds(holder, len(watcher.index) + 1)  # pulled at once, and refused
            await trio.sleep(SYNC_INTERVAL / 10)
            assert watcher.stats.store_errors == 1, watcher.stats
            full_from = trio.current_time()
            for _ in range(20):  # a minute of statuses: the holder and two more hold more
                await trio.sleep(SYNC_INTERVAL)
                for peer in (holder, peers[0], peers[1]):
                    watcher.peer_holds(peer, len(watcher.index) + 1)
                watcher.sync_now.set()  # as a gap in a feed asks
            outcome["full"] = [peer for at, peer in network.opens if at >= full_from]
            outcome["full_for"] = trio.current_time() - full_from
            watcher.store.add_many = free  # type: ignore[method-assign]
            freed = trio.current_time()
            with trio.move_on_after(10 * QUIET_SYNC_INTERVAL):
                while len(watcher.index) == 0:
                    await trio.sleep(SYNC_INTERVAL)
                    watcher.peer_holds(holder, len(watcher.index) + 1)
            outcome["caught_up_after"] = trio.current_time() - freed
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    rounds = -(-outcome["full_for"] // QUIET_SYNC_INTERVAL) + 1  # type: ignore[operator]
    assert len(outcome["full"]) <= rounds * SYNC_FANOUT, outcome["full"]  # not one a status (60)
    # the last refusal quiets statuses for a quiet interval; the next status after it pulls
    assert outcome["caught_up_after"] <= QUIET_SYNC_INTERVAL + 2 * SYNC_INTERVAL, outcome


def test_a_member_pulls_often_while_pulls_repair_and_seldom_while_gossip_keeps_up(tmp_path: Path) -> None:
    """A member's pulls that find nothing were most of what it cost: once no pull has brought it
    anything new for ``QUIET_AFTER``, its rounds come every ``QUIET_SYNC_INTERVAL``; a pull
    that brings something (here gossip is lost, so pulls bring every event) brings back a round
    every ``SYNC_INTERVAL``. Events that gossip delivers whole do not: fifty members on two
    cores spent a third to a half of their CPU per delivery on the pulls they quickened (stop 43)."""
    holder_id = identity("holder").peer_id
    feed, gapped = Feed("holder", "client"), Feed("gapper", "client")
    held = EventIndex()
    rounds: dict[str, list] = {}

    serve = _serving(held)

    def gaps(opens: list[tuple[float, str]], since: float, until: float) -> set[float]:
        times = [at for at, _ in opens if since <= at < until]
        return {round(b - a, 1) for a, b in pairwise(times)}

    async def main() -> None:
        async def a_minute_of_events(title: str, gossiped: bool) -> None:
            """An event of the holder's every SYNC_INTERVAL for a minute; ``gossiped``: the
            watcher hears each as gossip too, else only its pulls bring them."""
            for i in range(20):
                event = feed.at(EPOCH_MS + int(trio.current_time() * 1000), goal(f"{title} {i}", [holder_id], 1))
                held.add_all([event])
                if gossiped:
                    watcher.receive(event.to_wire())
                await trio.sleep(SYNC_INTERVAL)

        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0  # no gossip: only pulls carry events
            network = CountingNetwork(fabric, identity("watcher").peer_id)
            watcher, holder = await _watcher_and_holder(nursery, tmp_path, network, holder_id, serve)
            fabric.bring_up(network)
            fabric.bring_up(holder)
            await trio.sleep(10 * QUIET_SYNC_INTERVAL)
            busy_from = trio.current_time()
            await a_minute_of_events("Goal number", gossiped=False)
            busy_until = trio.current_time()
            await trio.sleep(QUIET_AFTER + 10 * QUIET_SYNC_INTERVAL)
            assert len(watcher.index) == 20
            rounds.update(quiet=sorted(gaps(network.opens, SYNC_INTERVAL, busy_from)),
                          busy=sorted(gaps(network.opens, busy_from + SYNC_INTERVAL, busy_until)),
                          after=sorted(gaps(network.opens, busy_until + QUIET_AFTER + SYNC_INTERVAL,
                                            trio.current_time())))
            # quiet, and gossip brings every event, in order: the rounds stay quiet
            gossip_from = trio.current_time()
            await a_minute_of_events("Gossiped goal", gossiped=True)
            assert len(watcher.index) == 40
            rounds.update(gossiped=sorted(gaps(network.opens, gossip_from, trio.current_time())))
            # quiet, and gossip brings an event whose feed has a gap: the member pulls at once
            first, second = (gapped.at(EPOCH_MS + int(trio.current_time() * 1000) + i,
                                       goal(f"Gapped goal {i}", [holder_id], 1)) for i in range(2))
            held.add_all([first, second])
            await trio.sleep(SYNC_INTERVAL / 2)  # off the rounds' beat
            received_at = trio.current_time()
            watcher.receive(second.to_wire())
            with trio.move_on_after(SYNC_INTERVAL):
                while first.id not in watcher.index:
                    await trio.sleep(0.01)
            rounds.update(gap=[round(at - received_at, 2) for at, _ in network.opens if at >= received_at][:1],
                          filled=[first.id in watcher.index])
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    for quiet in (rounds["quiet"], rounds["after"], rounds["gossiped"]):  # the first wake at least QUIET_SYNC_INTERVAL on
        assert quiet and all(QUIET_SYNC_INTERVAL <= gap <= QUIET_SYNC_INTERVAL + LATEST_WAKE for gap in quiet), rounds
    busy = rounds["busy"]
    assert busy and all(SYNC_INTERVAL * (1 - WAKE_JITTER) <= gap <= LATEST_WAKE for gap in busy), rounds
    assert len(busy) > 3, rounds  # never in step: the gaps differ round to round
    assert rounds["gap"] == [0.0] and rounds["filled"] == [True], rounds


def _members_started_together(tmp_path: Path, count: int, seconds: float) -> dict[str, list[float]]:
    """``count`` observers started at the same instant, each connected to one quiet holder, no
    gossip: when each opened its pulls (trio time), by member."""
    holder_id = identity("holder").peer_id
    opens: dict[str, list[float]] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0
            holder = fabric.endpoint(holder_id)
            holder.serve(_serving(EventIndex()))
            holder.attach(nursery)
            networks = {}
            for i in range(count):
                name = f"watcher-{i}"
                network = networks[name] = CountingNetwork(fabric, identity(name).peer_id)
                member = Member(credentials(name, "observer"), EventStore.open(tmp_path / name), network,
                                think_in_thread=False, now_ms=_now_ms, store_in_thread=False)
                network.attach(nursery)
                await nursery.start(member.run)
            for endpoint in (holder, *networks.values()):  # all at one instant
                fabric.bring_up(endpoint)
            await trio.sleep(seconds)
            opens.update({name: [at for at, _ in network.opens] for name, network in networks.items()})
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return opens


def test_members_started_together_do_not_pull_in_step(tmp_path: Path) -> None:
    """Fifty members started together (a lab, a bench) woke in the same second every round and
    pulled all at once, saturating both cores: every ``QUIET_SYNC_INTERVAL`` 75 pulls within a
    second, and a probe gossiped then was seconds late. Each member's wakes are drawn from its
    own seeded generator: past the pulls on connecting, no second holds the pulls of more than
    a few of ten quiet members started at one instant, each still makes about one round per
    ``QUIET_SYNC_INTERVAL``, and the same members wake at the same times in a second run (no
    unseeded random source)."""
    seconds = 10 * QUIET_SYNC_INTERVAL  # nothing ever reaches them: quiet, a round at least that far apart
    opens = _members_started_together(tmp_path / "first", 10, seconds)
    pulling: dict[int, set[str]] = {}  # second -> the members that pulled in it (a round opens a few streams)
    for name, times in opens.items():
        for at in times:
            if at >= SYNC_INTERVAL * 3:  # past the pulls on connecting
                pulling.setdefault(int(at), set()).add(name)
    assert max(len(names) for names in pulling.values()) <= 4, sorted(pulling.items())
    for times in opens.values():  # a quiet member's rounds, as often as before on average
        rounds = len({int(at) for at in times if at >= SYNC_INTERVAL * 3})
        assert seconds / (QUIET_SYNC_INTERVAL + LATEST_WAKE) - 1 <= rounds <= seconds / QUIET_SYNC_INTERVAL + 1, times
    again = _members_started_together(tmp_path / "second", 10, seconds)
    assert again == opens


def test_the_rotation_skips_no_peer_while_others_come_and_go() -> None:
    """A peer leaves and another joins every round: each peer connected throughout is still
    pulled from at least once in every ceil(peers / SYNC_FANOUT) + 1 rounds."""
    from types import SimpleNamespace

    member = SimpleNamespace(network=SimpleNamespace(peer_id=identity("watcher").peer_id), _pulling={},
                             _pull_after=b"", _ring_keys={})
    member._ring_key = lambda peer: Member._ring_key(member, peer)  # type: ignore[arg-type]
    stable = [identity(f"stable-{i}").peer_id for i in range(12)]
    churn = [identity(f"churn-{i}").peer_id for i in range(60)]
    last: dict[str, int] = {}
    gaps: list[int] = []
    for round_ in range(50):
        connected = stable + churn[round_:round_ + 8]  # one leaves, one joins, every round
        for peer in Member._next_pulls(member, connected):  # type: ignore[arg-type]
            if peer in stable:
                if peer in last:
                    gaps.append(round_ - last[peer])
                last[peer] = round_
    assert set(last) == set(stable)
    assert max(gaps) <= -(-20 // SYNC_FANOUT) + 1, gaps


class SlowFrames:
    """A server's side of a sync stream whose events frames each take ``delay`` to leave (a
    slow link), counting how many conversations run at once."""

    running = 0
    most = 0

    def __init__(self, stream: PeerStream, delay: float, frames: list[int] | None = None) -> None:
        self._stream, self.peer, self._delay, self._frames = stream, stream.peer, delay, frames

    async def send(self, frame: bytes) -> None:
        if frame.startswith(b'{"events"') or b'"type":"events"' in frame[:200]:
            if self._frames is not None:  # frames left for the whole holder, every stream together
                if self._frames[0] == 0:
                    await trio.sleep_forever()  # the link goes dead mid-pull, for good
                self._frames[0] -= 1
            await trio.sleep(self._delay)
        await self._stream.send(frame)

    async def receive(self, limit: int = MAX_FRAME_BYTES) -> bytes:
        return await self._stream.receive(limit)


async def _watching(nursery: trio.Nursery, tmp_path: Path, holder_id: str, serve, network_type) -> Member:
    """A watcher and a holder that answers its pulls with ``serve``, both up, on a fabric that
    loses every gossip message (only pulls carry events)."""
    fabric = SimFabric(random.Random(0), nursery)
    fabric.weather.loss = 1.0
    network = network_type(fabric, identity("watcher").peer_id)
    watcher, holder = await _watcher_and_holder(nursery, tmp_path, network, holder_id, serve)
    fabric.bring_up(network)
    fabric.bring_up(holder)
    return watcher


def _slow_holder(tmp_path: Path, events: int, delay: float, during=None, frames: int | None = None) -> dict[str, object]:
    """A watcher catches up from one holder of ``events`` goals whose frames each take ``delay``;
    ``during(watcher)`` runs once the first pull is under way."""
    holder_id = identity("holder").peer_id
    feed = Feed("holder", "client")
    held = EventIndex([feed.at(EPOCH_MS - 60_000 + i, goal(f"Goal number {i}", [holder_id], 1))
                       for i in range(events)])
    outcome: dict[str, object] = {}
    left = None if frames is None else [frames]

    async def serve(stream: PeerStream) -> None:
        SlowFrames.running += 1
        SlowFrames.most = max(SlowFrames.most, SlowFrames.running)
        try:
            await serve_pull(SlowFrames(stream, delay, left), held, credentials("holder", "client"))
        except StreamClosed:  # the puller gave up on us: a member's server says so and goes on
            pass
        finally:
            SlowFrames.running -= 1

    async def main() -> None:
        SlowFrames.running = SlowFrames.most = 0
        async with trio.open_nursery() as nursery:
            watcher = await _watching(nursery, tmp_path, holder_id, serve, CountingNetwork)
            started = trio.current_time()
            if during is not None:
                await trio.sleep(1)
                await during(watcher)
            with trio.move_on_after(120 if frames is None else 30):
                while len(watcher.index) < events or watcher._pulling:  # a pull folds as it ends
                    await trio.sleep(0.5)
            outcome.update(stored=len(watcher.index), after=trio.current_time() - started,
                           timeouts=watcher.stats.sync_timeouts, most=SlowFrames.most,
                           bytes_in=watcher.stats.sync_bytes_in, bytes_out=watcher.stats.sync_bytes_out,
                           complete_tree=len(watcher.tree.goals) == events, goals=len(watcher.tree.goals))
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return outcome


def test_a_catch_up_that_keeps_moving_outlives_the_pull_deadline(tmp_path: Path) -> None:
    """4,000 events come in eight frames (500 asked at a time) of 6 s each: the whole pull takes longer than
    ``PULL_DEADLINE``, but no frame does. The deadline counts from the last frame, so the pull
    completes (a deadline on the whole pull cut it after the first frame, every time, and the
    events already received were thrown away with it)."""
    outcome = _slow_holder(tmp_path, 4000, delay=6.0)
    assert outcome["stored"] == 4000 and outcome["complete_tree"], outcome
    assert outcome["after"] > PULL_DEADLINE, outcome  # type: ignore[operator]
    assert outcome["timeouts"] == 0, outcome
    # the sync bytes are counted: the frames in, the summary and needs out
    assert outcome["bytes_in"] > 4000 * 300 and 0 < outcome["bytes_out"] < outcome["bytes_in"] / 10, outcome  # type: ignore[operator]


def test_a_one_shot_sync_waits_for_the_pull_already_running_instead_of_pulling_twice(tmp_path: Path) -> None:
    """``sync_all`` (what ``swarm observe`` runs) while the member's own loop pulls from the same
    peer: one conversation at a time with that peer, not two fetching and verifying the same
    events side by side."""
    held_after_first: list[int] = []

    async def one_shot(watcher: Member) -> None:
        await watcher.sync_all()
        held_after_first.append(len(watcher.index))

    outcome = _slow_holder(tmp_path, 3000, delay=3.0, during=one_shot)
    assert outcome["stored"] == 3000, outcome
    assert outcome["most"] == 1, f"{outcome['most']} sync conversations ran at once with one peer"
    # it waited for the running pull and pulled after it: one call is a whole catch-up
    # (observe's one-shot stops at the first round that brings nothing), and the round was
    # not cut short while a pull kept moving
    assert held_after_first == [3000], held_after_first
    assert outcome["timeouts"] == 0, outcome


def test_a_pull_cut_mid_way_keeps_and_folds_what_it_received(tmp_path: Path) -> None:
    """The holder's link dies after two frames (500 events each): the pull is dropped at its
    deadline, and the thousand events it brought are stored and shown, not thrown away."""
    outcome = _slow_holder(tmp_path, 3000, delay=1.0, frames=2)
    assert outcome["timeouts"], outcome
    assert outcome["stored"] == outcome["goals"] == 1000, outcome


def test_a_fold_longer_than_every_deadline_is_work_not_a_stalled_pull(tmp_path: Path, monkeypatch) -> None:
    """Folding what a big pull brought takes a while (over 40 s for a million events here).
    The one-shot round waiting on that pull (``swarm observe``) was cut short at its deadline
    as the pull closed its stream after the fold, and observe said no pull had run to its end."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    folding = Member._refold

    def slow_refold(self: Member) -> None:
        folding(self)
        clock.jump(3 * WEDGED_AFTER)  # the fold's time, as the member's clock sees it

    monkeypatch.setattr(Member, "_refold", slow_refold)
    holder_id = identity("holder").peer_id
    feed = Feed("holder", "client")
    held = EventIndex([feed.at(EPOCH_MS - 60_000 + i, goal(f"Goal number {i}", [holder_id], 1)) for i in range(600)])
    outcome: dict[str, int] = {}

    serve = _serving(held)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            watcher = await _watching(nursery, tmp_path, holder_id, serve, SimNetwork)
            await watcher.sync_all()
            outcome.update(stored=len(watcher.index), whole=watcher.stats.pulls_whole,
                           timeouts=watcher.stats.sync_timeouts)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    assert outcome["stored"] == 600 and outcome["whole"] >= 1 and outcome["timeouts"] == 0, outcome


@pytest.mark.parametrize(("authors", "offer_page", "expected", "behind", "store_in_thread"),
                         [(1, 20_000, [1_000, 300], [True, False], True),
                          (1, 20_000, [1_000, 300], [False, False], False),
                          (3, 1, [300, 300, 300], [False, False, False], True)],
                         ids=["one page", "one page, no store thread (the simulated world)", "a page per author"])
def test_a_large_pull_stores_a_transaction_per_store_every_events_or_page_and_folds_once(
        tmp_path: Path, monkeypatch, authors: int, offer_page: int, expected: list[int], behind: list[bool],
        store_in_thread: bool) -> None:
    """Events come in frames of ``BATCH`` (500): with ``STORE_EVERY`` at 1,000, 1,300 events of
    one author are stored in two transactions (a commit per frame was an fsync per 500
    events), and 3 x 300 events offered a page per author one transaction per page (the next
    page's wants are read from what is stored). The tree is folded once, at the end.

    A batch stored at ``STORE_EVERY`` is committed on the store thread while frames go on
    coming (``behind``); the last, and one stored before a page's wants are read, on the
    event loop's thread (what follows reads the index)."""
    from agents import syncing, syncproto, syncwire

    monkeypatch.setattr(syncing, "STORE_EVERY", 2 * syncproto.BATCH)
    monkeypatch.setattr(syncwire, "OFFER_PAGE", offer_page)
    holder_id = identity("holder").peer_id
    feeds = [Feed(f"holder-{i}", "client") for i in range(authors)]
    per_author = sum(expected) // authors
    held = EventIndex([feed.at(1_000 + i, goal(f"Goal {i}", [holder_id], 1))
                       for feed in feeds for i in range(per_author)])
    stored: list[int] = []
    on_store_thread: list[bool] = []
    folds: list[int] = []  # events stored at each fold
    outcome: dict[str, object] = {}

    serve = _serving(held)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0
            network = SimNetwork(fabric, identity("watcher").peer_id)
            watcher, holder = await _watcher_and_holder(nursery, tmp_path, network, holder_id, serve,
                                                        store_in_thread)
            store_many, refold = watcher.store.add_many, watcher._refold

            def counted_store(events: list, durable: bool = True) -> int:
                stored.append(len(events))
                on_store_thread.append(threading.current_thread() is not threading.main_thread())
                return store_many(events, durable)

            def counted_refold() -> None:
                folds.append(watcher.store.count())
                refold()

            monkeypatch.setattr(watcher.store, "add_many", counted_store)
            monkeypatch.setattr(watcher, "_refold", counted_refold)
            fabric.bring_up(network)
            fabric.bring_up(holder)
            with trio.move_on_after(120):
                while watcher.tree.events < len(held):
                    await trio.sleep(0.5)
            outcome["folded"] = watcher.tree.events
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome["folded"] == len(held) == sum(expected)
    assert stored == expected, stored
    assert on_store_thread == behind, on_store_thread
    assert folds == [len(held)], folds  # once, with every event stored


def test_a_batch_the_store_thread_cannot_write_is_not_taken_and_comes_again(tmp_path: Path, monkeypatch) -> None:
    """The disk refuses the batch the store thread commits: those events are neither indexed
    nor folded (nothing says they are held), the error is counted, the pull goes on, and a
    later pull brings them again once the store takes writes."""
    from agents import syncing, syncproto

    monkeypatch.setattr(syncing, "STORE_EVERY", 2 * syncproto.BATCH)
    holder_id = identity("holder").peer_id
    feed = Feed("holder", "client")
    held = EventIndex([feed.at(1_000 + i, goal(f"Goal {i}", [holder_id], 1)) for i in range(1_300)])
    refused: list[int] = []
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0
            network = SimNetwork(fabric, identity("watcher").peer_id)
            watcher, holder = await _watcher_and_holder(nursery, tmp_path, network, holder_id, _serving(held))
            store_many, refold = watcher.store.add_many, watcher._refold

            def full_once(events: list, durable: bool = True) -> int:
                if threading.current_thread() is not threading.main_thread() and not refused:
                    refused.append(len(events))
                    raise StoreError("cannot write to the store: database or disk is full (test)")
                return store_many(events, durable)

            def checked_refold() -> None:  # whatever is folded is stored
                assert watcher.store.count() == len(watcher.index)
                refold()

            monkeypatch.setattr(watcher.store, "add_many", full_once)
            monkeypatch.setattr(watcher, "_refold", checked_refold)
            fabric.bring_up(network)
            fabric.bring_up(holder)
            with trio.move_on_after(120):
                while watcher.tree.events < len(held):
                    await trio.sleep(0.5)
            outcome.update(folded=watcher.tree.events, stored=watcher.store.count(),
                           errors=watcher.stats.store_errors, pulls=watcher.stats.pulls_whole)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert refused == [1_000], refused
    assert outcome["errors"] == 1, outcome
    assert outcome["folded"] == outcome["stored"] == len(held), outcome
    assert outcome["pulls"] >= 2, outcome  # the first left 1,000 behind; a later one brought them


class _Recorder:
    """A member's logger that keeps the messages it was given, at any level."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __getattr__(self, level: str):
        return lambda message, **fields: self.messages.append(message)


def test_an_event_sent_twice_in_one_pull_frame_is_taken_once_as_by_gossip(tmp_path: Path) -> None:
    """A pull's frames go through the same screen as a gossip batch (``Member._take_into``): a
    copy already taken is counted, not stored, logged or measured as a delivery again (the
    propagation benchmark counts "admitted" records, one per event and member)."""
    feed = Feed("writer", "client")
    events = [feed.at(EPOCH_MS - 10_000 + i, goal(f"Goal {i}", [identity("writer").peer_id], 1)) for i in range(3)]
    frame = [(e.to_wire(), e) for e in events]
    frame.insert(2, frame[0])
    outcome: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            network = SimNetwork(SimFabric(random.Random(0), nursery), identity("watcher").peer_id)
            with EventStore.open(tmp_path / "watcher") as store:
                member = Member(credentials("watcher", "observer"), store, network, think_in_thread=False,
                                now_ms=_now_ms)
                member._log = recorder = _Recorder()  # type: ignore[assignment]
                unstored: dict[str, Event] = {}
                member._screen_synced(frame, unstored)
                outcome.update(unstored=list(unstored), received=member.stats.received,
                               admitted=recorder.messages.count("admitted"))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome["unstored"] == [e.id for e in events], outcome
    assert outcome["received"] == 4, outcome  # the copy is counted as received
    assert outcome["admitted"] == 3, outcome  # and logged once
