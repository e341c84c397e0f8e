"""How many leaves one executor worked on together, read from the signed events alone."""

from __future__ import annotations

from collections.abc import Iterable

from agents.core.events import ClaimBody, Event, FailureBody, ResultBody


def most_leaves_worked_at_once(events: Iterable[Event]) -> int:
    """The most leaves one executor worked on together: a leaf from its claim to its own result
    (or failure) on that claim, by the events' clock. 0 when no claim was answered."""
    events = list(events)
    spans: dict[str, list[tuple[int, int]]] = {}
    claimed = {e.id: e for e in events if isinstance(e.body, ClaimBody)}
    for event in events:
        if isinstance(event.body, (ResultBody, FailureBody)) and event.body.claim in claimed:
            claim = claimed[event.body.claim]
            spans.setdefault(event.author, []).append((claim.ts.ms, event.ts.ms))
    return max((max(sum(1 for s, e in mine if s <= start < e) for start, _ in mine) for mine in spans.values()),
               default=0)
