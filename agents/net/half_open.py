"""Pubsub relations that py-libp2p leaves half open, found and their connections dropped.

py-libp2p 0.8.1's pubsub learns a peer's subscriptions from one place only: the peer's own
stream to us (its hello, then its subscribe messages). When any pubsub stream with a peer
fails, ``Pubsub._handle_dead_peer`` forgets all the peer's subscriptions and reopens *our*
stream while the connection lives; the peer's stream to us, if it is still open, says its
subscriptions again only when it is reopened itself, and the peer reopens it only when one
of its own writes to us fails (or what we send it does not parse). So a member can hold a
live stream to a peer and never learn again that the peer is subscribed: it then never puts the peer in a mesh, never gossips it
an IHAVE and never forwards it anything. The peer hears from this member only through
others, and the member's mesh has one candidate fewer. Made on real hosts by
py-libp2p's own dead-peer path, it stays so for good (``tests/agents/test_half_open.py``).
In the propagation bench (16 and 50 silent members, a diagnostic hook on py-libp2p's queue
for peers whose subscriptions it does not know) the relations found half open were almost
all in the first seconds of a start, each for under about 3 s, the time between a stream
and its hello: those the wait below leaves alone.

The mend: a peer once known to subscribe to the events topic, still connected, that we have
held a pubsub stream to for ``HALF_OPEN_AFTER`` seconds without knowing it subscribed has its
connections dropped (``Libp2pNetwork.drop``; redialled as usual), at most once per
``MEND_AGAIN_AFTER``: with its last connection gone each end forgets the other, and the next
connection starts with a hello both ways. Nothing narrower works on py-libp2p 0.8.1: a reset
of our stream to the peer reaches its reader as an error it logs as normal at shutdown and
otherwise ignores, and a reset of its stream to us is seen only at its next write to us,
after which it forgets *our* subscriptions in turn. Peers never known to subscribe (members
of another cluster met through mDNS, say) are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable

HALF_OPEN_AFTER = 10.0  # a hello follows its stream at once; starting members showed gaps of up to ~3 s
MEND_AGAIN_AFTER = 60.0
MAX_REMEMBERED = 4096  # peers remembered as once subscribed; they come and go, so the memo is bounded


class HalfOpen:
    """Which peers to reconnect for a half-open pubsub relation, from what this member holds
    at each check.
    Pure: times come in as ``now``, peers as strings."""

    def __init__(self, after: float = HALF_OPEN_AFTER, again_after: float = MEND_AGAIN_AFTER) -> None:
        self.after = after
        self.again_after = again_after
        self.mended = 0  # peers found half open and dropped
        self._known: set[str] = set()  # peers once known to subscribe
        self._since: dict[str, float] = {}  # peer -> first check that found it half open
        self._mended_at: dict[str, float] = {}

    def known(self, peer: str) -> bool:
        """Whether ``peer`` is remembered as once subscribed (only such peers are ever due)."""
        return peer in self._known

    def due(self, now: float, writable: Iterable[str], subscribed: set[str]) -> list[str]:
        """The peers to reconnect now: ``writable`` are the connected peers we hold a pubsub
        stream to, ``subscribed`` those we know subscribe to the events topic now."""
        if len(self._known) > MAX_REMEMBERED:
            self._known.clear()
        self._known |= subscribed
        half_open = {peer for peer in writable if peer in self._known and peer not in subscribed}
        self._since = {peer: self._since.get(peer, now) for peer in half_open}
        self._mended_at = {peer: at for peer, at in self._mended_at.items() if now - at < self.again_after}
        due = sorted(peer for peer, since in self._since.items()
                     if now - since >= self.after and peer not in self._mended_at)
        for peer in due:
            self._mended_at[peer] = now
            del self._since[peer]
        self.mended += len(due)
        return due
