"""The plan tree: what ``fold`` computes from an event set, and its digest.

Everything here is derived from the event set alone. The digest is the sha256
of a canonical encoding with an explicit field list (``node_record``, ``digest_of``): no
arrival times, no local counters, no member's own identity, so two members
holding the same events always print the same digest. Local facts (events
refused on receipt, events held back) are reported beside the digest, never in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Literal, TypeVar

import orjson

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


K = TypeVar("K")
V = TypeVar("V")


class SortedMap(Mapping[K, V]):
    """A read-only map whose keys iterate in sorted order: a set's order, never the order of
    the events that made it (``LiveFold`` adds entries as they come). Lookups are a dict's;
    the sort happens at the first iteration, and most readers only look up."""

    __slots__ = ("_data", "_keys")

    def __init__(self, data: dict[K, V]) -> None:
        self._data = data
        self._keys: list[K] | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def get(self, key: K, default=None):  # type: ignore[override]  # a dict's speed, not Mapping's
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[K]:
        if self._keys is None:
            self._keys = sorted(self._data)  # type: ignore[type-var]
        return iter(self._keys)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SortedMap):
            return self._data == other._data
        return self._data == other if isinstance(other, dict) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SortedMap({self._data!r})"


def _no_digest() -> str:
    return ""


@dataclass(frozen=True, eq=False)
class PlanTree:
    """The folded plan. Build it with ``agents.core.fold.fold``.

    ``nodes``, ``proposals``, ``claims`` and ``results`` are keyed by id; ``rounds``
    by (node or leaf, round); ``entered`` maps node or leaf -> scorer -> the highest
    round it entered. ``acked`` maps (leaf, scorer) -> the highest epoch it acked.
    ``issues`` lists rule breaks found in the set (forks, role and clock cuts, safety
    breaches), kept out of the digest. ``nodes`` lists the nodes in the order ``fold``
    walks them (each goal depth first); the other maps are ``SortedMap``s, whose keys
    iterate sorted: nothing a reader iterates depends on the order events came in.

    ``digest`` is hashed when first read, from what ``hash_digest`` was given: a member folds a
    tree per batch it takes, and hashing every event id held for each was most of what a
    gossiped event cost at 100k events (40 of 47 ms), for a digest read only when the plan
    turns complete (or incomplete), when a tree is shown (``swarm plan``, ``observe``), and by
    an observer's web view, at most once per tree and four times a second. Until then the tree
    keeps what it hashes (at 100k events, 24 MB of node records a ``LiveFold`` holds anyway).
    Two trees are equal when their fields and digests are.
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
    hash_digest: Callable[[], str] = field(default=_no_digest, compare=False, repr=False)

    @cached_property
    def digest(self) -> str:
        digest = self.hash_digest()
        object.__setattr__(self, "hash_digest", _no_digest)  # what it hashed is not needed again
        return digest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlanTree):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.compare) and (
            self.digest == other.digest)

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


def node_record(node: Node) -> bytes:
    """A node's part of the digest (PROTOCOL.md, section 10), encoded: its shape and decisions."""
    return canonical_bytes([node.id, node.goal, node.parent, node.depth, node.title, node.description, node.leaf,
                            node.split, node.split_round, list(node.children), node.claim, node.epoch,
                            node.result, node.status == "done"], check=False)


def events_hash(counted_ids: Iterable[str], presorted: bool = False) -> str:
    """Which events count: the hash of their ids in order."""
    ordered = counted_ids if presorted else sorted(counted_ids)
    return sha256_hex("".join(ordered).encode("ascii"))


def digest_of(counted: str, goal_ids: Iterable[str], node_records: Iterable[bytes]) -> bytes:
    """The canonical bytes the digest hashes: ``counted`` from ``events_hash``, every goal, and
    every node's ``node_record`` in the order of their ids (kept encoded by ``LiveFold``, which
    re-encodes only the nodes that changed)."""
    nodes = orjson.Fragment(b"[" + b",".join(node_records) + b"]")
    return canonical_bytes({"v": DIGEST_VERSION, "events": counted, "goals": sorted(goal_ids), "nodes": nodes},
                           check=False)


def compute_digest(tree: PlanTree, counted_ids: Iterable[str]) -> str:
    """The digest (PROTOCOL.md, section 10): which events count, and every decision. Derived
    views a member may compute differently without disagreeing on anything (scores,
    heartbeats, tallies of a round still open) stay out, so another implementation can
    reproduce it from the protocol alone."""
    records = [node_record(n) for n in sorted(tree.nodes.values(), key=lambda n: n.id)]
    return sha256_hex(digest_of(events_hash(counted_ids), (g.id for g in tree.goals), records))
