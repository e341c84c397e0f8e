"""The checkers can fail: plant a bug in the fold and the simulation catches it in a few seeds.

Each test breaks one rule the way a careless change would, runs seeds until a
violation appears, and asserts it is the right invariant. The simulation runs
in this process (jobs=1) so the patched module is the one the members use.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import agents.core.fold as fold_module
from agents.core.claims import arbitrate
from chaos.sim.runner import judge, quiet_logs
from chaos.sim.world import SimConfig

BUDGET = 10  # seeds a planted bug may survive, at most


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


def test_accepting_a_split_one_vote_short_of_quorum_is_caught(monkeypatch) -> None:
    honest = fold_module._quorum_time

    def one_short(proposal, votes, quorum):
        return honest(proposal, votes, max(1, quorum - 1))

    monkeypatch.setattr(fold_module, "_quorum_time", one_short)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"delay"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "quorum_safety", found


def test_letting_a_later_claim_win_is_caught(monkeypatch) -> None:
    def latest_wins(leaf, created_at, lease_ms, claims, followups):
        # the bug: only the newest claim on a leaf is considered, so it beats earlier live leases
        newest = sorted(claims, key=lambda c: c.order_key)[-1:]
        return arbitrate(leaf, created_at, lease_ms, newest, followups)

    monkeypatch.setattr(fold_module, "arbitrate", latest_wins)
    found = _first_violation(SimConfig(seed=0, faults=frozenset({"delay"})))
    assert found is not None, f"no violation in {BUDGET} seeds"
    assert found[1] == "claim_safety", found


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
    assert found[1] in ("convergence", "liveness", "late_join"), found
