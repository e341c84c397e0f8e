"""Hybrid logical clocks (Kulkarni et al.), fed by an injected physical clock.

A timestamp is ``(ms, counter)``: milliseconds of physical time, and a counter
that orders events within one millisecond and carries causality when a remote
clock runs ahead. Timestamps compare as tuples; with the author's peer id as a
tie-break every event gets a place in one total order that all members agree on.

The clock never reads the wall clock itself: ``now_ms`` is passed in, so the
simulation and the tests drive it with virtual time.

Drift: a remote timestamp may pull our clock forward, but only up to
``max_drift_ms`` ahead of our physical time; an event further ahead is *held*
by the caller (see ``agents.core.intake``) until our physical clock catches up,
never refused for good, because "too far ahead" depends on who looks and when.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

DEFAULT_MAX_DRIFT_MS = 10_000
MAX_COUNTER = 2**31 - 1  # the schema's bound; a counter never passes it (see ``HybridClock._next``)


class Timestamp(NamedTuple):
    """A hybrid logical timestamp. Ordered as a tuple: physical ms first, then counter."""

    ms: int
    counter: int = 0

    def plus_ms(self, delta_ms: int) -> Timestamp:
        """The earliest timestamp at least ``delta_ms`` of physical time after this one."""
        return Timestamp(self.ms + delta_ms, 0)

    def __str__(self) -> str:
        return f"{self.ms}.{self.counter}"


def ts_list(ts: Timestamp | None) -> list[int] | None:
    """A timestamp as JSON wants it ([ms, counter]), or None."""
    return None if ts is None else [ts.ms, ts.counter]


class ClockDriftError(ValueError):
    """A remote timestamp too far ahead of our physical clock to be merged yet."""

    def __init__(self, remote: Timestamp, physical_ms: int, max_drift_ms: int) -> None:
        self.remote = remote
        self.physical_ms = physical_ms
        self.max_drift_ms = max_drift_ms
        super().__init__(
            f"timestamp {remote} is {remote.ms - physical_ms} ms ahead of the local clock "
            f"(at most {max_drift_ms} ms allowed); hold the event until the clock catches up"
        )


class HybridClock:
    """A hybrid logical clock. ``tick()`` stamps a local event; ``observe()`` merges a remote one.

    Guarantees: successive ``tick()`` results strictly increase, and a ``tick()``
    after ``observe(t)`` is strictly greater than ``t``. Both hold even when the
    physical clock goes backwards.
    """

    def __init__(
        self, now_ms: Callable[[], int], max_drift_ms: int = DEFAULT_MAX_DRIFT_MS
    ) -> None:
        self._now_ms = now_ms
        self.max_drift_ms = max_drift_ms
        self._last = Timestamp(0, 0)

    @property
    def last(self) -> Timestamp:
        return self._last

    def physical_ms(self) -> int:
        return self._now_ms()

    def _next(self) -> Timestamp:
        physical = self._now_ms()
        if physical > self._last.ms:
            return Timestamp(physical, 0)
        if self._last.counter >= MAX_COUNTER:
            # a peer stamped an event at the counter's limit: step to the next millisecond
            # rather than stamp a counter no receiver would accept
            return Timestamp(self._last.ms + 1, 0)
        return Timestamp(self._last.ms, self._last.counter + 1)

    def tick(self) -> Timestamp:
        self._last = self._next()
        return self._last

    def peek(self) -> Timestamp:
        """The timestamp ``tick()`` would return now, without advancing the clock."""
        return self._next()

    def check_drift(self, remote: Timestamp) -> None:
        """Raise ClockDriftError when ``remote`` is too far ahead to merge now."""
        physical = self._now_ms()
        if remote.ms - physical > self.max_drift_ms:
            raise ClockDriftError(remote, physical, self.max_drift_ms)

    def observe(self, remote: Timestamp) -> None:
        """Merge a remote timestamp so that our next tick is causally after it."""
        self.check_drift(remote)
        if remote > self._last:
            self._last = remote

    def restore(self, last: Timestamp) -> None:
        """After a restart: never stamp anything at or before our own last event."""
        if last > self._last:
            self._last = last
