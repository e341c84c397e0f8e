"""The events in their feeds, grouped by what they refer to: what ``fold`` settles each node from.

Every list here is in feed order, (author, seq, id), whatever order the events came in:
``FoldIndex(feeds)`` builds it from a whole set, ``extend`` adds an author's next
events in its feed as if they had been there when it was built (``agents.core.livefold``
checks that they only extend that author's one chain), and ``refeed`` adds those of an author
whose feed is forked or cut, and reads its chains again.
"""

from __future__ import annotations

from bisect import insort
from collections import defaultdict
from collections.abc import Iterable

from agents.core.branches import Branches, walk_feed
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
        self.by_id: dict[str, Event] = {e.id: e for e in feeds.accepted}
        self.goals: list[Event] = []
        self.proposals: dict[str, list[Event]] = defaultdict(list)  # node -> proposals
        self.draft_number: dict[str, int] = {}  # proposal -> its number among its author's on the node
        self.result_number: dict[str, int] = {}  # result -> its number among its author's on the leaf
        self.numbered: dict[tuple[str, str], int] = {}  # (author, node or leaf) -> how many numbered there
        self.votes: dict[str, dict[str, Event]] = defaultdict(dict)  # proposal -> scorer -> vote
        self.voters: dict[str, set[str]] = defaultdict(set)
        self.candidates: dict[str, list[Event]] = defaultdict(list)  # node -> candidates
        self.first_candidates: set[str] = set()  # its author's first on its chain for its (node, round)
        self._named: set[tuple[str, str, int]] = set()  # (author, node, round) of one-chain authors' candidates
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
        for author, events in by_author.items():
            if author in feeds.equivocators:
                self._along_chains(author, walk_feed(feeds, events))
            else:
                for event in sorted(events, key=lambda e: e.seq):  # one chain
                    self._next_on_chain(event)

    def _along_chains(self, author: str, walk: Iterable[tuple[int, Event]]) -> None:
        """What the index reads along the chains of an author whose feed is forked (or cut),
        walking its feed once (``branches.walk_feed``; ``_next_on_chain`` reads one chain): a
        decomposer's proposals and an executor's results numbered per node or leaf along their
        chain, a scorer's events on each node or leaf gathered into its ``Branches`` there, the
        first candidate per (node, round) on each chain. Its ``numbered`` is the highest count
        on any chain."""
        count: dict[str, int] = defaultdict(int)  # node -> the author's numbered events on it, on this chain
        depth_on: dict[str, int] = defaultdict(int)  # node -> the scorer's events on it, on this chain
        named: set[tuple[str, int]] = set()  # (node, round) of the candidates on this chain
        # per event on this chain: the count it raised, the depth it raised, the (node, round) it named first
        undo: list[tuple[str | None, str | None, tuple[str, int] | None]] = []
        trees = self.scorer_chains[author]
        for depth, event in walk:
            while len(undo) > depth:  # back to the branch point: the chain this event is on
                counted, placed, first = undo.pop()
                if counted is not None:
                    count[counted] -= 1
                if placed is not None:
                    depth_on[placed] -= 1
                if first is not None:
                    named.discard(first)
            counted = placed = first = None
            body, role = event.body, event.role  # one role per chain (a role change cuts it), not per author
            if (role == "decomposer" and isinstance(body, ProposalBody)) or (
                    role == "executor" and isinstance(body, ResultBody)):
                counted = target(event)
                number = count[counted] = count[counted] + 1  # type: ignore[index]
                (self.draft_number if role == "decomposer" else self.result_number)[event.id] = number
                key = (author, counted)
                self.numbered[key] = max(self.numbered.get(key, 0), number)  # type: ignore[arg-type]
            elif role == "scorer" and isinstance(body, (PromiseBody, BallotBody, AckBody)):
                placed = target(event)
                trees[placed].add(event, depth_on[placed])  # type: ignore[index]
                depth_on[placed] += 1  # type: ignore[index]
            elif isinstance(body, CandidateBody) and (body.node, body.round) not in named:
                first = (body.node, body.round)
                named.add(first)
                self.first_candidates.add(event.id)
            undo.append((counted, placed, first))
        if not trees:
            del self.scorer_chains[author]

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
        for event in events:
            self.by_id[event.id] = event
            self._group(event, append=False)
            self._next_on_chain(event)

    def _next_on_chain(self, event: Event) -> None:
        """Read the next event of an author whose feed is one chain: numbered, its scorer
        events grown, a candidate first for its round when its author named none before."""
        body, role = event.body, event.role
        if (role == "decomposer" and isinstance(body, ProposalBody)) or (
                role == "executor" and isinstance(body, ResultBody)):
            key = (event.author, target(event))
            number = self.numbered[key] = self.numbered.get(key, 0) + 1  # type: ignore[index]
            (self.draft_number if role == "decomposer" else self.result_number)[event.id] = number
        elif role == "scorer" and isinstance(body, (PromiseBody, BallotBody, AckBody)):
            self.scorer_chains[event.author][target(event)].grow(event)  # type: ignore[index]
        elif isinstance(body, CandidateBody) and (key := (event.author, body.node, body.round)) not in self._named:
            self._named.add(key)  # its author's one chain holds no other for this round
            self.first_candidates.add(event.id)

    def refeed(self, author: str, new: Iterable[Event], feeds: Feeds) -> None:
        """Add ``new``, events of an author whose feed is not one chain (forked, or cut at a
        broken link), now in its feed, and read the author's chains again from ``feeds``, a
        ``build_feeds`` of the author's events alone: a branch may have grown or appeared.
        Its events already here stay in its feed (an event's place in it depends on its own
        chain alone, which later events cannot change). ``numbered`` is set again too (the highest count on any chain);
        only ``extend``, for one-chain authors, reads it."""
        for event in new:
            self.by_id[event.id] = event
            self._group(event, append=False)
        self.scorer_chains.pop(author, None)
        self._along_chains(author, walk_feed(feeds, feeds.accepted))

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


def _in_feed_order(events: list[Event], event: Event) -> None:
    insort(events, event, key=feed_key)
