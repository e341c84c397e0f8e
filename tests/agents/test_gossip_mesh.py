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
            announced = router.mcache.window(topic)
            assert len(announced) == len(expected), (topic, announced)
            for message_id in announced:
                assert pubsub.seen_messages.has(message_id), f"IHAVE would announce {message_id.hex()}, " \
                    "an id no member's seen-cache holds"
                message = router.mcache.get(message_id)
                assert message is not None and network._message_id(message) == message_id
            assert sorted(router.mcache.get(m).data for m in announced) == sorted(expected)
        nursery.cancel_scope.cancel()
