"""Pubsub relations py-libp2p leaves half open are reopened (``agents/net/half_open.py``).

When a pubsub stream with a peer fails, py-libp2p forgets the peer's subscriptions and
reopens only its own stream; the peer, whose stream to us still works, never says its
subscriptions again. We then never mesh, gossip or forward to it. The real-host test makes
that state the way py-libp2p does (its dead-peer path) and proves gossip flows again.
"""

from __future__ import annotations

import trio
from libp2p.peer.id import ID

from agents.net import p2p
from agents.net.half_open import HalfOpen
from tests.agents.gossip_pair import heard, start_pair


def _known(*peers: str) -> HalfOpen:
    """A HalfOpen that has seen ``peers`` subscribed (at time -1)."""
    half_open = HalfOpen(after=10, again_after=60)
    assert half_open.due(-1, list(peers), set(peers)) == []
    return half_open


def test_a_peer_is_due_once_it_has_been_half_open_for_the_whole_wait() -> None:
    half_open = _known("a", "b")
    assert half_open.due(0, ["a", "b"], {"b"}) == []
    assert half_open.due(9.9, ["a", "b"], {"b"}) == []
    assert half_open.due(10, ["a", "b"], {"b"}) == ["a"]
    assert half_open.mended == 1


def test_a_peer_never_known_to_subscribe_is_left_alone() -> None:
    """A peer of another cluster (met through mDNS) subscribes to nothing of ours: not half open."""
    half_open = _known("a")
    assert [now for now in range(0, 200, 2) if half_open.due(now, ["a", "stranger"], {"a"})] == []
    assert half_open.mended == 0


def test_a_peer_whose_subscriptions_arrive_starts_its_wait_again() -> None:
    half_open = _known("a")
    half_open.due(0, ["a"], set())
    half_open.due(8, ["a"], {"a"})  # its hello came: not half open
    assert half_open.due(12, ["a"], set()) == []  # half open again from 12, not from 0
    assert half_open.due(22, ["a"], set()) == ["a"]


def test_a_peer_that_is_gone_is_forgotten() -> None:
    half_open = _known("a")
    half_open.due(0, ["a"], set())
    assert half_open.due(5, [], set()) == []
    assert half_open.due(12, ["a"], set()) == []  # its wait began again at 12
    assert half_open.due(22, ["a"], set()) == ["a"]


def test_a_peer_that_stays_half_open_is_reopened_once_per_interval() -> None:
    """A peer that stays half open costs a reconnect per ``again_after``, not per check."""
    half_open = _known("a")
    reopened = [now for now in range(0, 200, 2) if half_open.due(now, ["a"], set())]
    assert reopened == [10, 70, 130, 190]  # after its first 10 s, once every 60 s
    assert half_open.mended == 4


def _knows_subscribed(network: p2p.Libp2pNetwork, peer: str) -> bool:
    return ID.from_base58(peer) in network._pubsub.peer_topics.get(network.topic, set())


async def test_gossip_reaches_a_peer_again_after_py_libp2p_forgot_its_subscriptions() -> None:
    async with trio.open_nursery() as nursery:
        listener, dialler = await start_pair(nursery, "half-open")
        listener_id = ID.from_base58(listener.peer_id)
        with trio.fail_after(30):
            while not (_knows_subscribed(dialler, listener.peer_id)
                       and _knows_subscribed(listener, dialler.peer_id)):
                await trio.sleep(0.1)
            while not dialler.half_open.known(listener.peer_id):  # its dial loop has seen it subscribed
                await trio.sleep(0.1)
        # a short wait from here on, not before: a hello late at start-up is not mended
        dialler.half_open.after = 1.0
        # what py-libp2p does when one pubsub stream with the listener fails (here: as if the
        # listener's stream to us had): it forgets the listener's subscriptions and reopens
        # its own stream; the listener's stream to us is fine, so it never says them again
        dialler._pubsub._handle_dead_peer(listener_id)
        with trio.fail_after(10):
            while listener_id not in dialler._pubsub.peers:
                await trio.sleep(0.05)
        assert not _knows_subscribed(dialler, listener.peer_id), "the half-open state was not made"
        assert dialler.counters()["gossip_half_open"] == 0

        # gossip from the dialler reaches the listener again: without the reopening it never
        # does (the listener is in no mesh of the dialler's, and no other peer forwards)
        received = await heard(dialler, listener)
        assert received.startswith(b"probe "), received
        assert _knows_subscribed(dialler, listener.peer_id)
        assert dialler.counters()["gossip_half_open"] >= 1
        nursery.cancel_scope.cancel()
