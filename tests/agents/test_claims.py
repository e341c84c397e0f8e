"""Claim arbitration by example: earliest claim wins, leases lapse, renewals and failures count."""

from __future__ import annotations

import hashlib

from agents.core.author import Author
from agents.core.claims import arbitrate
from agents.core.clock import HybridClock, Timestamp
from agents.core.events import ClaimBody, FailureBody, RenewBody, ResultBody
from agents.core.identity import Identity

LEAF = "ee" * 32
LEASE = 1000
CREATED = Timestamp(100, 0)


class Exec:
    def __init__(self, name: str) -> None:
        self.now = 0
        self.author = Author(Identity(hashlib.sha256(name.encode()).digest()), "executor",
                             HybridClock(lambda: self.now))

    def at(self, ms, body):
        self.now = ms
        return self.author.sign(body)


def _decide(claims, followups):
    table: dict[str, list] = {}
    for event in followups:
        table.setdefault(event.body.claim, []).append(event)
    return arbitrate(LEAF, CREATED, LEASE, claims, table)


def test_earliest_claim_wins_and_later_ones_lose() -> None:
    x, y = Exec("x"), Exec("y")
    cx, cy = x.at(200, ClaimBody(leaf=LEAF)), y.at(201, ClaimBody(leaf=LEAF))
    rx = x.at(500, ResultBody(leaf=LEAF, claim=cx.id, output="done"))
    outcome = _decide([cy, cx], [rx])
    assert outcome.result == rx
    assert {c.id: c.status for c in outcome.claims} == {cx.id: "won", cy.id: "lost"}


def test_a_silent_holder_lapses_and_the_next_claim_after_the_lease_takes_over() -> None:
    x, y = Exec("x"), Exec("y")
    cx = x.at(200, ClaimBody(leaf=LEAF))
    early = y.at(900, ClaimBody(leaf=LEAF))  # during x's lease: loses
    cy = y.at(1200, ClaimBody(leaf=LEAF))  # lease ended at 1200: takes over
    late_x = x.at(1300, ResultBody(leaf=LEAF, claim=cx.id, output="too late"))
    ry = y.at(1400, ResultBody(leaf=LEAF, claim=cy.id, output="done"))
    outcome = _decide([cx, early, cy], [late_x, ry])
    assert outcome.result == ry
    statuses = {c.id: c.status for c in outcome.claims}
    assert statuses == {cx.id: "lapsed", early.id: "lost", cy.id: "won"}
    assert outcome.duplicate_results == 1  # x's late result is evidence, never accepted


def test_renewal_keeps_the_lease_and_blocks_a_takeover() -> None:
    x, y = Exec("x"), Exec("y")
    cx = x.at(200, ClaimBody(leaf=LEAF))
    renew = x.at(1100, RenewBody(claim=cx.id))  # lease now ends at 2100
    cy = y.at(1500, ClaimBody(leaf=LEAF))
    rx = x.at(2000, ResultBody(leaf=LEAF, claim=cx.id, output="done"))
    outcome = _decide([cx, cy], [renew, rx])
    assert outcome.result == rx and outcome.holder.lease_until == Timestamp(2100, 0)


def test_a_renewal_after_the_lease_ended_resurrects_nothing() -> None:
    x = Exec("x")
    cx = x.at(200, ClaimBody(leaf=LEAF))
    renew = x.at(1300, RenewBody(claim=cx.id))
    rx = x.at(1400, ResultBody(leaf=LEAF, claim=cx.id, output="late"))
    outcome = _decide([cx], [renew, rx])
    assert outcome.result is None and outcome.holder.status == "holding"


def test_a_failure_frees_the_leaf_at_once() -> None:
    x, y = Exec("x"), Exec("y")
    cx = x.at(200, ClaimBody(leaf=LEAF))
    fail = x.at(300, FailureBody(leaf=LEAF, claim=cx.id, reason="model failed"))
    cy = y.at(350, ClaimBody(leaf=LEAF))
    outcome = _decide([cx, cy], [fail])
    assert {c.id: c.status for c in outcome.claims} == {cx.id: "failed", cy.id: "holding"}
    assert outcome.holder.id == cy.id


def test_a_claim_stamped_before_the_leaf_existed_does_not_count() -> None:
    x, y = Exec("x"), Exec("y")
    backdated = x.at(50, ClaimBody(leaf=LEAF))
    cy = y.at(150, ClaimBody(leaf=LEAF))
    outcome = _decide([backdated, cy], [])
    assert outcome.holder.id == cy.id and backdated.id not in {c.id for c in outcome.claims}


def test_only_the_claims_author_can_finish_it() -> None:
    x, y = Exec("x"), Exec("y")
    cx = x.at(200, ClaimBody(leaf=LEAF))
    forged = y.at(300, ResultBody(leaf=LEAF, claim=cx.id, output="stolen"))
    outcome = _decide([cx], [forged])
    assert outcome.result is None
