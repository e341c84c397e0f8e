"""What a member's running pulls have asked for, so that two pulls do not fetch one event.

A member pulls from several peers at once (``swarm observe`` from every peer it is
connected to; a running member from up to ``SYNC_FANOUT`` new connections), and each
pull asks for what its *index* lacks. Events another pull has asked for but not stored
yet are not in the index, so before this ledger a late joiner connected to three
holders parsed, verified and stored its backlog three times: 20k events from three
holders took 14.8 s and 44.3 MB, from one 6.7 s and 14.8 MB.

Each pull opens a ``Claim``. Before each need it ``take``s its next batch: ids and seqs
another *fresh* pull has claimed are skipped, the rest is claimed for this one. A claim
is released when its pull ends, after it stored what it received (a failed pull too), so
what another pull skipped is either in the index by then or wanted again by the next
pull. Several pulls catching up on one backlog thereby split it between them, a batch
at a time, instead of each fetching all of it.

A pull that skipped anything did not see all its peer holds, so it is not a *whole*
pull (``Claim.skipped``). A one-shot round pulls again from the peers whose pulls
skipped, once every pull of the round has ended.

A claim is honoured only while its pull moves (``Claim.moved``, at each frame; a
stalled pull holds nobody back after ``FRESH_S``), and only for ``HOLD_S`` from when
it was first made, however the pull moves: a hostile peer that answers one event a
frame, just often enough, holds back the other pulls' fetch of at most the
``NEEDS_AHEAD`` batches it asked for, and for ``HOLD_S``; asking again for what it left
for later does not renew a claim. An honest answer slower than that costs a fetch
twice, never a missing event. Everything here is the member's own bookkeeping: nothing
a peer sends is trusted more or less because of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import trio

from agents.core.sync import SeqRange

FRESH_S = 3.0  # a pull's claims are honoured this long after its last frame
HOLD_S = 10.0  # and a claim this long after it was made, at most


class Claim:
    """One pull's claims on the ledger it came from."""

    def __init__(self, ledger: PullClaims, key: int, now: float) -> None:
        self._ledger = ledger
        self.key = key
        self.moved_at = now
        self.skipped = 0  # ids and seqs skipped because another pull had claimed them

    def moved(self) -> None:
        """The pull received a frame: its claims stay honoured ``FRESH_S`` longer."""
        self.moved_at = self._ledger.clock()

    def take(self, ids: list[str], ranges: list[SeqRange],
             room: int) -> tuple[list[str], list[SeqRange], list[str], list[SeqRange]]:
        """Up to ``room`` ids and seqs from the front of ``ids`` then ``ranges``, leaving out
        what other fresh pulls claimed (counted in ``skipped``); what is taken is claimed.
        Returns what to ask for now and what is left for the next batch."""
        return self._ledger.take(self, ids, ranges, room)

    def close(self) -> None:
        """The pull ended and stored what it got: its claims go."""
        self._ledger.release(self)


class PullClaims:
    """The ledger of one member's running pulls (see the module's docstring)."""

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self.clock = clock
        self._keys = itertools.count()
        self._open: dict[int, Claim] = {}
        self._ids: dict[str, tuple[int, float]] = {}  # event id -> (key of the claim that asked, when)
        self._seqs: dict[str, list[tuple[int, int, int, float]]] = {}  # author -> (first, last, key, when)

    def open(self) -> Claim:
        claim = Claim(self, next(self._keys), self.clock())
        self._open[claim.key] = claim
        return claim

    def release(self, claim: Claim) -> None:
        if self._open.pop(claim.key, None) is None:
            return
        self._ids = {i: held for i, held in self._ids.items() if held[0] != claim.key}
        for author in list(self._seqs):
            kept = [run for run in self._seqs[author] if run[2] != claim.key]
            if kept:
                self._seqs[author] = kept
            else:
                del self._seqs[author]

    def _others(self, claim: Claim) -> set[int]:
        """Keys of the other pulls whose claims are honoured now (they moved lately)."""
        since = self.clock() - FRESH_S
        return {key for key, other in self._open.items() if key != claim.key and other.moved_at >= since}

    def take(self, claim: Claim, ids: list[str], ranges: list[SeqRange],
             room: int) -> tuple[list[str], list[SeqRange], list[str], list[SeqRange]]:
        now = self.clock()
        others = self._others(claim)
        made_after = now - HOLD_S
        taken_ids: list[str] = []
        position = 0
        for position, event_id in enumerate(ids):  # noqa: B007 (read after the loop)
            if len(taken_ids) >= room:
                break
            key, when = self._ids.get(event_id, (-1, 0.0))
            if key in others and when > made_after:
                claim.skipped += 1
                continue
            taken_ids.append(event_id)
            if key != claim.key:  # asked again (left for later): the first claim's time stands
                self._ids[event_id] = (claim.key, now)
        else:
            position = len(ids)
        room -= len(taken_ids)
        taken_ranges: list[SeqRange] = []
        left: list[SeqRange] = []
        for at, wanted in enumerate(ranges):
            if room <= 0:
                left.extend(ranges[at:])
                break
            pieces = self._cut(wanted, lambda key, when: key in others and when > made_after)
            claim.skipped += len(wanted) - sum(len(piece) for piece in pieces)
            for piece in pieces:
                if room <= 0:
                    left.append(piece)
                    continue
                if len(piece) > room:
                    left.append(SeqRange(piece.author, piece.first + room, piece.last))
                    piece = SeqRange(piece.author, piece.first, piece.first + room - 1)
                taken_ranges.append(piece)
                room -= len(piece)
                runs = self._seqs.setdefault(piece.author, [])
                runs.extend((new.first, new.last, claim.key, now)
                            for new in self._cut(piece, lambda key, _when: key == claim.key))
        return taken_ids, taken_ranges, ids[position:], left

    def _cut(self, wanted: SeqRange, honoured: Callable[[int, float], bool]) -> list[SeqRange]:
        """The pieces of ``wanted`` outside the claimed runs ``honoured(key, when)`` keeps."""
        runs = sorted((first, last) for first, last, key, when in self._seqs.get(wanted.author, ())
                      if last >= wanted.first and first <= wanted.last and honoured(key, when))
        pieces: list[SeqRange] = []
        start = wanted.first
        for first, last in runs:
            if first > start:
                pieces.append(SeqRange(wanted.author, start, first - 1))
            start = max(start, last + 1)
            if start > wanted.last:
                break
        if start <= wanted.last:
            pieces.append(SeqRange(wanted.author, start, wanted.last))
        return pieces


__all__ = ["FRESH_S", "HOLD_S", "Claim", "PullClaims"]
