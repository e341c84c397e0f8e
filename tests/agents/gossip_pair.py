"""Two real libp2p members on loopback, the dialler bootstrapped to the listener (no mDNS),
gossip sent until it is heard, and hooks on the dialler's pubsub opens: for tests of what
py-libp2p's pubsub leaves undone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from libp2p.peer.id import ID

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


def on_pubsub_opens(hook: Callable[[p2p.Libp2pNetwork, ID], Awaitable[None]]
                    ) -> Callable[[p2p.Libp2pNetwork], None]:
    """A ``before_dialling`` that awaits ``hook(dialler, peer)`` before each pubsub stream the
    dialler opens (the hook may sleep, or raise what a failed open raises)."""
    def install(dialler: p2p.Libp2pNetwork) -> None:
        opens = dialler.host.new_stream

        async def hooked(peer_id, protocol_ids):
            if any("meshsub" in p for p in protocol_ids):
                await hook(dialler, peer_id)
            return await opens(peer_id, protocol_ids)

        dialler.host.new_stream = hooked

    return install


async def pair_once_opening(nursery: trio.Nursery, cluster: str,
                            hook: Callable[[p2p.Libp2pNetwork, ID], Awaitable[None]],
                            opened: list[ID]) -> tuple[p2p.Libp2pNetwork, ID]:
    """The pair, with ``hook`` on the dialler's pubsub opens, once the connection's own open
    has reached it (``hook`` appends to ``opened``): the dialler and the listener's id."""
    listener, dialler = await start_pair(nursery, cluster, on_pubsub_opens(hook))
    with trio.fail_after(30):
        while not opened:
            await trio.sleep(0.01)
    return dialler, ID.from_base58(listener.peer_id)
