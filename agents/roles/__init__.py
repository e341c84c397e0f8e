"""The roles as small policies: ``decide(tree, me, now_ms) -> intents``, no I/O.

Each policy looks at the folded tree and the member's own clock reading and
says what to do next; drivers carry the intents out. Policies read nothing but
their arguments, so the same code runs in the simulation and in a networked member.
"""

from __future__ import annotations

from collections.abc import Callable

from agents.core.tree import PlanTree
from agents.roles import decomposer, executor, observer, scorer
from agents.roles.intents import (
    THINKING,
    Ack,
    Ballot,
    Candidate,
    Claim,
    Execute,
    Intent,
    Me,
    Promise,
    Propose,
    Renew,
    Vote,
)

Policy = Callable[[PlanTree, Me, int], list[Intent]]


def calls_at_once(role: str, parallel: int) -> int:
    """How many model calls a member of ``role`` runs together when its backend answers up to
    ``parallel`` side by side (``Me.at_once``). Executors and decomposers use them all: every leaf
    and every split is needed, so what the batch adds to throughput is time saved. Scorers
    vote one draft at a time: their votes race to a node's first quorum, and on a batched
    model two votes together each finish later than one alone."""
    return max(1, parallel) if role in ("executor", "decomposer") else 1

POLICIES: dict[str, Policy] = {
    "decomposer": decomposer.decide,
    "scorer": scorer.decide,
    "executor": executor.decide,
    "observer": observer.decide,
}

__all__ = [
    "POLICIES",
    "THINKING",
    "Ack",
    "Ballot",
    "Candidate",
    "Claim",
    "Execute",
    "Intent",
    "Me",
    "Policy",
    "Promise",
    "Propose",
    "Renew",
    "Vote",
    "calls_at_once",
]
