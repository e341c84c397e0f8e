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
import json
from dataclasses import replace

import pytest

from agents.core.fold import fold
from agents.core.transitions import changes
from chaos.checkers.integrity import observer_truth
from chaos.history import History, MemberHistory, Shown
from chaos.lab.recorder import shows_complete
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig, run_seed


@pytest.fixture(scope="module")
def history() -> History:
    quiet_logs()
    run = run_seed(SimConfig(seed=3))
    observer = run.history.members["observer-0"]
    assert observer.alive and observer.completed_at is not None, "seed 3 should complete, its observer up"
    kinds = [s.kind for s in observer.shown]
    assert "complete" in kinds and "result" in kinds[:kinds.index("complete")], kinds
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
    # what the lab records: its recorder folds the store from the host, the member shows it
    # after its next fold; the old checker replayed the log up to the recorder's moment
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


def test_an_observer_the_run_ended_on_before_it_could_show_its_store_is_a_stall(history: History) -> None:
    cut = copy.deepcopy(history)
    observer = _observer(cut)
    observer.shown = [s for s in observer.shown if s.kind != "complete"]
    cut.show_within_s = cut.ended_at - observer.completed_at + 1.0  # type: ignore[operator]
    verdict = observer_truth(cut)
    assert verdict.status == "stall", verdict.evidence
    assert "never showed the plan complete" in verdict.evidence


def test_a_restart_starts_what_the_observer_shows_afresh(history: History) -> None:
    before = copy.deepcopy(history)
    observer = _observer(before)
    # shown before a restart, and not by its fold from the store after it
    observer.shown = [Shown(0.0, "result", "f" * 64, None, "e" * 64), Shown(0.1, "start"), *observer.shown]
    verdict = observer_truth(before)
    assert verdict.status == "pass", verdict.evidence

    lost = copy.deepcopy(history)
    observer = _observer(lost)
    mark = next(i for i, s in enumerate(observer.shown) if s.kind == "complete")
    refold = [s for s in observer.shown[:mark] if s.kind in ("split", "result")]
    dropped = next(s for s in reversed(refold) if s.kind == "result")
    # a restart whose first fold misses a result it showed before, then calls the plan complete
    observer.shown = [*observer.shown[:mark], Shown(refold[-1].at, "start"),
                      *(s for s in refold if s is not dropped), *observer.shown[mark:]]
    verdict = observer_truth(lost)
    assert verdict.status == "fail"
    assert f"result of {dropped.node[:8]} is -" in verdict.evidence, verdict.evidence


def test_a_fold_logs_the_plan_turning_complete_last_and_once(history: History) -> None:
    events = _observer(history).events
    done = fold(events)
    assert done.complete
    first = changes(None, done)
    assert first[-1].kind == "complete" and first[-1].after == done.digest
    assert all(c.kind != "complete" for c in first[:-1])
    assert not [c for c in changes(done, done) if c.kind == "complete"]
    undone = next(fold(events[:n]) for n in range(len(events) - 1, 0, -1) if not fold(events[:n]).complete)
    assert [c for c in changes(undone, done) if c.kind == "complete"][-1].after == done.digest
    assert [c.before for c in changes(done, undone) if c.kind == "complete"] == [done.digest]


def test_the_lab_reads_from_a_transition_log_whether_a_member_shows_the_plan_complete(tmp_path) -> None:
    log = tmp_path / "transitions.jsonl"
    assert not shows_complete(tmp_path)

    def write(*records: dict) -> None:
        with log.open("a") as out:
            for record in records:
                out.write(json.dumps({"at_ms": 0, "hlc": [0, 0], "node": "", "before": None, "after": None,
                                      **record}) + "\n")

    write({"kind": "start"}, {"kind": "split", "node": "a" * 64, "after": "b" * 64})
    assert not shows_complete(tmp_path)
    write({"kind": "complete", "after": "c" * 64})
    assert shows_complete(tmp_path)
    write({"kind": "start"})  # restarted: not until its fold from the store says so again
    assert not shows_complete(tmp_path)
    write({"kind": "complete", "after": "c" * 64})
    log.write_text(log.read_text() + '{"at_ms": 1, "kind": "sta')  # a line cut short by SIGKILL
    assert shows_complete(tmp_path)
