"""Checkers: judge a recorded ``History`` against the swarm's guarantees.

Each checker reads the history only (never a live member) and returns a
``Verdict`` with evidence a person can follow. They must not share the fold's
rules, or a bug in those rules would pass them: the safety checkers recount
from the events, and the finality checker judges what members *showed* over
time (their transition logs), not their final state. Planted bugs prove each
one can fail (``tests/chaos/test_planted_bugs.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from chaos.checkers.convergence import convergence, durability, late_join
from chaos.checkers.disk import disk_failure
from chaos.checkers.finality import no_revocation
from chaos.checkers.hostility import hostile_refused
from chaos.checkers.integrity import event_sets, honest_feeds, observer_truth, wasted_work
from chaos.checkers.liveness import liveness
from chaos.checkers.safety import claim_safety, quorum_safety, reference_agreement
from chaos.checkers.verdict import Status, Verdict
from chaos.history import History

CHECKERS: dict[str, Callable[[History], Verdict]] = {
    "convergence": convergence,
    "quorum_safety": quorum_safety,
    "claim_safety": claim_safety,
    "reference_agreement": reference_agreement,
    "no_revocation": no_revocation,
    "observer_truth": observer_truth,
    "event_sets": event_sets,
    "honest_feeds": honest_feeds,
    "wasted_work": wasted_work,
    "hostile_refused": hostile_refused,
    "liveness": liveness,
    "late_join": late_join,
    "durability": durability,
    "disk_failure": disk_failure,
}


def check(history: History, names: Iterable[str] | None = None) -> list[Verdict]:
    return [CHECKERS[name](history) for name in (names or CHECKERS)]


__all__ = ["CHECKERS", "Status", "Verdict", "check"]
