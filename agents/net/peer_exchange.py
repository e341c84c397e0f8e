"""Peer exchange: a member learns peers from its peers, so one bootstrap address is enough.

One short conversation on its own protocol (``PROTOCOL``), opened by the member that
wants to learn (the *asker*)::

    asker    -> answerer  {"type": "ask", "cluster": C, "ticket": T}
    answerer -> asker     {"type": "peers", "ticket": T, "peers": [[PEER_ID, [ADDR, ...]], ...]}

Each side opens with its admission ticket, checked as the sync protocol checks it
(``agents.syncwire.check_ticket``): a peer that is not admitted learns nothing and
teaches nothing. The answer lists at most ``MAX_LISTED`` of the answerer's connected
peers, each with at most ``MAX_ADDRS`` TCP addresses; which ones depends on who asks
(``listing``), so askers learn different parts of a large cluster. Nothing in it is
trusted: an address is only somewhere to dial, and the noise handshake proves the peer
id on every connection (a wrong entry costs a failed dial, and the dialler forgets an
entry after a few of them). An answer that breaks any of these rules is refused whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import multiaddr
from libp2p.peer.id import ID

from agents.core.admission import Credentials
from agents.net.base import PeerStream
from agents.syncwire import SyncProtocolError, check_ticket, decode_message, encode_message

PROTOCOL = "/swarm/peers/1.0.0"
MAX_LISTED = 32
MAX_ADDRS = 4
MAX_ADDR_CHARS = 200
ASK_LIMIT = 8 * 1024
ANSWER_LIMIT = 64 * 1024
_ADDRESS_FIRST = ("ip4", "ip6", "dns", "dns4", "dns6")

Listing = list[tuple[str, list[str]]]


class PeerExchangeError(SyncProtocolError):
    """The peer broke the peer-exchange protocol: the message says how."""


def listing(asker: str, peers: Iterable[tuple[str, list[str]]]) -> Listing:
    """Up to ``MAX_LISTED`` of ``peers`` (never the asker), chosen by a hash of the asker's
    id and theirs: each asker gets its own spread of a large cluster, the same one each time."""
    chosen = sorted((p for p in peers if p[0] != asker and p[1]),
                    key=lambda p: hashlib.sha256(f"{asker}/{p[0]}".encode()).digest())
    return [(peer, addrs[:MAX_ADDRS]) for peer, addrs in chosen[:MAX_LISTED]]


def _valid_address(address: Any) -> str:
    if not isinstance(address, str) or len(address) > MAX_ADDR_CHARS:
        raise PeerExchangeError(f"an address must be a string of at most {MAX_ADDR_CHARS} characters")
    try:
        parts = [p.name for p in multiaddr.Multiaddr(address).protocols()]
    except Exception as exc:  # the multiaddr package raises several types for bad input
        raise PeerExchangeError(f"{address[:60]!r} is not a multiaddr: {exc!r:.80}") from None
    if len(parts) != 2 or parts[0] not in _ADDRESS_FIRST or parts[1] != "tcp":
        raise PeerExchangeError(f"{address[:60]!r} is not an IP or DNS name and a TCP port")
    return address


def valid_address(address: str) -> bool:
    """Whether an asker would accept ``address`` in a listing (an answerer lists no other)."""
    try:
        _valid_address(address)
    except PeerExchangeError:
        return False
    return True


def _parse_peers(data: Any, asker: str) -> Listing:
    if not isinstance(data, list) or len(data) > MAX_LISTED:
        raise PeerExchangeError(f"expected a list of at most {MAX_LISTED} peers")
    learned: Listing = []
    for entry in data:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list) and 0 < len(entry[1]) <= MAX_ADDRS):
            raise PeerExchangeError(f"a peer is [PEER_ID, [ADDR, ...]] with 1 to {MAX_ADDRS} addresses")
        try:
            ID.from_base58(entry[0])
        except Exception:
            raise PeerExchangeError(f"{entry[0][:60]!r} is not a peer id") from None
        if entry[0] != asker:
            learned.append((entry[0], [_valid_address(a) for a in entry[1]]))
    return learned


async def ask(stream: PeerStream, me: Credentials) -> Listing:
    """Ask the stream's peer whom it knows. PeerExchangeError (or SyncRefused) when it
    breaks the protocol or is not admitted; StreamClosed when the stream fails."""
    await stream.send(encode_message({"type": "ask", "cluster": me.cluster, "ticket": me.ticket.wire()}))
    answer = decode_message(await stream.receive(ANSWER_LIMIT), "peers", PeerExchangeError)
    check_ticket(answer, stream, me)
    return _parse_peers(answer.get("peers"), me.identity.peer_id)


async def answer(stream: PeerStream, me: Credentials, connected: Iterable[tuple[str, list[str]]],
                 on_checked: Callable[[str], None] = lambda peer: None) -> int:
    """Answer one ask with a listing of ``connected`` (peer id, addresses); returns how many.
    ``on_checked`` is told the asker's peer id once its ticket admits it, before ``connected``
    is iterated (a generator's body runs only then): of two peers asking at once, the answer
    to the second lists the first, so every pair of askers comes to know each other."""
    question = decode_message(await stream.receive(ASK_LIMIT), "ask", PeerExchangeError)
    if question.get("cluster") != me.cluster:
        raise PeerExchangeError(f"peer is in cluster {question.get('cluster')!r}, we are in {me.cluster!r}")
    check_ticket(question, stream, me)
    on_checked(stream.peer)
    chosen = listing(stream.peer, connected)
    await stream.send(encode_message({"type": "peers", "ticket": me.ticket.wire(), "peers": [list(p) for p in chosen]}))
    return len(chosen)
