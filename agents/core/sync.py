"""Catch-up sync as a transport-free state machine: what to tell a peer, what to send it.

Gossip is the fast path and loses messages; this is what guarantees that two
members who talk end up holding the same event set. It knows nothing of
streams: a driver (the libp2p adapter, or the simulator) carries the messages.

One exchange, run by both sides at once (vocabulary after Automerge's sync):

1. ``Summary``: for every author we hold, ``our_prefix`` (the highest seq up to
   which our copy of the feed is gap-free and fork-free, and the id there) and
   a digest of *all* ids we hold of that author.
2. On their summary, for each author whose digest differs from ours we send an
   ``Offer``: what we hold of that author. Because feeds are hash chains, if
   we hold *their* prefix head (same id at the same seq), we share everything
   up to it and only offer what lies after; otherwise (a fork, or they hold
   nothing) we offer the author's whole feed. Forks therefore travel in full,
   and both sides see the same proof of equivocation. When what we offer of an
   author is one gap-free, fork-free run of its chain (nearly always), the offer
   is that run (``AuthorRange``: after which seq, through which seq, ending at
   which id) instead of its ids: a puller holding that head at that seq holds
   the whole run and asks nothing; one that lacks it asks for the seqs. Ids
   travel only for feeds with gaps or forks.
3. On their offer: ``Need`` the ids and runs we lack; and since we now know
   exactly what they hold of those authors, we push the events they lack in
   ``Events``.
4. On their need: ``Events`` with what they asked for.

When both summaries match, nothing is sent. Needs and pushes are bounded by the
caller's batch size (offers go whole here; ``agents.syncproto`` pages them); a driver
repeats the exchange until a round sends nothing.
"""

from __future__ import annotations

import bisect
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

    def holds_through(self, event: Event) -> bool:
        """Whether the feed of ``event``'s author is held gap-free up to ``event`` (and no
        further): what ``swarm submit`` reads, in a summary a member served, as its goal held."""
        mine = self.authors.get(event.author)
        return mine is not None and mine.prefix_id == event.id


@dataclass(frozen=True)
class AuthorOffer:
    """We hold every event of this author up to ``after_seq`` (a chain prefix we share with
    you), and beyond it exactly ``ids``. Never truncated: an offer that left ids out could
    list only what the peer already holds and make a round look quiet while sets differ."""

    after_seq: int
    ids: tuple[str, ...]


@dataclass(frozen=True)
class AuthorRange:
    """We hold exactly this author's chain from ``after_seq`` + 1 through ``through``, ending
    at ``head``, and nothing else of theirs after ``after_seq``: one gap-free, fork-free run,
    offered without its ids. A puller holding ``head`` at ``through`` inside its own gap-free
    prefix holds the whole run (the chain's hashes say so) and asks nothing."""

    after_seq: int
    through: int
    head: str


@dataclass(frozen=True)
class Offer:
    authors: dict[str, AuthorOffer | AuthorRange]


@dataclass(frozen=True)
class SeqRange:
    """An author's events at seqs ``first`` through ``last``: what a puller asks of a run."""

    author: str
    first: int
    last: int

    def __len__(self) -> int:
        return self.last - self.first + 1

    def wire(self) -> list:
        """As a sync frame lists it: ``[author, first, last]``."""
        return [self.author, self.first, self.last]


@dataclass(frozen=True)
class Need:
    ids: tuple[str, ...]
    ranges: tuple[SeqRange, ...] = ()


@dataclass(frozen=True)
class Events:
    events: tuple[Event, ...]


SyncMessage = Summary | Offer | Need | Events


class EventIndex:
    """The events a member holds, indexed for sync. Add to it as events are stored."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._by_id: dict[str, Event] = {}
        self._by_author: dict[str, dict[str, Event]] = defaultdict(dict)
        # Summary entries and seq-ordered feeds per author, dropped when that author's events
        # change: members summarise on every pull and serve, while most authors are quiet
        # most of the time.
        self._summaries: dict[str, AuthorSummary] = {}
        self._feeds: dict[str, list[Event]] = {}
        self.add_all(events)

    def add_all(self, events: Iterable[Event]) -> int:
        added = 0
        for event in events:
            if event.id not in self._by_id:
                self._by_id[event.id] = event
                self._by_author[event.author][event.id] = event
                self._summaries.pop(event.author, None)
                feed = self._feeds.get(event.author)
                if feed is not None:  # kept in order as the author goes on: needs read it by seq
                    bisect.insort(feed, event, key=lambda e: (e.seq, e.id))
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

    def feed(self, author: str) -> list[Event]:
        """The author's events we hold, by seq (and id, where a fork puts two at one seq)."""
        cached = self._feeds.get(author)
        if cached is None:
            held = self._by_author.get(author)
            if held is None:  # an author we hold nothing of: nothing to keep (a need may name any)
                return []
            cached = self._feeds[author] = sorted(held.values(), key=lambda e: (e.seq, e.id))
        return cached

    def in_range(self, wanted: SeqRange) -> list[Event]:
        """The author's events we hold at seqs ``first`` through ``last``, by seq."""
        feed = self.feed(wanted.author)
        start = bisect.bisect_left(feed, wanted.first, key=lambda e: e.seq)
        end = bisect.bisect_right(feed, wanted.last, key=lambda e: e.seq)
        return feed[start:end]

    def holds_run(self, author: str, run: AuthorRange) -> bool:
        """Whether we hold the whole of ``run``: its head at its last seq, inside our own
        gap-free, fork-free prefix of the author's chain (a hash chain: the same head at
        the same seq means the same events before it)."""
        head = self._by_id.get(run.head)
        return (head is not None and head.author == author and head.seq == run.through
                and self.summary_of(author).prefix_seq >= run.through)

    def summary_of(self, author: str) -> AuthorSummary:
        cached = self._summaries.get(author)
        if cached is None:
            seq, head = self._prefix(author)
            digest = hashlib.sha256("".join(sorted(self._by_author[author])).encode()).hexdigest()
            cached = self._summaries[author] = AuthorSummary(seq, head, digest)
        return cached

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
        return Summary({author: self.summary_of(author) for author in self._by_author})

    def offer_for(self, theirs: Summary) -> Offer | None:
        """What we hold that their summary suggests they might lack, author by author."""
        ours = self.summary().authors
        offered: dict[str, AuthorOffer | AuthorRange] = {}
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
            prefix = ours[author]
            if prefix.prefix_id is not None and prefix.prefix_seq > after \
                    and len(self._by_author[author]) == prefix.prefix_seq:
                # all we hold of the author is its chain: the run after theirs, without ids
                offered[author] = AuthorRange(after, prefix.prefix_seq, prefix.prefix_id)
            else:
                offered[author] = AuthorOffer(after, tuple(e.id for e in self.feed(author) if e.seq > after))
        return Offer(offered) if offered else None

    def answer_offer(self, offer: Offer, limit: int) -> tuple[Need | None, Events | None]:
        """Ask for what they offered and we lack; push what we hold of those authors and they lack.

        Both answers carry at most ``limit`` items; the next round continues where they stop.
        """
        need, ranges = self.wanted(offer)
        push: list[Event] = []
        for author, theirs in sorted(offer.authors.items()):
            mine = [e for e in self.feed(author) if e.seq > theirs.after_seq]
            if isinstance(theirs, AuthorOffer):
                known = set(theirs.ids)
                push.extend(e for e in mine if e.id not in known)
            elif self.holds_run(author, theirs):  # they hold our chain through their head
                chain = self._chain_ids(author, theirs.through)
                push.extend(e for e in mine if e.id not in chain)
            else:
                push.extend(mine)
        ranges, _ = split_ranges(ranges, limit - min(limit, len(need)))
        answer = Need(tuple(need[:limit]), tuple(ranges)) if need or ranges else None
        return answer, (Events(tuple(push[:limit])) if push else None)

    def wanted(self, offer: Offer) -> tuple[list[str], list[SeqRange]]:
        """What of ``offer`` we lack: the offered ids we do not hold, and the runs we do not
        hold whole (asked for by seq, after the seq we share)."""
        ids = [i for a in offer.authors.values() if isinstance(a, AuthorOffer) for i in a.ids if i not in self._by_id]
        ranges = [SeqRange(author, a.after_seq + 1, a.through) for author, a in offer.authors.items()
                  if isinstance(a, AuthorRange) and not self.holds_run(author, a)]
        return ids, ranges

    def _chain_ids(self, author: str, through: int) -> set[str]:
        """The ids of our gap-free prefix of the author's chain up to seq ``through``."""
        return {e.id for e in self.feed(author) if e.seq <= through and e.seq <= self.summary_of(author).prefix_seq}

    def answer_need(self, need: Need) -> Events | None:
        found = [e for i in need.ids if (e := self._by_id.get(i)) is not None]
        for wanted in need.ranges:
            found.extend(self.in_range(wanted))
        return Events(tuple(found)) if found else None


def split_ranges(ranges: list[SeqRange], room: int) -> tuple[list[SeqRange], list[SeqRange]]:
    """The first ``room`` seqs of ``ranges`` (whole ranges, then part of the next), and the rest."""
    taken: list[SeqRange] = []
    for position, wanted in enumerate(ranges):
        if room <= 0:
            return taken, ranges[position:]
        if len(wanted) > room:
            cut = wanted.first + room
            taken.append(SeqRange(wanted.author, wanted.first, cut - 1))
            return taken, [SeqRange(wanted.author, cut, wanted.last), *ranges[position + 1:]]
        taken.append(wanted)
        room -= len(wanted)
    return taken, []
