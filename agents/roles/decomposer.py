"""Decomposer: propose a split for every open node; try again when scorers reject it.

"Open" means a goal or subgoal that is not a leaf and has no accepted split
yet. A decomposer proposes once per node, and again (up to ``MAX_ATTEMPTS``
in all) when its latest proposal there was rejected by at least ``quorum``
scorers: a split the board turned down can never be accepted, and without a
new one the node would wait for ever. Everything is read from the tree (its
own proposals are events in its own store), so a restart never repeats itself.
"""

from __future__ import annotations

from agents.core.tree import PlanTree
from agents.roles.intents import Intent, Me, Propose

MAX_ATTEMPTS = 3


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    intents: list[Intent] = []
    for node in tree.walk():
        if node.leaf or node.status != "open":
            continue
        mine = sorted((p for p in tree.proposals.values() if p.node == node.id and p.author == me.peer_id),
                      key=lambda p: (p.at, p.id))
        if not mine:
            intents.append(Propose(node.id, 1))
        elif len(mine) < MAX_ATTEMPTS and len(mine[-1].rejections) >= tree.goal_of(node).quorum:
            intents.append(Propose(node.id, len(mine) + 1))
    return intents
