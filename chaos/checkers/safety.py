"""Quorum and claim safety, recounted from the events rather than taken from the fold."""

from __future__ import annotations

from collections import Counter, defaultdict

from agents.core.clock import Timestamp
from agents.core.events import Event, FailureBody, RenewBody, ResultBody, VoteBody
from chaos.checkers.verdict import Verdict, short
from chaos.history import History, MemberHistory


def _counted_approvals(proposal: Event, events: list[Event]) -> list[Event]:
    """The approving counted votes on ``proposal``: each scorer's earliest vote after it."""
    earliest: dict[str, Event] = {}
    for event in events:
        body = event.body
        if (isinstance(body, VoteBody) and body.proposal == proposal.id and event.role == "scorer"
                and event.ts > proposal.ts):
            held = earliest.get(event.author)
            if held is None or event.order_key < held.order_key:
                earliest[event.author] = event
    return sorted((v for v in earliest.values() if v.body.approve), key=lambda v: v.order_key)  # type: ignore[union-attr]


def quorum_safety(history: History) -> Verdict:
    """No member accepted a split without ``quorum`` distinct scorers approving it, nor one
    that reached its quorum after a rival proposal on the same node reached its own."""
    checked = 0
    for member in history.live():
        tree = member.tree()
        proposals_on: dict[str, list[Event]] = defaultdict(list)
        for event in member.events:
            if event.kind == "proposal":
                proposals_on[event.body.node].append(event)  # type: ignore[union-attr]
        for accepted in tree.proposals.values():
            if accepted.status != "accepted":
                continue
            checked += 1
            node = tree.nodes[accepted.node]
            quorum = tree.goal_of(node).quorum
            reached: dict[str, tuple] = {}
            for rival in proposals_on[node.id]:
                approvals = _counted_approvals(rival, member.events)
                if rival.ts > node.created_at and len(approvals) >= quorum:
                    reached[rival.id] = (approvals[quorum - 1].order_key, rival.id)
                if rival.id == accepted.id and len(approvals) < quorum:
                    return Verdict("quorum_safety", "fail",
                                   f"{member.name} accepted proposal {accepted.id[:8]} on node {node.id[:8]} "
                                   f"with {len(approvals)} distinct scorer approval(s) "
                                   f"({', '.join(short(v.author) for v in approvals) or 'none'}); quorum is {quorum}")
            first = min(reached.values())[1]
            if first != accepted.id:
                return Verdict("quorum_safety", "fail",
                               f"{member.name} accepted proposal {accepted.id[:8]} on node {node.id[:8]}, but "
                               f"proposal {first[:8]} reached its quorum of {quorum} first "
                               f"(at {reached[first][0][:2]} against {reached[accepted.id][0][:2]})")
    return Verdict("quorum_safety", "pass",
                   f"{checked} accepted split(s) across live members, each the first on its node to "
                   "reach a quorum of distinct scorers")


def _lease_end(claim: Event, lease_ms: int, followups: list[Event]) -> Timestamp | None:
    """When ``claim``'s lease ended, replayed from its author's own renewals and failure.
    None when it produced a result in time (it won: nobody may take the leaf after it)."""
    end = claim.ts.plus_ms(lease_ms)
    for event in sorted(followups, key=lambda e: e.order_key):
        if not event.ts < end:
            break
        if isinstance(event.body, RenewBody):
            end = max(end, event.ts.plus_ms(lease_ms))
        elif isinstance(event.body, FailureBody):
            return event.ts
        elif isinstance(event.body, ResultBody):
            return None
    return end


def _holders(claims: list[Event], created_at: Timestamp, lease_ms: int,
             followups: dict[str, list[Event]]) -> list[tuple[Event, Timestamp | None]]:
    """The claims that held the leaf, in order, each with its lease end (None: it won).
    A claim holds when no earlier holder's lease covers it; otherwise it lost the race."""
    holders: list[tuple[Event, Timestamp | None]] = []
    for claim in sorted((c for c in claims if c.ts > created_at), key=lambda c: c.order_key):
        if any(end is None or claim.ts < end for _, end in holders):
            continue
        own = [e for e in followups[claim.id] if e.author == claim.author]
        holders.append((claim, _lease_end(claim, lease_ms, own)))
    return holders


def claim_safety(history: History) -> Verdict:
    """Never two accepted results for a leaf; the accepted one came from a claim that held
    the leaf by the rule (no earlier live lease), within its lease. Duplicates are counted."""
    accepted_by_leaf: dict[str, set[str]] = defaultdict(set)
    checked = 0
    for member in history.live():
        tree = member.tree()
        by_id = {e.id: e for e in member.events}
        followups: dict[str, list[Event]] = defaultdict(list)
        claims_on: dict[str, list[Event]] = defaultdict(list)
        for event in member.events:
            body = event.body
            if event.kind == "claim":
                claims_on[body.leaf].append(event)  # type: ignore[union-attr]
            elif event.kind in ("renew", "result", "failure"):
                followups[body.claim].append(event)  # type: ignore[union-attr]
        for node in tree.nodes.values():
            if not node.leaf or node.result is None:
                continue
            checked += 1
            accepted_by_leaf[node.id].add(node.result)
            lease_ms = tree.goal_of(node).claim_lease_ms
            claim, result = by_id.get(node.claim or ""), by_id[node.result]

            def fail(why: str, member: MemberHistory = member, leaf: str = node.id) -> Verdict:
                return Verdict("claim_safety", "fail", f"{member.name}, leaf {leaf[:8]}: {why}")

            if claim is None or result.author != claim.author or result.body.claim != claim.id:  # type: ignore[union-attr]
                return fail(f"accepted result {result.id[:8]} is not by the holder of claim {str(node.claim)[:8]}")
            if not claim.ts > node.created_at:
                return fail(f"claim {claim.id[:8]} predates the leaf")
            own = [e for e in followups[claim.id] if e.author == claim.author]
            end = _lease_end(claim, lease_ms, [e for e in own if e.id != result.id])
            if end is not None and not result.ts < end:
                return fail(f"result {result.id[:8]} at {result.ts} came after the lease ended at {end}")
            holders = _holders(claims_on[node.id], node.created_at, lease_ms, followups)
            if claim.id not in [h.id for h, _ in holders]:
                blocker, until = next(
                    (h, end) for h, end in holders
                    if h.order_key < claim.order_key and (end is None or claim.ts < end)
                )
                return fail(f"claim {claim.id[:8]} by {short(claim.author)} at {claim.ts} won while "
                            f"claim {blocker.id[:8]} by {short(blocker.author)} at {blocker.ts} held the "
                            f"leaf (until {until or 'its result'})")
    split = {leaf: ids for leaf, ids in accepted_by_leaf.items() if len(ids) > 1}
    if split:
        leaf, ids = min(split.items())
        return Verdict("claim_safety", "fail",
                       f"leaf {leaf[:8]} has {len(ids)} different accepted results across members: "
                       + ", ".join(sorted(i[:8] for i in ids)))
    union = {e.id: e for m in history.members.values() for e in m.events}
    results = Counter(e.body.leaf for e in union.values() if isinstance(e.body, ResultBody))
    duplicates = sum(n - 1 for n in results.values())
    return Verdict("claim_safety", "pass",
                   f"{checked} accepted result(s) checked across live members, one per leaf; "
                   f"{duplicates} duplicate execution(s) (results that could not count)")


