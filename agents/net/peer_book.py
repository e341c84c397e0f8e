"""Whom a member dials: the peers it was told of, and a bounded set it learned from peers.

A member dials the peers it knows while it has fewer than ``ACTIVE_PEERS``
connections: first the *configured* ones (``--bootstrap``), then the *discovered* (mDNS)
and *learned* ones (``peer_exchange``), each group in an order of the member's own (a
hash of its id and theirs, so that a cluster's members spread their connections instead
of all dialling the same few). A cluster of up to ``ACTIVE_PEERS + 1`` peers (clients and
watchers count) connects every pair, as a full bootstrap list or mDNS did; a larger one
keeps each member's connections near ``ACTIVE_PEERS`` however many addresses it was given
(gossip and sync need a connected graph, not a full one), and a member that loses connections (a
partition, a peer gone) dials more until it is back at the bound. At the bound it still
``probe``s one more known peer now and then (the caller's schedule), up to ``PROBE_BELOW``
connections, so that a partition healed while both sides were full does not stay one. A
peer whose dials fail is not tried again for a while, doubling each time, so a dead
bootstrap address does not hold a slot.

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

from agents.net.peer_exchange import valid_address

ACTIVE_PEERS = 12
PROBE_BELOW = 2 * ACTIVE_PEERS  # a member at the bound still probes one more peer now and then, up to this
MAX_LEARNED = 256
MAX_ADDRS = 8  # addresses remembered per learned peer (listings add to them, never replace them)
FORGET_AFTER = 3
RETRY_BASE_S = 2.0  # a peer whose dial failed n times in a row is not tried for 2^n times this, at most
RETRY_MAX_S = 60.0
_WILDCARDS = ("0.0.0.0", "::")


class PeerBook:
    """The peers one member may dial, and the order it dials them in. Times are the
    caller's monotonic seconds."""

    def __init__(self, own: str) -> None:
        self.own = own
        self.configured: dict[str, PeerInfo] = {}
        self.learned: dict[str, PeerInfo] = {}  # in the order first learned
        self._sticky: set[str] = set()  # discovered by mDNS: never forgotten
        self._connected_once: set[str] = set()
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._probed = b""  # the rotation key of the last peer probed
        self.forgotten = 0  # learned peers dropped after failing dials (a metric)

    def __contains__(self, peer: str) -> bool:
        return peer in self.configured or peer in self.learned

    def _key(self, peer: str) -> bytes:
        return hashlib.sha256(f"{self.own}/{peer}".encode()).digest()

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
        """Remember peers a peer listed (``peer_exchange``); returns how many were new. A
        known peer's addresses are added to, never replaced (a hostile listing cannot move an
        honest peer out of reach); a full book makes room by forgetting the oldest learned
        peer never connected to, or takes no more."""
        new = 0
        for peer, addresses in listing:
            if peer == self.own or peer in self.configured or peer in self._sticky:
                continue
            addrs = [multiaddr.Multiaddr(a) for a in addresses]
            known = self.learned.get(peer)
            if known is not None:
                merged = list(known.addrs) + [a for a in addrs if a not in known.addrs]
                self.learned[peer] = PeerInfo(known.peer_id, merged[:MAX_ADDRS])
                continue
            if len(self.learned) >= MAX_LEARNED and not self._make_room():
                continue
            new += 1
            self.learned[peer] = PeerInfo(ID.from_base58(peer), addrs[:MAX_ADDRS])
        return new

    def _make_room(self) -> bool:
        for peer in self.learned:
            if peer not in self._sticky and peer not in self._connected_once:
                self._forget(peer)
                return True
        return False

    def _forget(self, peer: str) -> None:
        del self.learned[peer]
        self._failures.pop(peer, None)
        self._retry_at.pop(peer, None)
        self.forgotten += 1

    def _candidates(self, connected: set[str], now: float) -> list[PeerInfo]:
        def ordered(book: dict[str, PeerInfo]) -> list[PeerInfo]:
            peers = sorted((p for p in book if p not in connected and self._retry_at.get(p, 0.0) <= now),
                           key=self._key)
            return [book[p] for p in peers]

        return ordered(self.configured) + ordered(self.learned)

    def to_dial(self, connected: set[str], now: float = 0.0) -> list[PeerInfo]:
        """The peers to dial now: none at ``ACTIVE_PEERS`` connections, else up to the bound;
        bootstrap peers first, peers whose last dials failed left out until their retry time."""
        room = ACTIVE_PEERS - len(connected)
        return self._candidates(connected, now)[:room] if room > 0 else []

    def probe(self, connected: set[str], now: float = 0.0) -> PeerInfo | None:
        """One more peer to dial although the member is at the bound (below ``PROBE_BELOW``):
        the next known, unconnected one in the member's rotation. Now and then, so that a
        partition healed while each side was full does not stay one, and the overlay mixes."""
        if len(connected) >= PROBE_BELOW:
            return None
        candidates = sorted(self._candidates(connected, now), key=lambda i: self._key(str(i.peer_id)))
        if not candidates:
            return None
        after = [i for i in candidates if self._key(str(i.peer_id)) > self._probed]
        chosen = (after or candidates)[0]
        self._probed = self._key(str(chosen.peer_id))
        return chosen

    def dialled(self, peer: str, ok: bool, now: float = 0.0) -> None:
        """Note a dial's outcome: a failed one backs the peer off, and a learned peer is
        forgotten after ``FORGET_AFTER`` in a row."""
        if ok:
            self._failures.pop(peer, None)
            self._retry_at.pop(peer, None)
            self._connected_once.add(peer)
            return
        if peer not in self:
            return
        failures = self._failures[peer] = self._failures.get(peer, 0) + 1
        self._retry_at[peer] = now + min(RETRY_BASE_S * 2 ** failures, RETRY_MAX_S)
        if failures >= FORGET_AFTER and peer in self.learned and peer not in self._sticky:
            self._forget(peer)


def listed_addresses(declared: Iterable[multiaddr.Multiaddr], observed: Iterable[multiaddr.Multiaddr]) -> list[str]:
    """A connected peer's dialable addresses: what it declared (its signed peer record)
    without the ``/p2p`` part, with a wildcard IP (it listens on every interface) replaced
    by the IP we see its connection come from; only addresses an asker accepts
    (``peer_exchange.valid_address``: anything else would make it refuse the whole answer)."""
    seen_ips = [a.value_for_protocol("ip4") for a in observed if "ip4" in [p.name for p in a.protocols()]]
    out: list[str] = []
    for address in declared:
        parts = str(address).split("/p2p/")[0]
        names = [p.name for p in multiaddr.Multiaddr(parts).protocols()]
        if names[:1] == ["ip4"] and multiaddr.Multiaddr(parts).value_for_protocol("ip4") in _WILDCARDS:
            if not seen_ips:
                continue
            parts = parts.replace("/ip4/0.0.0.0/", f"/ip4/{seen_ips[0]}/", 1)
        if parts not in out and valid_address(parts):
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
