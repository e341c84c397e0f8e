"""One author's feed kept up to date event by event, whatever its shape: what ``build_feeds``
of the author's events gives, at every moment, for the cost of the events added.

``agents.core.livefold`` keeps a ``Tangle`` for each author whose feed is forked or cut (an
equivocator, or a broken link), or that stopped being one chain as ``feeds.Chain`` keeps it
(an event waiting on one nobody holds, next to the feed's head); an author whose feed is one
chain needs only ``feeds.Chain``. Making the feed again from all the author's events at every batch cost an
equivocator's whole feed per event it signed: quadratic in its events, which one admitted key
could choose to sign at will.

The rules are ``build_feeds``'s (PROTOCOL.md, section 3), read per event: an event's place
depends on its predecessor's alone. A seq-1 event citing none is in the feed; an event citing
one in the feed is in it too when ``link_rule`` holds, and cut (with an issue) when it does
not; an event citing a cut one is cut (no issue: the break is further up); anything else waits
(pending). So an event's place is settled once its predecessor's is, and never changes after:
adding events only moves pending ones into the feed or out of it, each once. A fork (two events
at one seq) marks the author for good.
"""

from __future__ import annotations

from bisect import insort
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

from agents.core.events import Event
from agents.core.feeds import FeedIssue, link_rule

Place = Literal["in", "cut", "pending"]


def issue_key(issue: FeedIssue) -> tuple[str, int, str, str]:
    """The order ``build_feeds`` lists issues in."""
    return issue.author, issue.seq, issue.rule, issue.detail


class Tangle:
    """An author's events and where each stands in its feed (see the module's docstring)."""

    def __init__(self, author: str, events: Iterable[Event] = ()) -> None:
        self.author = author
        self.by_id: dict[str, Event] = {}
        self.place: dict[str, Place] = {}
        self.parent: dict[str, str] = {}  # an event in the feed past seq 1 -> its predecessor
        self._children: dict[str, list[Event]] = defaultdict(list)  # a ``prev`` -> the events citing it
        self._at_seq: dict[int, list[Event]] = defaultdict(list)
        self._links: list[FeedIssue] = []  # the broken links, sorted
        self.fork_seq: int | None = None  # the lowest seq where the author forked
        self.head: Event | None = None  # its last event in the feed, in (seq, id) order
        self.counts = {"in": 0, "cut": 0, "pending": 0}
        self.new_links: list[FeedIssue] = []  # the broken links the last ``add`` found
        self.add(events)

    @property
    def forked(self) -> bool:
        return self.fork_seq is not None

    @property
    def fork_issue(self) -> FeedIssue | None:
        if self.fork_seq is None:
            return None
        return FeedIssue(self.author, self.fork_seq, "fork", f"two different events signed at seq {self.fork_seq}")

    @property
    def issues(self) -> tuple[FeedIssue, ...]:
        """As ``build_feeds`` lists them for this author: sorted, the fork's at its lowest seq."""
        issues = list(self._links)
        if (fork := self.fork_issue) is not None:
            insort(issues, fork, key=issue_key)
        return tuple(issues)

    def add(self, events: Iterable[Event]) -> list[Event]:
        """Take the author's events (any order, duplicates ignored); returns those that came
        into the feed, in (seq, id) order: each after its predecessor."""
        new = [e for e in {e.id: e for e in events if e.id not in self.by_id}.values()]
        self.new_links = []
        for event in new:
            assert event.author == self.author, "a tangle holds one author's events"
            self.by_id[event.id] = event
            self._at_seq[event.seq].append(event)
            if event.prev is not None:
                self._children[event.prev].append(event)
        forks = [e.seq for e in new if len(self._at_seq[e.seq]) > 1]  # two events at one seq
        if forks and (self.fork_seq is None or min(forks) < self.fork_seq):
            self.fork_seq = min(forks)
        entered: list[Event] = []
        for event in new:
            self.place[event.id] = "pending"
            self.counts["pending"] += 1
        for event in new:
            if self.place[event.id] == "pending":
                self._settle(event, entered)
        entered.sort(key=lambda e: (e.seq, e.id))
        return entered

    def _settle(self, event: Event, entered: list[Event]) -> None:
        """Place a pending event from its predecessor's place, then those waiting on it."""
        stack = [event]
        while stack:
            event = stack.pop()
            before = self.by_id.get(event.prev) if event.prev is not None else None
            if before is None:
                if event.prev is not None or event.seq != 1:
                    continue  # its predecessor is missing (or it is no seq 1 and cites none): it waits
                place: Place = "in"
            else:
                above = self.place[before.id]
                if above == "pending":
                    continue
                if above == "cut":
                    place = "cut"
                else:
                    broken = link_rule(event, before)
                    place = "in" if broken is None else "cut"
                    if broken is not None:
                        issue = FeedIssue(self.author, event.seq, *broken)
                        insort(self._links, issue, key=issue_key)
                        self.new_links.append(issue)
            self._move(event, place)
            if place == "in":
                entered.append(event)
                if before is not None:
                    self.parent[event.id] = before.id
                if self.head is None or (event.seq, event.id) > (self.head.seq, self.head.id):
                    self.head = event
            stack.extend(e for e in self._children.get(event.id, ()) if self.place.get(e.id) == "pending")

    def _move(self, event: Event, place: Place) -> None:
        self.counts[self.place[event.id]] -= 1
        self.place[event.id] = place
        self.counts[place] += 1
