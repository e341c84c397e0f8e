"""``fold``: the one function that turns an event set into the plan.

    Same event set, any arrival order, any duplicates: same tree, same digest.

That is the invariant the whole swarm rests on, and ``tests/agents/test_fold_properties.py``
guards it. To keep it, ``fold`` looks only at the events: never at a clock, a
random source, the member calling it, or the order it was handed the events in.
Every choice below is a minimum over a total order of the events.

Acceptance. For each node, a scorer's *counted* vote on a proposal is its
earliest one (by timestamp, then id): voting twice, or again after a restart,
never counts twice. A proposal reaches quorum when ``quorum`` distinct scorers'
counted votes approve it; its *quorum time* is the timestamp of the quorum-th
approval. Among the proposals for a node, the one with the earliest quorum time
(ties by id) is accepted; others that reached quorum are *superseded*, the rest
stay *draft*. A vote stamped later can still land with an earlier timestamp
(it was stuck behind a partition) and move the quorum time of another proposal
before the winner's: the winner changes, and the subtree built under the old
winner is orphaned. That is a reorganisation; members count them by comparing
successive folds (``agents.core.reorgs``), the fold itself cannot see time pass.

Causality. A proposal counts only if stamped after its node was created (the
quorum time of the split that made it); a vote only if stamped after its
proposal; a claim only if after its leaf was created. Nobody can act on a node
before it existed, so a back-dated event cannot jump the queue.

Leaves. A subgoal is a leaf when its proposer marked it executable or it sits at
the goal's ``max_depth``. Claims on a leaf are decided by
``agents.core.claims.arbitrate``. A leaf is done when it has an accepted result,
an inner node when every child of its accepted split is done, the plan when
every goal's root is done.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from agents.core.canonical import sha256_hex
from agents.core.claims import ClaimView, arbitrate
from agents.core.clock import Timestamp
from agents.core.events import (
    ClaimBody,
    Event,
    FailureBody,
    GoalBody,
    ProposalBody,
    RenewBody,
    ResultBody,
    VoteBody,
)
from agents.core.feeds import build_feeds
from agents.core.tree import Goal, Node, PlanTree, Proposal, compute_digest


def child_node_id(proposal_id: str, index: int) -> str:
    """The id of the ``index``-th subgoal of a proposal: stable, and the same everywhere."""
    return sha256_hex(f"node/{proposal_id}/{index}".encode())


class _Index:
    """The accepted events grouped by what they refer to."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.goals: list[Event] = []
        self.proposals: dict[str, list[Event]] = defaultdict(list)  # node -> proposals
        self.proposal_by_id: dict[str, Event] = {}
        self.votes: dict[str, dict[str, Event]] = defaultdict(dict)  # proposal -> scorer -> vote
        self.voters: dict[str, set[str]] = defaultdict(set)
        self.claims: dict[str, list[Event]] = defaultdict(list)  # leaf -> claims
        self.followups: dict[str, list[Event]] = defaultdict(list)  # claim -> renew/result/failure
        for event in events:
            body = event.body
            if isinstance(body, GoalBody):
                self.goals.append(event)
            elif isinstance(body, ProposalBody):
                self.proposals[body.node].append(event)
                self.proposal_by_id[event.id] = event
            elif isinstance(body, VoteBody):
                self.voters[body.proposal].add(event.author)
                counted = self.votes[body.proposal].get(event.author)
                if counted is None or event.order_key < counted.order_key:
                    self.votes[body.proposal][event.author] = event
            elif isinstance(body, ClaimBody):
                self.claims[body.leaf].append(event)
            elif isinstance(body, (RenewBody, ResultBody, FailureBody)):
                self.followups[body.claim].append(event)
        self.goals.sort(key=lambda e: e.order_key)


def _quorum_time(
    proposal: Event, votes: dict[str, Event], quorum: int
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, int, str, str] | None]:
    approving: list[Event] = []
    rejecting: list[str] = []
    for vote in votes.values():
        if not vote.ts > proposal.ts:
            continue  # a vote cannot predate what it votes on
        assert isinstance(vote.body, VoteBody)
        if vote.body.approve:
            approving.append(vote)
        else:
            rejecting.append(vote.author)
    approving.sort(key=lambda v: v.order_key)
    reached = approving[quorum - 1].order_key if len(approving) >= quorum else None
    return tuple(sorted(v.author for v in approving)), tuple(sorted(rejecting)), reached


def fold(events: Iterable[Event]) -> PlanTree:
    """Fold an event set into the plan tree. Pure and order-independent: see the module doc."""
    feeds = build_feeds(events)
    index = _Index(feeds.accepted)
    nodes: dict[str, Node] = {}
    proposals: dict[str, Proposal] = {}
    claims: dict[str, ClaimView] = {}
    duplicate_results = 0
    goals: list[Goal] = []

    for goal_event in index.goals:
        body = goal_event.body
        assert isinstance(body, GoalBody)
        goal = Goal(goal_event.id, goal_event.author, body.text, body.quorum, body.max_depth,
                    body.claim_lease_ms, goal_event.ts)
        goals.append(goal)
        root = Node(goal.id, goal.id, None, 0, body.text, "", False, goal.at, "open")
        stack = [root]
        while stack:
            node = stack.pop()
            if node.leaf:
                outcome = arbitrate(node.id, node.created_at, goal.claim_lease_ms,
                                    index.claims.get(node.id, ()), index.followups)
                duplicate_results += outcome.duplicate_results
                for view in outcome.claims:
                    claims[view.id] = view
                if outcome.result is not None:
                    assert isinstance(outcome.result.body, ResultBody)
                    node = replace(node, status="done", result=outcome.result.id,
                                   output=outcome.result.body.output)
                elif outcome.holder is not None:
                    node = replace(node, status="claimed")
                else:
                    node = replace(node, status="ready")
                if outcome.holder is not None or outcome.result is not None:
                    holder = outcome.holder
                    assert holder is not None
                    node = replace(node, claim=holder.id, executor=holder.executor,
                                   lease_until=holder.lease_until)
                nodes[node.id] = node
                continue

            best: tuple[tuple[int, int, str, str], str] | None = None
            for proposal in index.proposals.get(node.id, ()):
                assert isinstance(proposal.body, ProposalBody)
                approvals, rejections, reached = _quorum_time(
                    proposal, index.votes.get(proposal.id, {}), goal.quorum
                )
                timely = proposal.ts > node.created_at
                proposals[proposal.id] = Proposal(
                    proposal.id, node.id, proposal.author, proposal.body.strategy,
                    tuple(s.title for s in proposal.body.subgoals), proposal.ts,
                    "draft" if timely else "orphaned", approvals, rejections,
                    Timestamp(reached[0], reached[1]) if reached and timely else None,
                )
                if timely and reached is not None and (best is None or (reached, proposal.id) < best):
                    best = (reached, proposal.id)
            if best is None:
                nodes[node.id] = node
                continue
            winner_id = best[1]
            for proposal in index.proposals[node.id]:
                view = proposals[proposal.id]
                if view.quorum_at is not None:
                    status = "accepted" if proposal.id == winner_id else "superseded"
                    proposals[proposal.id] = replace(view, status=status)
            winner = index.proposal_by_id[winner_id]
            assert isinstance(winner.body, ProposalBody)
            created = Timestamp(best[0][0], best[0][1])
            children = []
            for i, sub in enumerate(winner.body.subgoals):
                depth = node.depth + 1
                child = Node(child_node_id(winner_id, i), goal.id, node.id, depth, sub.title,
                             sub.description, sub.executable or depth >= goal.max_depth,
                             created, "open")
                children.append(child)
            nodes[node.id] = replace(node, status="split", split=winner_id,
                                     children=tuple(c.id for c in children))
            stack.extend(reversed(children))

    # Proposals whose node is not in the tree (orphaned by a reorganisation, or
    # aimed at a node that never existed) stay visible as orphaned.
    for node_id, events_for_node in index.proposals.items():
        if node_id in nodes:
            continue
        for proposal in events_for_node:
            assert isinstance(proposal.body, ProposalBody)
            approvals, rejections, _ = _quorum_time(proposal, index.votes.get(proposal.id, {}), 1)
            proposals[proposal.id] = Proposal(
                proposal.id, node_id, proposal.author, proposal.body.strategy,
                tuple(s.title for s in proposal.body.subgoals), proposal.ts, "orphaned",
                approvals, rejections, None,
            )
    orphaned_results = sum(
        1
        for claim_events in index.claims.values()
        for claim in claim_events
        if claim.id not in claims
        for e in index.followups.get(claim.id, ())
        if isinstance(e.body, ResultBody)
    )

    nodes = _roll_up(nodes, goals)
    tree = PlanTree(
        goals=tuple(goals),
        nodes=nodes,
        proposals=proposals,
        claims=claims,
        voters={p: frozenset(v) for p, v in index.voters.items()},
        events=len(feeds.accepted),
        pending=len(feeds.pending),
        duplicate_results=duplicate_results,
        orphaned_results=orphaned_results,
        equivocators=feeds.equivocators,
        issues=feeds.issues,
        heads=feeds.heads,
        members=_members(feeds.accepted),
    )
    return replace(tree, digest=compute_digest(tree))


def _members(events: Iterable[Event]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each author's role and the models its events say it thought with."""
    roles: dict[str, str] = {}
    models: dict[str, set[str]] = defaultdict(set)
    for event in events:
        roles[event.author] = event.role
        model = getattr(event.body, "model", "")
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
