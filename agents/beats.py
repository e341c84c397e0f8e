"""Timers that never beat in step with another member's.

Members started together (a lab, a bench, a compose file brought up at once), or all
woken by the same event, ran their periodic work in the same second: at fifty members
on two cores every sync round and every status heartbeat of the cluster came at once,
both cores were saturated for seconds, and gossip arriving then was seconds late. A
``Beats`` gives each interval a factor between ``1 - spread`` and ``1 + spread``, drawn
afresh each time, so that phases drift apart and stay apart while the mean interval (so
the load) is unchanged. It is seeded by the member's own peer id and the timer's name:
the same member beats at the same times in a simulated run (no unseeded random source,
no arrival order or wall clock), and two members never share a sequence.
"""

from __future__ import annotations

import hashlib
import random


class Beats:
    """Intervals around a mean, each drawn apart (see the module's docstring)."""

    def __init__(self, peer_id: str, timer: str, spread: float) -> None:
        if not 0 <= spread < 1:
            raise ValueError(f"spread {spread} must be in [0, 1): an interval must stay positive")
        self._spread = spread
        self._draws = random.Random(hashlib.sha256(f"{timer}/{peer_id}".encode()).digest())

    def factor(self) -> float:
        """The next draw: a factor in [1 - spread, 1 + spread) for an interval whose mean may
        change before it ends (a status heartbeat's follows the cluster's size)."""
        return 1 + self._spread * (2 * self._draws.random() - 1)

    def next(self, mean: float) -> float:
        """The next interval: ``mean`` times the next ``factor``."""
        return mean * self.factor()
