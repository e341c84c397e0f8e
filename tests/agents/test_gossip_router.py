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
