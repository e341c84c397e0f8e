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

Turning py-libp2p's opportunistic grafting off was measured and left out. It grafts at
every heartbeat, where go-libp2p does once a minute and only for a poor mesh: 2-4 GRAFTs
and 3-6 PRUNEs a second per idle member at 21 members, and in an 8-host test meshes of 0
and 1 whose members got no gossip at all (sync repairs that in a swarm). Without it idle
members spent 6.0% of a core against 7.4-9.2%, but the 30-member container test
(``tests/chaos/test_clusters.py``) crawled, no leaf done after 600 s, twice: alone and
with IDONTWANT sent only for messages of 512 bytes or more (js-libp2p-gossipsub's
default; statuses are about 430 bytes), as stop 22 saw. With this cache alone it passed in
366 s. Why a cluster that gossips less crawls is not known.
"""

from __future__ import annotations

from collections.abc import Callable

from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.mcache import CacheEntry, MessageCache
from libp2p.pubsub.pb import rpc_pb2


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


class Router(GossipSub):
    """GossipSub whose message cache names messages as the seen-cache does (``key_cache_by``)."""

    def key_cache_by(self, message_id: Callable[[rpc_pb2.Message], bytes]) -> None:
        """Key the message cache by ``message_id``, the pubsub's; call before the host runs."""
        self.mcache = CacheByMessageId(self.mcache.window_size, self.mcache.history_size, message_id)
