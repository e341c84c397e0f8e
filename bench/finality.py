"""``python -m bench finality``: what final decisions cost, against the protocol before them.

Baseline: the last commit before finality (``BEFORE``: splits accepted by the earliest
quorum time, claims by timestamps and leases, no admission), exported with ``git archive``
and run in a subprocess on the same seeds and faults, in the same run. For each side:
the time until every live member saw the plan complete (virtual seconds), events per plan,
model calls, and how many times any member showed a decision and then another one
(the old side counts its reorganisations; the new side its transition logs).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from chaos.checkers.finality import revocations
from chaos.sim.faults import parse_faults
from chaos.sim.runner import quiet_logs
from chaos.sim.world import SimConfig, run_seed

BEFORE = "4c89bc3"  # the landed code before decisions were final
SEEDS = 24
ROOT = Path(__file__).resolve().parents[1]

_OLD = r"""
import json, sys, logging, structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
from chaos.sim.world import SimConfig, run_seed
from chaos.sim.faults import parse_faults
faults, seeds = sys.argv[1], int(sys.argv[2])
rows = []
for seed in range(seeds):
    run = run_seed(SimConfig(seed=seed, faults=parse_faults(faults)))
    live = run.history.live()
    union = {e.id for m in run.history.members.values() for e in m.events}
    done = [m.completed_at for m in live if m.completed_at is not None]
    reorgs = sum(line.count("reorganisation") for line in run.trace)
    rows.append({"complete_s": max(done) if len(done) == len(live) else None, "events": len(union),
                 "revocations": reorgs})
print(json.dumps(rows))
"""


def _after(faults: str) -> list[dict]:
    rows = []
    for seed in range(SEEDS):
        run = run_seed(SimConfig(seed=seed, faults=parse_faults(faults)))
        live = run.history.live()
        union = {e.id for m in run.history.members.values() for e in m.events}
        done = [m.completed_at for m in live if m.completed_at is not None]
        rows.append({"complete_s": max(done) if len(done) == len(live) else None, "events": len(union),
                     "revocations": revocations(run.history),
                     "calls": sum(m.model_calls for m in run.history.members.values())})
    return rows


def _before(faults: str) -> list[dict] | None:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE], capture_output=True)
        if archive.returncode != 0:
            print(f"(no baseline: commit {BEFORE} is not in this clone)")
            return None
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        run = subprocess.run([sys.executable, "-c", _OLD, faults, str(SEEDS)], cwd=tmp,
                             capture_output=True, text=True, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"})
        if run.returncode != 0:
            print(f"(baseline failed: {run.stderr.strip().splitlines()[-1:]})")
            return None
        return json.loads(run.stdout.strip().splitlines()[-1])


def _median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    quiet_logs()
    print(f"\n## the price of finality (same {SEEDS} seeds, scripted model, 3/3/3 quorum 2; "
          f"baseline: commit {BEFORE}, before finality, run in the same session)")
    print("| faults | protocol | plan complete (virtual s, median) | events per plan (median) | "
          "seeds with a revoked decision | revocations |")
    print("|---|---|---:|---:|---:|---:|")
    for faults in ("none", "partition,crash,delay,loss,skew"):
        before, after = _before(faults), _after(faults)
        for name, rows in (("before", before), ("final", after)):
            if rows is None:
                continue
            print(f"| {faults} | {name} | {_median(rows, 'complete_s'):.1f} | {_median(rows, 'events'):.0f} | "
                  f"{sum(1 for r in rows if r['revocations'])}/{len(rows)} | "
                  f"{sum(r['revocations'] for r in rows)} |", flush=True)
        if before:
            ratio_t = _median(after, "complete_s") / _median(before, "complete_s")
            ratio_e = _median(after, "events") / _median(before, "events")
            print(f"| {faults} | final / before | x{ratio_t:.2f} | x{ratio_e:.2f} | | |", flush=True)


if __name__ == "__main__":
    main()
