"""What a member's running pulls are fetching, so that two pulls do not fetch one event.

A member pulls from several peers at once (``swarm observe`` from every peer it is
connected to; a running member from up to ``SYNC_FANOUT`` new connections), and each
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
  pull holds it drops, and what another pull still asks for it waits on (``pending``),
  up to ``HOLD_S`` in all; the rest it fetches. A peer's asks can therefore delay an
  honest pull, never starve it: they are honoured only while its pull moves
  (``FRESH_S``), for ``HOLD_S`` from the first ask, and a pull waits on them ``HOLD_S``
  at most.
* **held**: events a pull received, checked and admitted, not stored yet. They are
  stored by that pull (each ``STORE_EVERY`` events, each ``STORE_AFTER_S``, and at its
  end, whatever ends it), so another pull drops them for good. A pull that dropped
  some is not *whole*: when it ends they may not be in the index yet, and a whole pull
  is what tells a member the state of its own feed. A one-shot round pulls again from
  those peers once every pull has ended.

Memory holds what each pull asked for in the last ``HOLD_S`` and what it holds unstored,
whatever peers send.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio

from agents.core.events import Event
from agents.core.sync import EventIndex, SeqRange

FRESH_S = 3.0  # a pull's asks are honoured this long after its last frame
WAIT_S = 0.2  # how often a pull with nothing in flight looks again at what it put off
HOLD_S = 5.0  # and an ask this long after it was first made, at most (under PULL_DEADLINE: a
# pull waiting on another's asks gets no frame meanwhile)

Run = tuple[int, int]  # first and last seq, inclusive


def _cut(wanted: SeqRange, runs: Iterable[Run]) -> list[SeqRange]:
    """The pieces of ``wanted`` outside ``runs``."""
    pieces: list[SeqRange] = []
    start = wanted.first
    for first, last in sorted(run for run in runs if run[1] >= wanted.first and run[0] <= wanted.last):
        if first > start:
            pieces.append(SeqRange(wanted.author, start, first - 1))
        start = max(start, last + 1)
        if start > wanted.last:
            return pieces
    if start <= wanted.last:
        pieces.append(SeqRange(wanted.author, start, wanted.last))
    return pieces


def _seqs(pieces: Iterable[SeqRange]) -> int:
    return sum(len(piece) for piece in pieces)


def _asked(event_id: str, asking: list[Claim], now: float) -> bool:
    """Another moving pull asked for ``event_id`` under ``HOLD_S`` ago."""
    return any(c._asked_ids.get(event_id, now - HOLD_S) > now - HOLD_S for c in asking)


class Claim:
    """One pull's marks on the ledger it came from (see the module's docstring)."""

    def __init__(self, ledger: PullClaims, index: EventIndex, now: float,
                 settle: Callable[[], None] = lambda: None) -> None:
        self._ledger = ledger
        self._index = index
        self._settle = settle
        self.moved_at = now
        self.left = 0  # wanted ids and seqs dropped because another pull held them
        self._asked_ids: dict[str, float] = {}  # id -> when first asked
        self._asked_runs: dict[str, list[tuple[int, int, float]]] = {}  # author -> (first, last, when)
        self._held_ids: set[str] = set()
        self._held_runs: dict[str, list[Run]] = {}
        self._deferred_ids: list[str] = []
        self._deferred_ranges: list[SeqRange] = []
        self._waiting_since: float | None = None  # when the end game began

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
        others = [c for c in self._ledger.open_claims() if c is not self]
        asking = [c for c in others if c.moved_at >= now - FRESH_S]
        taken_ids: list[str] = []
        position = 0
        for position, event_id in enumerate(ids):  # noqa: B007 (read after the loop)
            if len(taken_ids) >= room:
                break
            if any(event_id in c._held_ids for c in others):
                self.left += 1
            elif _asked(event_id, asking, now):
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
            room = self._take_range(wanted, others, asking, now, room, taken, left, self._deferred_ranges)
        if room > 0:  # the list is used up (or it would have filled the room): the end game
            if self._waiting_since is None:
                self._waiting_since = now
            if now - self._waiting_since >= HOLD_S:  # waited long enough on others' asks: fetch it all
                asking = []
            more = self._end_game_ids(others, asking, now, room)
            taken_ids.extend(more)
            if room > len(more):
                self._end_game_ranges(others, asking, now, room - len(more), taken)
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

    def _take_range(self, wanted: SeqRange, others: list[Claim], asking: list[Claim], now: float, room: int,
                    taken: list[SeqRange], left: list[SeqRange], deferred: list[SeqRange]) -> int:
        """``wanted`` less what others hold, into ``taken`` (up to ``room``), ``left`` (past
        it) and ``deferred`` (asked by others). Returns the room left."""
        asked = [(first, last) for c in asking for first, last, when in c._asked_runs.get(wanted.author, ())
                 if when > now - HOLD_S]
        for piece in self._drop_held(wanted, others):
            unasked = _cut(piece, asked)
            for part in unasked:
                if room <= 0:
                    left.append(part)
                    continue
                if len(part) > room:
                    left.append(SeqRange(part.author, part.first + room, part.last))
                    part = SeqRange(part.author, part.first, part.first + room - 1)
                taken.append(part)
                room -= len(part)
            deferred.extend(_cut(piece, [(p.first, p.last) for p in unasked]))
        return room

    def _drop_held(self, wanted: SeqRange, others: list[Claim]) -> list[SeqRange]:
        free = _cut(wanted, [run for c in others for run in c._held_runs.get(wanted.author, ())])
        self.left += len(wanted) - _seqs(free)
        return free

    def _end_game_ids(self, others: list[Claim], asking: list[Claim], now: float, room: int) -> list[str]:
        """Deferred ids nobody holds or asks for any longer, up to ``room``; those still
        asked stay deferred, those held are dropped."""
        taken: list[str] = []
        still: list[str] = []
        for event_id in self._deferred_ids:
            if event_id in self._index:
                continue
            if any(event_id in c._held_ids for c in others):
                self.left += 1
            elif len(taken) < room and not _asked(event_id, asking, now):
                taken.append(event_id)
            else:
                still.append(event_id)
        self._deferred_ids = still
        return taken

    def _end_game_ranges(self, others: list[Claim], asking: list[Claim], now: float, room: int,
                         taken: list[SeqRange]) -> None:
        deferred, self._deferred_ranges = self._deferred_ranges, []
        for wanted in deferred:
            stored = [(e.seq, e.seq) for e in self._index.in_range(wanted)]
            for part in _cut(wanted, stored):
                # what room does not take goes back to the deferred list, as what is still asked
                room = self._take_range(part, others, asking, now, room, taken, self._deferred_ranges,
                                        self._deferred_ranges)

    def _ask(self, ids: list[str], ranges: list[SeqRange], now: float) -> None:
        """Mark what this pull asks for now. An ask stands until ``HOLD_S`` has passed (its
        answer is screened and stored well before, or the pull stalled), so memory holds what
        a pull asked for in the last ``HOLD_S``, whatever peers send."""
        expired = now - HOLD_S
        if any(when <= expired for when in self._asked_ids.values()):
            self._asked_ids = {i: when for i, when in self._asked_ids.items() if when > expired}
        for author in [a for a, runs in self._asked_runs.items() if any(r[2] <= expired for r in runs)]:
            kept = [run for run in self._asked_runs[author] if run[2] > expired]
            if kept:
                self._asked_runs[author] = kept
            else:
                del self._asked_runs[author]
        for event_id in ids:
            self._asked_ids.setdefault(event_id, now)  # asked again (left for later): the first time stands
        for wanted in ranges:
            runs = self._asked_runs.setdefault(wanted.author, [])
            runs.extend((p.first, p.last, now) for p in _cut(wanted, [(f, la) for f, la, _ in runs]))

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
