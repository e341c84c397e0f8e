"""Executor: hold at most one leaf at a time; claim free leaves; run them; renew the lease.

An executor that gave a leaf up (its model failed) leaves it to the others for
half a lease before trying it again, instead of winning it back at once.

A leaf is free when nobody holds it, or when the holder's lease has ended by
this member's hybrid clock (``now_ms``): a claim made then is stamped after the
lease end, so every member's fold agrees the old holder lapsed. Executors try
leaves in an order hashed from their own peer id, so that several executors
starting at once tend to pick different leaves instead of all racing for the first.
"""

from __future__ import annotations

import hashlib

from agents.core.tree import PlanTree
from agents.roles.intents import Claim, Execute, Intent, Me, Renew

RENEW_AT_FRACTION = 0.5  # renew once half the lease is gone
RETRY_AFTER_FAILURE_FRACTION = 0.5  # after giving a leaf up, leave it to others for half a lease


def _preference(me: Me, leaf_id: str) -> str:
    return hashlib.sha256(f"{me.peer_id}/{leaf_id}".encode()).hexdigest()


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    intents: list[Intent] = []
    holding = [
        c for c in tree.claims.values()
        if c.executor == me.peer_id and c.status == "holding" and c.id == tree.nodes[c.leaf].claim
    ]
    for claim in sorted(holding, key=lambda c: c.id):
        lease_ms = tree.goal_of(tree.nodes[claim.leaf]).claim_lease_ms
        intents.append(Execute(claim.leaf, claim.id))
        if claim.lease_until is not None and now_ms >= claim.lease_until.ms - lease_ms * RENEW_AT_FRACTION:
            intents.append(Renew(claim.id))
    if holding:
        return intents
    free = [
        leaf for leaf in tree.leaves()
        if leaf.status == "ready"
        or (leaf.status == "claimed" and leaf.executor != me.peer_id
            and leaf.lease_until is not None and now_ms >= leaf.lease_until.ms)
    ]
    gave_up = {
        c.leaf: c.lease_until.ms for c in tree.claims.values()
        if c.executor == me.peer_id and c.status == "failed" and c.lease_until is not None
    }
    free = [
        leaf for leaf in free
        if leaf.id not in gave_up
        or now_ms >= gave_up[leaf.id] + tree.goal_of(leaf).claim_lease_ms * RETRY_AFTER_FAILURE_FRACTION
    ]
    free.sort(key=lambda leaf: _preference(me, leaf.id))
    return [Claim(free[0].id)] if free else []
