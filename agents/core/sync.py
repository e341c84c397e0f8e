"""Catch-up sync as a transport-free state machine: what to tell a peer, what to send it.

Gossip is the fast path and loses messages; this is what guarantees that two
members who talk end up holding the same event set. It knows nothing of
streams: a driver (the libp2p adapter, or the simulator) carries the messages.

One exchange, run by both sides at once (vocabulary after Automerge's sync):

1. ``Summary``: for every author we hold, ``our_prefix`` (the highest seq up to
   which our copy of the feed is gap-free and fork-free, and the id there) and
   a digest of *all* ids we hold of that author.
2. On their summary, for each author whose digest differs from ours we send an
   ``Offer``: the ids we hold of that author. Because feeds are hash chains, if
   we hold *their* prefix head (same id at the same seq), we share everything
   up to it and only offer what lies after; otherwise (a fork, or they hold
   nothing) we offer the author's whole feed. Forks therefore travel in full,
   and both sides see the same proof of equivocation.
3. On their offer: ``Need`` the ids we lack; and since we now know exactly what
   they hold of those authors, we push the events they lack in ``Events``.
4. On their need: ``Events`` with what they asked for.

When both summaries match, nothing is sent. Every message is bounded by the
caller's batch size (offers are id lists and go whole); a driver repeats the exchange until a round sends nothing.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from agents.core.events import Event


@dataclass(frozen=True)
class AuthorSummary:
    prefix_seq: int  # 0 when we hold no gap-free start of this feed
    prefix_id: str | None
    ids_digest: str


@dataclass(frozen=True)
class Summary:
    authors: dict[str, AuthorSummary]


@dataclass(frozen=True)
class AuthorOffer:
    """We hold every event of this author up to ``after_seq`` (a chain prefix we share with
    you), and beyond it exactly ``ids``. Never truncated: an offer that left ids out could
    list only what the peer already holds and make a round look quiet while sets differ."""

    after_seq: int
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Offer:
    authors: dict[str, AuthorOffer]


@dataclass(frozen=True)
class Need:
    ids: tuple[str, ...]


@dataclass(frozen=True)
class Events:
    events: tuple[Event, ...]


SyncMessage = Summary | Offer | Need | Events


class EventIndex:
    """The events a member holds, indexed for sync. Add to it as events are stored."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._by_id: dict[str, Event] = {}
        self._by_author: dict[str, dict[str, Event]] = defaultdict(dict)
        # Summary entries per author, dropped when that author's events change: members
        # summarise on every pull and serve, while most authors are quiet most of the time.
        self._summaries: dict[str, AuthorSummary] = {}
        self.add_all(events)

    def add_all(self, events: Iterable[Event]) -> int:
        added = 0
        for event in events:
            if event.id not in self._by_id:
                self._by_id[event.id] = event
                self._by_author[event.author][event.id] = event
                self._summaries.pop(event.author, None)
                added += 1
        return added

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def events(self) -> list[Event]:
        return list(self._by_id.values())

    def get(self, event_id: str) -> Event | None:
        return self._by_id.get(event_id)

    def _prefix(self, author: str) -> tuple[int, str | None]:
        by_seq: dict[int, list[Event]] = defaultdict(list)
        for event in self._by_author[author].values():
            by_seq[event.seq].append(event)
        seq, head = 0, None
        while len(by_seq.get(seq + 1, ())) == 1:
            event = by_seq[seq + 1][0]
            if event.prev != head:
                break
            seq, head = event.seq, event.id
        return seq, head

    def summary(self) -> Summary:
        authors = {}
        for author, events in self._by_author.items():
            cached = self._summaries.get(author)
            if cached is None:
                seq, head = self._prefix(author)
                digest = hashlib.sha256("".join(sorted(events)).encode()).hexdigest()
                cached = self._summaries[author] = AuthorSummary(seq, head, digest)
            authors[author] = cached
        return Summary(authors)

    def offer_for(self, theirs: Summary) -> Offer | None:
        """What we hold that their summary suggests they might lack, author by author."""
        ours = self.summary().authors
        offered: dict[str, AuthorOffer] = {}
        for author in sorted(ours):
            other = theirs.authors.get(author)
            if other is not None and other.ids_digest == ours[author].ids_digest:
                continue
            held = self._by_id.get(other.prefix_id) if other and other.prefix_id else None
            # their chain head is ours too, and our own copy has no fork up to it (a sibling
            # branch below their head must travel, or they would never see the fork)
            shared = (held is not None and held.author == author and other is not None
                      and held.seq == other.prefix_seq and ours[author].prefix_seq >= other.prefix_seq)
            after = held.seq if shared and held is not None else 0
            mine = sorted(self._by_author[author].values(), key=lambda e: (e.seq, e.id))
            offered[author] = AuthorOffer(after, tuple(e.id for e in mine if e.seq > after))
        return Offer(offered) if offered else None

    def answer_offer(self, offer: Offer, limit: int) -> tuple[Need | None, Events | None]:
        """Ask for what they offered and we lack; push what we hold of those authors and they lack.

        Both answers carry at most ``limit`` items; the next round continues where they stop.
        """
        need = tuple(i for a in offer.authors.values() for i in a.ids if i not in self._by_id)
        push: list[Event] = []
        for author, theirs in sorted(offer.authors.items()):
            known = set(theirs.ids)
            mine = sorted(self._by_author.get(author, {}).values(), key=lambda e: (e.seq, e.id))
            push.extend(e for e in mine if e.seq > theirs.after_seq and e.id not in known)
        return (Need(need[:limit]) if need else None), (Events(tuple(push[:limit])) if push else None)

    def answer_need(self, need: Need) -> Events | None:
        found = tuple(e for i in need.ids if (e := self._by_id.get(i)) is not None)
        return Events(found) if found else None
