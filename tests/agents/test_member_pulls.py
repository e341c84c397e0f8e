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
from pathlib import Path

import trio
import trio.testing

from agents.core.sync import EventIndex
from agents.member import SYNC_FANOUT, SYNC_INTERVAL, WEDGED_AFTER, Member
from agents.net.base import PeerStream
from agents.store import EventStore
from agents.syncproto import serve_pull
from chaos.sim.identities import EPOCH_MS
from chaos.sim.network import SimFabric, SimNetwork
from tests.builders import Feed, credentials, goal, identity


class WedgingNetwork(SimNetwork):
    """Every open to ``wedged`` blocks, shielded from cancellation, until ``release`` is set."""

    def __init__(self, fabric: SimFabric, peer_id: str, wedged: str) -> None:
        super().__init__(fabric, peer_id)
        self.wedged = wedged
        self.release = trio.Event()
        self.opens_to_wedged = 0
        self.dropped: list[str] = []

    async def open_stream(self, peer: str):
        if peer == self.wedged:
            self.opens_to_wedged += 1
            with trio.CancelScope(shield=True):
                await self.release.wait()
        return await super().open_stream(peer)

    def drop(self, peer: str) -> None:
        self.dropped.append(peer)


def test_a_pull_that_ignores_cancellation_does_not_stop_sync_with_other_peers(tmp_path: Path) -> None:
    watcher_id, holder_id, silent_id = (identity(n).peer_id for n in ("watcher", "holder", "silent"))
    held = EventIndex()  # what the holder serves; the test adds to it
    feed = Feed("holder", "client")
    outcome: dict[str, object] = {}

    def now_ms() -> int:
        return EPOCH_MS + int(trio.current_time() * 1000)

    async def serve(stream: PeerStream) -> None:
        await serve_pull(stream, held, credentials("holder", "client"))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0  # no gossip at all: only pulls carry events
            network = WedgingNetwork(fabric, watcher_id, wedged=silent_id)
            watcher = Member(credentials("watcher", "observer"), EventStore.open(tmp_path / "watcher"), network,
                             think_in_thread=False, now_ms=now_ms)
            network.attach(nursery)
            await nursery.start(watcher.run)
            holder = fabric.endpoint(holder_id)
            holder.serve(serve)
            holder.attach(nursery)
            for endpoint in (network, holder, fabric.endpoint(silent_id)):  # the silent one never answers
                fabric.bring_up(endpoint)
            await trio.sleep(WEDGED_AFTER + 10)  # the first pull to the silent peer is still running
            event = feed.at(now_ms(), goal("Plan a two-week trip to Japan", [holder_id], 1))
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


def test_a_member_pulls_from_a_few_peers_a_round_and_reaches_every_peer(tmp_path: Path) -> None:
    """Twenty connected peers: each round pulls from ``SYNC_FANOUT`` of them (not twenty), and
    an event that only one of them holds still arrives, within one turn of the rotation."""
    names = [f"peer-{i}" for i in range(20)]
    peers = [identity(name).peer_id for name in names]
    feed = Feed("holder", "client")
    held = EventIndex()
    outcome: dict[str, object] = {}

    def now_ms() -> int:
        return EPOCH_MS + int(trio.current_time() * 1000)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fabric = SimFabric(random.Random(0), nursery)
            fabric.weather.loss = 1.0  # no gossip at all: only pulls carry events
            network = CountingNetwork(fabric, identity("watcher").peer_id)
            watcher = Member(credentials("watcher", "observer"), EventStore.open(tmp_path / "watcher"), network,
                             think_in_thread=False, now_ms=now_ms)
            network.attach(nursery)
            await nursery.start(watcher.run)
            fabric.bring_up(network)
            for name, peer in zip(names, peers, strict=True):
                endpoint = fabric.endpoint(peer)
                endpoint.serve(lambda stream, name=name: serve_pull(
                    stream, held if name == names[-1] else EventIndex(), credentials(name, "client")))
                endpoint.attach(nursery)
                fabric.bring_up(endpoint)
            await trio.sleep(10 * SYNC_INTERVAL)
            event = feed.at(now_ms(), goal("Plan a two-week trip to Japan", [peers[-1]], 1))
            held.add_all([event])
            posted = trio.current_time()
            with trio.move_on_after(60):
                while event.id not in watcher.index:
                    await trio.sleep(0.1)
            outcome.update(opens=list(network.opens), arrived_after=trio.current_time() - posted,
                           arrived=event.id in watcher.index)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    opens: list[tuple[float, str]] = outcome["opens"]  # type: ignore[assignment]
    assert outcome["arrived"], "an event held by one peer of twenty never arrived"
    turn = -(-len(peers) // SYNC_FANOUT)  # rounds for the rotation to come round
    assert outcome["arrived_after"] <= (turn + 1) * SYNC_INTERVAL  # type: ignore[operator]
    # steady state (after the first connections): at most SYNC_FANOUT opens in any round
    start = opens[0][0] + SYNC_INTERVAL
    windows: dict[int, int] = {}
    for at, _ in opens:
        if at >= start:
            windows[int((at - start) // SYNC_INTERVAL)] = windows.get(int((at - start) // SYNC_INTERVAL), 0) + 1
    assert windows and max(windows.values()) <= SYNC_FANOUT, windows
    # and within one turn of the rotation every peer is pulled from
    first_turn = {peer for at, peer in opens if start <= at < start + turn * SYNC_INTERVAL}
    assert first_turn == set(peers)


def test_the_rotation_skips_no_peer_while_others_come_and_go() -> None:
    """A peer leaves and another joins every round: each peer connected throughout is still
    pulled from at least once in every ceil(peers / SYNC_FANOUT) + 1 rounds."""
    from types import SimpleNamespace

    member = SimpleNamespace(network=SimpleNamespace(peer_id=identity("watcher").peer_id), _pulling={},
                             _pull_after=b"")
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
