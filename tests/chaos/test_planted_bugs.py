"""The checkers can fail: plant a bug where a careless change would put it, and the simulation
catches it within a few seeds, naming the right invariant.

The simulation runs in this process (jobs=1) so the patched module is the one the members
use. The checkers judge with the reference model and the members' transition logs, never
with the fold they check, which is what lets them see a bug in the fold's rules.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest

import agents.core.claims as claim_rules
import agents.core.rounds as round_rules
import agents.core.settle as settle_module
from chaos.sim.runner import judge, quiet_logs
from chaos.sim.world import SimConfig

BUDGET = 8  # seeds a planted bug may survive, at most


@pytest.fixture(autouse=True)
def _quiet() -> None:
    quiet_logs()


def _first_violation(config: SimConfig) -> tuple[int, str, str] | None:
    for seed in range(BUDGET):
        outcome = judge(replace(config, seed=seed))
        if outcome.violations:
            v = outcome.violations[0]
            return outcome.seed, v.invariant, v.evidence
    return None


def test_accepting_a_value_one_ballot_short_of_quorum_is_caught(monkeypatch) -> None:
    honest = round_rules.settle

    def one_short(goal, *args, **kwargs):
        return honest(replace(goal, quorum=max(1, goal.quorum - 1)), *args, **kwargs)

    monkeypatch.setattr(settle_module.round_rules, "settle", one_short)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"delay"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] in ("quorum_safety", "claim_safety", "reference_agreement"), found


def test_granting_a_claim_one_ack_short_is_caught(monkeypatch) -> None:
    honest = claim_rules.settle

    def one_short(leaf, quorum, *args, **kwargs):
        return honest(leaf, max(1, quorum - 1), *args, **kwargs)

    monkeypatch.setattr(settle_module.leaf_rules, "settle", one_short)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"delay"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] in ("claim_safety", "reference_agreement"), found


def test_a_sync_that_skips_an_author_is_caught(monkeypatch) -> None:
    import agents.syncproto as syncproto

    honest = syncproto.EventIndex.offer_for

    def forgetful(self, theirs):
        offer = honest(self, theirs)
        if offer is None:
            return None
        # the bug: never offer the first author's events (it looks like an off-by-one)
        kept = dict(sorted(offer.authors.items())[1:])
        return type(offer)(kept) if kept else None

    monkeypatch.setattr(syncproto.EventIndex, "offer_for", forgetful)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"loss", "late"}), settle_s=60))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] in ("convergence", "event_sets", "liveness", "late_join"), found


def test_a_member_that_shows_a_split_before_it_is_decided_is_caught(monkeypatch) -> None:
    """A display that runs ahead of the decision: a member shows the first draft of an open node
    as its split. What it showed is not what the board accepted, or it changes."""
    import agents.core.transitions as transitions

    honest = transitions.decisions

    def eager(tree):
        shown = honest(tree)
        for node in tree.nodes.values():
            drafts = tree.drafts(node.id)
            if not node.leaf and node.split is None and drafts:
                shown[("split", node.id)] = drafts[0].id
        return shown

    monkeypatch.setattr(transitions, "decisions", eager)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"delay", "slow"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] in ("no_revocation", "quorum_safety", "observer_truth"), found


def test_a_member_that_calls_the_plan_complete_one_result_early_is_caught(monkeypatch) -> None:
    """A display that counts the leaves wrong: it tells the user the plan is complete while one
    leaf still has no result. What the observer printed then is not the final plan."""
    import agents.member as member_module
    from agents.core.transitions import Transition

    honest = member_module.changes

    def hasty(before, after):
        out = honest(before, after)
        leaves = [n for n in after.nodes.values() if n.leaf]
        undone = [n for n in leaves if n.result is None]
        if not after.complete and len(leaves) > 1 and len(undone) == 1:
            out.append(Transition("complete", after=after.digest))
        return out

    monkeypatch.setattr(member_module, "changes", hasty)
    found = _first_violation(SimConfig(seed=0))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "observer_truth", found


def test_a_store_that_never_waits_for_the_disk_is_caught(monkeypatch) -> None:
    """No fsync at all, the member's own events included: a power cut takes events nobody else
    may hold (and the member may sign their seqs again). The durability checker names them.
    (Own events alone left unsynced are seldom caught by a power cut, since the next change
    shown fsyncs them too: ``tests/agents/test_member_disk.py`` checks that rule directly.)"""
    from agents.member import Member
    from agents.store.sqlite import EventStore

    monkeypatch.setattr(Member, "_durable", lambda self, events: False)
    monkeypatch.setattr(EventStore, "sync", lambda self: None)
    named = [v.invariant for seed in range(BUDGET)
             for v in judge(SimConfig(seed=seed, faults=frozenset({"lostwrite"}))).violations]
    assert "durability" in named, f"durability named no violation in {BUDGET} seeds: {named}"


def test_a_member_that_shows_a_decision_before_it_is_on_the_disk_is_caught(monkeypatch) -> None:
    """No fsync before a change is shown: a power cut takes back the events a shown decision
    rests on, and the member, restarted, shows the decision undone. (The goal's fsync before a
    summary lists it is kept: without it ``durability`` sees a goal lost first.)"""
    from agents.member import Member
    from agents.store.sqlite import EventStore

    honest = EventStore.sync

    async def goals_still_on_disk(self: Member) -> None:
        if self.goals_synced < self.goals_stored:
            honest(self.store)
            self.goals_synced = self.goals_stored

    monkeypatch.setattr(EventStore, "sync", lambda self: None)
    monkeypatch.setattr(Member, "goals_on_disk", goals_still_on_disk)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"lostwrite"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "no_revocation", found


def test_a_store_that_takes_a_failed_fsync_for_a_full_disk_is_caught(monkeypatch) -> None:
    """A commit whose fsync failed reported as a refused write: the member takes back the event
    the commit may hold (its seq free again, as after a full disk) and signs another there, and
    once the disk works both are in its store: it forked itself."""
    from agents.store import EventStore, StoreError

    honest = EventStore._failing

    def as_a_full_disk(self, message: str):
        return StoreError(message) if "failed an fsync" in message else honest(self, message)

    monkeypatch.setattr(EventStore, "_failing", as_a_full_disk)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"eio"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "honest_feeds", found


def test_a_store_that_shrugs_off_a_failed_fsync_is_caught(monkeypatch) -> None:
    """The fsync before showing a change fails and the member shows it anyway. The kernel may
    drop the pages a failed writeback held (``eio-dropped``): the restarted member lacks what it
    showed. The simulation restarted only from the page cache before, and saw nothing wrong in
    twelve seeds."""
    from agents.store import DiskFailed, EventStore

    honest = EventStore.sync

    def shrugging(self) -> None:
        with contextlib.suppress(DiskFailed):
            honest(self)

    monkeypatch.setattr(EventStore, "sync", shrugging)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"eio"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "no_revocation", found


def test_a_goal_held_only_in_page_caches_is_caught(monkeypatch) -> None:
    """A member's served summary lists a goal no fsync covered yet: the client leaves on its
    word, so a blackout before anything fsynced the goal takes it from every member, and the
    plan the user was told was submitted is gone. Found when goals waited for no fsync at all
    by the first simulated blackouts (seeds 920030 and five more of 300 stalled with no goal
    anywhere)."""
    from agents.member import Member

    async def said_without_the_disk(self) -> None:
        return None

    monkeypatch.setattr(Member, "goals_on_disk", said_without_the_disk)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"blackout"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "durability" and "without the goal" in found[2], found


def test_a_gate_that_admits_anyone_is_caught(monkeypatch) -> None:
    """Tickets not checked: the hostile peer's sybil keys get their events stored (and counted)."""
    from agents.core.admission import Gate

    monkeypatch.setattr(Gate, "admits", lambda self, peer, role, sig: True)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"hostile"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "hostile_refused", found
