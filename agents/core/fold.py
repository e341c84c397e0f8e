"""``fold``: the one function that turns an event set into the plan (PROTOCOL.md, sections 3-7).

    Same event set, any arrival order, any duplicates: same tree, same digest.
    And every decision it shows is final: a superset of the events shows the
    same accepted splits and results, and possibly more.

``tests/agents/test_fold_properties.py`` guards both, over adversarial event
sets and every prefix of random delivery orders. To keep them, ``fold`` looks
only at the events: never at a clock, a random source, the member calling it,
or the order it was handed the events in; and no rule depends on timestamps
(which a late event could undercut). Acceptance is "has a quorum", which more
events cannot take away:

* **feeds** (``agents.core.feeds``): only events whose author's chain is
  complete count; forks are evidence, and both branches stay;
* **splits** (``agents.core.rounds``): a node's proposal is accepted when a
  quorum of the goal's roster ballots for it in one round; rounds carry over
  what an earlier round may have accepted;
* **claims and results** (``agents.core.claims``): a claim is granted by a
  quorum of acks; a result is accepted by a quorum of accepts.

A subgoal is a leaf when its proposer marked it executable or it sits at the
goal's ``max_depth``. A leaf is done when it has an accepted result, an inner
node when every child of its accepted split is done, the plan when every
goal's root is done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from agents.core import claims as leaf_rules
from agents.core import rounds as round_rules
from agents.core.canonical import sha256_hex
from agents.core.clock import Timestamp
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
from agents.core.feeds import FeedIssue, build_feeds, chain_order
from agents.core.tree import (
    ClaimView,
    Goal,
    Node,
    PlanTree,
    Proposal,
    ResultView,
    RoundView,
    compute_digest,
)

MAX_DRAFTS = 3  # an author's proposals per node that count as drafts


def child_node_id(proposal_id: str, index: int) -> str:
    """The id of the ``index``-th subgoal of a proposal: stable, and the same everywhere."""
    return sha256_hex(f"node/{proposal_id}/{index}".encode())


class _Index:
    """The events in their feeds, grouped by what they refer to; scorers' events along their chains."""

    def __init__(self, feeds) -> None:
        self.by_id: dict[str, Event] = {e.id: e for e in feeds.accepted}
        self.goals: list[Event] = []
        self.proposals: dict[str, list[Event]] = defaultdict(list)  # node -> proposals
        self.draft_number: dict[str, int] = {}  # proposal -> its number among its author's on the node
        self.result_number: dict[str, int] = {}  # result -> its number among its author's on the leaf
        self.votes: dict[str, dict[str, Event]] = defaultdict(dict)  # proposal -> scorer -> vote
        self.voters: dict[str, set[str]] = defaultdict(set)
        self.candidates: dict[str, list[Event]] = defaultdict(list)  # node -> candidates
        self.claims: dict[str, list[Event]] = defaultdict(list)  # leaf -> claims
        self.results: dict[str, list[Event]] = defaultdict(list)  # leaf -> results
        self.followups: dict[str, list[Event]] = defaultdict(list)  # claim -> renew/failure
        # scorer -> node or leaf -> one list per chain of its promises, ballots, acks, accepts there
        self.scorer_chains: dict[str, dict[str, list[list[Event]]]] = defaultdict(lambda: defaultdict(list))
        by_author: dict[str, list[Event]] = defaultdict(list)
        for event in feeds.accepted:
            by_author[event.author].append(event)
            body = event.body
            if isinstance(body, GoalBody):
                self.goals.append(event)
            elif isinstance(body, ProposalBody):
                self.proposals[body.node].append(event)
            elif isinstance(body, VoteBody):
                self.voters[body.proposal].add(event.author)
                counted = self.votes[body.proposal].get(event.author)
                if counted is None or event.order_key < counted.order_key:
                    self.votes[body.proposal][event.author] = event
            elif isinstance(body, CandidateBody):
                self.candidates[body.node].append(event)
            elif isinstance(body, ClaimBody):
                self.claims[body.leaf].append(event)
            elif isinstance(body, ResultBody):
                self.results[body.leaf].append(event)
            elif isinstance(body, (RenewBody, FailureBody)):
                self.followups[body.claim].append(event)
        self.goals.sort(key=lambda e: e.order_key)
        for author, events in by_author.items():
            for chain in chain_order(feeds, events):
                role = chain[0].role  # one role per chain (a role change cuts it); not per author
                if role == "decomposer":
                    self._number(chain, ProposalBody, self.draft_number)
                elif role == "executor":
                    self._number(chain, ResultBody, self.result_number)
                elif role == "scorer":
                    per_target: dict[str, list[Event]] = defaultdict(list)
                    for event in chain:
                        body = event.body
                        if isinstance(body, (PromiseBody, BallotBody)):
                            per_target[body.node].append(event)
                        elif isinstance(body, AckBody):
                            per_target[body.leaf].append(event)
                    for target, mine in per_target.items():
                        self.scorer_chains[author][target].append(mine)

    @staticmethod
    def _number(chain: list[Event], kind: type, numbers: dict[str, int]) -> None:
        """Number an author's proposals per node (or results per leaf) along its chain."""
        count: dict[str, int] = defaultdict(int)
        for event in chain:
            if isinstance(event.body, kind):
                target = getattr(event.body, "node", None) or event.body.leaf  # type: ignore[attr-defined]
                count[target] += 1
                numbers[event.id] = count[target]

    def chains(self, target: str, roster: tuple[str, ...]) -> dict[str, list[list[Event]]]:
        return {s: self.scorer_chains[s][target] for s in roster if target in self.scorer_chains.get(s, {})}


def _proposal_view(index: _Index, event: Event, status: str, roster: frozenset[str]) -> Proposal:
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


def fold(events: Iterable[Event]) -> PlanTree:
    """Fold an event set into the plan tree. Pure and order-independent: see the module doc."""
    feeds = build_feeds(events)
    index = _Index(feeds)
    nodes: dict[str, Node] = {}
    proposals: dict[str, Proposal] = {}
    rounds: dict[tuple[str, int], RoundView] = {}
    entered: dict[str, dict[str, int]] = {}
    claims: dict[str, ClaimView] = {}
    results: dict[str, ResultView] = {}
    acked: dict[tuple[str, str], int] = {}
    promises: dict[tuple[str, int], tuple] = {}
    certificates: dict[tuple[str, int, str], tuple[tuple[str, str], ...]] = {}
    issues: list[FeedIssue] = list(feeds.issues)
    duplicate_results = 0
    goals: list[Goal] = []

    for goal_event in index.goals:
        body = goal_event.body
        assert isinstance(body, GoalBody)
        goal = Goal(goal_event.id, goal_event.author, body.text, body.scorers, body.quorum, body.max_depth,
                    body.claim_lease_ms, body.hold_limit_ms, body.round_ms, goal_event.ts)
        goals.append(goal)
        roster = frozenset(goal.scorers)
        stack = [Node(goal.id, goal.id, None, 0, body.text, "", False, "open")]
        while stack:
            node = stack.pop()
            if node.id in nodes:
                continue  # two goals cannot share a node, but a hostile set may try
            if node.leaf:
                leaf = leaf_rules.settle(node.id, goal.quorum, index.claims.get(node.id, ()),
                                         index.results.get(node.id, ()), index.chains(node.id, goal.scorers),
                                         index.followups, index.result_number)
                outcome = _run_rounds(goal, node.id, leaf.eligible, index, rounds, entered, promises,
                                      certificates, issues)
                node, duplicates = _settle_leaf(node, leaf, outcome, index, claims, results, acked, issues)
                duplicate_results += duplicates
                nodes[node.id] = node
                continue
            held = {p.id: p for p in index.proposals.get(node.id, ())}
            drafts: dict[str, bool | None] = {pid: index.draft_number.get(pid, 0) <= MAX_DRAFTS for pid in held}
            outcome = _run_rounds(goal, node.id, drafts, index, rounds, entered, promises, certificates, issues)
            for pid, event in held.items():
                proposals[pid] = _proposal_view(index, event, "draft" if drafts[pid] else "extra", roster)
            if outcome.accepted is None:
                nodes[node.id] = node
                continue
            winner_id, round_, approvers = outcome.accepted
            proposals[winner_id] = replace(proposals[winner_id], status="accepted", ballots=approvers)
            winner = index.by_id[winner_id]
            assert isinstance(winner.body, ProposalBody)
            children = []
            for i, sub in enumerate(winner.body.subgoals):
                depth = node.depth + 1
                leaf = sub.executable or depth >= goal.max_depth
                children.append(Node(child_node_id(winner_id, i), goal.id, node.id, depth, sub.title,
                                     sub.description, leaf, "ready" if leaf else "open"))
            nodes[node.id] = replace(node, status="split", split=winner_id, split_round=round_,
                                     children=tuple(c.id for c in children))
            stack.extend(reversed(children))

    # Proposals on nodes that do not exist (yet): they wait, visible.
    for node_id, waiting in index.proposals.items():
        if node_id in nodes:
            continue
        for event in waiting:
            proposals[event.id] = _proposal_view(index, event, "waiting", frozenset())

    nodes = _roll_up(nodes, goals)
    tree = PlanTree(
        goals=tuple(goals),
        nodes=nodes,
        proposals=proposals,
        rounds=rounds,
        entered=entered,
        claims=claims,
        results=results,
        voters={p: frozenset(v) for p, v in index.voters.items()},
        acked=acked,
        events=len(feeds.accepted),
        pending=len(feeds.pending),
        duplicate_results=duplicate_results,
        equivocators=feeds.equivocators,
        issues=tuple(issues),
        heads=feeds.heads,
        members=_members(feeds.accepted),
        promises=promises,
        certificates=certificates,
        acts=_acts(feeds.accepted),
        ignored=_ignored(feeds.accepted, goals),
    )
    return replace(tree, digest=compute_digest(tree, (e.id for e in feeds.accepted)))


_ACTS = {"promise": "round", "candidate": "round", "ballot": "round", "ack": "epoch", "claim": "epoch"}


def _acts(events: Iterable[Event]) -> dict[tuple[str, str], dict[tuple[str, int], Timestamp]]:
    """What each scorer and executor did where: the policies' memory, read from the set."""
    acts: dict[tuple[str, str], dict[tuple[str, int], Timestamp]] = defaultdict(dict)
    for event in events:
        # read from the body's fields, not getattr with a default: a field a pydantic model
        # lacks takes its slow path (a raised AttributeError), and this runs once per event
        fields = event.body.__dict__
        kind = fields["kind"]
        act = _ACTS.get(kind)
        if act is None:
            continue
        target = fields.get("node") or fields["leaf"]
        key = (kind, fields[act])
        mine = acts[(target, event.author)]
        earliest = mine.get(key)
        if earliest is None or event.hlc < earliest:  # a Timestamp compares as the pair it is
            mine[key] = event.ts
    return dict(acts)


def _run_rounds(goal: Goal, node_id: str, values: dict[str, bool | None], index: _Index,
                rounds: dict, entered: dict, promises: dict, certificates: dict,
                issues: list[FeedIssue]) -> round_rules.NodeRounds:
    """Settle one node's (or leaf's) rounds and record what the policies and the digest need."""
    roster = frozenset(goal.scorers)
    outcome = round_rules.settle(goal, node_id, values,
                                 [c for c in index.candidates.get(node_id, ()) if c.author in roster],
                                 index.chains(node_id, goal.scorers), index.by_id)
    for round_, view in outcome.rounds.items():
        rounds[(node_id, round_)] = view
    entered[node_id] = outcome.entered
    for round_, views in outcome.promises.items():
        promises[(node_id, round_)] = views
    for (round_, value), ids in outcome.certificates.items():
        certificates[(node_id, round_, value)] = ids
    if outcome.breach:
        issues.append(FeedIssue("", 0, "breach", outcome.breach))
    return outcome


def _settle_leaf(node: Node, leaf: leaf_rules.LeafClaims, outcome: round_rules.NodeRounds, index: _Index,
                 claims: dict[str, ClaimView], results: dict[str, ResultView], acked: dict[tuple[str, str], int],
                 issues: list[FeedIssue]) -> tuple[Node, int]:
    claims.update(leaf.claims)
    for scorer, targets in index.scorer_chains.items():
        epochs = [e.body.epoch for chain in targets.get(node.id, ()) for e in chain if isinstance(e.body, AckBody)]
        if epochs:
            acked[(node.id, scorer)] = max(epochs)
    if leaf.breach:
        issues.append(FeedIssue("", 0, "breach", leaf.breach))
    accepted = outcome.accepted[0] if outcome.accepted else None
    for event in index.results.get(node.id, ()):
        body = event.body
        assert isinstance(body, ResultBody)
        status = "accepted" if event.id == accepted else "waiting" if leaf.eligible.get(event.id) else "void"
        results[event.id] = ResultView(event.id, node.id, body.claim, event.author, event.ts, status,  # type: ignore[arg-type]
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
    duplicates = sum(1 for r in index.results.get(node.id, ()) if r.id != accepted)
    return node, duplicates


def _ignored(events: Iterable[Event], goals: list[Goal]) -> int:
    """Scorers' events by authors no goal names as a scorer: counted, never decisive."""
    rostered = frozenset(scorer for goal in goals for scorer in goal.scorers)
    return sum(1 for e in events if e.role == "scorer" and e.author not in rostered)


def _members(events: Iterable[Event]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each author's role and the models its events say it thought with."""
    roles: dict[str, str] = {}
    models: dict[str, set[str]] = defaultdict(set)
    for event in events:
        roles[event.author] = event.role
        model = event.body.__dict__.get("model", "")  # as in _acts: no getattr default
        if model:
            models[event.author].add(model)
    return {a: (roles[a], tuple(sorted(models[a]))) for a in sorted(roles)}


def _roll_up(nodes: dict[str, Node], goals: list[Goal]) -> dict[str, Node]:
    """Mark split nodes done when all their children are done (post-order)."""

    def visit(node_id: str) -> bool:
        node = nodes[node_id]
        if node.leaf:
            return node.status == "done"
        if node.split is None:
            return False
        done = all([visit(c) for c in node.children])
        if done:
            nodes[node_id] = replace(node, status="done")
        return done

    for goal in goals:
        visit(goal.id)
    return nodes
