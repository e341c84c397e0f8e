"""Gossip announces messages by the ids receivers know them by (``agents/net/gossip_router.py``).

py-libp2p 0.8.1's message cache named messages by sender and sequence number while the
seen-cache names them by our content id, so each IHAVE announced ids no receiver
recognised: every member asked (IWANT) for messages it held and got them again, for the
whole gossip window (21 idle members: 35-45 statuses a second reached each, about 4 new).
A real libp2p host publishes; what its heartbeat would announce must be what a receiver's
seen-cache holds, and what an IWANT for such an id is answered with.
"""

from __future__ import annotations

import trio
from libp2p.peer.id import ID

from agents.net.p2p import Libp2pNetwork
from tests.builders import credentials


async def test_ihave_announces_the_ids_the_seen_cache_holds_and_iwant_finds_them() -> None:
    creds = credentials("observer-0", "observer")
    network = Libp2pNetwork(creds.identity, creds.cluster, ["/ip4/127.0.0.1/tcp/0"], mdns=False, credentials=creds)
    payloads = [f"message {i}".encode() for i in range(3)]
    async with trio.open_nursery() as nursery:
        await nursery.start(network.run)
        for payload in payloads:
            await network.publish(payload)
        await network.publish_status(b"a status")  # another topic: another id rule
        router, pubsub = network._router, network._pubsub
        for topic, expected in ((network.topic, payloads), (network.status_topic, [b"a status"])):
            # every slot of the cache's history, not only the window IHAVE reads now: a slow
            # machine may have shifted the window past the first message meanwhile
            cached = [entry.mid for slot in router.mcache.history for entry in slot if topic in entry.topics]
            assert len(cached) == len(expected), (topic, cached)
            for message_id in cached:
                assert pubsub.seen_messages.has(message_id), f"IHAVE would announce {message_id.hex()}, " \
                    "an id no member's seen-cache holds"
                message = router.mcache.get(message_id)
                assert message is not None and network._message_id(message) == message_id
            assert sorted(router.mcache.get(m).data for m in cached) == sorted(expected)
        nursery.cancel_scope.cancel()


async def test_idontwant_goes_out_only_for_messages_worth_sparing(monkeypatch) -> None:
    """py-libp2p sent an IDONTWANT to every mesh peer for every message, a status of 430 bytes
    included: more RPCs than the duplicates they spared. Only messages of at least
    ``IDONTWANT_MIN_BYTES`` (go-libp2p's threshold) get them now."""
    from libp2p.pubsub.gossipsub import GossipSub

    from agents.net.gossip_router import IDONTWANT_MIN_BYTES

    emitted: list[bytes] = []

    async def record(self, msg_id: bytes, topic_ids) -> None:
        emitted.append(msg_id)

    monkeypatch.setattr(GossipSub, "_emit_idontwant_for_message", record)
    creds = credentials("observer-0", "observer")
    network = Libp2pNetwork(creds.identity, creds.cluster, ["/ip4/127.0.0.1/tcp/0"], mdns=False, credentials=creds)
    small, big = b"s" * 300, b"b" * IDONTWANT_MIN_BYTES
    async with trio.open_nursery() as nursery:
        await nursery.start(network.run)
        await network.publish(small)
        await network.publish(big)
        await network.publish_status(b"a status")
        ids = {m.data: network._message_id(m) for slot in network._router.mcache.history for entry in slot
               for m in [network._router.mcache.get(entry.mid)]}
        nursery.cancel_scope.cancel()
    assert emitted == [ids[big]], "IDONTWANT for a small message, or none for a big one"
    assert not network._router._small, "the router kept ids of messages it has published"


def test_a_peer_the_heartbeat_prunes_is_not_grafted_again_inside_its_backoff() -> None:
    """py-libp2p's heartbeat pruned a mesh past ``degree_high`` without backing off the pruned
    peers, which back off from us on the PRUNE: a later heartbeat short of ``degree_low`` could
    graft one of them again inside its backoff window, and it refused ("GRAFT: ignoring
    request ... back off") or penalised us ("GRAFT flood detected"). The heartbeat here is
    py-libp2p's, on a mesh and peer table set by hand."""
    topic = "swarm/test/events"
    peers = [ID(f"peer-{i}".encode()) for i in range(12)]
    router = _router(peers, topic)
    router.mesh = {topic: set(peers[:8])}  # past degree_high: it is pruned back to degree

    _, to_prune = router.mesh_heartbeat()
    pruned = {peer for peer, topics in to_prune.items() if topic in topics}
    assert len(pruned) >= 4 and not pruned & router.mesh[topic]
    assert all(router._check_back_off(peer, topic) for peer in pruned), "a pruned peer is not backed off"

    for _ in range(20):  # the mesh falls short again and again: never a pruned peer grafted
        router.mesh[topic] = set(sorted(router.mesh[topic] - pruned, key=str)[:2])
        to_graft, _ = router.mesh_heartbeat()
        grafted = {peer for peer, topics in to_graft.items() if topic in topics}
        assert grafted and not grafted & pruned, f"grafted {grafted & pruned} inside their backoff"


def test_a_peer_in_backoff_still_hears_of_messages_by_ihave() -> None:
    """py-libp2p picked the heartbeat's IHAVE peers among those not backed off, though a
    backoff bars only a GRAFT (the gossipsub 1.1 spec; go-libp2p gossips to them): a member
    whose grafts every peer had pruned (fifty members starting at once churn their meshes)
    backed off, and was backed off by, every peer for a minute, and heard of no message by
    gossip at all: one member of fifty took all forty of the propagation benchmark's probes
    by sync, seconds late. The heartbeat's gossip is py-libp2p's, on a mesh set by hand."""
    from libp2p.pubsub.pb import rpc_pb2

    from agents.net.gossip_router import BACKED_OFF_GOSSIP

    topic = "swarm/test/events"
    peers = [ID(f"peer-{i}".encode()) for i in range(12)]
    router = _router(peers, topic)
    router.mesh = {topic: set(peers[:4])}
    outside = set(peers[4:])
    for peer in outside:  # pruned both ways: every peer outside the mesh is backed off
        router._add_back_off(peer, topic, False)
    router.mcache.put(rpc_pb2.Message(from_id=b"a", seqno=b"1", data=b"probe", topicIDs=[topic]))

    told: list[set[ID]] = []
    for _ in range(200):
        told.append({peer for peer, topics in router.gossip_heartbeat().items() if topic in topics})
    assert all(told), "no peer outside the mesh was told of the message: every one is backed off"
    assert all(len(heard) == BACKED_OFF_GOSSIP and heard <= outside for heard in told), told[:3]
    assert set().union(*told) == outside, "a backed-off peer never told in 200 heartbeats"

    for peer in outside:  # none backed off: py-libp2p's own count, and no more
        del router.back_off[topic][peer]
    heard = {peer for peer, topics in router.gossip_heartbeat().items() if topic in topics}
    assert heard <= outside and len(heard) == max(6, int(len(outside) * 0.25))


def test_mesh_state_counts_the_mesh_the_subscribed_and_the_backed_off_slack_included(monkeypatch) -> None:
    """What a member's "gossip mesh" debug line says (``agents/net/p2p.py``; the propagation
    benchmark counts the members it shows out of every mesh)."""
    from agents.net import gossip_router

    topic = "swarm/test/events"
    peers = [ID(f"peer-{i}".encode()) for i in range(12)]
    router = _router(peers, topic)
    router.mesh = {topic: set(peers[:4])}
    for peer in peers[4:]:
        router._add_back_off(peer, topic, False, 1)  # one second: over, but not its slack
    assert router.mesh_state(topic) == {"mesh": 4, "subscribed": 12, "backed_off": 8}
    now = gossip_router._now()
    monkeypatch.setattr(gossip_router, "_now", lambda: now + 2)  # the backoffs over, their slack not
    assert router.mesh_state(topic) == {"mesh": 4, "subscribed": 12, "backed_off": 8}
    monkeypatch.setattr(gossip_router, "_now", lambda: now + 1 + gossip_router.BACKOFF_SLACK_S)
    assert router.mesh_state(topic) == {"mesh": 4, "subscribed": 12, "backed_off": 0}
    router.pubsub = None  # before pubsub attaches, or after it is gone
    assert router.mesh_state(topic) == {"mesh": 4, "subscribed": 0, "backed_off": 0}


def _router(peers: list[ID], *topics: str):
    from types import SimpleNamespace

    from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11

    from agents.net.gossip_router import Router
    from agents.net.p2p import GOSSIP_PROTOCOLS

    router = Router(protocols=GOSSIP_PROTOCOLS, degree=4, degree_low=3, degree_high=6, heartbeat_interval=1,
                    adaptive_gossip_enabled=False, spam_protection_enabled=False)
    router.pubsub = SimpleNamespace(peer_topics={topic: set(peers) for topic in topics})
    router.peer_protocol = {peer: PROTOCOL_ID_V11 for peer in peers}
    router.mesh = {topic: set() for topic in topics}
    return router


async def test_each_peer_gets_the_heartbeats_grafts_prunes_and_ihaves_meant_for_it_alone(monkeypatch) -> None:
    """py-libp2p 0.8.1 ran its GRAFT, PRUNE and IHAVE lists on from one peer's control message
    into the next: a peer was grafted or pruned in a topic never meant for it."""
    events, statuses = "swarm/test/events", "swarm/test/status/1"
    one, two, three, four, five = (ID(f"peer-{i}".encode()) for i in range(5))
    router = _router([one, two, three, four, five], events, statuses)
    sent: dict[ID, list] = {}

    async def emit(control, peer) -> None:
        sent.setdefault(peer, []).append(control)

    monkeypatch.setattr(router, "emit_control_message", emit)
    await router._emit_control_msgs({one: [events], two: [statuses], five: [events]},
                                    {three: [events], two: [events]},
                                    {one: {events: [b"a"]}, four: {statuses: [b"b"]}})

    def what(peer: ID) -> tuple:
        [control] = sent[peer]  # one message per peer
        return (sorted(g.topicID for g in control.graft), sorted(p.topicID for p in control.prune),
                sorted((i.topicID, list(i.messageIDs)) for i in control.ihave))

    assert what(one) == ([events], [], [(events, [b"a"])])
    assert what(two) == ([statuses], [events], [])
    assert what(five) == ([events], [], []), "grafted after a pruned peer, and given its PRUNE"
    assert what(three) == ([], [events], [])
    assert what(four) == ([], [], [(statuses, [b"b"])])
    assert all(p.backoff == router.prune_back_off for p in sent[three][0].prune)


async def test_we_graft_a_peer_only_a_slack_after_our_backoff_ends_but_take_its_graft_when_it_ends(
        monkeypatch) -> None:
    """The two ends' backoffs end seconds apart; the end whose backoff ended first grafted the
    other while it still backed off, and was refused ("GRAFT: ignoring request ... back off")."""
    from libp2p.pubsub.pb import rpc_pb2

    from agents.net import gossip_router

    topic = "swarm/test/events"
    peers = [ID(f"peer-{i}".encode()) for i in range(6)]
    backed_off = peers[0]
    router = _router(peers, topic)
    now = [1_000_000.0]
    monkeypatch.setattr(gossip_router, "_now", lambda: now[0])
    sent: list = []

    async def emit(control, peer) -> None:
        sent.append((peer, control))

    monkeypatch.setattr(router, "emit_control_message", emit)
    router.back_off = {topic: {backed_off: int(now[0])}}  # our backoff of it ends now

    for _ in range(10):  # the mesh is short: every heartbeat grafts, never the peer we back off from
        router.mesh[topic] = set()
        to_graft, _ = router.mesh_heartbeat()
        assert to_graft and backed_off not in to_graft
    now[0] += gossip_router.BACKOFF_SLACK_S - 1
    assert router._check_back_off(backed_off, topic)
    assert not router._check_back_off(backed_off, topic + "/other")  # a backoff is per topic

    await router.handle_graft(rpc_pb2.ControlGraft(topicID=topic), backed_off)  # its backoff is over
    assert backed_off in router.mesh[topic] and not sent, "a GRAFT after the backoff ended was refused"

    router.mesh[topic].discard(backed_off)
    router.back_off[topic][backed_off] = int(now[0]) + 30  # backing off still: its GRAFT is refused
    await router.handle_graft(rpc_pb2.ControlGraft(topicID=topic), backed_off)
    assert backed_off not in router.mesh[topic] and [peer for peer, _ in sent] == [backed_off]
    assert sent[0][1].prune

    router.back_off[topic][backed_off] = int(now[0])  # ended now: we may graft it once the slack is over
    now[0] += gossip_router.BACKOFF_SLACK_S - 1
    assert router._check_back_off(backed_off, topic)
    now[0] += 2
    assert not router._check_back_off(backed_off, topic) and backed_off not in router.back_off[topic]
