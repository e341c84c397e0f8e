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

Mesh links were made and unmade all the time: fifty members on loopback logged about 3,900
"GRAFT flood detected ... applying penalty" (a GRAFT within 10 s of a PRUNE) and 1,800
"GRAFT: ignoring request ... back off" in five minutes. A peer refusing a GRAFT sends a
PRUNE and backs off another minute, and a penalty makes the peer the first one the mesh
upkeep replaces. Three causes, each mended here:

* py-libp2p's heartbeat packs its GRAFTs, PRUNEs and IHAVEs into one control message per
  peer, but its lists ran on from peer to peer: each grafted peer's message carried the
  GRAFTs, PRUNEs and IHAVEs of the peers before it, and a pruned peer's the IHAVEs of the
  one before, so a peer was grafted or pruned in topics (and told of messages) meant for
  another. ``_emit_control_msgs`` packs each peer's own.
* the heartbeat pruned a mesh grown past ``degree_high`` without backing off the peers it
  pruned, while each of them, told by the PRUNE, backed off from us for a minute: the next
  heartbeat short of ``degree_low`` could graft one again inside its window. The
  gossipsub 1.1 spec backs off both ends, as go-libp2p does; ``mesh_heartbeat`` adds ours.
* the two ends' backoffs end within a few seconds of each other (whole seconds, and a PRUNE
  that takes seconds to arrive on a starved machine), and the end whose backoff ended first
  grafted the other while it still backed off. We graft a peer only ``BACKOFF_SLACK_S``
  after our backoff of it ends, but take its GRAFT as soon as the backoff ends (the spec's
  slack, after go-libp2p's).

py-libp2p also sent the heartbeat's IHAVE gossip only to peers it did not back off from,
though a backoff bars only a GRAFT: fifty members starting at once churn their meshes, and a
member whose every graft was pruned backed off, and was backed off by, every peer it knew
for a minute, out of every mesh and told of nothing; one member of fifty then took all forty
of the propagation benchmark's probes by sync, seconds late (``gossip_heartbeat`` tells one
of them a heartbeat, per topic).

Not mended: py-libp2p's grafts for IP diversity (``_improve_mesh_diversity``, when a mesh
spans fewer than 3 addresses) ignore backoffs. Loopback members share one address, so only
the container lab can meet it; and a GRAFT it refuses for a flood records no backoff of ours.

py-libp2p's opportunistic grafting (two peers at every heartbeat, where go-libp2p grafts
once a minute and only for a poor mesh) is the churn's engine, and is left on, by
measurement (stop 52's note; fifty members, ``bench.swarm.propagation(50)``, runs taken in
turn): with no scores every peer qualifies, so a full mesh grows past ``degree_high`` and is
pruned every other heartbeat, each prune backing both ends off (about 250 "GRAFT: ignoring
request ... back off" a run; meshes of 0 to 7 peers). Grafting only below the target degree
ended that (0 to 6 such refusals a run; meshes of 4 to 6) but the probes came slower: p50
97-129 ms against 88-109, p99 median 240 against 194 ms (7 and 11 runs). Off altogether,
p99 492-636 ms (4 runs): the meshes stay as the start made them, while few peers were
connected (and at stop 22 the 30-member container test crawled). The churn keeps the meshes
random; the member it now and then leaves out of every mesh is told by ``gossip_heartbeat``.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
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
# seconds past a backoff's end before we graft that peer: the two ends' backoffs ended up to
# 6 s apart among fifty members on two cores
BACKOFF_SLACK_S = 10
BACKED_OFF_GOSSIP = 1  # peers we back off from told of the window's messages, per topic and heartbeat
_now = time.time  # a module attribute, so a test can move time (py-libp2p's backoffs are wall-clock seconds)


class Router(GossipSub):
    """GossipSub whose message cache names messages by the pubsub's message id, which
    sends IDONTWANT only for messages of at least ``IDONTWANT_MIN_BYTES`` (encoded: data,
    signature, key and all), and whose mesh upkeep keeps to the backoffs (its own and its
    peers')."""

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

    def mesh_heartbeat(self) -> tuple[dict[ID, list[str]], dict[ID, list[str]]]:
        """py-libp2p's mesh upkeep, and each peer it prunes is backed off for the PRUNE's
        ``prune_back_off``, as the pruned peer backs off from us."""
        to_graft, to_prune = super().mesh_heartbeat()
        for peer, topics in to_prune.items():
            for topic in topics:
                self._add_back_off(peer, topic, False)
        return to_graft, to_prune

    def gossip_heartbeat(self) -> defaultdict[ID, dict[str, list[bytes]]]:
        """py-libp2p's IHAVE gossip, and per topic ``BACKED_OFF_GOSSIP`` peers more, drawn from
        the subscribed peers outside the mesh we back off from: a backoff bars a GRAFT, not
        gossip (the gossipsub 1.1 spec; go-libp2p's ``emitGossip``). py-libp2p picks only
        peers it does not back off from, so a member pruned by every peer heard of nothing
        for the minute both ends back off, and took every event by sync. Gossiping to all
        of them, as go-libp2p does, cost the quiet runs at fifty members half again their
        p50 (more IHAVEs on a saturated machine). One a heartbeat from each peer: such a
        member, backed off by k peers that each back off b, hears of a message about k/b
        times a heartbeat over the cache's 3-heartbeat window, and sync brings the rest (not
        yet measured to cure the slow mode: stop 51's note)."""
        to_gossip = super().gossip_heartbeat()
        if self.pubsub is None:
            return to_gossip
        for topic in {*self.mesh, *self.fanout}:
            subscribed, ids = self.pubsub.peer_topics.get(topic), self.mcache.window(topic)
            if not subscribed or not ids:
                continue
            told = {peer for peer, topics in to_gossip.items() if topic in topics}
            current = self.mesh[topic] if topic in self.mesh else self.fanout[topic]
            outside = self._get_in_topic_gossipsub_peers_from_minus(topic, len(subscribed), current | told)
            backed_off = [peer for peer in outside if self._check_back_off(peer, topic)]
            for peer in random.sample(backed_off, min(BACKED_OFF_GOSSIP, len(backed_off))):
                to_gossip[peer][topic] = list(ids)
        return to_gossip

    def mesh_state(self, topic: str) -> dict[str, int]:
        """How ``topic``'s mesh stands: its peers, the subscribed peers, and those of them we
        back off from grafting (``BACKOFF_SLACK_S`` included; expired backoffs are dropped, as
        by every ``_check_back_off``). An empty mesh with every subscribed peer backed off is
        stop 51's slow mode."""
        subscribed = set(self.pubsub.peer_topics.get(topic, ())) if self.pubsub is not None else set()
        return {"mesh": len(self.mesh.get(topic, ())), "subscribed": len(subscribed),
                "backed_off": sum(1 for peer in subscribed if self._check_back_off(peer, topic))}

    async def _emit_control_msgs(self, peers_to_graft, peers_to_prune, peers_to_gossip) -> None:
        """The heartbeat's GRAFTs, PRUNEs and IHAVEs, one control message per peer holding that
        peer's own and nothing else (peers in py-libp2p's order: grafted, pruned, gossiped)."""
        for peer in {**peers_to_graft, **peers_to_prune, **peers_to_gossip}:
            grafts = [rpc_pb2.ControlGraft(topicID=topic) for topic in peers_to_graft.get(peer, ())]
            prunes = [rpc_pb2.ControlPrune(topicID=topic, backoff=self.prune_back_off)
                      for topic in peers_to_prune.get(peer, ())]
            ihaves = [rpc_pb2.ControlIHave(messageIDs=ids, topicID=topic)
                      for topic, ids in peers_to_gossip.get(peer, {}).items()]
            await self.emit_control_message(self.pack_control_msgs(ihaves, grafts, prunes), peer)

    def _check_back_off(self, peer: ID, topic: str) -> bool:
        """Whether we back off from grafting ``peer`` in ``topic``: until ``BACKOFF_SLACK_S``
        after its backoff ends. py-libp2p asks this before each graft of its own, and when it
        picks fanout and IHAVE peers (a pruned peer goes without those for the slack too,
        but for ``gossip_heartbeat``'s one);
        a GRAFT received is judged without the slack (``handle_graft``)."""
        until = self.back_off.get(topic, {}).get(peer)
        if until is None:
            return False
        if until + BACKOFF_SLACK_S > int(_now()):
            return True
        del self.back_off[topic][peer]
        return False

    async def handle_graft(self, graft_msg: rpc_pb2.ControlGraft, sender_peer_id: ID) -> None:
        """py-libp2p's, refusing the GRAFT of a peer we back off from only until the backoff
        ends: the slack is for our own grafts, so that the other end's backoff is over first."""
        backoffs = self.back_off.get(graft_msg.topicID, {})
        if sender_peer_id in backoffs and backoffs[sender_peer_id] <= int(_now()):
            del backoffs[sender_peer_id]
        await super().handle_graft(graft_msg, sender_peer_id)

    async def _emit_idontwant_for_message(self, msg_id: bytes, topic_ids: Iterable[str]) -> None:
        if msg_id not in self._small:
            await super()._emit_idontwant_for_message(msg_id, topic_ids)

    def attach(self, pubsub: Pubsub) -> None:
        """Called by ``Pubsub``'s constructor, its message id constructor already set."""
        super().attach(pubsub)
        self._small = set()
        self.mcache = CacheByMessageId(self.mcache.window_size, self.mcache.history_size, pubsub.get_message_id)
