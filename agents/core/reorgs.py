"""Reorganisations: a node whose accepted split changed between two folds.

The fold cannot see them (it only knows one set); a member that folds again
after new events arrived compares the two trees. A late vote with an early
timestamp, stuck behind a partition, is the usual cause.
"""

from __future__ import annotations

from agents.core.tree import PlanTree


def reorganised(before: PlanTree, after: PlanTree) -> list[str]:
    """Ids of nodes whose accepted split in ``before`` is no longer the one in ``after``."""
    changed = []
    for node_id, node in before.nodes.items():
        if node.split is None:
            continue
        now = after.nodes.get(node_id)
        if now is None or now.split != node.split:
            changed.append(node_id)
    return sorted(changed)
