"""Our gossipsub router: py-libp2p 0.8.1's, with its message cache keyed by the pubsub's ids.

Pubsub dedupes by the id our ``msg_id_constructor`` gives (sha256 of the content, so a
re-publication dedupes: PROTOCOL.md section 11), and so do IWANT, IDONTWANT and the
seen-cache; but py-libp2p's ``MessageCache.put`` keys each message by its sender and
sequence number (``from_id + seqno``) whatever the constructor, and the heartbeat's IHAVE
gossip announces those keys. A receiver looks each announced id up in its seen-cache,
never finds it, and asks for it with IWANT; the announcer finds it in its cache and sends
it whole again. So every message came back to each member about once per gossip peer per
heartbeat of the gossip window, for nothing: with 21 idle members on loopback, 35-45
status messages a second reached each member, about 4 of them new (20-30 after).
``CacheByMessageId`` keys the cache by the pubsub's own id.

py-libp2p sends an IDONTWANT to every mesh peer for every message it receives, one RPC
each, however small the message: for a status of about 430 bytes the IDONTWANTs cost
each member more RPCs than the message they spare it. The gossipsub 1.2 spec leaves the
size to the implementation; go-libp2p sends them only for messages of at least 1 KiB
(``IDONTWANT_MIN_BYTES``, the same here), so our events and statuses travel without them.

py-libp2p's opportunistic grafting (at every heartbeat, where go-libp2p grafts once a
minute and only for a poor mesh) is left on: with it off, the 30-member container test
(``tests/chaos/test_clusters.py``) crawled, no leaf done after 600 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.mcache import CacheEntry, MessageCache
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub


class CacheByMessageId(MessageCache):
    """A gossip message cache keyed by ``message_id``, the id pubsub dedupes by."""

    def __init__(self, window_size: int, history_size: int,
                 message_id: Callable[[rpc_pb2.Message], bytes]) -> None:
        super().__init__(window_size, history_size)
        self._message_id = message_id

    def put(self, msg: rpc_pb2.Message) -> None:
        mid = self._message_id(msg)
        if mid in self.msgs:
            return
        self.msgs[mid] = msg
        self.history[0].append(CacheEntry(mid, msg.topicIDs))


IDONTWANT_MIN_BYTES = 1024  # go-libp2p's GossipSubIDontWantMessageThreshold


class Router(GossipSub):
    """GossipSub whose message cache names messages by the pubsub's message id, and which
    sends IDONTWANT only for messages of at least ``IDONTWANT_MIN_BYTES`` (encoded: data,
    signature, key and all)."""

    _small: set[bytes]  # ids of messages being published that are too small for IDONTWANT

    async def publish(self, msg_forwarder: ID, pubsub_msg: rpc_pb2.Message) -> None:
        small = pubsub_msg.ByteSize() < IDONTWANT_MIN_BYTES and self.pubsub is not None
        if small:
            message_id = self.pubsub.get_message_id(pubsub_msg)
            self._small.add(message_id)
        try:
            await super().publish(msg_forwarder, pubsub_msg)
        finally:
            if small:
                self._small.discard(message_id)

    async def _emit_idontwant_for_message(self, msg_id: bytes, topic_ids: Iterable[str]) -> None:
        if msg_id not in self._small:
            await super()._emit_idontwant_for_message(msg_id, topic_ids)

    def attach(self, pubsub: Pubsub) -> None:
        """Called by ``Pubsub``'s constructor, its message id constructor already set."""
        super().attach(pubsub)
        self._small = set()
        self.mcache = CacheByMessageId(self.mcache.window_size, self.mcache.history_size, pubsub.get_message_id)
