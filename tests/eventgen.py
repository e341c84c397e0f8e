"""Hypothesis strategies for adversarial event sets, shared by the property tests.

A "universe" is one goal with a roster of 1-5 scorers and a majority (or
stricter, BFT-style) quorum, decomposers drafting competing splits (sometimes
more than the three that count), and rounds on the root and on second-level
nodes: promises into later rounds, candidates named by the right coordinator
or by anybody, with a correct justification or a random one, ballots for
either, second ballots in one round and *late* ballots cast in an earlier
round after their scorer promised a later one (neither may count). Executors claim leaves in epochs, scorers
ack a favourite claim or any claim, and leaves run the same rounds over their
results. Up to ``f = 2q - n - 1`` scorers *equivocate*: they sign a second
branch at the same seq (a second ballot, candidate or ack), then go on signing
after any of their earlier events (their feeds become trees of long branches,
not one chain with stubs), which is what the quorum sizes must tolerate.

Every event is properly signed, admitted and chained: what is adversarial is
the behaviour, the competition and the forks. Nothing here reads the fold: the
generator keeps its own simplified bookkeeping, so it produces valid and
invalid justifications alike, and the fold has to tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from agents.core.events import (
    AckBody,
    BallotBody,
    CandidateBody,
    ClaimBody,
    Event,
    PromiseBody,
    ProposalBody,
    ResultBody,
    Subgoal,
)
from agents.core.fold import child_node_id
from tests.builders import Feed, goal


@dataclass
class Universe:
    events: list[Event]
    quorum: int
    roster: tuple[str, ...]
    equivocators: frozenset[str]
    tolerated: int  # f = 2q - n - 1
    feeds: dict[str, Feed] = field(default_factory=dict)  # every author, by peer id: to sign more

    @property
    def within_tolerance(self) -> bool:
        return len(self.equivocators) <= self.tolerated


@dataclass
class _World:
    draw: st.DrawFn
    scorers: list[Feed]
    roster: tuple[str, ...]
    quorum: int
    forkers: set[str]
    events: list[Event] = field(default_factory=list)
    clock: int = 100
    forked: set[str] = field(default_factory=set)
    last_approved: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)  # (scorer, node) -> (round, value)
    approvals: dict[tuple[str, str], int] = field(default_factory=dict)  # (node, value) -> most approvals in a round

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def emit(self, feed: Feed, body: object, alternative: object | None = None) -> Event:
        if feed.peer_id in self.forked and self.draw(st.integers(0, 4)) == 0:
            # an equivocator goes on along one of its branches: its feed is a tree, not a comb
            feed.go_on_after(self.draw(st.sampled_from([e for e in self.events if e.author == feed.peer_id])))
        event = feed.at(self.tick(), body)
        self.events.append(event)
        if alternative is not None and feed.peer_id in self.forkers and self.draw(st.integers(0, 2)) == 0:
            self.events.append(feed.fork(self.tick(), alternative))
            self.forked.add(feed.peer_id)
        return event

    def coordinator(self, node: str, round_: int) -> Feed:
        peer = self.roster[(int(node[:8], 16) + round_ - 1) % len(self.roster)]
        return next(s for s in self.scorers if s.peer_id == peer)


def _drafts(w: _World, decomposers: list[Feed], node: str, tag: str) -> list[Event]:
    drafts = []
    for dec in decomposers:
        for attempt in range(w.draw(st.integers(0, 4))):  # four is one past the cap
            subs = tuple(Subgoal(title=f"{tag} {node[:4]} {attempt} {i} {dec.peer_id[-4:]}",
                                 executable=w.draw(st.booleans())) for i in range(w.draw(st.integers(2, 3))))
            drafts.append(w.emit(dec, ProposalBody(node=node, strategy="s", subgoals=subs)))
    return drafts


def _rounds(w: _World, node: str, values: list[Event]) -> None:
    """Rounds on a node (values: drafts) or a leaf (values: results)."""
    if not values:
        return
    promises: dict[int, list[Event]] = {}
    named: list[tuple[int, Event, str]] = []
    skipped: dict[str, list[tuple[int, Event]]] = {}  # scorer -> rounds it did not ballot in
    for round_ in range(1, w.draw(st.integers(1, 4)) + 1):
        if round_ > 1:
            promises[round_] = []
            for scorer in w.scorers:
                if w.draw(st.integers(0, 3)) > 0:
                    promises[round_].append(w.emit(scorer, PromiseBody(node=node, round=round_)))
        style = w.draw(st.sampled_from(["paxos", "paxos", "paxos", "any", "wrong-author", "none"]))
        if style == "none":
            continue
        coordinator = w.coordinator(node, round_)
        if style == "wrong-author":
            coordinator = w.draw(st.sampled_from(w.scorers))
        cited = tuple(p.id for p in promises.get(round_, ()))
        value = w.draw(st.sampled_from(values)).id
        if style == "paxos" and round_ > 1:
            # a coordinator cites the promises it has: often all, sometimes only a quorum of them
            mine = list(promises[round_])
            if len(mine) > w.quorum and w.draw(st.booleans()):
                mine = w.draw(st.lists(st.sampled_from(mine), unique=True, min_size=w.quorum, max_size=w.quorum))
            cited = tuple(p.id for p in mine)
            reports = [w.last_approved[(p.author, node)] for p in mine if (p.author, node) in w.last_approved]
            if reports:
                value = max(reports)[1]
        elif style == "any" and cited:
            cited = tuple(w.draw(st.lists(st.sampled_from(cited), unique=True)))
        other = w.draw(st.sampled_from(values)).id
        candidate = w.emit(coordinator, CandidateBody(node=node, round=round_, value=value, promises=cited),
                           CandidateBody(node=node, round=round_, value=other, promises=cited))
        named.append((round_, candidate, value))
        approving = 0
        for scorer in w.scorers:
            if w.draw(st.integers(0, 7)) == 0:
                skipped.setdefault(scorer.peer_id, []).append((round_, candidate))
                continue
            # first rounds fail more often, so later rounds and their carried-over values get exercised
            approve = w.draw(st.integers(0, 7)) > (2 if round_ == 1 else 0)
            w.emit(scorer, BallotBody(node=node, round=round_, candidate=candidate.id, approve=approve),
                   BallotBody(node=node, round=round_, candidate=candidate.id, approve=not approve))
            if w.draw(st.integers(0, 7)) == 0:  # a second ballot in the same round (must not count)
                w.emit(scorer, BallotBody(node=node, round=round_, candidate=candidate.id, approve=not approve))
            if approve:
                approving += 1
                w.last_approved[(scorer.peer_id, node)] = (round_, value)
        key = (node, value)
        w.approvals[key] = max(w.approvals.get(key, 0), approving)
    # late ballots: a scorer that moved on ballots in a round it skipped (they must not count)
    for scorer in w.scorers:
        missed = skipped.get(scorer.peer_id, [])
        if missed and w.draw(st.integers(0, 1)) == 0:
            round_, candidate = w.draw(st.sampled_from(missed))
            w.emit(scorer, BallotBody(node=node, round=round_, candidate=candidate.id, approve=True))


def _leaves(w: _World, executors: list[Feed], leaves: list[str]) -> None:
    """Claims on a few leaves in epochs 1-2: most scorers ack one favourite claim per epoch
    (the rest ack anything), the claimants answer, and the leaf's rounds run over the results."""
    by_author = {e.peer_id: e for e in executors}
    for leaf in leaves[: w.draw(st.integers(1, 4))]:
        results: list[Event] = []
        for epoch in range(1, w.draw(st.integers(1, 2)) + 1):
            claims = [w.emit(exe, ClaimBody(leaf=leaf, epoch=epoch))
                      for exe in executors if w.draw(st.integers(0, 2)) > 0]
            if not claims:
                continue
            favourite = w.draw(st.sampled_from(claims))
            for scorer in w.scorers:
                if w.draw(st.integers(0, 7)) == 0:
                    continue
                claim = favourite if w.draw(st.integers(0, 7)) > 0 else w.draw(st.sampled_from(claims))
                other = w.draw(st.sampled_from(claims))
                w.emit(scorer, AckBody(leaf=leaf, claim=claim.id, epoch=epoch),
                       AckBody(leaf=leaf, claim=other.id, epoch=epoch))
                if w.draw(st.integers(0, 3)) == 0:  # a second ack in the same epoch (must not count)
                    w.emit(scorer, AckBody(leaf=leaf, claim=other.id, epoch=epoch))
            for claim in claims:
                if claim is favourite or w.draw(st.integers(0, 2)) == 0:
                    results.append(w.emit(by_author[claim.author], ResultBody(
                        leaf=leaf, claim=claim.id, output=f"did {leaf[:6]} {claim.id[:4]}")))
        _rounds(w, leaf, results)


def _children(draft: Event) -> list[tuple[str, bool]]:
    """(child id, executable) of a draft's subgoals."""
    return [(child_node_id(draft.id, i), sub.executable)
            for i, sub in enumerate(draft.body.subgoals)]  # type: ignore[union-attr]


@st.composite
def universes(draw: st.DrawFn, max_scorers: int = 5) -> Universe:
    tag = draw(st.integers(0, 10**6))
    n = draw(st.integers(1, max_scorers))
    quorum = draw(st.sampled_from([n // 2 + 1, n // 2 + 1, n]))  # majorities mostly, sometimes all
    tolerated = 2 * quorum - n - 1
    scorers = [Feed(f"{tag}/s{i}", "scorer") for i in range(n)]
    roster = tuple(sorted(s.peer_id for s in scorers))
    forkers = set(draw(st.lists(st.sampled_from(roster), unique=True, max_size=tolerated)))
    w = _World(draw, scorers, roster, quorum, forkers)
    client = Feed(f"{tag}/client", "client")
    decomposers = [Feed(f"{tag}/d{i}", "decomposer") for i in range(draw(st.integers(1, 3)))]
    executors = [Feed(f"{tag}/e{i}", "executor") for i in range(draw(st.integers(1, 3)))]
    root = w.emit(client, goal(f"goal {tag}", list(roster), quorum, max_depth=2))
    level1 = _drafts(w, decomposers, root.id, "a")
    _rounds(w, root.id, level1)
    leaves = []
    # the children of the splits most likely accepted first: leaves nobody can reach prove little
    likely = sorted(level1, key=lambda d: -w.approvals.get((root.id, d.id), 0))
    for draft in likely[:2]:
        for child, executable in _children(draft):
            if executable:
                leaves.append(child)
            elif draw(st.integers(0, 2)) == 0:
                drafts = _drafts(w, decomposers[:1], child, "b")
                _rounds(w, child, drafts)
                best = sorted(drafts, key=lambda d: -w.approvals.get((child, d.id), 0))[:1]
                leaves += [c for d in best for c, _ in _children(d)]
    _leaves(w, executors, leaves)
    feeds = {f.peer_id: f for f in (client, *scorers, *decomposers, *executors)}
    return Universe(w.events, quorum, roster, frozenset(w.forked), tolerated, feeds)
