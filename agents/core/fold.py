"""``fold``: the one function that turns an event set into the plan (PROTOCOL.md, sections 3-7).

    Same event set, any arrival order, any duplicates: same tree, same digest.
    And every decision it shows is final: a superset of the events shows the
    same accepted splits and results, and possibly more.

``tests/agents/test_fold_properties.py`` guards both, over adversarial event
sets and every prefix of random delivery orders. To keep them, ``fold`` looks
only at the events: never at a clock, a random source, the member calling it,
or the order it was handed the events in; and no rule depends on timestamps
(which a late event could undercut). Acceptance is "has a quorum", which more
events cannot take away:

* **feeds** (``agents.core.feeds``): only events whose author's chain is
  complete count; forks are evidence, and both branches stay;
* **splits** (``agents.core.rounds``): a node's proposal is accepted when a
  quorum of the goal's roster ballots for it in one round; rounds carry over
  what an earlier round may have accepted;
* **claims and results** (``agents.core.claims``): a claim is granted by a
  quorum of acks; a result is accepted by a quorum of accepts.

A subgoal is a leaf when its proposer marked it executable or it sits at the
goal's ``max_depth``. A leaf is done when it has an accepted result, an inner
node when every child of its accepted split is done, the plan when every
goal's root is done.

The rules per node live in ``agents.core.settle``, the index they read in
``agents.core.index``. ``fold`` is a ``LiveFold`` (``agents.core.livefold``)
that folds its events once: a member keeps one, and folds only what each new
batch changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from agents.core.events import Event
from agents.core.livefold import LiveFold
from agents.core.settle import MAX_DRAFTS, child_node_id
from agents.core.tree import PlanTree


def fold(events: Iterable[Event]) -> PlanTree:
    """Fold an event set into the plan tree. Pure and order-independent: see the module doc."""
    return LiveFold(events).tree()


__all__ = ["MAX_DRAFTS", "child_node_id", "fold"]
