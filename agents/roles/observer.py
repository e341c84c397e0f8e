"""Observer: never speaks. It folds what it hears and prints it; it decides nothing."""

from __future__ import annotations

from agents.core.tree import PlanTree
from agents.roles.intents import Intent, Me


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    return []
