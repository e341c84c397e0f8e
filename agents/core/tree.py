"""The plan tree: what ``fold`` computes from an event set, and its digest.

Everything here is derived from the event set alone. The digest is the sha256
of a canonical encoding with an explicit field list (``digest_record``): no
arrival times, no local counters, no member's own identity, so two members
holding the same events always print the same digest. Local facts (events
refused on receipt, events held back) are reported beside the digest, never in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.core.canonical import canonical_bytes, sha256_hex
from agents.core.clock import Timestamp
from agents.core.feeds import FeedIssue

NodeStatus = Literal["open", "split", "ready", "claimed", "done"]
ProposalStatus = Literal["accepted", "draft", "extra", "waiting"]
DIGEST_VERSION = 3


@dataclass(frozen=True)
class Goal:
    id: str
    author: str
    text: str
    scorers: tuple[str, ...]  # the roster, sorted
    quorum: int
    max_depth: int
    claim_lease_ms: int
    hold_limit_ms: int
    round_ms: int
    at: Timestamp

    def coordinator(self, node: str, round_: int) -> str:
        """Who names the candidate of ``round_`` on ``node`` (PROTOCOL.md, section 5)."""
        return self.scorers[(int(node[:8], 16) + round_ - 1) % len(self.scorers)]

    @property
    def tolerated_equivocators(self) -> int:
        return 2 * self.quorum - len(self.scorers) - 1


@dataclass(frozen=True)
class Node:
    """A goal or subgoal. Leaves are executed; other nodes are split by an accepted proposal."""

    id: str
    goal: str
    parent: str | None
    depth: int
    title: str
    description: str
    leaf: bool
    status: NodeStatus
    split: str | None = None  # accepted proposal id
    split_round: int | None = None  # the round whose ballots accepted it
    children: tuple[str, ...] = ()
    claim: str | None = None  # the holder: granted claim with the highest epoch
    executor: str | None = None
    epoch: int = 0  # the holder's epoch
    heartbeat: Timestamp | None = None  # the holder's latest claim or renewal
    holder_failed: bool = False  # the holder published a failure
    result: str | None = None  # accepted result event id
    output: str | None = None


@dataclass(frozen=True)
class Proposal:
    id: str
    node: str
    author: str
    strategy: str
    subgoals: tuple[str, ...]
    at: Timestamp
    status: ProposalStatus  # accepted; draft; extra (past its author's draft cap); waiting (no such node yet)
    draft_number: int  # 1, 2, 3 among its author's proposals on the node
    approvals: tuple[str, ...]  # roster scorers whose vote (assessment) approves, sorted
    rejections: tuple[str, ...]
    score: int  # sum over the roster's votes of clarity + non_overlap + coverage
    ballots: tuple[str, ...] = ()  # for the accepted one: the scorers whose ballots accepted it


@dataclass(frozen=True)
class RoundView:
    """One round of one node: its valid candidate and the counted ballots on it."""

    node: str
    round: int
    coordinator: str
    candidate: str | None  # the valid candidate event, if any
    value: str | None  # what it names: a proposal (inner node) or a result (leaf)
    forced: bool  # the proposal was carried over from an earlier round's ballots
    approvals: tuple[str, ...]
    rejections: tuple[str, ...]
    promised: tuple[str, ...]  # scorers whose counted promise entered this round


@dataclass(frozen=True)
class PromiseView:
    """A counted promise and what it reports: the scorer's last approved proposal and its round."""

    id: str
    scorer: str
    round: int
    report_round: int | None
    report_value: str | None
    determined: bool  # False while a candidate its report depends on is not held yet


@dataclass(frozen=True)
class ClaimView:
    id: str
    leaf: str
    executor: str
    epoch: int
    at: Timestamp
    acks: tuple[str, ...]  # roster scorers whose counted ack names it
    granted: bool


@dataclass(frozen=True)
class ResultView:
    id: str
    leaf: str
    claim: str
    executor: str
    at: Timestamp
    status: Literal["accepted", "waiting", "void"]  # waiting: may be accepted; void: not (yet) eligible
    number: int  # among its author's results on the leaf
    ballots: tuple[str, ...] = ()  # for the accepted one: the scorers whose ballots accepted it


@dataclass(frozen=True)
class PlanTree:
    """The folded plan. Build it with ``agents.core.fold.fold``.

    ``nodes``, ``proposals``, ``claims`` and ``results`` are keyed by id; ``rounds``
    by (node or leaf, round); ``entered`` maps node or leaf -> scorer -> the highest
    round it entered. ``acked`` maps (leaf, scorer) -> the highest epoch it acked.
    ``issues`` lists rule breaks found in the set (forks, role and clock cuts, safety
    breaches), kept out of the digest.
    """

    goals: tuple[Goal, ...]
    nodes: Mapping[str, Node]
    proposals: Mapping[str, Proposal]
    rounds: Mapping[tuple[str, int], RoundView]
    entered: Mapping[str, Mapping[str, int]]
    claims: Mapping[str, ClaimView]
    results: Mapping[str, ResultView]
    voters: Mapping[str, frozenset[str]]  # proposal id -> every scorer that voted on it
    acked: Mapping[tuple[str, str], int]
    events: int  # events folded
    pending: int  # events waiting for a gap in their author's feed to fill
    duplicate_results: int  # results that were not accepted (wasted work)
    equivocators: frozenset[str]
    issues: tuple[FeedIssue, ...] = ()
    heads: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    members: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # author -> (role, models)
    ignored: int = 0  # events by scorers on no goal's roster: they count for nothing
    promises: Mapping[tuple[str, int], tuple[PromiseView, ...]] = field(default_factory=dict)
    # (node, round, value) -> (ballot id, scorer) of counted ballots on valid candidates naming it
    certificates: Mapping[tuple[str, int, str], tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # (node or leaf, author) -> (kind, round or epoch) -> timestamp of its first such event: what it did
    acts: Mapping[tuple[str, str], Mapping[tuple[str, int], Timestamp]] = field(default_factory=dict)
    digest: str = ""

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(g.id for g in self.goals)

    @property
    def complete(self) -> bool:
        """True when there is a goal and every goal's tree is done."""
        return bool(self.goals) and all(self.nodes[g.id].status == "done" for g in self.goals)

    def goal_of(self, node: Node) -> Goal:
        return next(g for g in self.goals if g.id == node.goal)

    def walk(self, root: str | None = None) -> Iterator[Node]:
        """Depth-first, children in proposal order: the order the tree is printed in."""
        stack = [root] if root is not None else list(reversed(self.roots))
        while stack:
            node = self.nodes[stack.pop()]
            yield node
            stack.extend(reversed(node.children))

    def leaves(self) -> list[Node]:
        return [n for n in self.walk() if n.leaf]

    def drafts(self, node_id: str) -> list[Proposal]:
        return sorted((p for p in self.proposals.values() if p.node == node_id and p.status == "draft"),
                      key=lambda p: (p.draft_number, p.author, p.id))

    def eligible_results(self, leaf_id: str) -> list[ResultView]:
        """Results a leaf's rounds may accept, the holder's latest epoch first."""
        epochs = {c.id: c.epoch for c in self.claims.values() if c.leaf == leaf_id}
        return sorted((r for r in self.results.values() if r.leaf == leaf_id and r.status == "waiting"),
                      key=lambda r: (-epochs.get(r.claim, 0), r.number, r.id))

    def claims_on(self, leaf_id: str) -> list[ClaimView]:
        return sorted((c for c in self.claims.values() if c.leaf == leaf_id), key=lambda c: (c.epoch, c.id))


def digest_record(tree: PlanTree, counted_ids: Iterable[str]) -> dict[str, Any]:
    """What the digest covers (PROTOCOL.md, section 10): which events count, and every decision.

    ``counted_ids`` are the ids of the events in their feeds (section 3). Derived views a
    member may compute differently without disagreeing on anything (scores, heartbeats,
    tallies of a round still open) stay out, so another implementation can reproduce it
    from the protocol alone."""
    return {
        "v": DIGEST_VERSION,
        "events": sha256_hex("".join(sorted(counted_ids)).encode("ascii")),
        "goals": sorted(g.id for g in tree.goals),
        "nodes": [
            [n.id, n.goal, n.parent, n.depth, n.title, n.description, n.leaf, n.split, n.split_round,
             list(n.children), n.claim, n.epoch, n.result, n.status == "done"]
            for n in sorted(tree.nodes.values(), key=lambda n: n.id)
        ],
    }


def compute_digest(tree: PlanTree, counted_ids: Iterable[str]) -> str:
    return sha256_hex(canonical_bytes(digest_record(tree, counted_ids), check=False))
