"""The catch-up sync protocol on a stream: pull what a peer has and we lack.

One conversation, opened by the member that wants to catch up (the *puller*)::

    puller -> server   {"type": "summary", "cluster": C, "ticket": T, "authors": {...}}
    server -> puller   {"type": "offer", "ticket": T, "summary": {...}, "authors": {...}, "more": M}
    puller -> server   {"type": "need", "ids": [...], "ranges": [[author, first, last], ...]}
    server -> puller   {"type": "events", "events": [...], "rest": [...], "rest_ranges": [...]}
    ... need / events repeat until nothing of this offer is missing ...
    puller -> server   {"type": "next"}                        (only when M was true)
    server -> puller   {"type": "offer", "authors": {...}, "more": M}
    ... need / events, next / offer, until an offer says "more": false ...
    puller -> server   {"type": "done"}

An offer lists, per author, either the ids the server holds after a seq
(``[after_seq, [ids]]``: a feed with gaps or forks) or, for a feed it holds as one
gap-free, fork-free chain, the run itself (``[after_seq, through, head]``: the
events at seqs after ``after_seq`` through ``through``, the last being ``head``).
A puller holding ``head`` at ``through`` in its own gap-free prefix holds the run
and asks nothing (the chain's hashes say so); otherwise it asks for the seqs,
``[author, first, last]``. Catching up on a healthy cluster ships no ids at all:
under 3.0.0 a joiner received and sent back 67 bytes an event in ids, and a member
that was behind offered its whole feed to every peer ahead of it.

The offer is paged: each offer frame lists at most ``OFFER_PAGE`` ids and runs (an
author's ids may go on in the next page), so what either side holds in one frame
does not grow with the event set. A need asks for at most ``BATCH`` events (ids
and the seqs of its ranges together).

``events`` carries the canonical bytes of each event as a JSON string, ids first
in the order asked, then each range's events by seq, until the frame reaches
``EVENTS_BUDGET`` bytes; ``rest`` lists the asked ids left out for the budget and
``rest_ranges`` the seqs, and the puller asks for them again. Every asked id and seq
must be answered or left for later (the server offered them, and its set only grows),
and what is left must be less than what was asked: each frame moves a pull forward,
and ``PULL_LIMIT`` ends even one a hostile server drips along (a run may claim seqs up
to 2^53-1). A puller may have several needs in flight; the server answers them in
order. Each step has its own frame limit (``LIMITS``), so a peer can
make us buffer at most that much at a time.

Every member pulls from every peer it talks to, so both directions are covered
without a push. Each side opens with its admission ticket (``T`` = ``{"peer",
"role", "sig"}``); a side whose ticket does not admit the stream's peer in this
cluster is refused before anything is exchanged. The server answers from its
own event set and never trusts what it is told: the puller verifies every event
it receives as if it came by gossip, and does not ask for ids its intake already
knows (held, refused, or due later). A run is asked by seq from the end of the
puller's own gap-free prefix, so events it holds past a gap (gossip lost one, or
holds it for being ahead of the clock) come again until the gap fills: the price of
offering no ids. Skipping seqs it holds is no option: a puller cannot tell that its
event at a seq is the server's without the server's id, and a fork's other branch
skipped would stay unseen for good.
The first offer also carries the server's summary, which ``swarm submit`` uses to see
that a peer holds its goal. Messages are strict: a decode error says what was
expected and what came.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import orjson
import trio

from agents.core.admission import Credentials, TicketError
from agents.core.events import MAX_INT
from agents.core.sync import (
    AuthorOffer,
    AuthorRange,
    AuthorSummary,
    EventIndex,
    Need,
    Offer,
    SeqRange,
    Summary,
    split_ranges,
)
from agents.net.base import MAX_FRAME_BYTES, PeerStream, StreamClosed

BATCH = 500  # events one need asks for: ids and the seqs of its ranges together
NEEDS_AHEAD = 2  # needs a puller has in flight: the server builds one frame while it takes another
PENDING_POLL_S = 0.2  # how often a pull with nothing in flight looks again at what it put off
OFFER_PAGE = 20_000  # ids and runs in one offer frame (about 1.4 MB); the rest come on "next"
PROTOCOL = "/swarm/sync/4.0.0"
EVENTS_BUDGET = 1024 * 1024  # a server stops adding events to a frame once it is this big
# Frame limits per message type. An events frame is its budget plus one event (32 KiB,
# at most doubled by escaping it into a JSON string) plus framing; a need is BATCH ids or
# ranges (67 and about 70 bytes each).
LIMITS = {
    "summary": 1024 * 1024,  # read before the peer's ticket is checked: ~7,000 authors
    "offer": MAX_FRAME_BYTES,
    "need": 64 * 1024,
    "next": 64 * 1024,
    "done": 64 * 1024,
    "events": 2 * 1024 * 1024,
}


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


async def _receive(stream: PeerStream, expected: str | tuple[str, ...]) -> dict[str, Any]:
    wanted = (expected,) if isinstance(expected, str) else expected
    return decode_message(await stream.receive(max(LIMITS[w] for w in wanted)), wanted)


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


def _summary_json(summary: Summary) -> dict[str, Any]:
    return {a: [s.prefix_seq, s.prefix_id, s.ids_digest] for a, s in summary.authors.items()}


def _summary_from(data: Any) -> Summary:
    if not isinstance(data, dict):
        raise SyncProtocolError(f"expected a summary object, found {type(data).__name__}")
    authors = {}
    for author, entry in data.items():
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int)
                and (entry[1] is None or isinstance(entry[1], str)) and isinstance(entry[2], str)):
            raise SyncProtocolError(f"expected [seq, id|null, digest] for author {author[:12]}, found {entry!r:.80}")
        authors[author] = AuthorSummary(entry[0], entry[1], entry[2])
    return Summary(authors)


def _pages(offer: Offer | None) -> list[dict[str, list]]:
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


def _more(message: dict[str, Any], page: Offer) -> bool:
    more = message.get("more")
    if not isinstance(more, bool):
        raise SyncProtocolError(f"expected 'more' (true or false) in an offer, found {more!r:.40}")
    if more and not any(isinstance(entry, AuthorRange) or entry.ids for entry in page.authors.values()):
        raise SyncProtocolError("an offer page that says more follow lists no ids and no run")
    return more


def _seq(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_INT  # not a bool, not a float


def _offer_from(data: Any) -> Offer:
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


def _ranges_from(data: Any, what: str) -> list[SeqRange]:
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


def _need_from(message: dict[str, Any]) -> Need:
    ids = message.get("ids")
    if not isinstance(ids, list):
        raise SyncProtocolError(f"expected a list of ids in a need, found {type(ids).__name__}")
    ranges = _ranges_from(message.get("ranges"), "ranges")
    if len(ids) + sum(len(r) for r in ranges) > BATCH:
        raise SyncProtocolError(f"a need asked for more than {BATCH} events (ids and the seqs of its ranges)")
    return Need(tuple(ids), tuple(ranges))


def _answer(index: EventIndex, need: Need) -> dict[str, Any]:
    """The events frame for ``need``: ids first, then each range by seq, until the budget;
    what is left out goes in ``rest`` (held ids) and ``rest_ranges``. A range cut between two
    events at one seq (a fork) goes on after that seq: the siblings left out are offered by
    id on the next pull (a forked feed is offered by id), and what is left is always less
    than what was asked."""
    events: list[str] = []
    rest: list[str] = []
    rest_ranges: list[list] = []
    size = 0

    def add(wire: bytes) -> None:
        nonlocal size
        events.append(wire.decode())
        size += len(wire) + wire.count(b'"') + wire.count(b"\\") + 3  # escaped in the frame, plus '"",'

    for position, event_id in enumerate(need.ids):
        if size >= EVENTS_BUDGET:
            rest = [i for i in need.ids[position:] if isinstance(i, str) and i in index]
            break
        if isinstance(event_id, str) and (event := index.get(event_id)) is not None:
            add(event.to_wire())
    for wanted in need.ranges:
        if size >= EVENTS_BUDGET:  # every range after the cut is left whole
            rest_ranges.append(wanted.wire())
            continue
        last_sent = 0
        for event in index.in_range(wanted):
            if size >= EVENTS_BUDGET:
                if last_sent < wanted.last:
                    rest_ranges.append(SeqRange(wanted.author, last_sent + 1, wanted.last).wire())
                break
            add(event.to_wire())
            last_sent = event.seq
    return {"type": "events", "events": events, "rest": rest, "rest_ranges": rest_ranges}


async def serve_pull(stream: PeerStream, index: EventIndex, me: Credentials,
                     on_need: Callable[[], None] = lambda: None) -> int:
    """Answer one peer's pull from our events. Returns how many events we sent.
    ``on_need`` is told of each need answered with at least one event, and of each offer page
    sent on ``next`` (the caller's deadline counts from the last)."""
    hello = await _receive(stream, "summary")
    if hello.get("cluster") != me.cluster:
        raise SyncRefused(f"peer is in cluster {hello.get('cluster')!r}, we are in {me.cluster!r}")
    check_ticket(hello, stream, me)
    pages = _pages(index.offer_for(_summary_from(hello.get("authors"))))
    await stream.send(encode_message({
        "type": "offer",
        "ticket": me.ticket.wire(),
        "summary": _summary_json(index.summary()),
        "authors": pages[0],
        "more": len(pages) > 1,
    }))
    page = 0
    sent = 0
    while True:
        message = await _receive(stream, ("need", "next", "done"))
        if message["type"] == "done":
            return sent
        if message["type"] == "next":
            page += 1
            if page >= len(pages):
                raise SyncProtocolError("asked for the next offer page after the last")
            on_need()  # a page answered is progress too
            await stream.send(encode_message({"type": "offer", "authors": pages[page], "more": page + 1 < len(pages)}))
            continue
        answer = _answer(index, _need_from(message))
        if answer["events"]:  # a need for nothing we hold is no progress: it does not extend the deadline
            on_need()
        await stream.send(encode_message(answer))
        sent += len(answer["events"])


async def _open_pull(stream: PeerStream, index: EventIndex, me: Credentials) -> tuple[dict[str, Any], Summary]:
    """Send our summary; the server's first offer (its ticket checked) and its summary."""
    await stream.send(encode_message({"type": "summary", "cluster": me.cluster, "ticket": me.ticket.wire(),
                                      "authors": _summary_json(index.summary())}))
    reply = await _receive(stream, "offer")
    check_ticket(reply, stream, me)
    return reply, _summary_from(reply.get("summary"))


async def peek(stream: PeerStream, index: EventIndex, me: Credentials) -> Summary:
    """The peer's summary alone: its first offer is read and nothing is fetched (``swarm
    submit`` asks this to see that a peer holds its goal)."""
    _reply, theirs = await _open_pull(stream, index, me)
    await stream.send(encode_message({"type": "done"}))
    return theirs


async def pull(stream: PeerStream, index: EventIndex, me: Credentials,
               known: Callable[[str], bool] = lambda _id: False,
               on_events: Callable[[list[bytes]], None] | None = None,
               on_page: Callable[[], None] = lambda: None,
               batches: Batches | None = None) -> tuple[list[bytes], Summary]:
    """Pull from the peer what it offers and we lack (and ``known`` does not rule out).
    Returns the raw events (unverified: run them through the intake) and the peer's summary.

    With ``on_events``, each events frame goes to it as it arrives and none is returned:
    a large catch-up is stored as it comes, and what it stored drops out of what is asked
    next time (``index``/``known``) should the pull be cut. ``on_page`` is told of each
    offer page after the first (progress too: pages may list only what we hold). A page
    that says more follow must list some ids or a run: an endless run of empty pages would
    be progress about nothing. ``batches`` cuts each need's batch from what is wanted (by
    default the next ``BATCH`` ids and seqs; ``agents.pull_claims.Claim`` puts off what
    another running pull is fetching, and has the pull wait while it is ``pending``)."""
    reply, theirs = await _open_pull(stream, index, me)
    received: list[bytes] = []
    while True:
        page = _offer_from(reply.get("authors"))
        more = _more(reply, page)
        await _fetch(stream, page, index, known, received if on_events is None else on_events,
                     batches or Batches())
        if not more:
            break
        await stream.send(encode_message({"type": "next"}))
        reply = await _receive(stream, "offer")
        on_page()
    await stream.send(encode_message({"type": "done"}))
    return received, theirs


class Batches:
    """The plain cut: the next ``BATCH`` ids, then seqs, of what is wanted."""

    def take(self, ids: list[str], ranges: list[SeqRange],
             room: int) -> tuple[list[str], list[SeqRange], list[str], list[SeqRange]]:
        """Up to ``room`` ids then seqs to ask for now, and what is left of each."""
        these, ids = ids[:room], ids[room:]
        these_ranges, ranges = split_ranges(ranges, room - len(these))
        return these, these_ranges, ids, ranges

    def pending(self) -> bool:
        """Something is left to take later, once others' fetches settle (never, here)."""
        return False

    async def wait(self) -> None:
        """Wait a while before taking again what is ``pending``."""
        await trio.sleep(PENDING_POLL_S)


async def _fetch(stream: PeerStream, page: Offer, index: EventIndex, known: Callable[[str], bool],
                 to: list[bytes] | Callable[[list[bytes]], None], batches: Batches) -> None:
    """Ask for what one offer page lists and we lack (ids, and runs by seq); each events
    frame goes ``to``. ``NEEDS_AHEAD`` needs are in flight at once, so the server builds the
    next frame while we take this one (with one need at a time each side waited on the other)."""
    ids, ranges = index.wanted(page)
    ids = [i for i in ids if not known(i)]
    asked: deque[tuple[list[str], list[SeqRange]]] = deque()
    while True:
        while len(asked) < NEEDS_AHEAD:
            these, these_ranges, ids, ranges = batches.take(ids, ranges, BATCH)
            if not these and not these_ranges:  # nothing (more) to ask for now
                break
            await stream.send(encode_message({"type": "need", "ids": these,
                                              "ranges": [r.wire() for r in these_ranges]}))
            asked.append((these, these_ranges))
        if not asked:
            if not batches.pending():
                return
            await batches.wait()  # what is left, another pull is fetching: see what it brings
            continue
        these, these_ranges = asked.popleft()
        frame, rest, rest_ranges = _checked_answer(await _receive(stream, "events"), these, these_ranges)
        if isinstance(to, list):
            to.extend(frame)
        else:
            to(frame)
        ids = rest + ids
        ranges = rest_ranges + ranges


def _checked_answer(answer: dict[str, Any], asked: list[str],
                    asked_ranges: list[SeqRange]) -> tuple[list[bytes], list[str], list[SeqRange]]:
    """An events frame's events, and what it left for later, once it keeps the rules."""
    events, rest = answer.get("events"), answer.get("rest")
    rest_ranges = _ranges_from(answer.get("rest_ranges"), "rest_ranges")
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise SyncProtocolError("expected a list of event strings in an events message")
    if not isinstance(rest, list) or not all(isinstance(i, str) for i in rest) or not set(rest) <= set(asked):
        raise SyncProtocolError("expected 'rest' to list asked ids left out")
    rest = list(dict.fromkeys(rest))  # an id listed twice is asked once (repeats would grow our queue)
    if not all(any(r.author == a.author and a.first <= r.first and r.last <= a.last for a in asked_ranges)
               for r in rest_ranges):
        raise SyncProtocolError("expected 'rest_ranges' to lie inside the ranges asked")
    left = len(rest) + sum(len(r) for r in rest_ranges)
    wanted = len(set(asked)) + sum(len(r) for r in asked_ranges)
    if left and (not events or left >= wanted):
        # a frame that answers nothing, or leaves as much as was asked for later, would
        # keep a pull (whose deadline counts from its last frame) going with no end
        raise SyncProtocolError("an events frame left for later as much as was asked, or sent nothing")
    if len(events) + left < wanted:
        # the server offered all it is asked for, and its set only grows: what it neither
        # sends nor leaves for later it holds back (empty frames would drip a pull along)
        raise SyncProtocolError("an events frame neither answered nor left for later all that was asked")
    try:
        return [e.encode() for e in events], rest, rest_ranges
    except UnicodeEncodeError:
        raise SyncProtocolError("an event string holds a lone surrogate: no event's bytes can") from None


__all__ = [
    "BATCH",
    "EVENTS_BUDGET",
    "LIMITS",
    "OFFER_PAGE",
    "PROTOCOL",
    "Batches",
    "StreamClosed",
    "SyncProtocolError",
    "SyncRefused",
    "TicketError",
    "peek",
    "pull",
    "serve_pull",
]
