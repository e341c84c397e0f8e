"""Our pubsub: py-libp2p 0.8.1's, retrying a pubsub stream whose protocol negotiation failed.

Pubsub opens its own stream to every connected peer and retries the open while the peer
stays connected, but only for a ``SwarmException`` (a muxer not ready yet). A stream whose
multistream negotiation fails (``StreamFailure``: the peer's answer cut short, or later than
the negotiation timeout, as on a starved machine) counted as "non-retryable", and the peer
was never registered for that connection: we learnt its subscriptions on its own stream to
us, put it in our mesh, and kept every message for it in a queue never sent (py-libp2p's
"pending message queue ... exceeded limit" warnings). In one run of fifty ``swarm plan``
members on two cores, a member held a pubsub stream to a median 14 of its 20 connected peers
after the first two minutes (up to 11 peers had a stream to it and none from it); in other
runs of the same, 19 of 21. ``GossipPubsub`` retries that failure like the other, on
py-libp2p's own backoff (0.5 s doubling to 10 s, while the peer stays connected). A connected
peer that speaks no pubsub protocol at all costs one negotiation every 10 s.
"""

from __future__ import annotations

from libp2p.host.exceptions import StreamFailure
from libp2p.network.exceptions import SwarmException
from libp2p.peer.id import ID
from libp2p.pubsub.pubsub import Pubsub


class GossipPubsub(Pubsub):
    """Pubsub whose stream to a new peer is retried when its negotiation fails."""

    async def _handle_new_peer(self, peer_id: ID) -> None:
        try:
            await super()._handle_new_peer(peer_id)
        except StreamFailure as exc:  # what the retry loop takes as "retry while connected"
            raise SwarmException(f"pubsub stream negotiation with {peer_id} failed: {exc}") from exc


__all__ = ["GossipPubsub"]
