"""Our own stalls: stretches of time in which this process did not run at all.

A paused container, a ``SIGSTOP``, a starved machine or a long garbage collection stops
every task at once. On waking, every deadline that fell inside the stall has passed, and
the replies that arrived meanwhile are still unread: a ping or a pull that "timed out"
across such a stretch says nothing about the peer. ``StallWatch`` notices them so that
the callers who judge peers by deadlines can tell their own silence from the peer's.
"""

from __future__ import annotations

import trio

TICK = 0.25  # how often the watch wakes
SLACK = 1.0  # a wake this much later than asked means this process did not run meanwhile


class StallWatch:
    """Start with ``nursery.start_soon(watch.run)``; ask ``stalled_since(t)``."""

    def __init__(self) -> None:
        self._last_tick: float | None = None  # trio time of the watch's latest wake
        self._stall_ended = float("-inf")  # trio time at which the latest stall was noticed
        self.stalls = 0  # how many it has noticed

    async def run(self) -> None:
        self._last_tick = trio.current_time()
        while True:
            await trio.sleep(TICK)
            now = trio.current_time()
            if now - self._last_tick > TICK + SLACK:
                self._stall_ended = now
                self.stalls += 1
            self._last_tick = now

    def stalled_since(self, start: float) -> bool:
        """Whether this process stopped running at some moment after trio time ``start``,
        including a stall it is waking from right now (the watch has not run yet, but a
        caller whose deadline passed during the stall may run before it)."""
        if self._stall_ended > start:
            return True
        if self._last_tick is None:
            return False
        return trio.current_time() - self._last_tick > TICK + SLACK
