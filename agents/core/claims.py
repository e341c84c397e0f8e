"""Claim arbitration for one leaf: who holds it, whose result counts.

The rule, over the set of claims on a leaf (nothing depends on arrival order or
on anybody's clock at fold time):

1. Only claims stamped after the leaf came to exist count (a claim cannot
   predate the acceptance that created its leaf).
2. Claims are taken in the total order (timestamp, author, id). The first one
   *holds* the leaf; its lease ends ``lease`` ms after its timestamp.
3. The holder's own ``renew`` events, stamped before the lease ends, push the
   end to ``renew + lease``. Its ``failure`` event, stamped before the end,
   ends the lease at once.
4. The holder's first ``result`` stamped before the lease ends is *the*
   accepted result: the leaf is done, every other claim has lost.
5. Otherwise the holder has *lapsed* (or *failed*): the next claim stamped at
   or after the end of the lease becomes the holder, and rule 3 repeats.
   Claims stamped while a lease was running have *lost* the race.

So a leaf never has two accepted results, and a result from a lapsed or losing
claim is kept only as evidence of duplicate work. An executor that wants to
take over a leaf whose holder went silent waits until its own hybrid clock has
passed the lease end, then claims: its claim is then after the end by
construction, and the fold agrees with it everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agents.core.clock import Timestamp
from agents.core.events import Event, FailureBody, RenewBody, ResultBody

ClaimStatus = Literal["won", "holding", "lapsed", "failed", "lost"]


@dataclass(frozen=True)
class ClaimView:
    id: str
    leaf: str
    executor: str
    at: Timestamp
    status: ClaimStatus
    lease_until: Timestamp | None  # for the claims that held the leaf


@dataclass(frozen=True)
class LeafOutcome:
    claims: tuple[ClaimView, ...]
    holder: ClaimView | None  # the claim that won or holds the leaf now
    result: Event | None  # the accepted result, if any
    duplicate_results: int  # results that were not accepted (lapsed, lost or repeated)


def _run_lease(claim: Event, lease_ms: int, followups: Sequence[Event]) -> tuple[Timestamp, Event | None, bool]:
    """Play the holder's renewals, failure and result against its lease."""
    end = claim.ts.plus_ms(lease_ms)
    for event in followups:  # already in total order
        if not event.ts < end:
            break
        body = event.body
        if isinstance(body, RenewBody):
            end = max(end, event.ts.plus_ms(lease_ms))
        elif isinstance(body, FailureBody):
            return event.ts, None, True
        elif isinstance(body, ResultBody):
            return end, event, False
    return end, None, False


def arbitrate(
    leaf: str,
    created_at: Timestamp,
    lease_ms: int,
    claims: Sequence[Event],
    followups: dict[str, list[Event]],
) -> LeafOutcome:
    """Decide the holder and the accepted result of one leaf.

    ``followups`` maps a claim id to the renew / result / failure events that
    cite it; only those by the claim's own author, about this leaf, count.
    """
    ordered = sorted((c for c in claims if c.ts > created_at), key=lambda c: c.order_key)
    views: dict[str, ClaimView] = {}
    holder: Event | None = None
    holder_end: Timestamp | None = None
    holder_failed = False
    result: Event | None = None

    def own_followups(claim: Event) -> list[Event]:
        mine = [
            e
            for e in followups.get(claim.id, ())
            if e.author == claim.author and getattr(e.body, "leaf", leaf) == leaf
        ]
        return sorted(mine, key=lambda e: e.order_key)

    for claim in ordered:
        if holder is not None:
            assert holder_end is not None
            if result is not None or claim.ts < holder_end:
                views[claim.id] = ClaimView(claim.id, leaf, claim.author, claim.ts, "lost", None)
                continue
            status: ClaimStatus = "failed" if holder_failed else "lapsed"
            views[holder.id] = ClaimView(holder.id, leaf, holder.author, holder.ts, status, holder_end)
        holder = claim
        holder_end, result, holder_failed = _run_lease(claim, lease_ms, own_followups(claim))

    holder_view: ClaimView | None = None
    if holder is not None:
        assert holder_end is not None
        if result is not None:
            final: ClaimStatus = "won"
        elif holder_failed:
            final = "failed"
        else:
            final = "holding"
        holder_view = ClaimView(holder.id, leaf, holder.author, holder.ts, final, holder_end)
        views[holder.id] = holder_view
        if holder_failed:
            holder_view = None

    all_results = {
        e.id
        for claim in claims
        for e in followups.get(claim.id, ())
        if isinstance(e.body, ResultBody) and e.author == claim.author
    }
    duplicates = len(all_results) - (1 if result is not None else 0)
    ordered_views = tuple(sorted(views.values(), key=lambda v: (v.at, v.executor, v.id)))
    return LeafOutcome(ordered_views, holder_view, result, duplicates)
