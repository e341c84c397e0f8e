"""The gossip mesh settles: once formed it stops changing, so no peer sits out a prune backoff.

Real libp2p hosts on loopback, every pair connected. py-libp2p 0.8.1 grafts
"opportunistically" at every heartbeat whenever the mesh is at its low degree or
above (go-libp2p does it once a minute, and only when the mesh's median score is
poor): with scores all zero that adds peers each second until the mesh passes its
high degree, whereupon it prunes back and both sides back off from each other for
a minute. Measured at 16 members: 10-14 of 15 peers in backoff within 10 s, and
meshes of 2-3 that could graft nobody; gossip then lost whole events.
"""

from __future__ import annotations

import multiaddr
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr

from agents.net.p2p import Libp2pNetwork
from tests.builders import credentials

MEMBERS = 8


def _mesh(network: Libp2pNetwork) -> frozenset[str]:
    return frozenset(str(p) for p in network._router.mesh.get(network.topic, ()))


async def test_once_formed_the_mesh_stops_changing_and_nobody_is_backed_off() -> None:
    networks = [Libp2pNetwork(c.identity, c.cluster, ["/ip4/127.0.0.1/tcp/0"], mdns=False, credentials=c)
                for c in (credentials(f"observer-{i}", "observer") for i in range(MEMBERS))]
    async with trio.open_nursery() as nursery:
        for network in networks:
            await nursery.start(network.run)
        addresses = [f"{n.addresses()[0]}/p2p/{n.peer_id}" for n in networks]
        for network in networks:
            for address in addresses:
                if network.peer_id not in address:
                    network.peers.configure(info_from_p2p_addr(multiaddr.Multiaddr(address)))
        with trio.fail_after(30):
            while not all(len(n.connected_peers()) == MEMBERS - 1 for n in networks):
                await trio.sleep(0.2)
        await trio.sleep(6)  # heartbeats of 1 s: the mesh forms in the first few
        settled = [_mesh(n) for n in networks]
        changes = 0
        for _ in range(8):
            await trio.sleep(1)
            now = [_mesh(n) for n in networks]
            changes += sum(a != b for a, b in zip(settled, now, strict=True))
            settled = now
        backed_off = sum(len(n._router.back_off.get(n.topic, {})) for n in networks)
        assert changes == 0, f"meshes changed {changes} times in 8 s after forming"
        assert all(3 <= len(mesh) <= 6 for mesh in settled), [len(m) for m in settled]
        assert backed_off <= MEMBERS, f"{backed_off} prune backoffs among {MEMBERS} members"
        nursery.cancel_scope.cancel()
