"""A reference model of the decision rules, written from PROTOCOL.md alone.

The fold (``agents.core.fold``) is what the lab checks, so the checkers must
not share its code: a rule the fold gets wrong would pass a checker that asks
the fold. This model imports nothing from ``agents.core`` but the event types
(decoding), and is built differently on purpose: the fold walks each author's
chains once, carrying state; this model asks, for every event, questions about
the events *earlier on its own chain* by walking ``prev`` pointers. It is slow
(quadratic in a feed's length), which the lab's event counts afford.

``Model(events)`` answers: which events are in their feeds, which proposal each
inner node accepted (sections 4-5), which claim holds each leaf and which result
its rounds accepted (sections 6-7), the tree's nodes, and whether the plan is
complete. A second accepted value for one node (impossible with at most
``2q - n - 1`` equivocating scorers) is reported as a breach.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from agents.core.events import Event

VALID, INVALID, UNKNOWN = "valid", "invalid", "unknown"
DRAFTS_PER_AUTHOR = 3
RESULTS_PER_AUTHOR = 3


@dataclass
class ModelNode:
    id: str
    goal: str
    depth: int
    leaf: bool
    children: tuple[str, ...] = ()
    split: str | None = None
    holder: str | None = None
    result: str | None = None
    done: bool = False


@dataclass
class GoalRules:
    id: str
    roster: tuple[str, ...]
    quorum: int
    max_depth: int


@dataclass
class Model:
    events: Iterable[Event]
    nodes: dict[str, ModelNode] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.all = {e.id: e for e in self.events}
        self.feed = {i: e for i, e in self.all.items() if self._in_feed(e)}
        self.ancestors_cache: dict[str, list[Event]] = {}
        self.judged: dict[tuple[str, str, str, int], tuple[str, str]] = {}
        self._values: dict[tuple[str, str], object] = {}
        self._rules_of: dict[tuple[str, str], GoalRules] = {}
        self._acks_of: dict[str, set[str]] = {}
        self._leaf_rules: dict[str, GoalRules] = {}
        self._build()

    # --- feeds (section 3) ----------------------------------------------------

    def _in_feed(self, event: Event) -> bool:
        current = event
        while current.seq != 1:
            before = self.all.get(current.prev or "")
            if before is None or before.author != current.author or before.seq != current.seq - 1:
                return False
            if before.role != current.role or not tuple(before.hlc) < tuple(current.hlc):
                return False
            current = before
        return current.prev is None

    def earlier(self, event: Event) -> list[Event]:
        """The events earlier on ``event``'s own chain, oldest first."""
        cached = self.ancestors_cache.get(event.id)
        if cached is None:
            chain = []
            current = event
            while current.prev is not None:
                current = self.feed[current.prev]
                chain.append(current)
            cached = self.ancestors_cache[event.id] = list(reversed(chain))
        return cached

    def equivocators(self) -> set[str]:
        """Authors with two events at one seq (an event citing a predecessor not held proves
        nothing yet: the one it cites may be at another seq, a broken link)."""
        seen: dict[tuple[str, int], set[str]] = defaultdict(set)
        for event in self.all.values():
            seen[(event.author, event.seq)].add(event.id)
        return {author for (author, _), ids in seen.items() if len(ids) > 1}

    # --- the tree (sections 4-7) ----------------------------------------------

    def _of(self, kind: str) -> list[Event]:
        return [e for e in self.feed.values() if e.body.kind == kind]

    def _build(self) -> None:
        goals = sorted(self._of("goal"), key=lambda e: (tuple(e.hlc), e.author, e.id))
        self.proposals = self._of("proposal")
        self.candidates = self._of("candidate")
        self.ballots = self._of("ballot")
        self.promises = self._of("promise")
        self.claims = self._of("claim")
        self.acks = self._of("ack")
        self.results = self._of("result")
        for goal_event in goals:
            body = goal_event.body
            rules = GoalRules(goal_event.id, tuple(sorted(body.scorers)), body.quorum, body.max_depth)  # type: ignore[union-attr]
            queue = [ModelNode(goal_event.id, goal_event.id, 0, False)]
            while queue:
                node = queue.pop(0)
                if node.id in self.nodes:
                    continue
                self.nodes[node.id] = node
                if node.leaf:
                    self._settle_leaf(rules, node)
                    continue
                node.split = self._accepted(rules, node.id, lambda e, n=node.id: VALID if self._is_draft(e, n)
                                            else INVALID)
                if node.split is None:
                    continue
                subgoals = self.feed[node.split].body.subgoals  # type: ignore[union-attr]
                kids = []
                for i, sub in enumerate(subgoals):
                    child = hashlib.sha256(f"node/{node.split}/{i}".encode()).hexdigest()
                    depth = node.depth + 1
                    kids.append(child)
                    queue.append(ModelNode(child, rules.id, depth, sub.executable or depth >= rules.max_depth))
                node.children = tuple(kids)
        for goal_event in goals:
            self._done(goal_event.id)

    def _done(self, node_id: str) -> bool:
        node = self.nodes[node_id]
        if node.leaf:
            node.done = node.result is not None
        else:
            node.done = node.split is not None and all([self._done(c) for c in node.children])
        return node.done

    @property
    def complete(self) -> bool:
        roots = [e.id for e in self._of("goal")]
        return bool(roots) and all(self.nodes[r].done for r in roots)

    # --- splits (section 5) ---------------------------------------------------

    def _is_draft(self, proposal: Event, node: str) -> bool:
        if proposal.body.kind != "proposal" or proposal.body.node != node:  # type: ignore[union-attr]
            return False
        before = sum(1 for e in self.earlier(proposal)
                     if e.body.kind == "proposal" and e.body.node == node)  # type: ignore[union-attr]
        return before < DRAFTS_PER_AUTHOR

    def _entered_before(self, event: Event, node: str) -> int:
        rounds = [e.body.round for e in self.earlier(event)  # type: ignore[union-attr]
                  if e.body.kind in ("promise", "ballot") and e.body.node == node]  # type: ignore[union-attr]
        return max([1, *rounds])

    def _counted_promise(self, event: Event, node: str, round_: int) -> bool:
        body = event.body
        return (body.kind == "promise" and body.node == node and body.round == round_  # type: ignore[union-attr]
                and round_ > self._entered_before(event, node))

    def _round_ballot(self, event: Event) -> bool:
        body = event.body
        if body.kind != "ballot":
            return False
        node, round_ = body.node, body.round  # type: ignore[union-attr]
        if any(e.body.kind == "ballot" and e.body.node == node and e.body.round == round_  # type: ignore[union-attr]
               for e in self.earlier(event)):
            return False
        return round_ >= self._entered_before(event, node)

    def _coordinator(self, rules: GoalRules, node: str, round_: int) -> str:
        return rules.roster[(int(node[:8], 16) + round_ - 1) % len(rules.roster)]

    def _report(self, rules: GoalRules, promise: Event) -> tuple[str, tuple[int, str] | None]:
        node = promise.body.node  # type: ignore[union-attr]
        best: tuple[int, str] | None = None
        for earlier in self.earlier(promise):
            body = earlier.body
            if body.kind != "ballot" or body.node != node or not body.approve or not self._round_ballot(earlier):  # type: ignore[union-attr]
                continue
            verdict, proposal = self._candidate(rules, body.candidate, node, body.round)  # type: ignore[union-attr]
            if verdict == UNKNOWN:
                return UNKNOWN, None
            if verdict == VALID and (best is None or body.round > best[0]):  # type: ignore[union-attr]
                best = (body.round, proposal)  # type: ignore[union-attr]
        return VALID, best

    def _candidate(self, rules: GoalRules, candidate_id: str, node: str, round_: int) -> tuple[str, str]:
        """(validity, proposal) of a candidate named for (node, round), judged once."""
        key = (rules.id, candidate_id, node, round_)
        if key not in self.judged:
            self.judged[key] = (UNKNOWN, "")  # a justification that cycles back here stays unknown
            self.judged[key] = self._judge(rules, candidate_id, node, round_)
        return self.judged[key]

    def _judge(self, rules: GoalRules, candidate_id: str, node: str, round_: int) -> tuple[str, str]:
        event = self.feed.get(candidate_id)
        if event is None:
            return UNKNOWN, ""
        body = event.body
        if body.kind != "candidate" or body.node != node or body.round != round_:  # type: ignore[union-attr]
            return INVALID, ""
        if event.author not in rules.roster or event.author != self._coordinator(rules, node, round_):
            return INVALID, ""
        if any(e.body.kind == "candidate" and e.body.node == node and e.body.round == round_  # type: ignore[union-attr]
               for e in self.earlier(event)):
            return INVALID, ""  # a coordinator's second candidate in one round, on one chain
        named = self.feed.get(body.value)  # type: ignore[union-attr]
        if named is None:
            return UNKNOWN, ""
        eligible = self._values[(rules.id, node)](named)
        if eligible != VALID:
            return eligible, ""
        value = named.id
        if round_ == 1:
            return (VALID if not body.promises and not body.certificate else INVALID), value  # type: ignore[union-attr]
        ids = list(body.promises)  # type: ignore[union-attr]
        if len(ids) != len(set(ids)) or len(ids) < rules.quorum:
            return INVALID, value
        scorers: set[str] = set()
        reports: list[tuple[int, str]] = []
        unknown = False
        for promise_id in ids:
            promise = self.feed.get(promise_id)
            if promise is None:
                unknown = True
                continue
            if promise.author not in rules.roster or not self._counted_promise(promise, node, round_):
                return INVALID, value
            if promise.author in scorers:
                return INVALID, value
            scorers.add(promise.author)
        if unknown:
            return UNKNOWN, value
        for promise_id in ids:
            verdict, best = self._report(rules, self.feed[promise_id])
            if verdict == UNKNOWN:
                return UNKNOWN, value
            if best is not None:
                reports.append(best)
        if not reports:
            return VALID, value
        top = max(r for r, _ in reports)
        carried = {p for r, p in reports if r == top}
        if value not in carried:
            return INVALID, value
        if len(carried) == 1:
            return VALID, value
        cert = list(body.certificate)  # type: ignore[union-attr]
        if len(cert) != len(set(cert)):
            return INVALID, value
        certifiers = set()
        for ballot_id in cert:
            ballot = self.feed.get(ballot_id)
            if ballot is None:
                return UNKNOWN, value
            if (ballot.author not in rules.roster or not self._round_ballot(ballot)
                    or ballot.body.node != node or ballot.body.round != top):  # type: ignore[union-attr]
                return INVALID, value
            verdict, proposal_id = self._candidate(rules, ballot.body.candidate, node, top)  # type: ignore[union-attr]
            if verdict != VALID:
                return verdict, value
            if proposal_id != value:
                return INVALID, value
            certifiers.add(ballot.author)
        return (VALID if len(certifiers) >= rules.quorum else INVALID), value

    def ungranted_results(self) -> list[tuple[Event, int, int]]:
        """Results on leaves of the tree whose claim no quorum granted: (result, acks, quorum)."""
        out = []
        for result in self.results:
            leaf = self.nodes.get(result.body.leaf)  # type: ignore[union-attr]
            if leaf is None or not leaf.leaf:
                continue
            rules = self._leaf_rules[leaf.id]
            acks = self._acks_of.get(result.body.claim, set())  # type: ignore[union-attr]
            if len(acks) < rules.quorum:
                out.append((result, len(acks), rules.quorum))
        return out

    def tally(self, node: str, round_: int) -> tuple[str | None, set[str], set[str]]:
        """(value, approving scorers, rejecting scorers) of a round, as the fold's round view shows
        it: the valid candidate with the lowest id, and the counted ballots naming its value."""
        rules = next((r for (g, n), r in self._rules_of.items() if n == node), None)
        if rules is None:
            return None, set(), set()
        valid = sorted(c.id for c in self.candidates if c.body.node == node and c.body.round == round_  # type: ignore[union-attr]
                       and self._candidate(rules, c.id, node, round_)[0] == VALID)
        if not valid:
            return None, set(), set()
        value = self._candidate(rules, valid[0], node, round_)[1]
        yes, no = set(), set()
        for ballot in self.ballots:
            body = ballot.body
            if (body.node != node or body.round != round_ or ballot.author not in rules.roster  # type: ignore[union-attr]
                    or not self._round_ballot(ballot)):
                continue
            verdict, named = self._candidate(rules, body.candidate, node, round_)  # type: ignore[union-attr]
            if verdict == VALID and named == value:
                (yes if body.approve else no).add(ballot.author)  # type: ignore[union-attr]
        return value, yes, no

    def _accepted(self, rules: GoalRules, node: str, eligible) -> str | None:
        """The value a quorum's ballots accepted in one round; ``eligible(event)`` says whether an
        event may be named on this node (VALID, INVALID, or UNKNOWN while it may still become so)."""
        self._values[(rules.id, node)] = eligible
        self._rules_of[(rules.id, node)] = rules
        approvals: dict[tuple[int, str], set[str]] = defaultdict(set)
        for ballot in self.ballots:
            body = ballot.body
            if body.node != node or not body.approve or ballot.author not in rules.roster:  # type: ignore[union-attr]
                continue
            if not self._round_ballot(ballot):
                continue
            verdict, proposal = self._candidate(rules, body.candidate, node, body.round)  # type: ignore[union-attr]
            if verdict == VALID:
                approvals[(body.round, proposal)].add(ballot.author)  # type: ignore[union-attr]
        accepted = sorted(k for k, who in approvals.items() if len(who) >= rules.quorum)
        if len({p for _, p in accepted}) > 1:
            self.breaches.append(f"{'leaf' if self.nodes[node].leaf else 'node'} {node[:8]} accepted "
                                 f"{len({p for _, p in accepted})} values: "
                                 + ", ".join(sorted({p[:8] for _, p in accepted})))
        return accepted[0][1] if accepted else None

    # --- leaves (sections 6-7) --------------------------------------------------

    def _first_on_chain(self, event: Event, same) -> bool:
        return not any(same(e) for e in self.earlier(event))

    def _settle_leaf(self, rules: GoalRules, node: ModelNode) -> None:
        leaf = node.id
        claims = {c.id: c for c in self.claims if c.body.leaf == leaf}  # type: ignore[union-attr]
        ackers: dict[str, set[str]] = defaultdict(set)
        for ack in self.acks:
            body = ack.body
            if body.leaf != leaf or ack.author not in rules.roster:  # type: ignore[union-attr]
                continue
            if not self._first_on_chain(ack, lambda e, b=body: e.body.kind == "ack" and e.body.leaf == b.leaf
                                        and e.body.epoch == b.epoch):  # type: ignore[union-attr]
                continue
            claim = claims.get(body.claim)  # type: ignore[union-attr]
            if claim is not None and claim.body.epoch == body.epoch:  # type: ignore[union-attr]
                ackers[claim.id].add(ack.author)
        granted = {cid for cid, who in ackers.items() if len(who) >= rules.quorum}
        self._acks_of.update(ackers)
        self._leaf_rules[leaf] = rules
        per_epoch: dict[int, list[str]] = defaultdict(list)
        for cid in granted:
            per_epoch[claims[cid].body.epoch].append(cid)  # type: ignore[union-attr]
        if any(len(v) > 1 for v in per_epoch.values()):
            self.breaches.append(f"leaf {leaf[:8]} granted two claims in one epoch")
        if per_epoch:
            node.holder = min(per_epoch[max(per_epoch)])

        def eligible(result: Event) -> str:
            body = result.body
            if body.kind != "result" or body.leaf != leaf:  # type: ignore[union-attr]
                return INVALID
            earlier = sum(1 for e in self.earlier(result) if e.body.kind == "result" and e.body.leaf == leaf)  # type: ignore[union-attr]
            if earlier >= RESULTS_PER_AUTHOR:
                return INVALID
            claim = claims.get(body.claim)  # type: ignore[union-attr]
            if claim is None:
                return UNKNOWN
            if claim.author != result.author:
                return INVALID
            return VALID if claim.id in granted else UNKNOWN

        node.result = self._accepted(rules, leaf, eligible)
