"""Liveness: the plan completes whenever the faults leave enough of every role."""

from __future__ import annotations

from collections import Counter

from agents.core.events import GoalBody
from chaos.checkers.verdict import Verdict
from chaos.history import History


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


