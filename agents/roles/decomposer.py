"""Decomposer: propose a split for every open node; try again when scorers reject it.

"Open" means a goal or subgoal that is not a leaf and has no accepted split
yet. A decomposer proposes once per node, and again (up to ``MAX_ATTEMPTS``
drafts in all, the most that count: PROTOCOL.md, section 4) when its latest
draft there was rejected by at least ``quorum`` of the roster's votes. Scorers
fall back to the best-scored draft after a few rounds, so a node never waits
for ever on drafts nobody likes. Everything is read from the tree (its own
proposals are events in its own store), so a restart never repeats itself.
"""

from __future__ import annotations

from agents.core.fold import MAX_DRAFTS
from agents.core.tree import PlanTree
from agents.roles.intents import Intent, Me, Propose

MAX_ATTEMPTS = MAX_DRAFTS


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    intents: list[Intent] = []
    for node in tree.walk():
        if node.leaf or node.status != "open":
            continue
        mine = sorted((p for p in tree.proposals.values() if p.node == node.id and p.author == me.peer_id),
                      key=lambda p: (p.draft_number, p.id))
        if not mine:
            intents.append(Propose(node.id, 1))
        elif len(mine) < MAX_ATTEMPTS and len(mine[-1].rejections) >= tree.goal_of(node).quorum:
            intents.append(Propose(node.id, len(mine) + 1))
    return intents
