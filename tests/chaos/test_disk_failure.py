"""The ``disk_failure`` checker, and the failing disk the lab gives a member.

The checker is judged on a simulated run whose failing disk stopped a member (it passes),
then on copies of that history in which the member ended otherwise: each must fail,
naming how. The lab's shim is built from its one source and explains a missing compiler.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from chaos.checkers.disk import disk_failure
from chaos.history import History
from chaos.lab.disk import ShimError, failing_fsync_shim
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig, run_seed


@pytest.fixture(scope="module")
def history() -> History:
    quiet_logs()
    for seed in range(4):
        run = run_seed(SimConfig(seed=seed, faults=frozenset({"eio"})))
        if any(m.disk_failures for m in run.history.members.values()):
            return run.history
    raise AssertionError("no seed in 0-3 had a failing disk stop its member")


def _ended(history: History, **how: object) -> History:
    """A copy of ``history`` in which the member whose disk failed ended as ``how`` says."""
    changed = copy.deepcopy(history)
    member = next(m for m in changed.members.values() if m.disk_failures)
    member.disk_failures[0] = dataclasses.replace(member.disk_failures[0], **how)
    return changed


def test_a_member_that_stopped_saying_its_disk_failed_passes(history: History) -> None:
    verdict = disk_failure(history)
    assert verdict.passed and "stopped by itself" in verdict.evidence, verdict.evidence
    failure = next(f for m in history.members.values() for f in m.disk_failures)
    assert "disk" in failure.last_words and failure.stopped_at is not None and failure.stopped_at >= failure.at


@pytest.mark.parametrize(("how", "named"), [
    ({"stopped_at": None}, "still running"),
    ({"traceback": True}, "traceback"),
    ({"exit_code": 2}, "status 2"),
    ({"last_words": "Exceptions from Trio nursery (1 sub-exception)"}, "without saying its disk failed"),
    ({"last_words": "free space on its disk\nExceptions from Trio nursery"}, "without saying its disk failed"),
])
def test_a_member_that_ends_otherwise_fails_the_checker(history: History, how: dict, named: str) -> None:
    verdict = disk_failure(_ended(history, **how))
    assert not verdict.passed and named in verdict.evidence, verdict.evidence


def test_a_member_must_run_on_through_a_full_disk_that_refused_its_writes(history: History) -> None:
    ran_on = _ended(history, kind="full", stopped_at=None, refused=3)
    assert disk_failure(ran_on).passed and "ran on through a full disk" in disk_failure(ran_on).evidence
    stopped = disk_failure(_ended(history, kind="full", exit_code=1, refused=3))
    assert not stopped.passed and "was full" in stopped.evidence and "it stopped (exit 1)" in stopped.evidence
    untouched = disk_failure(_ended(history, kind="full", stopped_at=None, refused=0))
    assert not untouched.passed and "never said a write was refused" in untouched.evidence


def test_a_run_without_a_failing_disk_says_so() -> None:
    run = run_seed(SimConfig(seed=0, faults=frozenset({"crash"})))
    assert disk_failure(run.history).evidence == "no member's disk failed in this run"


def test_the_shim_is_built_once_per_source_and_a_missing_compiler_is_explained(tmp_path, monkeypatch) -> None:
    built = failing_fsync_shim(tmp_path)
    assert built.exists() and failing_fsync_shim(tmp_path) == built
    built.unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(ShimError, match="install gcc"):
        failing_fsync_shim(tmp_path)
