"""Per-author feeds: which events of a set are part of their author's history (PROTOCOL.md, section 3).

Each author's events form a tree through ``prev`` (normally one chain: seq 1,
2, 3, ..., each citing the id of the one before). Given any set of events,
``build_feeds`` decides for every event, deterministically:

* **in the feed** (``accepted``): its whole chain back to seq 1 is held and
  every link is consistent: seq one more than its predecessor's, the same
  role, a strictly later timestamp;
* **pending**: its chain is incomplete (a gap); sync asks for the missing
  events, and folding only complete chains means a member never builds on an
  event whose causal past it has not seen;
* **cut**: a link on its chain breaks a rule (a role change, a timestamp that
  does not increase); it and everything after it never count.

**Forks** (two events by one author at one seq: both are signed, so that is
proof of equivocation) mark the author as an equivocator, with the evidence kept.
An event citing a predecessor that is not held proves nothing yet: the one it
cites may be at another seq (a broken link, not a fork), and an author once
listed as an equivocator must stay listed whatever arrives after. Both
branches stay in the feed: a decision that counted one branch must never be
erased because somebody later forked (the quorum sizes, not deletion, are what
bound an equivocator; see PROTOCOL.md, sections 4-7).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from agents.core.events import Event


@dataclass(frozen=True)
class FeedIssue:
    """A rule broken inside an author's feed. Deterministic: a function of the set alone."""

    author: str
    seq: int
    rule: str  # "fork", "role", "clock", "chain" (and "breach" from the fold)
    detail: str


@dataclass(frozen=True)
class Feeds:
    accepted: tuple[Event, ...]  # every event in its feed, by (author, seq, id)
    pending: tuple[Event, ...]
    cut: tuple[Event, ...]
    issues: tuple[FeedIssue, ...]
    equivocators: frozenset[str]
    heads: dict[str, tuple[int, str]]  # author -> (seq, id) of its latest event in the feed
    parent: dict[str, str]  # event id -> id of its predecessor in the feed (for events past seq 1)

    @property
    def forked_or_cut(self) -> frozenset[str]:
        """The authors whose feed is not one chain: equivocators, and those with a broken link."""
        return self.equivocators | {e.author for e in self.cut}


def link_rule(event: Event, before: Event) -> tuple[str, str] | None:
    """(rule, detail) when ``event`` cannot follow ``before`` in a feed."""
    if event.seq != before.seq + 1:
        return "chain", f"seq {event.seq} cites an event at seq {before.seq}"
    if event.role != before.role:
        return "role", f"role {event.role} after {before.role}"
    if not event.hlc > before.hlc:  # the timestamps' order, without building them: once per event
        return "clock", f"timestamp {event.ts} not after {before.ts}"
    return None


def _one_chain(mine: list[Event]) -> bool:
    """Whether an author's events, in seq order, are one gap-free chain from seq 1: each at
    the next seq, citing the one before (no fork, no gap). The links' other rules are still
    checked, one by one."""
    previous = None
    for at, event in enumerate(mine, start=1):
        if event.seq != at or event.prev != previous:
            return False
        previous = event.id
    return True


def build_feeds(events: Iterable[Event]) -> Feeds:
    """Split a set of events into feeds, pending and cut events.

    Same set (any order, any duplicates) gives the same result.
    """
    unique: dict[str, Event] = {}
    for event in events:
        unique[event.id] = event
    by_author: dict[str, list[Event]] = defaultdict(list)
    for event in unique.values():
        by_author[event.author].append(event)

    accepted: list[Event] = []
    pending: list[Event] = []
    cut: list[Event] = []
    issues: list[FeedIssue] = []
    equivocators: set[str] = set()
    heads: dict[str, tuple[int, str]] = {}
    parent: dict[str, str] = {}

    for author in sorted(by_author):
        mine = sorted(by_author[author], key=lambda e: (e.seq, e.id))
        if _one_chain(mine):  # nearly every author: the walk below, in one pass
            head = None
            for at, event in enumerate(mine):
                broken_rule = None if at == 0 else link_rule(event, mine[at - 1])
                if broken_rule is not None:
                    issues.append(FeedIssue(author, event.seq, *broken_rule))
                    cut.extend(mine[at:])  # everything after a broken link is cut too
                    break
                if at:
                    parent[event.id] = mine[at - 1].id
                accepted.append(event)
                head = event
            if head is not None:
                heads[author] = (head.seq, head.id)
            continue
        at_seq: dict[int, list[Event]] = defaultdict(list)
        children: dict[str, list[Event]] = defaultdict(list)
        for event in mine:
            at_seq[event.seq].append(event)
            if event.prev is not None:
                children[event.prev].append(event)
        fork_seqs = [s for s, group in at_seq.items() if len(group) > 1]
        if fork_seqs:
            equivocators.add(author)
            seq = min(fork_seqs)
            issues.append(FeedIssue(author, seq, "fork", f"two different events signed at seq {seq}"))

        reached: set[str] = set()
        broken: set[str] = set()
        stack = [e for e in at_seq.get(1, ()) if e.prev is None]
        reached.update(e.id for e in stack)
        while stack:
            event = stack.pop()
            for child in children.get(event.id, ()):
                broken_rule = link_rule(child, event)
                if broken_rule is None:
                    reached.add(child.id)
                    parent[child.id] = event.id
                    stack.append(child)
                else:
                    broken.add(child.id)
                    issues.append(FeedIssue(author, child.seq, *broken_rule))
        # everything after a broken link is cut too
        frontier = list(broken)
        while frontier:
            for child in children.get(frontier.pop(), ()):
                if child.id not in broken:
                    broken.add(child.id)
                    frontier.append(child.id)
        head = None  # ``mine`` is in (seq, id) order: its last event in the feed is the head
        for event in mine:
            if event.id in reached:
                accepted.append(event)
                head = event
            elif event.id in broken:
                cut.append(event)
            else:
                pending.append(event)
        if head is not None:
            heads[author] = (head.seq, head.id)

    return Feeds(
        accepted=tuple(accepted),
        pending=tuple(pending),
        cut=tuple(cut),
        issues=tuple(sorted(issues, key=lambda i: (i.author, i.seq, i.rule, i.detail))),
        equivocators=frozenset(equivocators),
        heads=heads,
        parent=parent,
    )


@dataclass
class Chain:
    """An author's feed while it is one chain (no fork, no broken link): its events by seq, how
    many are in the feed, and who cites whom. ``agents.core.livefold`` extends it event by
    event, and keeps the feed as a ``tangle.Tangle`` from the batch ``extend`` says made it
    something else."""

    at: dict[int, Event] = field(default_factory=dict)  # seq -> the author's one event there
    accepted: int = 0  # seqs 1..accepted are in the feed; the others wait for a gap to fill
    seq_of: dict[str, int] = field(default_factory=dict)  # id -> its seq
    cited: dict[str, int] = field(default_factory=dict)  # a ``prev`` -> the seq of the event citing it

    def hold(self, event: Event) -> None:
        """Note one of the author's events, in the feed or waiting (``extend`` checks it first;
        a fold from scratch notes what ``build_feeds`` sorted)."""
        self.at[event.seq] = event
        self.seq_of[event.id] = event.seq
        if event.prev is not None:
            self.cited[event.prev] = event.seq

    def extend(self, new: list[Event]) -> list[Event] | None:
        """Take an author's new events; returns those that came into the feed (in seq order),
        waiting ones whose gap they fill included, or None when the author's events may no
        longer be one chain as ``build_feeds`` sees it: a second event at a seq, two citing
        one predecessor, one citing another than the event held before it (a fork, or a
        link that ``build_feeds`` cuts once it reaches it), a ``prev`` held at another seq,
        or a link that breaks ``link_rule`` (a cut). The chain is then unusable, some of
        ``new`` held and ``accepted`` maybe moved: a ``Tangle`` of what it held before tells
        which (``LiveFold._untangle``)."""
        for event in new:
            if event.seq in self.at or (event.prev is not None and event.prev in self.cited):
                return None
            self.hold(event)
        for event in new:
            before, after = self.at.get(event.seq - 1), self.at.get(event.seq + 1)
            if before is not None and before.id != event.prev:
                return None  # it cites another predecessor than the one held: a fork, or a broken link
            if after is not None and after.prev != event.id:
                return None
            if event.prev is not None and self.seq_of.get(event.prev, event.seq - 1) != event.seq - 1:
                return None  # it cites an event of its author at another seq: a broken link
            if self.cited.get(event.id, event.seq + 1) != event.seq + 1:
                return None  # and the other way round
        grown = []
        while (event := self.at.get(self.accepted + 1)) is not None:
            before = self.at.get(self.accepted)
            if before is None:
                if event.prev is not None:
                    return None  # a first event that cites one: it never enters the feed
            elif event.prev != before.id or link_rule(event, before) is not None:
                return None
            if self.cited.get(event.id, event.seq + 1) != event.seq + 1:
                return None  # an event held, waiting, that cites it from another seq: cut once it is in
            grown.append(event)
            self.accepted += 1
        return grown
