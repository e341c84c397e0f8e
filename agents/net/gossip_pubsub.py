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

And messages that wait for the same peer leave in one write. py-libp2p's per-peer sending
loop wrote each queued RPC on its own: a protobuf frame, a noise frame, a yamux frame and a
socket send each, and as many reads, parses and wake-ups at the other end. In a 31-member
``swarm plan`` on two cores, 58% of the times the loop took an RPC more were waiting behind
it (6.3 on average), 90% of them carrying only published messages, and 2.4-3.5% of pushes were
refused by the full queue (32 RPCs), their messages lost to that peer until sync brought
them. The loop here takes the published-only RPCs waiting right behind the first along with
it, as one RPC of at most ``COALESCED_BYTES`` (``coalesce``). Batching never changes the
order py-libp2p sends in: an RPC with subscriptions or control ends a batch, and control
(py-libp2p's priority lane) still goes ahead of queued messages, as before. A receiver
takes an RPC's messages in any order (py-libp2p starts a task for each), as gossip may
bring them anyway. Every RPC also carries our signed peer record, which the receiver
checks (a signature, ~72 us here): a batch is checked once. Measured the same way, three
plans each way: 35-44% fewer writes, refusals 142-182 against 1,181-1,402, CPU per event
0.32-0.34 s against 0.35-0.38 s, median wall 67 s against 84 s.
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p.host.exceptions import StreamFailure
from libp2p.network.exceptions import SwarmException
from libp2p.peer.id import ID
from libp2p.peer.peerstore import PeerStoreError
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.rpc_queue import RpcQueue

# the most bytes sent as one batched RPC: under one noise message (65,519 bytes of
# plaintext with its length prefix), so a batch is one frame that nothing written to the
# same stream between two frames (py-libp2p's yamux lets go of its lock there) can split;
# a receiver's limit (1 MiB) is far away, and an event is at most 32 KiB
COALESCED_BYTES = 60 * 1024


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

    async def handle_sending_messages(self, peer_id: ID, stream: Any, queue: RpcQueue) -> None:
        """py-libp2p's per-peer sending loop, taking the published-only RPCs that wait
        together as one (``coalesce``)."""
        await super().handle_sending_messages(peer_id, stream, _Coalescing(queue))  # type: ignore[arg-type]


class _Coalescing:
    """The queue as py-libp2p's sending loop sees it (it only pops): each RPC it pops comes
    with those that ``coalesce`` takes along."""

    def __init__(self, queue: RpcQueue) -> None:
        self._queue = queue

    async def pop(self) -> rpc_pb2.RPC | None:
        rpc = await self._queue.pop()
        return None if rpc is None else coalesce(rpc, self._queue)


_PUBLISHED = frozenset({"publish", "senderRecord"})


def _published_only(rpc: rpc_pb2.RPC) -> bool:
    """Messages and nothing else but the sender's signed peer record, which py-libp2p puts
    in every RPC (the same bytes while our addresses stay the same)."""
    return len(rpc.publish) > 0 and all(field.name in _PUBLISHED for field, _ in rpc.ListFields())


def coalesce(rpc: rpc_pb2.RPC, queue: RpcQueue) -> rpc_pb2.RPC:
    """``rpc`` and, when it carries only published messages, the published-only RPCs with
    the same sender record queued right behind it, as one RPC of at most ``COALESCED_BYTES``
    (``rpc`` alone when there are none, or it is larger). Taken from the queue's normal lane
    unless its priority lane holds something, which goes next: py-libp2p 0.8.1's
    ``PriorityQueue`` deques (pinned; the tests drive a real queue). No queued RPC is changed
    (py-libp2p may queue one RPC object for many peers)."""
    lanes = queue._queue
    if lanes._priority or not lanes._non_priority or not _published_only(rpc):
        return rpc  # nothing waits to go with it (most pops, off a burst): no field walked
    size = rpc.ByteSize()  # each head's size counts its record again: never under the truth
    merged: rpc_pb2.RPC | None = None
    while lanes._non_priority:
        head = lanes._non_priority[0]
        head_size = head.ByteSize()
        if not _published_only(head) or head.senderRecord != rpc.senderRecord or size + head_size > COALESCED_BYTES:
            break
        lanes._non_priority.popleft()
        size += head_size
        if merged is None:
            merged = rpc_pb2.RPC()
            merged.CopyFrom(rpc)
        merged.publish.extend(head.publish)
    return rpc if merged is None else merged


__all__ = ["COALESCED_BYTES", "GossipPubsub", "coalesce"]
