"""What a member shows, and each change of it: the record finality is judged from.

A member *shows* three kinds of decision: the accepted split of a node, the
claim that holds a leaf, and the accepted result of a leaf. ``decisions``
reads them off a folded tree; ``changes`` lists what differs between two
folds. Members log every change (``Transition``), from the first fold after
they start, so a checker can judge every moment of every member and not only
the end: a split or a result, once shown, must never be shown as anything else,
by this member or any other. A holder may change (a lease ran out); that is
logged too, because users see it. So is the moment the plan shown turns complete
(``kind == "complete"``, after the decisions that completed it): what an observer
printed then is what ``observer_truth`` judges, not what its store held (a pull may
store events a sync interval before the member next folds and shows them).

The fold cannot see these (it knows one set, not two moments); members call
``changes`` after each refold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.core.tree import PlanTree

DecisionKind = Literal["split", "holder", "result"]
FINAL_KINDS: frozenset[str] = frozenset({"split", "result"})


@dataclass(frozen=True)
class Transition:
    """One change of what a member shows. ``kind == "start"`` marks a (re)start of the
    member: the transitions right after it are its first fold from its store, up to the
    ``kind == "loaded"`` record after them (what it shows from its store alone).
    ``kind == "complete"`` marks the plan shown turning complete (``after``: its digest)
    or incomplete again (``before``: the digest it had; a goal submitted after the first
    completed does that, and no checker judges it)."""

    kind: Literal["start", "loaded", "split", "holder", "result", "complete"]
    node: str = ""
    before: str | None = None
    after: str | None = None

    @property
    def revokes(self) -> bool:
        """A final decision taken back or replaced (never allowed)."""
        return self.kind in FINAL_KINDS and self.before is not None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "node": self.node, "before": self.before, "after": self.after}


def decisions(tree: PlanTree) -> dict[tuple[str, str], str]:
    """(kind, node id) -> the id a member shows for it: split proposal, holding claim, result."""
    shown: dict[tuple[str, str], str] = {}
    for node in tree.nodes.values():
        if node.split is not None:
            shown[("split", node.id)] = node.split
        if node.leaf and node.claim is not None:
            shown[("holder", node.id)] = node.claim
        if node.result is not None:
            shown[("result", node.id)] = node.result
    return shown


def changes(before: PlanTree | None, after: PlanTree) -> list[Transition]:
    """What changed between two folds, in a stable order (kind, node), then whether the
    plan turned complete (or incomplete again: a new goal)."""
    old = decisions(before) if before is not None else {}
    new = decisions(after)
    out = []
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) != new.get(key):
            kind, node = key
            out.append(Transition(kind, node, old.get(key), new.get(key)))  # type: ignore[arg-type]
    was_complete = before is not None and before.complete
    if after.complete and not was_complete:
        out.append(Transition("complete", after=after.digest))
    elif was_complete and not after.complete:
        out.append(Transition("complete", before=before.digest))  # type: ignore[union-attr]
    return out


def revocations(before: PlanTree, after: PlanTree) -> list[Transition]:
    """The changes that take a shown split or result back (reorganisations)."""
    return [t for t in changes(before, after) if t.revokes]
