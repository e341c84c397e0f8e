"""Claims on one leaf: who holds it, and which results may be decided (PROTOCOL.md, sections 6-7).

A leaf changes hands in epochs. An executor claims epoch ``e``; each roster
scorer's first ack for ``(leaf, e)`` on its chain counts, and a claim named by
``quorum`` counted acks is *granted*. The holder is the granted claim with the
highest epoch. Executors work only under a granted claim, so the side of a
partition without a quorum of scorers starts no model call.

Which result the leaf keeps is not decided here: a result by the author of a
granted claim is *eligible*, and the leaf's rounds (``agents.core.rounds``, the
same rounds that decide splits) accept one eligible result. Results that are
never accepted stay as evidence of duplicate work. Nothing here reads a
timestamp to decide: when scorers move on to a next epoch is their policy,
judged by their own clocks; what their acks add up to is a function of the set.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agents.core.branches import Branches
from agents.core.clock import Timestamp
from agents.core.events import AckBody, Event, FailureBody, RenewBody, ResultBody
from agents.core.tree import ClaimView

MAX_RESULTS = 3  # an executor's results per leaf that may be named


@dataclass
class LeafClaims:
    claims: dict[str, ClaimView] = field(default_factory=dict)
    holder: ClaimView | None = None
    heartbeat: Timestamp | None = None  # the holder's latest claim or renewal
    holder_failed: bool = False
    eligible: dict[str, bool | None] = field(default_factory=dict)  # result -> may be named (None: not yet)
    breach: str = ""


def settle(leaf: str, quorum: int, claims: Sequence[Event], results: Sequence[Event],
           chains_by_scorer: Mapping[str, Branches],
           followups: Mapping[str, Sequence[Event]], result_number: Mapping[str, int]) -> LeafClaims:
    """Decide one leaf's claims. ``claims``/``results`` are the held events on it;
    ``chains_by_scorer`` holds each roster scorer's acks on it, along its chains;
    ``followups`` maps a claim id to the renewals and failures citing it;
    ``result_number`` numbers each result among its author's results on the leaf."""
    by_claim = {c.id: c for c in claims}
    acks: dict[str, set[str]] = defaultdict(set)
    for scorer, branches in chains_by_scorer.items():
        acked_epochs: set[int] = set()
        undo: list[int | None] = []  # per event on this chain: the epoch it acked first
        forked = branches.forked
        for depth, event in branches.steps():
            while len(undo) > depth:  # back to the branch point (``Branches``)
                if (epoch := undo.pop()) is not None:
                    acked_epochs.discard(epoch)
            body = event.body
            first = None
            if isinstance(body, AckBody) and body.epoch not in acked_epochs:
                first = body.epoch
                acked_epochs.add(first)
                claim = by_claim.get(body.claim)
                if claim is not None and claim.body.epoch == first:  # type: ignore[union-attr]
                    acks[claim.id].add(scorer)
            if forked:
                undo.append(first)

    outcome = LeafClaims()
    granted: dict[int, list[Event]] = defaultdict(list)
    for claim in claims:
        ok = len(acks[claim.id]) >= quorum
        outcome.claims[claim.id] = ClaimView(claim.id, leaf, claim.author, claim.body.epoch,  # type: ignore[union-attr]
                                             claim.ts, tuple(sorted(acks[claim.id])), ok)
        if ok:
            granted[claim.body.epoch].append(claim)  # type: ignore[union-attr]
    for epoch, winners in sorted(granted.items()):
        if len(winners) > 1:
            outcome.breach = (f"leaf {leaf[:8]}: two claims granted in epoch {epoch}; more scorers equivocated "
                              f"than a quorum of {quorum} tolerates")
    if granted:
        holder = min(granted[max(granted)], key=lambda c: c.id)
        outcome.holder = outcome.claims[holder.id]
        own = [e for e in followups.get(holder.id, ()) if e.author == holder.author]
        outcome.heartbeat = max([holder.ts] + [e.ts for e in own if isinstance(e.body, RenewBody)])
        outcome.holder_failed = any(isinstance(e.body, FailureBody) for e in own)

    for result in results:
        body = result.body
        assert isinstance(body, ResultBody)
        claim = by_claim.get(body.claim)
        if result_number.get(result.id, 0) > MAX_RESULTS:
            outcome.eligible[result.id] = False
        elif claim is None:
            outcome.eligible[result.id] = None  # its claim may still arrive
        elif claim.author != result.author:
            outcome.eligible[result.id] = False
        else:
            outcome.eligible[result.id] = True if outcome.claims[claim.id].granted else None
    return outcome
