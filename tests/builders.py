"""Admitted authors for tests: one test cluster and authority, feeds whose clock the test sets.

Every event a test builds carries a valid ticket of ``CLUSTER`` signed by
``AUTHORITY``, unless the test forges one on purpose (``foreign_ticket``).
"""

from __future__ import annotations

import hashlib

from agents.core.admission import Credentials, Gate, issue
from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import Event, GoalBody, Role
from agents.core.identity import Identity

CLUSTER = "test"
AUTHORITY = Identity(hashlib.sha256(b"test authority").digest())


def identity(name: str) -> Identity:
    return Identity(hashlib.sha256(name.encode()).digest())


def gate() -> Gate:
    return Gate(CLUSTER, AUTHORITY.peer_id)


def ticket_sig(peer: str, role: str, authority: Identity = AUTHORITY, cluster: str = CLUSTER) -> str:
    return issue(authority, cluster, peer, role).sig


def credentials(name: str, role: str) -> Credentials:
    ident = identity(name)
    return Credentials(ident, issue(AUTHORITY, CLUSTER, ident.peer_id, role), gate())


class Feed:
    """An admitted author whose clock the test sets before each event (``at``)."""

    def __init__(self, name: str, role: Role, *, ticket: str | None = None) -> None:
        self.now = 0
        ident = identity(name)
        self.author = Author(ident, role, HybridClock(lambda: self.now), ticket or ticket_sig(ident.peer_id, role))
        self.history: list[Event] = []

    @property
    def peer_id(self) -> str:
        return self.author.peer_id

    def at(self, ms: int, body: object) -> Event:
        self.now = max(ms, self.now)
        event = self.author.sign(body)  # type: ignore[arg-type]
        self.history.append(event)
        return event

    def go_on_after(self, event: Event) -> None:
        """Sign the next event after ``event``, an earlier one of this feed: that forks the feed
        there, and the feed goes on along the new branch (an equivocator signing on both)."""
        self.author.seq, self.author.prev = event.seq, event.id

    def fork(self, ms: int, body: object) -> Event:
        """Sign ``body`` at the seq of this feed's last event, citing the same predecessor: a
        second branch (equivocation). The feed then continues after its first branch."""
        last = self.history[-1]
        self.author.seq, self.author.prev = last.seq - 1, last.prev
        self.now = max(ms, self.now)
        event = self.author.sign(body)  # type: ignore[arg-type]
        self.author.seq, self.author.prev = last.seq, last.id
        return event


def goal(text: str, scorers: list[str], quorum: int, *, max_depth: int = 2, lease_ms: int = 1000,
         hold_ms: int = 4000, round_ms: int = 1000) -> GoalBody:
    return GoalBody(text=text, scorers=tuple(sorted(scorers)), quorum=quorum, max_depth=max_depth,
                    claim_lease_ms=lease_ms, hold_limit_ms=hold_ms, round_ms=round_ms)
