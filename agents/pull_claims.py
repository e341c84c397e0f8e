"""What a member's running pulls are fetching, so that two pulls do not fetch one event.

A member pulls from several peers at once (``swarm observe`` from every peer it is
connected to; a running member from a few peers each round, and from new connections), and each
pull asks for what its *index* lacks. Events another pull is fetching are not in the
index yet, so before this ledger a late joiner connected to three holders parsed,
verified and stored its backlog three times (20k events: 44.3 MB and 13.1 s, against
14.8 MB and 7 s from one holder; with it, 14.8 MB and 7-8 s from three).

Each pull opens a ``Claim`` and cuts each need's batch with ``Claim.take``. Two marks
steer it, both the member's own bookkeeping (nothing a peer says is believed for them):

* **asked**: the ids and seqs a pull asked for in the last ``HOLD_S`` (answered or
  not: an answer is checked, admitted and stored a frame or more after it comes).
  Another pull *defers* them: it fetches the rest of its list first and comes back to
  them at its end (the end game). Then what its index holds it skips, what another
  pull holds it drops, and what another pull still asks for it waits on (``pending``:
  it settles what it received, then looks again every ``WAIT_S``), up to ``HOLD_S`` in
  all; the rest it fetches. A peer's asks can therefore delay an honest pull, never
  starve it: they are honoured only while its pull moves (``FRESH_S``), for ``HOLD_S``
  from the first ask, and a pull waits on them ``HOLD_S`` at most.
* **held**: events a pull received, checked and admitted, not stored yet. That pull
  stores them (``agents.syncing``: each ``STORE_EVERY`` events, at a frame
  ``STORE_AFTER_S`` after its last store, before it waits, and at its end, whatever
  ends it), so another pull drops them.

A pull that left anything to another (held, or seqs stored while it deferred them) is not
*whole*: held events may not be stored when it ends, and a stored seq may be a fork's
other branch (the run's seqs are not checked against this peer's events at them). A
whole pull is what tells a member the state of its own feed; a one-shot round pulls
again from those peers once every pull has ended, and a running member's next pulls ask
again from its own gap-free prefix (``EventIndex.wanted``).

Memory holds about what each pull asked for in the last ``HOLD_S`` (dropped at its next
take after that) and what it holds unstored, whatever peers send; a take merges each
author's runs once, so a peer that splits its asks into single seqs costs a log factor.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

import trio

from agents.core.events import Event
from agents.core.sync import EventIndex, SeqRange
from agents.syncproto import Batches

WAIT_S = 0.2  # how often a pull with nothing in flight looks again at what it put off
FRESH_S = 3.0  # a pull's asks are honoured this long after its last frame
HOLD_S = 5.0  # and an ask this long after it was first made, at most (under PULL_DEADLINE: a
# pull waiting on another's asks gets no frame meanwhile)

Run = tuple[int, int]  # first and last seq, inclusive


class _Runs:
    """Seq runs merged and sorted, to cut ranges around in O(log n) each."""

    def __init__(self, runs: Iterable[Run]) -> None:
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        for first, last in sorted(runs):
            if self.lasts and first <= self.lasts[-1] + 1:
                self.lasts[-1] = max(self.lasts[-1], last)
            else:
                self.firsts.append(first)
                self.lasts.append(last)

    def cut(self, wanted: SeqRange) -> list[SeqRange]:
        """The pieces of ``wanted`` outside these runs."""
        pieces: list[SeqRange] = []
        start = wanted.first
        at = bisect.bisect_left(self.lasts, wanted.first)
        while at < len(self.firsts) and self.firsts[at] <= wanted.last:
            if self.firsts[at] > start:
                pieces.append(SeqRange(wanted.author, start, self.firsts[at] - 1))
            start = self.lasts[at] + 1
            at += 1
        if start <= wanted.last:
            pieces.append(SeqRange(wanted.author, start, wanted.last))
        return pieces


def _seqs(pieces: Iterable[SeqRange]) -> int:
    return sum(len(piece) for piece in pieces)


class _Others:
    """What the other open pulls hold and (honoured now) ask, as one ``take`` sees it: each
    author's runs merged once per take, however many pieces it cuts."""

    def __init__(self, others: list[Claim], now: float, honour_asks: bool) -> None:
        self.now = now
        self.others = others
        self.asking = [c for c in others if c.moved_at >= now - FRESH_S] if honour_asks else []
        self._held: dict[str, _Runs] = {}
        self._asked: dict[str, _Runs] = {}

    def holds(self, event_id: str) -> bool:
        return any(event_id in c._held_ids for c in self.others)

    def asks(self, event_id: str) -> bool:
        return any(c._asked_ids.get(event_id, self.now - HOLD_S) > self.now - HOLD_S for c in self.asking)

    def held(self, author: str) -> _Runs:
        if author not in self._held:
            self._held[author] = _Runs(run for c in self.others for run in c._held_runs.get(author, ()))
        return self._held[author]

    def asked(self, author: str) -> _Runs:
        if author not in self._asked:
            expired = self.now - HOLD_S
            self._asked[author] = _Runs((first, last) for c in self.asking
                                        for first, last, when in c._asked_runs.get(author, ()) if when > expired)
        return self._asked[author]


class Claim(Batches):
    """One pull's marks on the ledger it came from (see the module's docstring)."""

    def __init__(self, ledger: PullClaims, index: EventIndex, now: float,
                 settle: Callable[[], None] = lambda: None) -> None:
        self._ledger = ledger
        self._index = index
        self._settle = settle
        self.moved_at = now
        self.left = 0  # wanted ids and seqs not fetched here: another pull held them, or they were stored meanwhile
        self._asked_ids: dict[str, float] = {}  # id -> when first asked, oldest first
        self._asked_runs: dict[str, list[tuple[int, int, float]]] = {}  # author -> (first, last, when), oldest first
        self._held_ids: set[str] = set()
        self._held_runs: dict[str, list[Run]] = {}
        self._deferred_ids: list[str] = []
        self._deferred_ranges: list[SeqRange] = []
        self._waiting_since: float | None = None  # when the end game began waiting on others

    def moved(self) -> None:
        """The pull received a frame: its asks stay honoured ``FRESH_S`` longer."""
        self.moved_at = self._ledger.clock()

    def take(self, ids: list[str], ranges: list[SeqRange],
             room: int) -> tuple[list[str], list[SeqRange], list[str], list[SeqRange]]:
        """Up to ``room`` ids and seqs from the front of ``ids`` then ``ranges`` to ask for
        now (marked asked), and what is left of each. What others hold is dropped; what they
        asked for is deferred, and taken once ``ids`` and ``ranges`` are used up, unless by
        then it is stored or held, or still asked (``pending``)."""
        now = self._ledger.clock()
        view = _Others([c for c in self._ledger.open_claims() if c is not self], now, honour_asks=True)
        taken_ids: list[str] = []
        position = 0
        for position, event_id in enumerate(ids):  # noqa: B007 (read after the loop)
            if len(taken_ids) >= room:
                break
            if view.holds(event_id):
                self.left += 1
            elif view.asks(event_id):
                self._deferred_ids.append(event_id)
            else:
                taken_ids.append(event_id)
        else:
            position = len(ids)
        room -= len(taken_ids)
        taken: list[SeqRange] = []
        left: list[SeqRange] = []
        for at, wanted in enumerate(ranges):
            if room <= 0:
                left.extend(ranges[at:])
                break
            room = self._take_range(wanted, view, room, taken, left, self._deferred_ranges)
        if room > 0 and self.pending():  # the list is used up (or it would have filled the room)
            if self._waiting_since is None:
                self._waiting_since = now
            if now - self._waiting_since >= HOLD_S:  # waited long enough on others' asks: fetch it all
                view = _Others(view.others, now, honour_asks=False)
            more = self._end_game_ids(view, room)
            taken_ids.extend(more)
            if room > len(more):
                self._end_game_ranges(view, room - len(more), taken)
            if not self.pending():
                self._waiting_since = None
        self._ask(taken_ids, taken, now)
        return taken_ids, taken, ids[position:], left

    def pending(self) -> bool:
        """Deferred ids or seqs wait for the pull that asked for them (``take`` again later)."""
        return bool(self._deferred_ids or self._deferred_ranges)

    async def wait(self) -> None:
        """Settle what this pull received (checked, admitted and stored: the pulls waiting on
        it see it), then wait ``WAIT_S`` before ``take`` looks again."""
        self._settle()
        await trio.sleep(WAIT_S)

    def _take_range(self, wanted: SeqRange, view: _Others, room: int,
                    taken: list[SeqRange], left: list[SeqRange], deferred: list[SeqRange]) -> int:
        """``wanted`` less what others hold, into ``taken`` (up to ``room``), ``left`` (past
        it) and ``deferred`` (asked by others). Returns the room left."""
        free = view.held(wanted.author).cut(wanted)
        self.left += len(wanted) - _seqs(free)
        asked = view.asked(wanted.author)
        for piece in free:
            unasked = asked.cut(piece)
            for part in unasked:
                if room <= 0:
                    left.append(part)
                    continue
                if len(part) > room:
                    left.append(SeqRange(part.author, part.first + room, part.last))
                    part = SeqRange(part.author, part.first, part.first + room - 1)
                taken.append(part)
                room -= len(part)
            if _seqs(unasked) < len(piece):
                deferred.extend(_Runs((p.first, p.last) for p in unasked).cut(piece))
        return room

    def _end_game_ids(self, view: _Others, room: int) -> list[str]:
        """Deferred ids not stored, held or asked by now, up to ``room``; those still asked
        stay deferred, those another pull holds are left to it."""
        taken: list[str] = []
        still: list[str] = []
        for event_id in self._deferred_ids:
            if event_id in self._index:  # that very event (an id is its content's hash): whole still
                continue
            if view.holds(event_id):
                self.left += 1
            elif len(taken) < room and not view.asks(event_id):
                taken.append(event_id)
            else:
                still.append(event_id)
        self._deferred_ids = still
        return taken

    def _end_game_ranges(self, view: _Others, room: int, taken: list[SeqRange]) -> None:
        """As ``_end_game_ids`` for the deferred seqs. Seqs the index holds are left to the
        pull that stored them, not checked against this peer's events at them (a fork's other
        branch): this pull is not whole, and a whole one asks again from the member's own
        gap-free prefix (``EventIndex.wanted``)."""
        deferred, self._deferred_ranges = self._deferred_ranges, []
        for wanted in deferred:
            unstored = _Runs((e.seq, e.seq) for e in self._index.in_range(wanted)).cut(wanted)
            self.left += len(wanted) - _seqs(unstored)
            for part in unstored:
                # what room does not take goes back to the deferred list, as what is still asked
                room = self._take_range(part, view, room, taken, self._deferred_ranges, self._deferred_ranges)

    def _ask(self, ids: list[str], ranges: list[SeqRange], now: float) -> None:
        """Mark what this pull asks for now. An ask stands until ``HOLD_S`` has passed (its
        answer is screened and stored well before, or the pull stalled); asks are dropped at
        this pull's next take after that, so memory holds about what it asked for in the
        last ``HOLD_S``, whatever peers send."""
        expired = now - HOLD_S
        while self._asked_ids and next(iter(self._asked_ids.values())) <= expired:  # oldest first
            del self._asked_ids[next(iter(self._asked_ids))]
        for author in list(self._asked_runs):
            runs = self._asked_runs[author]
            fresh = next((at for at, run in enumerate(runs) if run[2] > expired), len(runs))
            if fresh == len(runs):
                del self._asked_runs[author]
            elif fresh:
                del runs[:fresh]
        for event_id in ids:
            self._asked_ids.setdefault(event_id, now)  # asked again (left for later): the first time stands
        for author in {wanted.author for wanted in ranges}:
            runs = self._asked_runs.setdefault(author, [])
            mine = _Runs((first, last) for first, last, _ in runs)
            runs.extend((piece.first, piece.last, now) for wanted in ranges if wanted.author == author
                        for piece in mine.cut(wanted))

    def hold(self, events: Iterable[Event]) -> None:
        """These events were checked and admitted, and this pull will store them."""
        for event in events:
            if event.id in self._held_ids:
                continue
            self._held_ids.add(event.id)
            runs = self._held_runs.setdefault(event.author, [])
            if runs and runs[-1][1] + 1 == event.seq:
                runs[-1] = (runs[-1][0], event.seq)
            else:
                runs.append((event.seq, event.seq))

    def stored(self) -> None:
        """What this pull held is in the store and the index now."""
        self._held_ids.clear()
        self._held_runs.clear()

    def close(self) -> None:
        """The pull ended and stored what it held: its marks go."""
        self._ledger.release(self)


class PullClaims:
    """The ledger of one member's running pulls (see the module's docstring)."""

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self.clock = clock
        self._open: dict[int, Claim] = {}

    def open(self, index: EventIndex, settle: Callable[[], None] = lambda: None) -> Claim:
        """A claim for a pull into ``index``; ``settle`` checks, admits and stores what it
        received so far (called before it waits on others)."""
        claim = Claim(self, index, self.clock(), settle)
        self._open[id(claim)] = claim
        return claim

    def open_claims(self) -> Iterable[Claim]:
        return self._open.values()

    def release(self, claim: Claim) -> None:
        self._open.pop(id(claim), None)


__all__ = ["FRESH_S", "HOLD_S", "WAIT_S", "Claim", "PullClaims"]
