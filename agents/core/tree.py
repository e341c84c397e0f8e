"""The plan tree: what ``fold`` computes from an event set, and its digest.

Everything here is derived from the event set alone. The digest is the sha256
of a canonical encoding with an explicit field list (``_digest_record``): no
arrival times, no local counters, no member's own identity, so two members
holding the same events always print the same digest. Local facts (events
refused on receipt, events held back) are reported beside the digest, never in it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agents.core.canonical import canonical_bytes, sha256_hex
from agents.core.claims import ClaimView
from agents.core.clock import Timestamp, ts_list
from agents.core.feeds import FeedIssue

NodeStatus = Literal["open", "split", "ready", "claimed", "done"]
ProposalStatus = Literal["accepted", "draft", "superseded", "orphaned"]
DIGEST_VERSION = 1


@dataclass(frozen=True)
class Goal:
    id: str
    author: str
    text: str
    quorum: int
    max_depth: int
    claim_lease_ms: int
    at: Timestamp


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
    created_at: Timestamp
    status: NodeStatus
    split: str | None = None  # accepted proposal id
    children: tuple[str, ...] = ()
    claim: str | None = None  # claim that holds or won the leaf
    executor: str | None = None
    lease_until: Timestamp | None = None
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
    status: ProposalStatus
    approvals: tuple[str, ...]  # distinct scorers whose counted vote approves, sorted
    rejections: tuple[str, ...]
    quorum_at: Timestamp | None  # when the quorum-th approval was stamped


@dataclass(frozen=True)
class PlanTree:
    """The folded plan. Build it with ``agents.core.fold.fold``.

    ``nodes`` and ``proposals`` are keyed by id; ``roots`` are goal node ids in
    goal order. ``issues`` lists rule breaks found in the set (forks, role and
    clock cuts, ignored events), which are deterministic but kept out of the digest.
    """

    goals: tuple[Goal, ...]
    nodes: Mapping[str, Node]
    proposals: Mapping[str, Proposal]
    claims: Mapping[str, ClaimView]
    voters: Mapping[str, frozenset[str]]  # proposal id -> every scorer that voted on it
    events: int  # events folded
    pending: int  # events waiting for a gap in their author's feed to fill
    duplicate_results: int
    orphaned_results: int
    equivocators: frozenset[str]
    issues: tuple[FeedIssue, ...] = ()
    heads: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    members: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # author -> (role, models)
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


def _digest_record(tree: PlanTree) -> dict[str, Any]:
    return {
        "v": DIGEST_VERSION,
        "goals": [
            [g.id, g.author, g.text, g.quorum, g.max_depth, g.claim_lease_ms, ts_list(g.at)]
            for g in tree.goals
        ],
        "nodes": [
            [n.id, n.goal, n.parent, n.depth, n.title, n.description, n.leaf, ts_list(n.created_at),
             n.status, n.split, list(n.children), n.claim, n.executor, ts_list(n.lease_until),
             n.result, n.output]
            for n in sorted(tree.nodes.values(), key=lambda n: n.id)
        ],
        "proposals": [
            [p.id, p.node, p.author, p.strategy, list(p.subgoals), ts_list(p.at), p.status,
             list(p.approvals), list(p.rejections), ts_list(p.quorum_at)]
            for p in sorted(tree.proposals.values(), key=lambda p: p.id)
        ],
        "claims": [
            [c.id, c.leaf, c.executor, ts_list(c.at), c.status, ts_list(c.lease_until)]
            for c in sorted(tree.claims.values(), key=lambda c: c.id)
        ],
    }


def compute_digest(tree: PlanTree) -> str:
    return sha256_hex(canonical_bytes(_digest_record(tree), check=False))
