"""``observer_truth`` judges what an observer showed at the moment it showed the plan complete.

The lab's recorder folds each member's store from the host, so it sees a plan complete when
the store holds it; the member shows it when it next folds, which a pull may put off for up
to a sync interval (``agents.syncing.MemberSync._fold_after``). A checker that replays the
observer's log up to the recorder's moment blames an honest observer for that lag (CI, stop
31: oneway-partition, "printed a complete plan ... whose result is -"). These histories come
from a real simulated run, then altered the way the lab records them or a bug would show.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from chaos.checkers.integrity import observer_truth
from chaos.history import History, MemberHistory
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig, run_seed


@pytest.fixture(scope="module")
def history() -> History:
    quiet_logs()
    run = run_seed(SimConfig(seed=3))
    assert run.history.members["observer-0"].completed_at is not None, "seed 3 should complete"
    return run.history


def _observer(history: History) -> MemberHistory:
    return history.members["observer-0"]


def test_an_honest_run_passes_and_the_observer_logs_its_completion_once(history: History) -> None:
    verdict = observer_truth(history)
    assert verdict.status == "pass", verdict.evidence
    marks = [s for s in _observer(history).shown if s.kind == "complete"]
    assert len(marks) == 1 and marks[0].after, marks
    assert marks[0].at <= _observer(history).completed_at  # the world samples what members show


def test_a_store_complete_before_the_observer_folds_it_is_not_blamed_on_the_observer(history: History) -> None:
    lagging = copy.deepcopy(history)
    observer = _observer(lagging)
    observer.shown = [replace(s, at=s.at + 5.0) for s in observer.shown]  # shown 5 s after stored
    verdict = observer_truth(lagging)
    assert verdict.status == "pass", verdict.evidence


def test_an_observer_that_shows_the_plan_complete_with_a_result_missing_is_caught(history: History) -> None:
    early = copy.deepcopy(history)
    observer = _observer(early)
    mark = next(i for i, s in enumerate(observer.shown) if s.kind == "complete")
    last_result = max(i for i, s in enumerate(observer.shown[:mark]) if s.kind == "result")
    shown = observer.shown[last_result]
    # the result shown only after the observer called the plan complete
    observer.shown = observer.shown[:last_result] + observer.shown[last_result + 1:mark + 1] + [shown] \
        + observer.shown[mark + 1:]
    verdict = observer_truth(early)
    assert verdict.status == "fail"
    assert f"result of {shown.node[:8]} is -" in verdict.evidence, verdict.evidence


def test_an_observer_whose_store_is_complete_but_never_shows_it_is_caught(history: History) -> None:
    silent = copy.deepcopy(history)
    observer = _observer(silent)
    observer.shown = [s for s in observer.shown if s.kind != "complete"]
    verdict = observer_truth(silent)
    assert verdict.status == "fail"
    assert "never showed the plan complete" in verdict.evidence, verdict.evidence
