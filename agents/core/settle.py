"""Settling one node of the plan: its rounds, its proposals or its leaf's claims and results.

A node's outcome reads only the events on it (``agents.core.index``) and the roster of its
goal; ``held`` is looked up for the events its candidates, promises and certificates cite,
which a hostile set may place on other nodes. ``agents.core.livefold`` settles a node again
when an event on it arrives, or one it looked up and did not hold; ``fold`` settles every node
once. What a node puts into the tree comes back as a ``Settled``, so that it can be taken out
again when the node is settled anew.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from agents.core import claims as leaf_rules
from agents.core import rounds as round_rules
from agents.core.canonical import sha256_hex
from agents.core.clock import Timestamp
from agents.core.events import AckBody, Event, ProposalBody, ResultBody
from agents.core.feeds import FeedIssue
from agents.core.index import FoldIndex
from agents.core.tree import ClaimView, Goal, Node, PromiseView, Proposal, ResultView, RoundView

MAX_DRAFTS = 3  # an author's proposals per node that count as drafts


def child_node_id(proposal_id: str, index: int) -> str:
    """The id of the ``index``-th subgoal of a proposal: stable, and the same everywhere."""
    return sha256_hex(f"node/{proposal_id}/{index}".encode())


def root_node(goal: Goal) -> Node:
    return Node(goal.id, goal.id, None, 0, goal.text, "", False, "open")


@dataclass
class Settled:
    """What settling one node put into the tree."""

    node: Node  # settled, before the roll-up marks a split node done
    children: tuple[Node, ...] = ()  # its accepted split's subgoals, not settled yet
    proposals: dict[str, Proposal] = field(default_factory=dict)
    rounds: dict[tuple[str, int], RoundView] = field(default_factory=dict)
    entered: dict[str, int] = field(default_factory=dict)
    promises: dict[tuple[str, int], tuple[PromiseView, ...]] = field(default_factory=dict)
    certificates: dict[tuple[str, int, str], tuple[tuple[str, str], ...]] = field(default_factory=dict)
    claims: dict[str, ClaimView] = field(default_factory=dict)
    results: dict[str, ResultView] = field(default_factory=dict)
    acked: dict[tuple[str, str], int] = field(default_factory=dict)
    breaches: list[FeedIssue] = field(default_factory=list)  # in the order ``fold`` finds them
    duplicates: int = 0  # results on a leaf that were not accepted


def settle_node(goal: Goal, node: Node, index: FoldIndex, held: Mapping[str, Event]) -> Settled:
    """Settle ``node`` (as its parent made it: open, or ready for a leaf) of ``goal``."""
    settled = Settled(node)
    if node.leaf:
        leaf = leaf_rules.settle(node.id, goal.quorum, index.claims.get(node.id, ()),
                                 index.results.get(node.id, ()), index.chains(node.id, goal.scorers),
                                 index.followups, index.result_number)
        outcome = _run_rounds(goal, node.id, leaf.eligible, index, held, settled)
        _settle_leaf(settled, leaf, outcome, index)
        return settled
    roster = frozenset(goal.scorers)
    mine = {p.id: p for p in index.proposals.get(node.id, ())}
    drafts: dict[str, bool | None] = {pid: index.draft_number.get(pid, 0) <= MAX_DRAFTS for pid in mine}
    outcome = _run_rounds(goal, node.id, drafts, index, held, settled)
    for pid, event in mine.items():
        settled.proposals[pid] = proposal_view(index, event, "draft" if drafts[pid] else "extra", roster)
    if outcome.accepted is None:
        return settled
    winner_id, round_, approvers = outcome.accepted
    settled.proposals[winner_id] = replace(settled.proposals[winner_id], status="accepted", ballots=approvers)
    winner = index.by_id[winner_id]
    assert isinstance(winner.body, ProposalBody)
    depth = node.depth + 1
    children = []
    for i, sub in enumerate(winner.body.subgoals):
        leaf = sub.executable or depth >= goal.max_depth
        children.append(Node(child_node_id(winner_id, i), goal.id, node.id, depth, sub.title, sub.description,
                             leaf, "ready" if leaf else "open"))
    settled.node = replace(node, status="split", split=winner_id, split_round=round_,
                           children=tuple(c.id for c in children))
    settled.children = tuple(children)
    return settled


def proposal_view(index: FoldIndex, event: Event, status: str, roster: frozenset[str]) -> Proposal:
    """A proposal as the tree shows it; ``waiting`` (on no node of the tree yet) counts no votes."""
    body = event.body
    assert isinstance(body, ProposalBody)
    votes = [v for s, v in index.votes.get(event.id, {}).items() if s in roster]
    return Proposal(
        event.id, body.node, event.author, body.strategy, tuple(s.title for s in body.subgoals), event.ts,
        status, index.draft_number.get(event.id, 0),  # type: ignore[arg-type]
        tuple(sorted(v.author for v in votes if v.body.approve)),  # type: ignore[union-attr]
        tuple(sorted(v.author for v in votes if not v.body.approve)),  # type: ignore[union-attr]
        sum(v.body.clarity + v.body.non_overlap + v.body.coverage for v in votes),  # type: ignore[union-attr]
    )


def _run_rounds(goal: Goal, node_id: str, values: dict[str, bool | None], index: FoldIndex,
                held: Mapping[str, Event], settled: Settled) -> round_rules.NodeRounds:
    """Settle one node's (or leaf's) rounds and record what the policies and the digest need."""
    roster = frozenset(goal.scorers)
    outcome = round_rules.settle(goal, node_id, values,
                                 [c for c in index.candidates.get(node_id, ()) if c.author in roster],
                                 index.first_candidates, index.chains(node_id, goal.scorers), held)
    for round_, view in outcome.rounds.items():
        settled.rounds[(node_id, round_)] = view
    settled.entered = outcome.entered
    for round_, views in outcome.promises.items():
        settled.promises[(node_id, round_)] = views
    for (round_, value), ids in outcome.certificates.items():
        settled.certificates[(node_id, round_, value)] = ids
    if outcome.breach:
        settled.breaches.append(FeedIssue("", 0, "breach", outcome.breach))
    return outcome


def _settle_leaf(settled: Settled, leaf: leaf_rules.LeafClaims, outcome: round_rules.NodeRounds,
                 index: FoldIndex) -> None:
    node = settled.node
    settled.claims.update(leaf.claims)
    for scorer in sorted(index.scorer_chains):  # not in the order authors came: a set has none
        mine = index.scorer_chains[scorer].get(node.id)
        epochs = [e.body.epoch for e in mine.events if isinstance(e.body, AckBody)] if mine else []
        if epochs:
            settled.acked[(node.id, scorer)] = max(epochs)
    if leaf.breach:
        settled.breaches.append(FeedIssue("", 0, "breach", leaf.breach))
    accepted = outcome.accepted[0] if outcome.accepted else None
    for event in index.results.get(node.id, ()):
        body = event.body
        assert isinstance(body, ResultBody)
        status = "accepted" if event.id == accepted else "waiting" if leaf.eligible.get(event.id) else "void"
        settled.results[event.id] = ResultView(
            event.id, node.id, body.claim, event.author, event.ts, status,  # type: ignore[arg-type]
            index.result_number.get(event.id, 0),
            outcome.accepted[2] if event.id == accepted and outcome.accepted else ())
    holder = leaf.holder
    if accepted is not None:
        result = index.by_id[accepted]
        assert isinstance(result.body, ResultBody)
        won = leaf.claims[result.body.claim]
        node = replace(node, status="done", result=result.id, output=result.body.output, claim=won.id,
                       executor=won.executor, epoch=won.epoch, split_round=outcome.accepted[1])  # type: ignore[index]
    elif holder is not None:
        node = replace(node, status="claimed", claim=holder.id, executor=holder.executor, epoch=holder.epoch,
                       heartbeat=leaf.heartbeat, holder_failed=leaf.holder_failed)
    settled.node = node
    settled.duplicates = sum(1 for r in index.results.get(node.id, ()) if r.id != accepted)


class Watched(Mapping[str, Event]):
    """The held events, as ``settle_node`` looks them up for one node: the ids it looked up
    and did not find are noted in ``missed`` (their arrival must settle the node again)."""

    __slots__ = ("_held", "missed")

    def __init__(self, held: Mapping[str, Event], missed: set[str]) -> None:
        self._held, self.missed = held, missed

    def __getitem__(self, key: str) -> Event:
        try:
            return self._held[key]
        except KeyError:
            self.missed.add(key)
            raise

    def get(self, key: str, default: Event | None = None) -> Event | None:  # type: ignore[override]
        found = self._held.get(key)
        if found is None:
            self.missed.add(key)
            return default
        return found

    def __contains__(self, key: object) -> bool:
        if key in self._held:
            return True
        self.missed.add(key)  # type: ignore[arg-type]
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)


_ACTS = {"promise": "round", "candidate": "round", "ballot": "round", "ack": "epoch", "claim": "epoch"}


def record_act(acts: dict[tuple[str, str], dict[tuple[str, int], Timestamp]], event: Event,
               copy: bool = False) -> None:
    """What a scorer or executor did where (the policies' memory): its first promise, candidate
    or ballot per round, ack or claim per epoch. ``copy``: replace the author's entry with an
    updated copy (a tree handed out before keeps the one it has)."""
    # read from the body's fields, not getattr with a default: a field a pydantic model
    # lacks takes its slow path (a raised AttributeError), and this runs once per event
    fields = event.body.__dict__
    kind = fields["kind"]
    act = _ACTS.get(kind)
    if act is None:
        return
    where = (fields.get("node") or fields["leaf"], event.author)
    key = (kind, fields[act])
    mine = acts.get(where)
    earliest = mine.get(key) if mine is not None else None
    if earliest is None or event.hlc < earliest:  # a Timestamp compares as the pair it is
        if mine is None:
            mine = acts[where] = {}
        elif copy:
            mine = acts[where] = dict(mine)
        mine[key] = event.ts
