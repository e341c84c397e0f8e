"""Scorer: vote once on every proposal for a node that is still open.

Proposals for nodes that already have an accepted split are skipped (their vote
could not change anything but a reorganisation, and costs a model call).
Whether this member voted is read from the tree, so a restart never votes twice.
"""

from __future__ import annotations

from agents.core.tree import PlanTree
from agents.roles.intents import Intent, Me, Vote


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    intents: list[Intent] = []
    for proposal in sorted(tree.proposals.values(), key=lambda p: (p.at, p.id)):
        node = tree.nodes.get(proposal.node)
        if node is None or node.status != "open" or proposal.status != "draft":
            continue
        if me.peer_id in tree.voters.get(proposal.id, frozenset()):
            continue
        intents.append(Vote(proposal.id))
    return intents
