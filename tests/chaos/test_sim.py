"""The deterministic simulation: real members over the simulated network, judged by the checkers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from chaos.checkers import check
from chaos.sim.faults import FAULT_KINDS, FaultSpecError, parse_faults
from chaos.sim.runner import judge, quiet_logs, run_many
from chaos.sim.world import SimConfig, run_seed

ALL = parse_faults("all")


@pytest.fixture(autouse=True)
def _quiet() -> None:
    quiet_logs()


def test_the_same_seed_gives_the_same_trace_and_digests() -> None:
    first, second = run_seed(SimConfig(seed=7, faults=ALL)), run_seed(SimConfig(seed=7, faults=ALL))
    assert first.trace == second.trace
    assert [m.digest for m in first.history.members.values()] == [m.digest for m in second.history.members.values()]
    assert len(first.history.faults) > 2, "seed 7 should inject faults"
    other = run_seed(SimConfig(seed=8, faults=ALL))
    assert other.trace != first.trace


def _replay(seed: int, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "agents.cli.main", "sim", "--seed", str(seed)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.rsplit("\nswarm sim:", 1)[0]  # the last line quotes the wall-clock speed


def test_a_replay_is_byte_for_byte_the_same_in_another_process_and_hash_seed() -> None:
    # Set iteration order and object addresses change with the hash seed; neither may
    # leak into the run (trio's deadline ties are broken by address unless we sort).
    first, second = _replay(5, "1"), _replay(5, "2")
    assert "nemesis" in first and "PASS  convergence" in first
    assert first == second


def test_many_seeds_with_every_fault_kind_break_no_invariant() -> None:
    outcomes = run_many(SimConfig(seed=0, faults=ALL), range(100, 140), jobs=2)
    broken = [(o.seed, v.invariant, v.evidence) for o in outcomes for v in o.violations]
    assert broken == []
    assert sum(o.completed for o in outcomes) + sum(o.stalled for o in outcomes) == len(outcomes)


def test_members_with_two_model_calls_at_once_break_no_invariant_under_every_fault_kind() -> None:
    # executors then hold two leaves each: claims, grants, renewals and results of both interleave
    outcomes = run_many(SimConfig(seed=0, faults=ALL, parallel=2), range(300, 330), jobs=2)
    broken = [(o.seed, v.invariant, v.evidence) for o in outcomes for v in o.violations]
    assert broken == []
    assert sum(o.completed for o in outcomes) + sum(o.stalled for o in outcomes) == len(outcomes)


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_each_fault_kind_alone_is_injected_and_survived(kind: str) -> None:
    seen = False
    for seed in range(6):
        run = run_seed(SimConfig(seed=seed, faults=frozenset([kind])))
        from chaos.checkers import check

        verdicts = check(run.history)
        assert [v for v in verdicts if v.status == "fail"] == [], (seed, kind)
        plan = run.plan
        seen = seen or bool(
            [s for s in plan.steps if s.action not in ("clear",)] or plan.late
            or any(plan.skew_ms.values()) or len(set(plan.latency_s.values())) > 1
        )
    assert seen, f"no seed drew a {kind} fault"


def test_stalls_are_reported_as_stalls_when_too_few_scorers_survive() -> None:
    # one decomposer and one executor: stopping either before the plan is done stalls it
    base = SimConfig(seed=0, decomposers=1, scorers=3, executors=1, quorum=2,
                     faults=frozenset({"stop"}), settle_s=60)
    outcomes = run_many(base, range(30), jobs=2)
    assert [v for o in outcomes for v in o.violations] == []
    stalled = [o for o in outcomes if o.stalled]
    assert stalled, "some seed should stop a needed member before the plan completes"
    assert all(not o.completed for o in stalled)
    # a stalled run is read after a drain: everyone holds still while sync catches them up
    trace = list(judge(replace(base, seed=stalled[0].seed), keep_trace=True).trace)
    drain = next(i for i, line in enumerate(trace) if "members hold still" in line)
    assert not [line for line in trace[drain:] if " published " in line]


def test_a_restarted_member_comes_back_from_its_store() -> None:
    outcomes = [judge(SimConfig(seed=s, faults=frozenset({"crash"}))) for s in range(4)]
    durability = [v for o in outcomes for v in o.verdicts if v.invariant == "durability"]
    assert all(v.passed for v in durability)
    assert any("previously held events still there" in v.evidence for v in durability)


def test_a_decision_whose_only_evidence_a_wiped_store_took_is_still_judged_by_it() -> None:
    """Seed 1961: scorer-0 casts the second approving ballot, shows the split accepted, crashes
    before its ballot reaches anyone, and comes back with its store wiped (key kept: it never
    signs again). The ballot existed; the union the safety checkers judge holds it, so the
    split shown is the quorum's (judged against survivors' stores alone, it was 'accepted by
    nothing'), and no member ever showed another."""
    history = run_seed(SimConfig(seed=1961, faults=frozenset(FAULT_KINDS) - {"blackout"})).history  # its draws
    wiped = [r for r in history.members["scorer-0"].restarts if r.fault == "wipe"]
    assert wiped and wiped[0].lost, "the seed no longer wipes the store that held the ballot"
    assert {e.id for e in history.members["scorer-0"].destroyed} == set(wiped[0].lost)
    verdicts = {v.invariant: v for v in check(history)}
    assert verdicts["quorum_safety"].passed, verdicts["quorum_safety"].evidence
    assert verdicts["no_revocation"].passed
    assert any(s.kind == "split" and s.after for s in history.members["scorer-0"].shown)


def test_a_member_its_failing_disk_stopped_comes_back_once_the_disk_works() -> None:
    """``eio``: the member stops at its first failed fsync (its own restart, not the nemesis's
    crash) and is restarted from its store once the disk works, with its page cache or without
    what no fsync covered; nothing it showed is lost."""
    stops, dropped = 0, 0
    for seed in range(6):
        history = run_seed(SimConfig(seed=seed, faults=frozenset({"eio"}))).history
        for stop in [f for f in history.faults if f.kind == "crash"]:
            assert "its disk failed an fsync" in stop.detail, stop
            name = stop.detail.split(" ", 1)[0]
            back = [f for f in history.faults if f.kind == "restart" and f.at >= stop.at and f.detail.startswith(name)]
            assert back and "its disk works again" in back[0].detail, (seed, stop, back)
            assert history.members[name].restarts and history.members[name].alive, (seed, name)
            gone = "what no fsync covered is gone" in back[0].detail
            assert history.members[name].restarts[-1].power_cut == gone, (seed, name)
            dropped += gone
            assert [f.at <= stop.at for f in history.members[name].disk_failures] == [True], (seed, name)
            stops += 1
        assert [v for v in check(history) if v.status == "fail"] == [], seed
    assert stops > dropped > 0, f"{stops} stops, {dropped} restarts without the unsynced pages: want both kinds"


def test_a_blackout_restarts_every_member_without_what_no_fsync_covered() -> None:
    """``blackout``: the power fails for the whole cluster at once, so no member's page cache
    can give back another's unsynced commit; every member comes back from what its own fsyncs
    covered, and nothing any of them showed is lost."""
    lost = 0
    for seed in range(4):
        history = run_seed(SimConfig(seed=seed, faults=frozenset({"blackout"}))).history
        restarts = [(name, r) for name, m in history.members.items() for r in m.restarts]
        assert sorted(name for name, _ in restarts) == sorted(n for n in history.members if n != "client"), seed
        assert len({r.at for _, r in restarts}) == 1 and all(r.power_cut for _, r in restarts), (seed, restarts)
        lost += sum(len(r.lost) for _, r in restarts)
        assert [v for v in check(history) if v.status == "fail"] == [], seed
    assert lost, "no blackout took an unsynced commit: the fault had no teeth"


def test_the_restart_after_a_failing_disk_brings_back_only_a_member_that_disk_stopped(monkeypatch) -> None:
    """A member another fault holds down when its disk would fail stays down until that fault's
    own restart, which does its damage (here a wipe): the disk's restart is not for it."""
    import chaos.sim.world as world_module
    from chaos.sim.faults import FaultPlan, Step

    config = SimConfig(seed=0, faults=frozenset({"crash", "eio"}))
    steps = (Step(2.0, "crash", members=("executor-0",)), Step(3.0, "eio", members=("executor-0",), value=1),
             Step(5.0, "eio", members=("executor-0",)), Step(5.0, "restart", members=("executor-0",), flag="eio"),
             Step(9.0, "restart", members=("executor-0",), flag="wipe"),
             Step(config.window_s, "clear", weather=((1, 30), 0.0, 0.0)))
    names = config.names()
    monkeypatch.setattr(world_module, "draw_plan", lambda *args: FaultPlan(
        steps, config.window_s, {}, {m: 0 for m in names}, {m: config.model_latency_s for m in names}))
    history = run_seed(config).history
    restarts = history.members["executor-0"].restarts
    assert [(r.at, r.fault) for r in restarts] == [(9.0, "wipe")], restarts
    assert not [f for f in history.faults if "disk works again" in f.detail]


def test_bad_fault_names_are_refused_with_the_choices() -> None:
    with pytest.raises(FaultSpecError, match=r"unknown fault kind.*partiton.*choose from"):
        parse_faults("partiton,crash")


def _swarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agents.cli.main", *args],
                          capture_output=True, text=True, timeout=300)


def test_swarm_sim_writes_a_report_and_refuses_bad_arguments(tmp_path) -> None:
    done = _swarm("sim", "--seeds", "6", "--first", "20", "--report", str(tmp_path), "--jobs", "2", "--parallel", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["seeds"] == 6 and report["seed_range"] == [20, 25] and report["parallel"] == 2
    assert report["violations"] == [] and report["completed"] + report["stalled"] == 6
    assert report["converged"] == 6
    assert "# Simulation report" in (tmp_path / "report.md").read_text()

    bad = _swarm("sim", "--faults", "meteor")
    assert bad.returncode == 2 and "unknown fault kind(s) meteor" in bad.stderr
    bad = _swarm("sim", "--members", "3/3")
    assert bad.returncode == 2 and "DECOMPOSERS/SCORERS/EXECUTORS" in bad.stderr
    bad = _swarm("sim", "--parallel", "0")
    assert bad.returncode == 2 and "--parallel: invalid choice: 0" in bad.stderr
    bad = _swarm("sim", "--members", "3/1/3", "--quorum", "2")
    assert bad.returncode == 2 and "quorum 2 must be a majority of the 1 scorer(s) (from 1 to 1)" in bad.stderr


def test_the_config_is_all_a_run_depends_on() -> None:
    base = SimConfig(seed=3, faults=ALL)
    assert replace(base) == base  # frozen and comparable: a report names exactly what ran


def test_a_judged_seed_with_its_history_crosses_a_process_boundary() -> None:
    # a failing seed's outcome carries its history (for seed-S.html) back from a worker process
    import pickle

    outcome = judge(SimConfig(seed=3, faults=frozenset({"partition"})), keep_trace=True)
    back = pickle.loads(pickle.dumps(outcome))
    assert back.history is not None and back.history.faults == outcome.history.faults
    assert [v.status for v in check(back.history)] == [v.status for v in outcome.verdicts]
