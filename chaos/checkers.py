"""Checkers: judge a recorded ``History`` against the swarm's guarantees.

Each checker reads the history only (never a live member) and returns a
``Verdict`` with evidence a person can follow. The safety checkers recount
from the events themselves rather than trusting the fold's own bookkeeping:
the fold is what they check, so they must not share its arithmetic. A bug
planted in the fold (one vote short of quorum, a later claim winning) is
caught here; ``tests/chaos/test_planted_bugs.py`` proves it.

Verdict statuses: ``pass``; ``fail`` (a guarantee broke); ``stall`` (the plan
did not complete, but the faults left too few members of some role, so the
guarantee did not promise it would).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from agents.core.clock import Timestamp
from agents.core.events import Event, FailureBody, GoalBody, RenewBody, ResultBody, VoteBody
from chaos.history import History, MemberHistory

Status = Literal["pass", "fail", "stall"]


@dataclass(frozen=True)
class Verdict:
    invariant: str
    status: Status
    evidence: str

    @property
    def passed(self) -> bool:
        return self.status != "fail"

    def to_json(self) -> dict[str, object]:
        return {"invariant": self.invariant, "passed": self.passed, "status": self.status,
                "evidence": self.evidence}


def _short(peer_or_id: str) -> str:
    return peer_or_id[-8:] if peer_or_id.startswith(("12D", "Qm")) else peer_or_id[:8]


def _reference_digest(members: Iterable[MemberHistory]) -> str | None:
    counts = Counter(m.digest for m in members)
    return min(counts, key=lambda d: (-counts[d], d)) if counts else None


def convergence(history: History) -> Verdict:
    """Every live member holds the same plan digest, within the bound after the last fault."""
    live = history.live()
    if not live:
        return Verdict("convergence", "fail", "no member was alive at the end")
    digests = Counter(m.digest for m in live)
    if len(digests) > 1:
        groups = "; ".join(
            f"{d[:12]}: {', '.join(sorted(m.name for m in live if m.digest == d))}" for d in sorted(digests)
        )
        return Verdict("convergence", "fail",
                       f"{len(live)} live members ended with {len(digests)} digests ({groups}) "
                       f"at t={history.ended_at:.1f}s, {history.ended_at - history.last_fault_at:.1f}s "
                       "after the last fault")
    agreed = max((at for at, name, _ in history.samples if history.members[name].alive), default=0.0)
    settle = max(0.0, agreed - history.last_fault_at)
    evidence = (f"all {len(live)} live members at digest {next(iter(digests))[:12]} since t={agreed:.1f}s, "
                f"{settle:.1f}s after the last fault (bound {history.convergence_bound_s:.0f}s)")
    status: Status = "pass" if settle <= history.convergence_bound_s else "fail"
    return Verdict("convergence", status, evidence)


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
                                   f"({', '.join(_short(v.author) for v in approvals) or 'none'}); quorum is {quorum}")
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
                return fail(f"claim {claim.id[:8]} by {_short(claim.author)} at {claim.ts} won while "
                            f"claim {blocker.id[:8]} by {_short(blocker.author)} at {blocker.ts} held the "
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


def _needed(quorum: int) -> dict[str, int]:
    return {"decomposer": 1, "scorer": quorum, "executor": 1}


def _scorers_deadlocked(history: History) -> str:
    """Why the surviving scorers can never accept a split of some open node, or "".

    Only counted when faults took scorers away: then a quorum may survive in
    number and still be unable to agree (one survivor rejects what the others
    approve), which the lost scorers would have decided. With every scorer
    alive, a node nobody can accept is a liveness failure, not a stall."""
    scorers = [m for m in history.members.values() if m.role == "scorer"]
    live = {m.peer for m in scorers if m.alive}
    if len(live) == len(scorers) or not history.live():
        return ""
    reference = max(history.live(), key=lambda m: len(m.events))
    tree = reference.tree()
    for node in tree.walk():
        if node.leaf or node.status != "open":
            continue
        quorum = tree.goal_of(node).quorum
        drafts = [p for p in tree.proposals.values() if p.node == node.id and p.status == "draft"]
        reachable = [p for p in drafts
                     if len(p.approvals) + len(live - set(p.approvals) - set(p.rejections)) >= quorum]
        if drafts and not reachable:
            return (f"{len(scorers) - len(live)} of {len(scorers)} scorers lost; the {len(live)} left cannot "
                    f"give any of the {len(drafts)} drafts of node {node.id[:8]} ({node.title[:40]!r}) "
                    f"a quorum of {quorum}")
    return ""


def liveness(history: History) -> Verdict:
    """The plan completes whenever the faults leave a quorum of each role; when they
    don't, the run is reported as a stall with its length, not as an error."""
    live = [m for m in history.live() if m.role != "observer"]
    done = [m for m in history.live() if m.complete]
    if history.live() and len(done) == len(history.live()):
        last = max(m.completed_at or 0.0 for m in done)
        return Verdict("liveness", "pass", f"all {len(done)} live members saw the plan complete by t={last:.1f}s")
    alive = Counter(m.role for m in live)
    short = [f"{role}s {alive.get(role, 0)}/{need}" for role, need in _needed(history.quorum).items()
             if alive.get(role, 0) < need]
    goal_held = any(isinstance(e.body, GoalBody) for m in history.live() for e in m.events)
    stalled_for = history.ended_at - history.last_fault_at
    deadlock = _scorers_deadlocked(history)
    if short or not goal_held or deadlock:
        why = ", ".join(short) if short else ("no live member holds the goal" if not goal_held else deadlock)
        return Verdict("liveness", "stall",
                       f"incomplete after {stalled_for:.1f}s without faults, but too few survived ({why})")
    incomplete = sorted(m.name for m in history.live() if not m.complete)
    return Verdict("liveness", "fail",
                   f"a quorum of every role survived, yet {', '.join(incomplete)} had no complete plan "
                   f"{stalled_for:.1f}s after the last fault")


def late_join(history: History) -> Verdict:
    """A member that joined late rebuilt the same plan as everyone else."""
    late = [m for m in history.live() if m.late]
    if not late:
        return Verdict("late_join", "pass", "no member joined late in this run")
    reference = _reference_digest(m for m in history.live() if not m.late) or _reference_digest(late)
    wrong = [m.name for m in late if m.digest != reference]
    if wrong:
        return Verdict("late_join", "fail",
                       f"late joiner(s) {', '.join(wrong)} differ from the others' digest {str(reference)[:12]}")
    return Verdict("late_join", "pass",
                   f"{len(late)} late joiner(s) ({', '.join(m.name for m in late)}) rebuilt digest {str(reference)[:12]}")


def durability(history: History) -> Verdict:
    """A restarted member lost nothing it had stored before it went down."""
    restarts = [(m.name, r) for m in history.members.values() for r in m.restarts]
    for name, restart in restarts:
        if restart.lost:
            return Verdict("durability", "fail",
                           f"{name} restarted at t={restart.at:.1f}s without {len(restart.lost)} of the "
                           f"{restart.held_before} events it held: {', '.join(i[:8] for i in restart.lost[:5])}")
    held = sum(r.held_before for _, r in restarts)
    return Verdict("durability", "pass",
                   f"{len(restarts)} restart(s), all {held} previously held events still there"
                   if restarts else "no member restarted in this run")


CHECKERS: dict[str, Callable[[History], Verdict]] = {
    "convergence": convergence,
    "quorum_safety": quorum_safety,
    "claim_safety": claim_safety,
    "liveness": liveness,
    "late_join": late_join,
    "durability": durability,
}


def check(history: History, names: Iterable[str] | None = None) -> list[Verdict]:
    return [CHECKERS[name](history) for name in (names or CHECKERS)]
