"""Two real libp2p members on loopback, the dialler bootstrapped to the listener (no mDNS),
and gossip sent until it is heard: for tests of what py-libp2p's pubsub leaves undone."""

from __future__ import annotations

from collections.abc import Callable

import trio

from agents.net import p2p
from tests.builders import identity


async def start_pair(nursery: trio.Nursery, cluster: str,
                     before_dialling: Callable[[p2p.Libp2pNetwork], None] = lambda dialler: None,
                     ) -> tuple[p2p.Libp2pNetwork, p2p.Libp2pNetwork]:
    """The listener and the dialler, both running; ``before_dialling`` sees the dialler first."""
    listener = p2p.Libp2pNetwork(identity("listener"), cluster, listen=["/ip4/127.0.0.1/tcp/0"], mdns=False)
    await nursery.start(listener.run)
    dialler = p2p.Libp2pNetwork(identity("dialler"), cluster, listen=["/ip4/127.0.0.1/tcp/0"],
                                bootstrap=[f"{listener.addresses()[0]}/p2p/{listener.peer_id}"], mdns=False)
    before_dialling(dialler)
    await nursery.start(dialler.run)
    return listener, dialler


async def heard(sender: p2p.Libp2pNetwork, receiver: p2p.Libp2pNetwork, within: float = 20) -> bytes:
    """What ``receiver`` first takes of the probes ``sender`` gossips, one each half second."""
    sent = 0
    with trio.fail_after(within):
        while True:
            await sender.publish(b"probe %d" % sent)
            sent += 1
            with trio.move_on_after(0.5):
                return await receiver.gossip.receive()
