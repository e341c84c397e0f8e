"""The sync conversation's messages (``agents.syncproto``): encoded, decoded, and each
part read strictly, so that a peer's malformed frame is refused with an error that
says what was expected and what came, before any of it is used.

Everything here is about one frame at a time; when a message is sent, and what a side
does with it, is the conversation's (``agents.syncproto``).
"""

from __future__ import annotations

from typing import Any

import orjson

from agents.core.admission import Credentials
from agents.core.events import MAX_INT
from agents.core.sync import AuthorOffer, AuthorRange, AuthorSummary, Need, Offer, SeqRange, Summary
from agents.net.base import PeerStream

BATCH = 500  # events one need asks for: ids and the seqs of its ranges together
OFFER_PAGE = 20_000  # ids and runs in one offer frame (about 1.4 MB); the rest come on "next"


class SyncProtocolError(Exception):
    """The peer broke the protocol: the message says what was expected and what came."""


class SyncRefused(SyncProtocolError):
    """The peer is not admitted to this cluster (no valid ticket for its peer id)."""


def check_ticket(message: dict[str, Any], stream: PeerStream, me: Credentials) -> str:
    """The peer's role, once its ticket admits the stream's peer id in our cluster."""
    ticket = message.get("ticket")
    if not (isinstance(ticket, dict) and all(isinstance(ticket.get(k), str) for k in ("peer", "role", "sig"))):
        raise SyncRefused(f"{stream.peer[-8:]} sent no ticket; it must be admitted with 'swarm admit'")
    if ticket["peer"] != stream.peer:
        raise SyncRefused(f"{stream.peer[-8:]} presented the ticket of another peer ({ticket['peer'][-8:]})")
    if not me.gate.admits(ticket["peer"], ticket["role"], ticket["sig"]):
        raise SyncRefused(f"{stream.peer[-8:]}'s ticket does not admit it to cluster {me.cluster!r} as "
                          f"{ticket['role']!r}")
    return ticket["role"]


def encode_message(message: dict[str, Any]) -> bytes:
    # orjson: an events frame is a megabyte of JSON held in JSON strings, and escaping it
    # with Python's json was most of what serving a catch-up cost
    return orjson.dumps(message)


def decode_message(frame: bytes, expected: str | tuple[str, ...],
                   error: type[SyncProtocolError] = SyncProtocolError) -> dict[str, Any]:
    """A frame as a JSON object of one of the ``expected`` types; ``error`` names what came instead."""
    wanted = (expected,) if isinstance(expected, str) else expected
    try:
        message = orjson.loads(frame)
    except ValueError as exc:  # bad JSON, bad UTF-8, a lone surrogate, nesting past 1,024 levels
        raise error(f"expected a JSON {'/'.join(wanted)} message, got undecodable bytes: {exc!r:.120}") from None
    if not isinstance(message, dict) or message.get("type") not in wanted:
        found = message.get("type") if isinstance(message, dict) else type(message).__name__
        raise error(f"expected a {'/'.join(wanted)} message, found {found!r}")
    return message


def summary_json(summary: Summary) -> dict[str, Any]:
    return {a: [s.prefix_seq, s.prefix_id, s.ids_digest] for a, s in summary.authors.items()}


def summary_from(data: Any) -> Summary:
    if not isinstance(data, dict):
        raise SyncProtocolError(f"expected a summary object, found {type(data).__name__}")
    authors = {}
    for author, entry in data.items():
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int)
                and (entry[1] is None or isinstance(entry[1], str)) and isinstance(entry[2], str)):
            raise SyncProtocolError(f"expected [seq, id|null, digest] for author {author[:12]}, found {entry!r:.80}")
        authors[author] = AuthorSummary(entry[0], entry[1], entry[2])
    return Summary(authors)


def offer_pages(offer: Offer | None) -> list[dict[str, list]]:
    """The offer's ``authors`` entries, ``OFFER_PAGE`` ids and runs a page at most (an
    author's ids may go on in the next page, under the same ``after_seq``); always at least
    one page."""
    pages: list[dict[str, list]] = [{}]
    room = OFFER_PAGE
    for author, entry in (offer.authors if offer else {}).items():
        if isinstance(entry, AuthorRange):
            if room == 0:
                pages.append({})
                room = OFFER_PAGE
            pages[-1][author] = [entry.after_seq, entry.through, entry.head]
            room -= 1
            continue
        start = 0
        while True:
            if room == 0:
                pages.append({})
                room = OFFER_PAGE
            taken = list(entry.ids[start:start + room])
            pages[-1][author] = [entry.after_seq, taken]
            room -= len(taken)
            start += len(taken)
            if start >= len(entry.ids):
                break
    return pages


def more_follow(message: dict[str, Any], page: Offer) -> bool:
    more = message.get("more")
    if not isinstance(more, bool):
        raise SyncProtocolError(f"expected 'more' (true or false) in an offer, found {more!r:.40}")
    if more and not any(isinstance(entry, AuthorRange) or entry.ids for entry in page.authors.values()):
        raise SyncProtocolError("an offer page that says more follow lists no ids and no run")
    return more


def _seq(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_INT  # not a bool, not a float


def offer_from(data: Any) -> Offer:
    if not isinstance(data, dict):
        raise SyncProtocolError(f"expected an offer object, found {type(data).__name__}")
    authors: dict[str, AuthorOffer | AuthorRange] = {}
    for author, entry in data.items():
        if (isinstance(entry, list) and len(entry) == 2 and _seq(entry[0])
                and isinstance(entry[1], list) and all(isinstance(i, str) for i in entry[1])):
            authors[author] = AuthorOffer(entry[0], tuple(entry[1]))
        elif (isinstance(entry, list) and len(entry) == 3 and _seq(entry[0]) and _seq(entry[1])
              and entry[1] > entry[0] and isinstance(entry[2], str)):
            authors[author] = AuthorRange(entry[0], entry[1], entry[2])
        else:
            raise SyncProtocolError(f"expected [after_seq, [ids]] or [after_seq, through, head] for author "
                                    f"{author[:12]}, found {entry!r:.80}")
    return Offer(authors)


def ranges_from(data: Any, what: str) -> list[SeqRange]:
    if not isinstance(data, list):
        raise SyncProtocolError(f"expected a list of [author, first, last] in '{what}', found {type(data).__name__}")
    ranges = []
    for entry in data:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and _seq(entry[1])
                and _seq(entry[2]) and 1 <= entry[1] <= entry[2]):
            raise SyncProtocolError(f"expected [author, first, last] with 1 <= first <= last in '{what}', "
                                    f"found {entry!r:.80}")
        ranges.append(SeqRange(entry[0], entry[1], entry[2]))
    return ranges


def need_from(message: dict[str, Any]) -> Need:
    ids = message.get("ids")
    if not isinstance(ids, list):
        raise SyncProtocolError(f"expected a list of ids in a need, found {type(ids).__name__}")
    ranges = ranges_from(message.get("ranges"), "ranges")
    if len(ids) + sum(len(r) for r in ranges) > BATCH:
        raise SyncProtocolError(f"a need asked for more than {BATCH} events (ids and the seqs of its ranges)")
    return Need(tuple(ids), tuple(ranges))


__all__ = [
    "BATCH",
    "OFFER_PAGE",
    "SyncProtocolError",
    "SyncRefused",
    "check_ticket",
    "decode_message",
    "encode_message",
    "more_follow",
    "need_from",
    "offer_from",
    "offer_pages",
    "ranges_from",
    "summary_from",
    "summary_json",
]
