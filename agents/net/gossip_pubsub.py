"""Our pubsub: py-libp2p 0.8.1's, retrying a pubsub stream whose protocol negotiation failed.

Pubsub opens its own stream to every connected peer and retries the open while the peer
stays connected, but only for a ``SwarmException`` (a muxer not ready yet). A stream whose
multistream negotiation fails (``StreamFailure``: the peer's answer cut short, or later than
the negotiation timeout, as on a starved machine) counted as "non-retryable", and the peer
was never registered for that connection: we learnt its subscriptions on its own stream to
us and never wrote to it; py-libp2p kept the newest 100 messages for it, 30 s each, never
sent ("pending message queue ... exceeded limit" as more came). ``GossipPubsub`` retries
that failure like the other, on py-libp2p's own backoff (0.5 s doubling to 10 s, while the
peer stays connected), unless the peer is known (from identify) to speak no pubsub protocol.

Each connection's notification starts a retry loop of its own, and py-libp2p checks for a
registered stream only before it opens one: loops retrying side by side could both succeed,
and the second would overwrite the first's queue and leak its sending task. One open per
peer at a time, here: a loop that waited finds the peer registered and returns.

Measured with a diagnostic hook (not committed) in fifty ``swarm plan`` members on two
cores: a member held a pubsub stream to a median 14 of its 20 connected peers in one run,
19 of 21 in another and with this change; whether the missing streams were such failures,
and what the change does to a plan, is not shown (stop 36's note).
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p.host.exceptions import StreamFailure
from libp2p.network.exceptions import SwarmException
from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStoreError
from libp2p.pubsub.pubsub import Pubsub


class GossipPubsub(Pubsub):
    """Pubsub whose stream to a new peer is retried when its negotiation fails, opened by
    one task at a time per peer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._opening: dict[ID, trio.Lock] = {}

    async def _handle_new_peer(self, peer_id: ID) -> None:
        lock = self._opening.setdefault(peer_id, trio.Lock())
        async with lock:
            try:
                await super()._handle_new_peer(peer_id)  # returns at once for a peer registered meanwhile
            except StreamFailure as exc:
                if not self._may_speak_pubsub(peer_id):
                    raise
                # what the retry loop takes as "retry while connected"
                raise SwarmException(f"pubsub stream negotiation with {peer_id} failed: {exc}") from exc
            finally:
                if lock.statistics().tasks_waiting == 0:
                    self._opening.pop(peer_id, None)

    def _may_speak_pubsub(self, peer_id: ID) -> bool:
        """False only when identify told us the peer's protocols and no pubsub one is among them."""
        try:
            spoken = self.host.get_peerstore().get_protocols(peer_id)
        except PeerStoreError:  # nothing known of it yet
            return True
        return not spoken or any(protocol in spoken for protocol in self.protocols)


__all__ = ["GossipPubsub"]
