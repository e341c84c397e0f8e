"""An author's events as the tree its chains make, read along every chain in one walk.

The decision rules count "earlier on the event's own chain" (PROTOCOL.md, sections 4-7): a
scorer's first ballot per round, its first ack per epoch, the approvals a promise reports, a
coordinator's first candidate per round, a decomposer's first three proposals on a node. An
honest feed is one chain. An equivocator's
is a tree through ``prev``, and listing its root-to-tip chains costs the sum of their lengths:
a feed forked at every seq (a comb, which one admitted key can sign) has as many chains as
events, so reading them chain by chain is quadratic in time and memory.

A ``Branches`` (a scorer's events on one node, ``agents.core.index``) holds each event once, in depth-first order, with its depth: how many events
before it on its own chain it holds. A reader walks it once and keeps an undo log, one entry
per event on the chain it is on: at an event of depth ``d`` it first undoes the entries past
the ``d``-th (the branch it leaves), so its state is always that of the event's own chain.
Along one chain nothing is ever undone, and a reader keeps no log (``forked`` is false).

``walk_feed`` walks an author's feed itself, depth first and in the same way: the index
numbers proposals and results and finds first candidates along it, and gathers a scorer's
events on each node into the ``Branches`` of that node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from agents.core.events import Event
from agents.core.feeds import Feeds


@dataclass
class Branches:
    """Events in depth-first order along their chains, each with its depth on its chain."""

    events: list[Event] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    forked: bool = False  # more than one chain: a reader needs its undo log

    def add(self, event: Event, depth: int) -> None:
        """Add an event whose chain holds ``depth`` of the events here before it; the events
        must come in depth-first order (each after the ones before it on its chain, and a
        branch's events before those of the next)."""
        if depth != len(self.events):
            self.forked = True
        self.events.append(event)
        self.depths.append(depth)

    def grow(self, event: Event) -> None:
        """Add an event after the last one, on its chain: for a feed that is one chain."""
        self.add(event, len(self.events))

    def steps(self) -> Iterator[tuple[int, Event]]:
        """(depth, event), in depth-first order: before reading an event, a reader undoes
        what it read past the first ``depth`` events of its chain."""
        return zip(self.depths, self.events, strict=True)

    def __len__(self) -> int:
        return len(self.events)


def walk_feed(feeds: Feeds, events: Sequence[Event]) -> Iterator[tuple[int, Event]]:
    """An author's events in its feed (``feeds``'s, all of them by one author) as (depth, event),
    depth first; a root is at depth 0. Siblings come in id order, so the walk is a function of
    the set. An author that never forked is one chain: its events in seq order."""
    if not events or events[0].author not in feeds.equivocators:
        return enumerate(sorted(events, key=lambda e: e.seq))
    children: dict[str | None, list[Event]] = defaultdict(list)
    for event in events:
        children[feeds.parent.get(event.id)].append(event)
    return _depth_first(children)


def _depth_first(children: dict[str | None, list[Event]]) -> Iterator[tuple[int, Event]]:
    stack = [(0, e) for e in sorted(children[None], key=lambda e: e.id, reverse=True)]
    while stack:
        depth, event = stack.pop()
        yield depth, event
        stack.extend((depth + 1, e) for e in sorted(children.get(event.id, ()), key=lambda e: e.id, reverse=True))
