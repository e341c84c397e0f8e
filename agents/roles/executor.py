"""Executor: work on at most ``Me.at_once`` leaves at a time; claim free leaves; run them once granted.

A claim names an epoch: one more than any epoch seen on the leaf. It is
granted when a quorum of the roster's scorers acks it (PROTOCOL.md, section 6),
and only then does the executor start the model: on the minority side of a
partition nothing is granted, so no model time is spent on work that would be
thrown away. While it works it renews every half lease (the member spaces
renewals), so scorers know it is alive; a result it publishes is accepted by a
quorum of accepts.

A leaf is free when nobody holds it, or the holder is gone by this member's
clock (``agents.roles.scorer.holder_gone``: failed, silent for a lease, or past
the goal's hold limit). An executor whose claim was not granted within a lease
tries again with the next epoch. One that gave a leaf up (its model failed)
leaves it to the others for half a lease. Executors try leaves in an order
hashed from their own peer id, so several starting at once tend to pick
different leaves.
"""

from __future__ import annotations

import hashlib

from agents.core.events import MAX_ROUND
from agents.core.tree import PlanTree
from agents.roles.intents import Claim, Execute, Intent, Me, Renew
from agents.roles.scorer import being_taken, holder_gone

RENEW_AT_FRACTION = 0.5  # renew once half the lease has gone since the last sign of life
RETRY_AFTER_FAILURE_FRACTION = 0.5  # after giving a leaf up, leave it to others for half a lease


def _preference(me: Me, leaf_id: str) -> str:
    return hashlib.sha256(f"{me.peer_id}/{leaf_id}".encode()).hexdigest()


def _yield_after_split(tree: PlanTree, leaf, me: Me, now_ms: int) -> bool:
    """When the latest epoch's acks split between claims and none was granted, the claim with
    the most acks (then the lowest id) tries the next epoch first; the others wait half a lease
    longer, so two executors do not split the next epoch the same way."""
    lease = tree.goal_of(leaf).claim_lease_ms
    claims = tree.claims_on(leaf.id)
    if not claims:
        return False
    top = max(c.epoch for c in claims)
    split = [c for c in claims if c.epoch == top and not c.granted]
    if len(split) < 2 or top <= leaf.epoch:
        return False
    leader = min(split, key=lambda c: (-len(c.acks), c.id))
    return leader.executor != me.peer_id and now_ms - leader.at.ms < lease * (1 + RETRY_AFTER_FAILURE_FRACTION)


def decide(tree: PlanTree, me: Me, now_ms: int) -> list[Intent]:
    intents: list[Intent] = []
    leaves = [leaf for leaf in tree.leaves() if leaf.status != "done"]
    working = 0  # leaves we hold and have not answered yet
    for leaf in leaves:
        if leaf.status != "claimed" or leaf.executor != me.peer_id or leaf.holder_failed:
            continue
        lease = tree.goal_of(leaf).claim_lease_ms
        assert leaf.claim is not None
        if not any(r.claim == leaf.claim and r.executor == me.peer_id for r in tree.results.values()):
            intents.append(Execute(leaf.id, leaf.claim))
            working += 1
        if leaf.heartbeat is not None and now_ms >= leaf.heartbeat.ms + lease * RENEW_AT_FRACTION:
            intents.append(Renew(leaf.claim))
    waiting = {leaf.id for leaf in leaves  # claims of ours still waiting for their grant
               if any(c.executor == me.peer_id and not c.granted and c.epoch > leaf.epoch
                      and now_ms - c.at.ms < tree.goal_of(leaf).claim_lease_ms for c in tree.claims_on(leaf.id))}
    if waiting or working >= me.at_once or any(isinstance(i, Renew) for i in intents):
        # one claim in flight at a time (the next one then sees the others' claims made meanwhile),
        # and a renewal due goes out before any new claim
        return intents
    free = []
    for leaf in leaves:
        if leaf.id in waiting or not holder_gone(tree, leaf, now_ms) or being_taken(tree, leaf, now_ms, but=me.peer_id):
            continue
        lease = tree.goal_of(leaf).claim_lease_ms
        if (leaf.executor == me.peer_id and leaf.holder_failed and leaf.heartbeat is not None
                and now_ms < leaf.heartbeat.ms + lease * RETRY_AFTER_FAILURE_FRACTION):
            continue
        if _yield_after_split(tree, leaf, me, now_ms):
            continue
        free.append(leaf)
    if not free:
        return intents
    leaf = min(free, key=lambda node: _preference(me, node.id))
    return [*intents, Claim(leaf.id, next_epoch(tree, leaf, me))]


def next_epoch(tree: PlanTree, leaf, me: Me) -> int:
    """One past what counts: the holder's epoch, epochs whose claims some scorer acked, and our
    own earlier claims. A stranger's unacked claim at an absurd epoch moves nothing (a hostile
    claim at the last epoch would otherwise leave no epoch to claim)."""
    counted = [leaf.epoch] + [c.epoch for c in tree.claims_on(leaf.id) if c.acks or c.executor == me.peer_id]
    return min(max(counted) + 1, MAX_ROUND)
