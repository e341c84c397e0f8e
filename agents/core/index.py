"""The events in their feeds, grouped by what they refer to: what ``fold`` settles each node from.

Every list here is in feed order, (author, seq, id), whatever order the events came in:
``FoldIndex(feeds)`` builds it from a whole set, ``extend`` adds an author's next
events in its feed as if they had been there when it was built (``agents.core.livefold``
checks that they only extend that author's one chain), and ``refeed`` adds those of an author
whose feed is forked or cut, each read along its own chain (``untangle_reads`` first, when the
feed was one chain until then).
"""

from __future__ import annotations

from bisect import insort
from collections import defaultdict
from collections.abc import Iterable

import immutables

from agents.core.branches import Branches
from agents.core.events import (
    AckBody,
    BallotBody,
    CandidateBody,
    ClaimBody,
    Event,
    FailureBody,
    GoalBody,
    PromiseBody,
    ProposalBody,
    RenewBody,
    ResultBody,
    VoteBody,
)
from agents.core.feeds import Feeds


def feed_key(event: Event) -> tuple[str, int, str]:
    """An event's place in ``Feeds.accepted``: the order every list of the index keeps."""
    return event.author, event.seq, event.id


def target(event: Event) -> str | None:
    """The node or leaf an event is about, when its body names one (a vote names a proposal,
    a renewal or failure a claim: see ``FoldIndex.touched``)."""
    fields = event.body.__dict__  # as in ``fold``: no getattr default, a pydantic slow path
    return fields.get("node") or fields.get("leaf")


class FoldIndex:
    """The events in their feeds, grouped by what they refer to; scorers' events along their chains."""

    def __init__(self, feeds: Feeds) -> None:
        """An author whose feed is forked or cut has every event's reading kept, for ``refeed``;
        any other's feed must be one chain, which ``extend`` grows (or ``untangle_reads`` turns
        into one that ``refeed`` takes)."""
        self.by_id: dict[str, Event] = {e.id: e for e in feeds.accepted}
        self.goals: list[Event] = []
        self.proposals: dict[str, list[Event]] = defaultdict(list)  # node -> proposals
        self.draft_number: dict[str, int] = {}  # proposal -> its number among its author's on the node
        self.result_number: dict[str, int] = {}  # result -> its number among its author's on the leaf
        self.votes: dict[str, dict[str, Event]] = defaultdict(dict)  # proposal -> scorer -> vote
        self.voters: dict[str, set[str]] = defaultdict(set)
        self.candidates: dict[str, list[Event]] = defaultdict(list)  # node -> candidates
        self.first_candidates: set[str] = set()  # its author's first on its chain for its (node, round)
        # what the chain up to an event read (``_along``): for every event of a forked or cut
        # feed, for only the last of one that is one chain
        self._read: dict[str, immutables.Map] = {}
        self.claims: dict[str, list[Event]] = defaultdict(list)  # leaf -> claims
        self.results: dict[str, list[Event]] = defaultdict(list)  # leaf -> results
        self.followups: dict[str, list[Event]] = defaultdict(list)  # claim -> renew/failure
        # scorer -> node or leaf -> its promises, ballots and acks there, along its chains
        self.scorer_chains: dict[str, dict[str, Branches]] = defaultdict(lambda: defaultdict(Branches))
        by_author: dict[str, list[Event]] = defaultdict(list)
        for event in feeds.accepted:
            by_author[event.author].append(event)
            self._group(event, append=True)
        self.goals.sort(key=lambda e: e.order_key)
        tangled = feeds.forked_or_cut
        for author, events in by_author.items():  # in seq order: each after its predecessor
            self._read_along(sorted(events, key=lambda e: e.seq), keep=author in tangled)

    def _group(self, event: Event, append: bool) -> None:
        body = event.body
        add = list.append if append else _in_feed_order
        if isinstance(body, GoalBody):
            if append:
                self.goals.append(event)  # sorted at the end of ``__init__``
            else:
                insort(self.goals, event, key=lambda e: e.order_key)
        elif isinstance(body, ProposalBody):
            add(self.proposals[body.node], event)
        elif isinstance(body, VoteBody):
            self.voters[body.proposal].add(event.author)
            counted = self.votes[body.proposal].get(event.author)
            if counted is None or event.order_key < counted.order_key:
                self.votes[body.proposal][event.author] = event
        elif isinstance(body, CandidateBody):
            add(self.candidates[body.node], event)
        elif isinstance(body, ClaimBody):
            add(self.claims[body.leaf], event)
        elif isinstance(body, ResultBody):
            add(self.results[body.leaf], event)
        elif isinstance(body, (RenewBody, FailureBody)):
            add(self.followups[body.claim], event)

    def extend(self, events: Iterable[Event]) -> None:
        """Add an author's next events in its feed, in seq order: the feed's one chain (no
        fork, no broken link) grows by them."""
        events = list(events)
        self._group_all(events)
        self._read_along(events, keep=False)

    def refeed(self, events: Iterable[Event]) -> None:
        """Add events of an author whose feed is not one chain (forked, cut at a broken link,
        or past an event waiting on one nobody holds), now in its feed, each after its
        predecessor: each is read along its own chain from what its predecessor's chain read;
        the events already here stay as they were read, as an event's place in a feed depends
        on its own chain alone."""
        events = list(events)
        self._group_all(events)
        self._read_along(events, keep=True)

    def untangle_reads(self, events: Iterable[Event]) -> bool:
        """An author's feed was one chain (``extend``: only its head's reading kept) and is now
        read as a feed of any shape (``refeed``), which may go on after any of its events: what
        the chain up to each of them read is made again, as ``refeed`` would have kept it.
        ``events``: that chain, from seq 1, every one already here. False, the index then
        unusable, should one not be where that chain put it (never seen: a fold from scratch
        is right whatever happened)."""
        chain = _NOTHING
        try:
            for event in events:
                chain = self._read[event.id] = self._along(event, chain, again=True)
        except _ReadElsewhere:
            return False
        return True

    def _group_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.by_id[event.id] = event
            self._group(event, append=False)

    def _read_along(self, events: Iterable[Event], keep: bool) -> None:
        """Read each event from what its predecessor's chain read (``_along``); ``keep``: what
        every event's chain read stays (a forked feed may go on after any of them), else only
        the last event's (one chain grows from its head alone)."""
        read = self._read
        for event in events:
            if event.prev is None:
                chain = _NOTHING
            else:
                chain = read[event.prev] if keep else read.pop(event.prev)
            read[event.id] = self._along(event, chain)

    def _along(self, event: Event, chain: immutables.Map, again: bool = False) -> immutables.Map:
        """Read an event; ``chain`` is what its predecessor's chain read, which it returns
        grown by the event: the count of the author's proposals (or results) per node, the
        index in the node's ``Branches`` of its scorer events' last, the (node, round) of its
        candidates. A persistent map (a hash trie): each event's is its predecessor's with one
        entry changed, so a feed forked anywhere costs its events, not its chains. ``again``:
        the event was read before, along the one chain its author's feed then was, so it is in
        its ``Branches`` already, right after the one before it (what it finds is the same)."""
        body, role = event.body, event.role  # one role per chain (a role change cuts it), not per author
        if (role == "decomposer" and isinstance(body, ProposalBody)) or (
                role == "executor" and isinstance(body, ResultBody)):
            node = target(event)
            number = chain.get(("count", node), 0) + 1
            (self.draft_number if role == "decomposer" else self.result_number)[event.id] = number
            return chain.set(("count", node), number)
        if role == "scorer" and isinstance(body, (PromiseBody, BallotBody, AckBody)):
            node = target(event)
            before = chain.get(("last", node), -1)
            branches = self.scorer_chains[event.author][node]  # type: ignore[index]
            if not again:
                return chain.set(("last", node), branches.add(event, before))
            if before + 1 >= len(branches) or branches.events[before + 1] is not event:
                raise _ReadElsewhere
            return chain.set(("last", node), before + 1)
        if isinstance(body, CandidateBody) and ("named", body.node, body.round) not in chain:
            self.first_candidates.add(event.id)
            return chain.set(("named", body.node, body.round), True)
        return chain

    def touched(self, event: Event) -> str | None:
        """The node or leaf whose settling reads ``event``: the one it names, a vote's
        proposal's, a renewal's or failure's claim's (when held: its arrival settles that
        node anyway)."""
        body = event.body
        if isinstance(body, VoteBody):
            cited = self.by_id.get(body.proposal)
            return cited.body.node if cited is not None and isinstance(cited.body, ProposalBody) else None
        if isinstance(body, (RenewBody, FailureBody)):
            cited = self.by_id.get(body.claim)
            return cited.body.leaf if cited is not None and isinstance(cited.body, ClaimBody) else None
        return target(event)

    def chains(self, node: str, roster: tuple[str, ...]) -> dict[str, Branches]:
        """The roster scorers' promises, ballots and acks on ``node``, by scorer."""
        return {s: self.scorer_chains[s][node] for s in roster if node in self.scorer_chains.get(s, {})}


_NOTHING: immutables.Map = immutables.Map()


class _ReadElsewhere(Exception):
    """An event read again is not where its one chain put it in its ``Branches``."""


def _in_feed_order(events: list[Event], event: Event) -> None:
    insort(events, event, key=feed_key)
