"""``swarm sim`` and ``swarm chaos``: the two labs (``chaos.sim``, ``chaos.lab``), from the command line.

``swarm sim --seeds N`` judges N seeded runs and writes a report; ``swarm sim
--seed S`` replays one run exactly and prints its trace, which is the bug
report when a seed fails.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path


def _shape(value: str) -> tuple[int, int, int]:
    parts = value.split("/")
    try:
        numbers = tuple(int(p) for p in parts)
    except ValueError:
        numbers = ()
    if len(numbers) != 3 or min(numbers) < 1:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a cluster shape; write DECOMPOSERS/SCORERS/EXECUTORS, e.g. 3/3/3"
        )
    return numbers  # type: ignore[return-value]


def cmd_sim(args: argparse.Namespace) -> int:
    from agents.cli.common import majority_quorum
    from agents.cli.errors import UsageError
    from chaos.sim.faults import FaultSpecError, parse_faults
    from chaos.sim.runner import judge, quiet_logs, report, run_many, write_report
    from chaos.sim.world import SimConfig

    try:
        faults = parse_faults(args.faults)
    except FaultSpecError as exc:
        raise UsageError(str(exc)) from None
    decomposers, scorers, executors = args.members
    quorum = majority_quorum(args.quorum, scorers, "--quorum or the scorers in --members")
    base = SimConfig(seed=0, decomposers=decomposers, scorers=scorers, executors=executors,
                     observers=args.observers, quorum=quorum, faults=faults, parallel=args.parallel)
    started = time.perf_counter()
    if args.seed is not None:
        quiet_logs()
        outcomes = [judge(replace(base, seed=args.seed), keep_trace=True)]
        print("\n".join(outcomes[0].trace))
        print()
        for verdict in outcomes[0].verdicts:
            print(f"{verdict.status.upper():5} {verdict.invariant}: {verdict.evidence}")
    else:
        seeds = range(args.first, args.first + args.seeds)
        step = max(1, len(seeds) // 20)

        def progress(outcome, done: int, total: int) -> None:
            if outcome.violations:
                print(f"seed {outcome.seed}: VIOLATION {outcome.violations[0].invariant}: "
                      f"{outcome.violations[0].evidence}", file=sys.stderr)
            if done % step == 0 or done == total:
                rate = 60 * done / max(1e-9, time.perf_counter() - started)
                print(f"swarm sim: {done}/{total} seeds ({rate:.0f}/min)", file=sys.stderr)

        outcomes = run_many(base, seeds, jobs=args.jobs, progress=progress)
    summary = report(base, outcomes, time.perf_counter() - started)
    if args.report:
        write_report(Path(args.report), summary, outcomes, replay=args.seed is not None)
    print(f"swarm sim: {summary['seeds']} seed(s), {summary['completed']} completed, "
          f"{summary['converged']} converged, {summary['stalled']} stalled (too few survivors), "
          f"{len(summary['violations'])} violation(s); {summary['seeds_per_minute']} seeds/min"  # type: ignore[arg-type]
          + (f"; report in {args.report}" if args.report else ""))
    for violation in summary["violations"][:10]:  # type: ignore[index]
        print(f"  seed {violation['seed']} {violation['invariant']}: {violation['evidence']}\n"
              f"    replay: {violation['replay']}")
    return 1 if summary["violations"] else 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    from agents.cli.common import positive as _positive
    from chaos.sim.faults import FAULT_KINDS

    sim = sub.add_parser(
        "sim", help="run the real roles over a simulated, seeded network; check every run",
        description="Each seed runs the whole swarm in one process on virtual time, with faults "
                    "drawn from the seed, then checks convergence, quorum and claim safety, "
                    "liveness, late joins and durability. Same seed, same run, byte for byte.",
    )
    which = sim.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=_positive, default=100, help="how many seeds to run (default 100)")
    which.add_argument("--seed", type=int, help="replay this one seed and print its trace")
    sim.add_argument("--first", type=int, default=0, help="first seed of --seeds (default 0)")
    sim.add_argument("--members", type=_shape, default=(3, 3, 3), metavar="D/S/E",
                     help="decomposers/scorers/executors (default 3/3/3)")
    sim.add_argument("--observers", type=int, default=1, choices=range(0, 4), metavar="N")
    sim.add_argument("--quorum", type=_positive, help="approving scorers a decision needs (default: a majority)")
    sim.add_argument("--faults", default="all",
                     help=f"comma list of {', '.join(FAULT_KINDS)}; or all (default) or none")
    sim.add_argument("--parallel", type=int, default=1, choices=range(1, 9), metavar="N",
                     help="model calls each member may have under way at once, 1 to 8 (default 1; an executor "
                          "then works on N leaves together, as with a batched model service)")
    sim.add_argument("--report", metavar="DIR", help="write report.json, report.md and failing traces here")
    sim.add_argument("--jobs", type=_positive, help="worker processes (default: one per CPU)")
    sim.set_defaults(run=cmd_sim)


def cmd_chaos_run(args: argparse.Namespace) -> int:
    from agents.cli.errors import CommandError, UsageError
    from chaos.lab.cluster import LabError
    from chaos.lab.run import ScenarioRun, write_reports
    from chaos.lab.scenario import ScenarioError, load

    try:
        scenario = load(Path(args.scenario), seed=args.seed)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from None
    if args.llm:
        scenario = replace(scenario, llm=args.llm)
    report_dir = Path(args.report or f"reports/chaos/{scenario.name}")
    if report_dir.exists():
        shutil.rmtree(report_dir)
    started = time.perf_counter()
    print(f"swarm chaos: {scenario.name} (seed {scenario.seed}, model {scenario.llm}); report in {report_dir}")
    try:
        run = ScenarioRun(scenario, report_dir, log_level=args.member_log_level)
    except LabError as exc:
        raise CommandError(str(exc)) from None
    try:
        verdicts = run.run()
    except LabError as exc:
        raise CommandError(f"{scenario.name}: {exc}") from None
    finally:
        if not args.keep:
            run.close()
    report = write_reports(report_dir, scenario, run.history, verdicts, time.perf_counter() - started,
                           run.memory_mb, run.page)
    for verdict in verdicts:
        print(f"  {verdict.status.upper():5} {verdict.invariant}: {verdict.evidence}")
    print(f"swarm chaos: {scenario.name} {'PASSED' if report['passed'] else 'FAILED'} "
          f"in {report['wall_seconds']}s; {report_dir / 'report.md'}, {report_dir / 'report.html'}")
    return 0 if report["passed"] else 1


def cmd_chaos_sweep(_args: argparse.Namespace) -> int:
    from chaos.lab.cluster import sweep

    print(f"swarm chaos: removed {sweep()} leftover lab container(s) and network(s)")
    return 0


def add_chaos_commands(sub: argparse._SubParsersAction) -> None:
    chaos = sub.add_parser("chaos", help="the container lab: run fault scenarios against a Docker cluster")
    chaos_sub = chaos.add_subparsers(dest="chaos_command", required=True, metavar="ACTION")
    run = chaos_sub.add_parser("run", help="run one scenario (scenarios/NAME.yaml), check it, write a report")
    run.add_argument("scenario", metavar="SCENARIO.yaml")
    run.add_argument("--seed", type=int, default=0, help="draws the scenario's random times and targets")
    run.add_argument("--report", metavar="DIR", help="default reports/chaos/NAME (replaced each run)")
    run.add_argument("--llm", choices=["scripted", "llama"], help="override the scenario's model backend")
    run.add_argument("--keep", action="store_true", help="leave the containers up for a look (swarm chaos sweep)")
    run.add_argument("--member-log-level", default="info", choices=["debug", "info", "warning"])
    run.set_defaults(run=cmd_chaos_run)
    sweep = chaos_sub.add_parser("sweep", help="remove containers and networks a lab run left behind")
    sweep.set_defaults(run=cmd_chaos_sweep)
