"""Many seeds: run each, judge each with the checkers, and write the report.

Seeds are independent, so they spread over worker processes; each worker's
result is a pure function of its seed, so the report does not depend on how
many workers there were. A seed with a violation keeps its trace: the report
directory gets ``seed-S.trace`` beside ``report.json`` and ``report.md``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from chaos.checkers import Verdict, check
from chaos.checkers.finality import revocations
from chaos.checkers.safety import duplicate_executions
from chaos.history import History
from chaos.report_html import render as render_html
from chaos.sim.world import SimConfig, run_seed


@dataclass(frozen=True)
class SeedOutcome:
    seed: int
    verdicts: tuple[Verdict, ...]
    completed: bool
    converged: bool
    virtual_s: float
    digests: tuple[str, ...]  # of the live members, sorted and deduplicated
    revocations: int  # times a member replaced or withdrew a split or result it showed
    duplicates: int  # results never accepted: executions thrown away
    model_calls: int
    trace: tuple[str, ...]  # kept only when something broke (or when asked)
    history: History | None = None  # likewise: what report.html draws

    @property
    def violations(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == "fail"]

    @property
    def stalled(self) -> bool:
        return any(v.status == "stall" for v in self.verdicts)


def quiet_logs() -> None:
    """Members log through structlog; thousands of simulated runs only want errors."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


def judge(config: SimConfig, keep_trace: bool = False) -> SeedOutcome:
    run = run_seed(config)
    verdicts = tuple(check(run.history))
    live = run.history.live()
    digests = tuple(sorted({m.digest for m in live}))
    broke = any(v.status == "fail" for v in verdicts)
    return SeedOutcome(
        seed=config.seed,
        verdicts=verdicts,
        completed=bool(live) and all(m.complete for m in live),
        converged=len(digests) == 1,
        virtual_s=run.history.ended_at,
        digests=digests,
        revocations=revocations(run.history),
        duplicates=duplicate_executions(run.history),
        model_calls=sum(m.model_calls for m in run.history.members.values()),
        trace=tuple(run.trace) if (broke or keep_trace) else (),
        history=run.history if (broke or keep_trace) else None,
    )


def _work(config: SimConfig) -> SeedOutcome:
    quiet_logs()
    return judge(config)


def run_many(
    base: SimConfig,
    seeds: Iterable[int],
    jobs: int | None = None,
    progress: Callable[[SeedOutcome, int, int], None] | None = None,
) -> list[SeedOutcome]:
    """Judge every seed (``jobs`` worker processes; 1 runs them here). Ordered by seed."""
    configs = [replace(base, seed=s) for s in seeds]
    jobs = max(1, jobs or os.cpu_count() or 1)
    outcomes: list[SeedOutcome] = []
    if jobs == 1 or len(configs) < 4:
        quiet_logs()
        for config in configs:
            outcomes.append(judge(config))
            if progress:
                progress(outcomes[-1], len(outcomes), len(configs))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for outcome in pool.map(_work, configs, chunksize=4):
                outcomes.append(outcome)
                if progress:
                    progress(outcome, len(outcomes), len(configs))
    return sorted(outcomes, key=lambda o: o.seed)


def report(base: SimConfig, outcomes: list[SeedOutcome], seconds: float) -> dict[str, object]:
    violations = [
        {"seed": o.seed, "invariant": v.invariant, "evidence": v.evidence,
         "replay": f"swarm sim --seed {o.seed} {cli_flags(base)}".rstrip()}
        for o in outcomes for v in o.violations
    ]
    stalls = [
        {"seed": o.seed, "evidence": v.evidence}
        for o in outcomes for v in o.verdicts if v.status == "stall"
    ]
    return {
        "seeds": len(outcomes),
        "seed_range": [outcomes[0].seed, outcomes[-1].seed] if outcomes else [],
        "members": f"{base.decomposers}/{base.scorers}/{base.executors}",
        "observers": base.observers,
        "quorum": base.quorum,
        "parallel": base.parallel,
        "faults": sorted(base.faults),
        "completed": sum(o.completed for o in outcomes),
        "converged": sum(o.converged for o in outcomes),
        "stalled": len(stalls),
        "revocations": sum(o.revocations for o in outcomes),
        "seeds_with_revocations": sum(1 for o in outcomes if o.revocations),
        "duplicate_executions": sum(o.duplicates for o in outcomes),
        "seeds_with_duplicates": sum(1 for o in outcomes if o.duplicates),
        "model_calls": sum(o.model_calls for o in outcomes),
        "violations": violations,
        "stalls": stalls,
        "passed": not violations,
        "wall_seconds": round(seconds, 2),
        "seeds_per_minute": round(60 * len(outcomes) / seconds, 1) if seconds > 0 else None,
        "median_virtual_seconds": _median([o.virtual_s for o in outcomes]),
    }


def cli_flags(base: SimConfig) -> str:
    faults = ",".join(sorted(base.faults)) or "none"
    flags = f"--members {base.decomposers}/{base.scorers}/{base.executors} --faults {faults}"
    defaults = SimConfig(seed=0)
    for flag, value, default in (("--observers", base.observers, defaults.observers),
                                 ("--quorum", base.quorum, defaults.quorum),
                                 ("--parallel", base.parallel, defaults.parallel)):
        if value != default:
            flags += f" {flag} {value}"
    return flags


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else round((ordered[middle - 1] + ordered[middle]) / 2, 3)


def write_report(directory: Path, summary: dict[str, object], outcomes: list[SeedOutcome],
                 replay: bool = False) -> None:
    """``replay``: one seed replayed (``--seed``): its picture is ``report.html``; otherwise
    every failing seed gets ``seed-S.html``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    for outcome in outcomes:
        if outcome.trace:
            (directory / f"seed-{outcome.seed}.trace").write_text("\n".join(outcome.trace) + "\n")
        if outcome.history is not None:
            page = render_html(outcome.history, list(outcome.verdicts), f"swarm sim --seed {outcome.seed}")
            name = "report.html" if replay else f"seed-{outcome.seed}.html"
            (directory / name).write_text(page)
    lines = [
        "# Simulation report",
        "",
        f"- seeds: {summary['seeds']} ({summary['seed_range']}), members {summary['members']}"
        f" + {summary['observers']} observer(s), quorum {summary['quorum']}, "
        f"model calls under way at once per member {summary['parallel']}",
        f"- faults: {', '.join(summary['faults']) or 'none'}",  # type: ignore[arg-type]
        f"- completed: {summary['completed']}, converged: {summary['converged']}, "
        f"stalled (too few survivors): {summary['stalled']}",
        f"- violations: {len(summary['violations'])}",  # type: ignore[arg-type]
        f"- revocations (a decision shown, then another): {summary['revocations']}; duplicate executions "
        f"(results never accepted): {summary['duplicate_executions']} in {summary['seeds_with_duplicates']} seeds, "
        f"of {summary['model_calls']} model calls",
        f"- speed: {summary['seeds_per_minute']} seeds/min ({summary['wall_seconds']} s wall), "
        f"median {summary['median_virtual_seconds']} s virtual per run",
        "",
    ]
    if summary["violations"]:
        lines += ["## Violations", "", "| seed | invariant | evidence | replay |", "|---|---|---|---|"]
        for v in summary["violations"]:  # type: ignore[attr-defined]
            lines.append(f"| {v['seed']} | {v['invariant']} | {v['evidence']} | `{v['replay']}` |")
        lines.append("")
    if summary["stalls"]:
        lines += ["## Stalls (allowed: the faults left too few members of a role)", ""]
        for s in summary["stalls"][:50]:  # type: ignore[index]
            lines.append(f"- seed {s['seed']}: {s['evidence']}")
        lines.append("")
    (directory / "report.md").write_text("\n".join(lines))
