"""``python -m bench sim``: seeds per minute of the deterministic simulation.

Baseline: the same 3/3/3 cluster with no faults, measured in the same run;
the faulty runs are slower because they last longer in virtual time (the
members keep syncing and acting until the faults are over and the plan
converges). Figures are medians over ``REPEATS`` batches, one worker process,
so they compare across machines with different core counts; ``swarm sim``
uses one worker per CPU.
"""

from __future__ import annotations

import statistics
import time

from chaos.sim.faults import parse_faults
from chaos.sim.runner import quiet_logs, run_many
from chaos.sim.world import SimConfig

REPEATS = 3
BATCH = 12


def _rate(faults: str, shape: tuple[int, int, int], batch: int) -> tuple[float, float]:
    rates, virtual = [], []
    base = SimConfig(seed=0, decomposers=shape[0], scorers=shape[1], executors=shape[2],
                     faults=parse_faults(faults))
    for repeat in range(REPEATS):
        start = time.perf_counter()
        outcomes = run_many(base, range(repeat * batch, (repeat + 1) * batch), jobs=1)
        rates.append(60 * batch / (time.perf_counter() - start))
        virtual.extend(o.virtual_s for o in outcomes)
        assert not any(o.violations for o in outcomes), "a benchmark run broke an invariant"
    return statistics.median(rates), statistics.median(virtual)


def main() -> None:
    quiet_logs()
    print(f"\n## deterministic simulation (scripted model, one worker, median of {REPEATS} x {BATCH} seeds)")
    print("| cluster | faults | seeds/min | x no-fault baseline | median virtual s per run |")
    print("|---|---|---:|---:|---:|")
    baseline = None
    for shape, faults in [((3, 3, 3), "none"), ((3, 3, 3), "partition,crash"), ((3, 3, 3), "all"),
                          ((5, 5, 5), "all")]:
        rate, virtual = _rate(faults, shape, BATCH if shape == (3, 3, 3) else BATCH // 2)
        baseline = baseline or rate
        print(f"| {'/'.join(map(str, shape))} | {faults} | {rate:.0f} | {rate / baseline:.2f} | {virtual:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
