"""``no_revocation`` across a restart: a member comes back from its store showing every split
and result it showed before it went down, in the first fold of its store (the records between
its ``start`` and ``loaded``). One that shows a decision again only after a peer gave the
events back showed it undecided meanwhile: a power cut took what it had shown. These histories
come from a real simulated run, with a restart appended the way a member logs one.
"""

from __future__ import annotations

import copy

import pytest

from chaos.checkers.finality import no_revocation
from chaos.history import History, Shown
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig, run_seed


@pytest.fixture(scope="module")
def history() -> History:
    quiet_logs()
    run = run_seed(SimConfig(seed=3))
    assert no_revocation(run.history).passed
    return run.history


def _decisions(history: History) -> list[Shown]:
    """Every split and result observer-0 showed, as its first fold after a restart shows them."""
    shown = [Shown(s.at, s.kind, s.node, None, s.after) for s in history.members["observer-0"].shown
             if s.kind in ("split", "result") and s.after is not None]
    assert any(s.kind == "split" for s in shown), "observer-0 showed no split in seed 3"
    return shown


def _restarted(history: History, first_fold: list[Shown], after: list[Shown] = ()) -> History:
    """A copy of the history in which observer-0 restarts at the end: its first fold from its
    store shows ``first_fold``, then it shows ``after``."""
    changed = copy.deepcopy(history)
    observer = changed.members["observer-0"]
    end = observer.shown[-1].at + 1
    observer.shown += [Shown(end, "start"), *first_fold, Shown(end, "loaded"), *after]
    return changed


def test_a_member_that_comes_back_showing_what_it_showed_before_passes(history: History) -> None:
    assert no_revocation(_restarted(history, _decisions(history))).passed


def test_a_member_that_comes_back_without_a_split_it_showed_fails_even_if_given_it_back_later(
        history: History) -> None:
    decisions = _decisions(history)
    split = next(s for s in decisions if s.kind == "split")
    given_back = Shown(split.at + 1, "split", split.node, None, split.after)
    verdict = no_revocation(_restarted(history, [s for s in decisions if s is not split], [given_back]))
    assert not verdict.passed
    assert "came back from its store without the split" in verdict.evidence, verdict.evidence
