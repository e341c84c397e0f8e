"""``make bench``: fold throughput, the fold kept up to date as events come (``LiveFold``) against
one from scratch, the time to replay a 100k-event log, simulated seeds/min
(``bench.sim``), the price of final decisions (``bench.finality``), the shared model service (``bench.model``), the networked swarm
(``bench.swarm``) and the container lab (``bench.lab``).

Baseline: ``json.loads`` over the same lines, measured in the same run, so the
ratios mean something on a noisy machine. Every figure is the median of
``REPEATS`` runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from agents.core.decode import decode_event
from agents.core.fold import fold
from agents.core.livefold import LiveFold
from bench.synthetic import comb, equivocation, plan_log
from chaos.sim.plan import simulate_plan
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig

REPEATS = 3


def median_seconds(action: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    which = sys.argv[1:] or ["core", "sim", "finality", "model", "swarm", "lab"]
    if "core" in which:
        core()
    if "sim" in which:
        from bench import sim

        sim.main()
    if "finality" in which:
        from bench import finality

        finality.main()
    if "model" in which:
        from bench import model

        model.main()
    if "swarm" in which:
        from bench import swarm

        swarm.main()
    if "lab" in which:
        from bench import lab

        lab.main()


def _fold_memory(events: list) -> tuple[float, float, float]:
    """MB held by a ``LiveFold`` of ``events`` with its tree, by a tree folded from scratch, and
    by that tree once its digest is read (what it hashes is kept until then)."""
    tracemalloc.start()
    try:
        live = LiveFold(events)
        live.tree()
        held = tracemalloc.get_traced_memory()[0]
        del live
        tracemalloc.clear_traces()
        tree = fold(events)
        alone = tracemalloc.get_traced_memory()[0]
        _ = tree.digest
        read = tracemalloc.get_traced_memory()[0]
        del tree
    finally:
        tracemalloc.stop()
    return held / 1e6, alone / 1e6, read / 1e6


def _peak_mb(events: list) -> float:
    """The most MB traced while folding ``events`` from scratch."""
    tracemalloc.start()
    try:
        fold(events)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def _each(live: LiveFold, arriving: list, digests: list[float] | None = None) -> list[float]:
    """Seconds for ``live`` to take each of ``arriving`` and show its tree, one at a time;
    ``digests`` gets the seconds each tree's digest then took to read (hashed when first read)."""
    live.tree()
    times = []
    for event in arriving:
        start = time.perf_counter()
        live.add([event])
        tree = live.tree()
        times.append(time.perf_counter() - start)
        if digests is not None:
            start = time.perf_counter()
            _ = tree.digest
            digests.append(time.perf_counter() - start)
    return times


def _one_more(held: list, arriving: list) -> LiveFold:
    """Print a row: ``held`` and one more event folded from scratch, against a ``LiveFold`` of
    ``held`` taking ``arriving`` one at a time (the median); returns that ``LiveFold``."""
    scratch = median_seconds(lambda: fold(held + arriving[:1]))
    live, digests = LiveFold(held), []
    kept = statistics.median(_each(live, arriving, digests))
    print(f"| {len(held):,} | {scratch * 1000:.0f} | {kept * 1000:.1f} | {scratch / kept:.0f} "
          f"| {statistics.median(digests) * 1000:.1f} |", flush=True)
    return live


def core() -> None:
    print(f"# swarm-plan benchmarks (median of {REPEATS})\n", flush=True)
    start = time.perf_counter()
    events = list(plan_log(goals=5))
    sign_s = time.perf_counter() - start
    lines = [e.to_wire() for e in events]
    print(f"generated {len(events)} signed events in {sign_s:.1f} s ({len(events) / sign_s:,.0f} events/s signed)\n")

    print("## fold")
    print("| events | fold (s) | events/s |")
    print("|---:|---:|---:|")
    for size in (1_000, 10_000, len(events)):
        subset = events[:size]
        seconds = median_seconds(lambda subset=subset: fold(subset))
        print(f"| {size:,} | {seconds:.3f} | {size / seconds:,.0f} |", flush=True)

    print("\n## one more event, N held: the fold kept up to date (what a member does) against one from scratch; "
          "a tree's digest is hashed when first read (shown on request, and when the plan completes)")
    print("| events held | from scratch (ms) | kept up to date (ms, median of 50 events) | x faster "
          "| its digest, when read (ms) |")
    print("|---:|---:|---:|---:|---:|")
    for size in (1_000, 10_000, 100_000):
        _one_more(events[:size], events[size:size + 50])
    print("\n## one more event by an equivocator, N held: an admitted scorer whose feed forked goes on signing "
          "(votes); every batch of its events was a fold from scratch before its feed was kept apart")
    print("| events held | from scratch (ms) | kept up to date (ms, median of 50 events) | x faster "
          "| its digest, when read (ms) |")
    print("|---:|---:|---:|---:|---:|")
    for size in (1_000, 10_000, 100_000):
        held = events[:size]
        fork, after = equivocation([e.id for e in held if e.kind == "proposal"], 50)
        live = _one_more(held + fork, after)
        assert live.scratch_folds == 1 and live.tree().equivocators, "the equivocator's events were not changes"
    print("\n## an admitted key's first fork, N held: a scorer signs 1,000 votes on one chain, then a second "
          "event at seq 1; that batch was a fold from scratch before the feed was kept apart (``_untangle``)")
    print("| events held | from scratch (ms) | as a change (ms, median of 3) | x faster |")
    print("|---:|---:|---:|---:|")
    for size in (1_000, 10_000, 100_000):
        held = events[:size]
        (first, other), after = equivocation([e.id for e in held if e.kind == "proposal"], 1_000)
        before = [*held, first, *after]
        scratch = median_seconds(lambda before=before, other=other: fold([*before, other]))
        changes = []
        for _ in range(REPEATS):
            live = LiveFold(before)
            live.tree()
            start = time.perf_counter()
            live.add([other])
            forked = live.tree()
            changes.append(time.perf_counter() - start)
            assert live.scratch_folds == 1 and forked.equivocators, "the fork was not a change"
        kept = statistics.median(changes)
        print(f"| {size:,} | {scratch * 1000:.0f} | {kept * 1000:.1f} | {scratch / kept:.0f} |", flush=True)
    print("\n## an equivocator's next event as its own feed grows, 10,000 held: its feed was made again "
          "for every batch before it was kept up to date event by event (quadratic in its own events)")
    print("| its events so far | kept up to date (ms, median of the 50 before) | x an honest event at 10,000 held |")
    print("|---:|---:|---:|")
    held = events[:10_000]
    honest = statistics.median(_each(LiveFold(held), events[10_000:10_050]))
    fork, after = equivocation([e.id for e in held if e.kind == "proposal"], 6_000)
    live = LiveFold(held + fork)
    times = _each(live, after)
    for mark in (50, 1_000, 3_000, 6_000):
        kept = statistics.median(times[mark - 50:mark])
        print(f"| {mark:,} | {kept * 1000:.1f} | {kept / honest:.1f} |", flush=True)
    assert live.scratch_folds == 1, "the equivocator's events were not changes"

    print("\n## a feed forked at every seq (a comb), one admitted scorer on the roster: its promises and "
          "candidates on the root; baseline: as many events on one chain, in the same run")
    print("| events | comb: fold (s) | comb: peak MB | one chain: fold (s) | one chain: peak MB | x the chain's time |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in (1_000, 4_000, 16_000):
        figures = []
        for forked in (True, False):
            shaped = comb(size, forked)
            figures += [median_seconds(lambda shaped=shaped: fold(shaped)), _peak_mb(shaped)]
        print(f"| {size:,} | {figures[0]:.3f} | {figures[1]:.1f} | {figures[2]:.3f} | {figures[3]:.1f} "
              f"| {figures[0] / figures[2]:.1f} |", flush=True)
    held_mb, tree_mb, read_mb = _fold_memory(events[:100_000])
    print(f"\nmemory at 100,000 events: a LiveFold and its tree hold {held_mb:.0f} MB, a tree alone "
          f"{tree_mb:.0f} MB, {read_mb:.0f} MB once its digest is read (the price of not folding from scratch; "
          "tracemalloc)", flush=True)

    print("\n## replay of the full log (decode + verify every signature + fold)")
    baseline = median_seconds(lambda: [json.loads(line) for line in lines])
    decode = median_seconds(lambda: [decode_event(line) for line in lines])
    decoded = [decode_event(line) for line in lines]
    folded = median_seconds(lambda: fold(decoded))
    total = decode + folded
    print("| step | seconds | x json.loads baseline |")
    print("|---|---:|---:|")
    print(f"| json.loads only (baseline) | {baseline:.2f} | 1.0 |")
    print(f"| decode + verify | {decode:.2f} | {decode / baseline:.1f} |")
    print(f"| fold | {folded:.2f} | {folded / baseline:.1f} |")
    print(f"| replay total | {total:.2f} | {total / baseline:.1f} |", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "events.jsonl"
        log.write_bytes(b"\n".join(lines) + b"\n")
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "agents.cli.main", "replay", str(log)],
                             capture_output=True, text=True, check=True)
        cli = time.perf_counter() - start
        print(f"\n`swarm replay` of the {len(lines):,}-event log, end to end: {cli:.1f} s "
              f"({run.stdout.strip().splitlines()[-1][:80]}...)")

    print("\n## one simulated plan, no faults (scripted model, 3/3/3 + observer, quorum 2)")
    quiet_logs()
    results = []
    seconds = median_seconds(lambda: results.append(simulate_plan(
        SimConfig(goal="Plan a two-week trip to Japan", seed=len(results), model_latency_s=1.0))))
    print(f"{len(results[-1].events)} events per plan, {seconds * 1000:.0f} ms per simulated plan "
          f"({60 / seconds:,.0f} plans/min)")


if __name__ == "__main__":
    main()
