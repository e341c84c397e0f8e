"""What a person watching a console wants to read: who found whom, who is thinking about
what, each split accepted, each leaf claimed and done. ``swarm observe --follow`` prints
these lines between its progress lines (and so ``make swarm`` and ``swarm plan``).

The narrator only compares what it saw last time with what it sees now: the plan's
decisions (``agents.core.transitions``), the peers connected, and the status channel.
"""

from __future__ import annotations

from typing import Any

from agents.core.transitions import changes
from agents.core.tree import PlanTree
from agents.render import short

_THINKING = ("decompose", "score", "execute")


def _title(tree: PlanTree, node_or_proposal: str) -> str:
    node = tree.nodes.get(node_or_proposal)
    if node is None and node_or_proposal in tree.proposals:
        node = tree.nodes.get(tree.proposals[node_or_proposal].node)
    return f"'{node.title}'" if node is not None else node_or_proposal[:8]


class Narrator:
    def __init__(self) -> None:
        self._tree: PlanTree | None = None
        self._peers: set[str] = set()
        self._doing: dict[str, tuple[str, str]] = {}

    def lines(self, tree: PlanTree, connected: list[str], heard: list[dict[str, Any]]) -> list[str]:
        roles = {row["peer"]: row["role"] for row in heard} | {p: r for p, (r, _m) in tree.members.items()}
        out: list[str] = []
        found, lost = set(connected) - self._peers, self._peers - set(connected)
        if found:
            out.append("found " + ", ".join(f"{roles.get(p, 'peer')} {short(p)}" for p in sorted(found)))
        if lost:
            out.append("lost " + ", ".join(f"{roles.get(p, 'peer')} {short(p)}" for p in sorted(lost)))
        self._peers = set(connected)
        for row in heard:
            now = (row["doing"], row["about"])
            if now != self._doing.get(row["peer"]) and row["doing"] in _THINKING:
                out.append(f"{row['role']} {short(row['peer'])} thinking: {row['doing']} {_title(tree, row['about'])}")
            self._doing[row["peer"]] = now
        order = {"split": 0, "holder": 1, "result": 2}  # a split before the leaves it made
        for change in sorted(changes(self._tree, tree), key=lambda c: order.get(c.kind, 3)):
            out.extend(self._decision(tree, change.kind, change.node, change.after))
        self._tree = tree
        return out

    @staticmethod
    def _decision(tree: PlanTree, kind: str, node_id: str, after: str | None) -> list[str]:
        node = tree.nodes.get(node_id)
        if node is None or after is None:
            return []
        if kind == "split" and after in tree.proposals:
            proposal = tree.proposals[after]
            parts = ", ".join(tree.nodes[c].title for c in node.children if c in tree.nodes)
            return [f"split of '{node.title}' accepted ({proposal.strategy}, by {short(proposal.author)}; "
                    f"votes of {', '.join(short(s) for s in proposal.ballots)}): {parts}"]
        if kind == "holder" and after in tree.claims:
            claim = tree.claims[after]
            return [f"'{node.title}' held by executor {short(claim.executor)} (epoch {claim.epoch})"]
        if kind == "result" and after in tree.results:
            return [f"'{node.title}' done by executor {short(tree.results[after].executor)}"]
        return []
