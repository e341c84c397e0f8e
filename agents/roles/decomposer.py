"""Decomposer: propose a split for every open node, once per node.

"Open" means a goal or subgoal that is not a leaf and has no accepted split
yet. Whether this member already proposed is read from the tree (its own
proposals are events in its own store), so a restart never proposes twice.
"""

from __future__ import annotations

from agents.core.tree import PlanTree
from agents.roles.intents import Intent, Me, Propose


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    mine = {p.node for p in tree.proposals.values() if p.author == me.peer_id}
    return [
        Propose(node.id)
        for node in tree.walk()
        if not node.leaf and node.status == "open" and node.id not in mine
    ]
