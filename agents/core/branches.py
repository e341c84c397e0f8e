"""An author's events as the tree its chains make, read along every chain in one walk.

The decision rules count "earlier on the event's own chain" (PROTOCOL.md, sections 4-7): a
scorer's first ballot per round, its first ack per epoch, the approvals a promise reports, a
coordinator's first candidate per round, a decomposer's first three proposals on a node. An
honest feed is one chain. An equivocator's is a tree through ``prev``, and listing its
root-to-tip chains costs the sum of their lengths: a feed forked at every seq (a comb, which
one admitted key can sign) has as many chains as events, so reading them chain by chain is
quadratic in time and memory. (The index reads each event of such a feed once, from what its
predecessor's chain read: ``FoldIndex.refeed``.)

A ``Branches`` (a scorer's events on one node, ``agents.core.index``) holds each event once,
with the one before it on its own chain among them. A reader walks it once, depth first
(``steps``: each event with its depth, how many before it on its chain), and keeps an undo
log, one entry per event on the chain it is on: at an event of depth ``d`` it first undoes
the entries past the ``d``-th (the branch it leaves), so its state is always that of the
event's own chain. Along one chain nothing is ever undone, and a reader keeps no log
(``forked`` is false).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from agents.core.events import Event


@dataclass(eq=False)
class Branches:
    """Events along their chains: each with the index of the one before it on its chain here."""

    events: list[Event] = field(default_factory=list)
    before: list[int] = field(default_factory=list)  # -1: the first on its chain here
    forked: bool = False  # more than one chain: a reader needs its undo log
    _order: list[tuple[int, Event]] | None = None  # ``steps`` of a forked one, until the next add

    def add(self, event: Event, before: int) -> int:
        """Add an event after ``before`` (the index of the one before it on its chain here, -1
        for none); returns its own index. Each event comes after the one before it."""
        if before != len(self.events) - 1:
            self.forked = True
        self.events.append(event)
        self.before.append(before)
        self._order = None
        return len(self.events) - 1

    def steps(self) -> list[tuple[int, Event]] | enumerate[Event]:
        """(depth, event), depth first (siblings in id order, so the walk is a function of the
        events, not of the order they came in): before reading an event, a reader undoes what
        it read past the first ``depth`` events of its chain."""
        if not self.forked:
            return enumerate(self.events)
        if self._order is None:
            children: dict[int, list[int]] = defaultdict(list)
            for at, before in enumerate(self.before):
                children[before].append(at)
            order: list[tuple[int, Event]] = []
            stack = [(0, at) for at in sorted(children[-1], key=self._id, reverse=True)]
            while stack:
                depth, at = stack.pop()
                order.append((depth, self.events[at]))
                stack.extend((depth + 1, c) for c in sorted(children.get(at, ()), key=self._id, reverse=True))
            self._order = order
        return self._order

    def _id(self, at: int) -> str:
        return self.events[at].id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Branches) and list(self.steps()) == list(other.steps())

    def __len__(self) -> int:
        return len(self.events)
