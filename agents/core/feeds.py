"""Per-author feeds: which events of a set are part of their author's valid history.

Each author's events form a chain: seq 1, 2, 3, ..., each citing the id of the
one before (``prev``). Given any set of events, ``build_feeds`` keeps for every
author the longest valid prefix of that chain, deterministically:

* **Gap** (seq n is missing, or n's ``prev`` is unknown): events after the gap
  are *pending*, not folded, until the missing ones arrive (sync asks for them).
  Folding only clean prefixes means a member never builds on an event whose
  causal past it has not seen.
* **Fork** (two different events with one seq, or an event whose ``prev``
  names something other than the event we hold at seq n-1; both are signed by
  the author, so either is proof of equivocation): the feed is cut *before* the
  forked seq, both branches and everything after are dropped, and the author is
  listed as an equivocator. Every member does the same whichever branch it saw
  first, because the decision depends on the set alone.
* **Role change**: a feed keeps the role of its first event; an event declaring
  another role cuts the feed there. Roles are claims about identity, and a
  scorer cannot become a decomposer half-way.
* **Clock**: timestamps must strictly increase along a feed; the first that
  does not cuts the feed there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from agents.core.events import Event


@dataclass(frozen=True)
class FeedIssue:
    """A rule broken inside an author's feed. Deterministic: a function of the set alone."""

    author: str
    seq: int
    rule: str  # "fork", "role", "clock"
    detail: str


@dataclass(frozen=True)
class Feeds:
    accepted: tuple[Event, ...]
    pending: tuple[Event, ...]
    cut: tuple[Event, ...]
    issues: tuple[FeedIssue, ...]
    equivocators: frozenset[str]
    heads: dict[str, tuple[int, str]]  # author -> (seq, id) of the last accepted event


def _fork_seq(by_seq: dict[int, list[Event]]) -> tuple[int | None, str]:
    forks = sorted(seq for seq, events in by_seq.items() if len(events) > 1)
    fork = forks[0] if forks else None
    detail = f"two events signed at seq {fork}" if fork is not None else ""
    for seq in sorted(by_seq):
        if fork is not None and seq > fork:
            break
        before = by_seq.get(seq - 1)
        here = by_seq[seq]
        if before and len(before) == 1 and len(here) == 1 and here[0].prev != before[0].id:
            if fork is None or seq - 1 < fork:
                fork = seq - 1
                detail = f"seq {seq} cites a different seq {seq - 1} than the one held"
            break
    return fork, detail


def build_feeds(events: Iterable[Event]) -> Feeds:
    """Split a set of events into accepted feed prefixes, pending and cut events.

    Same set (any order, any duplicates) gives the same result.
    """
    unique: dict[str, Event] = {}
    for event in events:
        unique[event.id] = event
    by_author: dict[str, dict[int, list[Event]]] = defaultdict(lambda: defaultdict(list))
    for event in unique.values():
        by_author[event.author][event.seq].append(event)

    accepted: list[Event] = []
    pending: list[Event] = []
    cut: list[Event] = []
    issues: list[FeedIssue] = []
    equivocators: set[str] = set()
    heads: dict[str, tuple[int, str]] = {}

    for author in sorted(by_author):
        by_seq = by_author[author]
        for group in by_seq.values():
            group.sort(key=lambda e: e.id)
        fork, fork_detail = _fork_seq(by_seq)
        if fork is not None:
            equivocators.add(author)
            issues.append(FeedIssue(author, fork, "fork", fork_detail))
        stop_rule: str | None = None
        previous: Event | None = None
        seq = 1
        while seq in by_seq and (fork is None or seq < fork):
            event = by_seq[seq][0]  # unique, and chained to previous: _fork_seq stops us before either fails
            if previous is not None and event.role != previous.role:
                stop_rule = "role"
                issues.append(
                    FeedIssue(author, seq, "role", f"role {event.role} after {previous.role}")
                )
                break
            if previous is not None and not event.ts > previous.ts:
                stop_rule = "clock"
                issues.append(
                    FeedIssue(author, seq, "clock", f"timestamp {event.ts} not after {previous.ts}")
                )
                break
            accepted.append(event)
            previous = event
            seq += 1
        if previous is not None:
            heads[author] = (previous.seq, previous.id)
        last_good = previous.seq if previous is not None else 0
        for s, group in by_seq.items():
            if s <= last_good:
                continue
            if stop_rule is not None or (fork is not None and s >= fork):
                cut.extend(group)
            else:
                pending.extend(group)

    return Feeds(
        accepted=tuple(accepted),
        pending=tuple(sorted(pending, key=lambda e: (e.author, e.seq, e.id))),
        cut=tuple(sorted(cut, key=lambda e: (e.author, e.seq, e.id))),
        issues=tuple(issues),
        equivocators=frozenset(equivocators),
        heads=heads,
    )
