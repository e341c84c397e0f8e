"""Whom a member dials: the peers it was told of, and a bounded set it learned from peers.

A member dials the peers it knows while it has fewer than ``ACTIVE_PEERS``
connections: first the *configured* ones (``--bootstrap``), then the *discovered* (mDNS)
and *learned* ones (``peer_exchange``), each group in an order of the member's own (a
hash of its id and theirs, so that a cluster's members spread their connections instead
of all dialling the same few). A cluster of up to ``ACTIVE_PEERS + 1`` members connects
every pair, as a full bootstrap list or mDNS did; a larger one keeps each member's
connections near ``ACTIVE_PEERS`` however many addresses it was given (gossip and sync
need a connected graph, not a full one), and a member that loses connections (a
partition, a peer gone) dials more until it is back at the bound.

A learned peer is forgotten after ``FORGET_AFTER`` failed dials in a row, and at most
``MAX_LEARNED`` are remembered: a peer that lists junk fills a bounded book, and the
junk leaves it as its dials fail. Configured and discovered peers are never forgotten
(mDNS does not announce a known peer again, and a partition must not outlast its heal).

Addresses may name hosts (``/dns4/observer/tcp/4001/p2p/ID``: Docker's DNS in a
stack): they are resolved at each dial, so a peer whose container came back with
another IP is found again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import multiaddr
import trio
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo

ACTIVE_PEERS = 12
MAX_LEARNED = 256
FORGET_AFTER = 3
_WILDCARDS = ("0.0.0.0", "::")


class PeerBook:
    """The peers one member may dial, and the order it dials them in."""

    def __init__(self, own: str) -> None:
        self.own = own
        self.configured: dict[str, PeerInfo] = {}
        self.learned: dict[str, PeerInfo] = {}
        self._sticky: set[str] = set()  # discovered by mDNS: never forgotten
        self._failures: dict[str, int] = {}
        self.forgotten = 0  # learned peers dropped after failing dials (a metric)

    def __contains__(self, peer: str) -> bool:
        return peer in self.configured or peer in self.learned

    def configure(self, info: PeerInfo) -> None:
        peer = str(info.peer_id)
        if peer != self.own:
            self.configured[peer] = info
            self.learned.pop(peer, None)

    def discover(self, info: PeerInfo) -> None:
        """A peer found on the local network (mDNS): dialled like a learned one, never forgotten."""
        peer = str(info.peer_id)
        if peer != self.own and peer not in self.configured:
            self.learned[peer] = info
            self._sticky.add(peer)

    def learn(self, listing: Iterable[tuple[str, list[str]]]) -> int:
        """Remember peers a peer listed (``peer_exchange``); returns how many were new."""
        new = 0
        for peer, addresses in listing:
            if peer == self.own or peer in self.configured or peer in self._sticky:
                continue
            if peer not in self.learned and len(self.learned) >= MAX_LEARNED:
                continue
            addrs = [multiaddr.Multiaddr(a) for a in addresses]
            new += peer not in self.learned
            self.learned[peer] = PeerInfo(ID.from_base58(peer), addrs)
        return new

    def to_dial(self, connected: set[str]) -> list[PeerInfo]:
        """The peers to dial now: none at ``ACTIVE_PEERS`` connections, else up to the bound."""
        room = ACTIVE_PEERS - len(connected)
        if room <= 0:
            return []

        def ordered(book: dict[str, PeerInfo]) -> list[PeerInfo]:
            peers = sorted((p for p in book if p not in connected),
                           key=lambda p: hashlib.sha256(f"{self.own}/{p}".encode()).digest())
            return [book[p] for p in peers]

        return (ordered(self.configured) + ordered(self.learned))[:room]

    def dialled(self, peer: str, ok: bool) -> None:
        """Count a learned peer's failed dials; forget it after ``FORGET_AFTER`` in a row."""
        if ok:
            self._failures.pop(peer, None)
            return
        if peer not in self.learned or peer in self._sticky:
            return
        self._failures[peer] = self._failures.get(peer, 0) + 1
        if self._failures[peer] >= FORGET_AFTER:
            del self.learned[peer]
            del self._failures[peer]
            self.forgotten += 1


def listed_addresses(declared: Iterable[multiaddr.Multiaddr], observed: Iterable[multiaddr.Multiaddr]) -> list[str]:
    """A connected peer's dialable addresses: what it declared (its signed peer record)
    without the ``/p2p`` part, with a wildcard IP (it listens on every interface) replaced
    by the IP we see its connection come from."""
    seen_ips = [a.value_for_protocol("ip4") for a in observed if "ip4" in [p.name for p in a.protocols()]]
    out: list[str] = []
    for address in declared:
        parts = str(address).split("/p2p/")[0]
        names = [p.name for p in multiaddr.Multiaddr(parts).protocols()]
        if names[:1] == ["ip4"] and multiaddr.Multiaddr(parts).value_for_protocol("ip4") in _WILDCARDS:
            if not seen_ips:
                continue
            parts = parts.replace("/ip4/0.0.0.0/", f"/ip4/{seen_ips[0]}/", 1)
        if parts not in out and names[-1:] == ["tcp"]:
            out.append(parts)
    return out


async def resolved(info: PeerInfo) -> PeerInfo:
    """``info`` with each /dns, /dns4 or /dns6 address replaced by the IPs it names now
    (one that does not resolve is left out; a peer with none left cannot be dialled)."""
    addrs: list[multiaddr.Multiaddr] = []
    for address in info.addrs:
        parts = str(address).split("/")
        if len(parts) > 3 and parts[1] in ("dns", "dns4", "dns6"):
            family = {"dns4": trio.socket.AF_INET, "dns6": trio.socket.AF_INET6}.get(parts[1], 0)
            try:
                found = await trio.socket.getaddrinfo(parts[2], None, family=family, type=trio.socket.SOCK_STREAM)
            except OSError:
                continue
            rest = "/".join(parts[3:])
            for entry in found:
                ip = entry[4][0]
                kind = "ip6" if ":" in ip else "ip4"
                addrs.append(multiaddr.Multiaddr(f"/{kind}/{ip}/{rest}"))
        else:
            addrs.append(address)
    return PeerInfo(info.peer_id, addrs)
