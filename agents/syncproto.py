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

The offer is paged: each offer frame lists at most ``syncwire.OFFER_PAGE`` ids and runs (an
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
that a peer holds its goal (and so is a promise to a client: ``serve_pull``'s
``before_offer``). Messages are strict (``agents.syncwire``): a decode
error says what was expected and what came.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from agents.core.admission import Credentials, TicketError
from agents.core.sync import EventIndex, Need, Offer, SeqRange, Summary, split_ranges
from agents.net.base import MAX_FRAME_BYTES, PeerStream, StreamClosed
from agents.syncwire import (
    BATCH,
    SyncProtocolError,
    SyncRefused,
    check_ticket,
    decode_message,
    encode_message,
    more_follow,
    need_from,
    offer_from,
    offer_pages,
    ranges_from,
    summary_from,
    summary_json,
)

NEEDS_AHEAD = 2  # needs a puller has in flight: the server builds one frame while it takes another
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


async def _receive(stream: PeerStream, expected: str | tuple[str, ...]) -> dict[str, Any]:
    wanted = (expected,) if isinstance(expected, str) else expected
    return decode_message(await stream.receive(max(LIMITS[w] for w in wanted)), wanted)


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
                     on_need: Callable[[], None] = lambda: None,
                     before_offer: Callable[[str], Awaitable[None]] | None = None) -> int:
    """Answer one peer's pull from our events. Returns how many events we sent.
    ``on_need`` is told of each need answered with at least one event, and of each offer page
    sent on ``next`` (the caller's deadline counts from the last). ``before_offer`` is awaited
    with the puller's role once its ticket admits it, and the summary is read from ``index``
    right after it with no wait between: the summary is a promise to a client (``swarm
    submit`` reads a goal it lists as held), and ``Member`` makes what it promises durable there."""
    hello = await _receive(stream, "summary")
    if hello.get("cluster") != me.cluster:
        raise SyncRefused(f"peer is in cluster {hello.get('cluster')!r}, we are in {me.cluster!r}")
    role = check_ticket(hello, stream, me)
    if before_offer is not None:
        await before_offer(role)
    pages = offer_pages(index.offer_for(summary_from(hello.get("authors"))))
    await stream.send(encode_message({
        "type": "offer",
        "ticket": me.ticket.wire(),
        "summary": summary_json(index.summary()),
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
        answer = _answer(index, need_from(message))
        if answer["events"]:  # a need for nothing we hold is no progress: it does not extend the deadline
            on_need()
        await stream.send(encode_message(answer))
        sent += len(answer["events"])


async def _open_pull(stream: PeerStream, index: EventIndex,
                     me: Credentials) -> tuple[dict[str, Any], str, Summary]:
    """Send our summary; the server's first offer, its admitted role and its summary."""
    await stream.send(encode_message({"type": "summary", "cluster": me.cluster, "ticket": me.ticket.wire(),
                                      "authors": summary_json(index.summary())}))
    reply = await _receive(stream, "offer")
    role = check_ticket(reply, stream, me)
    return reply, role, summary_from(reply.get("summary"))


async def peek(stream: PeerStream, index: EventIndex, me: Credentials) -> tuple[str, Summary]:
    """The peer's admitted role and its summary alone: its first offer is read and nothing is
    fetched (``swarm submit`` asks this to see that a member holds its goal; another client
    holding it is no member that will serve it)."""
    _reply, role, theirs = await _open_pull(stream, index, me)
    await stream.send(encode_message({"type": "done"}))
    return role, theirs


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
    reply, _role, theirs = await _open_pull(stream, index, me)
    received: list[bytes] = []
    while True:
        page = offer_from(reply.get("authors"))
        more = more_follow(reply, page)
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
        """Before taking again what is ``pending`` (never called here: nothing is)."""
        await trio.lowlevel.checkpoint()


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
    rest_ranges = ranges_from(answer.get("rest_ranges"), "rest_ranges")
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
