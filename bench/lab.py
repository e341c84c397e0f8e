"""``python -m bench lab``: plan latency and event propagation in containers, under faults.

Four runs of the same 3/3/3 + observer cluster (scripted model, 1 s mean per call),
each a scenario in ``bench/scenarios``: no fault (the baseline, measured in the
same invocation), a 2/3 - 1/3 partition healed after 10 s, 100 ms one-way latency
with 30 ms jitter on every link (Toxiproxy), and 10% packet loss per link
(iptables). For each: the time from submitting the goal until every member holds
the complete plan, and the propagation delay of every event to every member
(from the members' own logs: "published" by its author, "admitted" by each
receiver; one host clock, no skew). Writes ``reports/bench/lab.md``,
``reports/bench/lab.png`` (delay CDFs, completion times) and ``lab-timeline.png`` (each
delivery's delay over the run, the run's fault windows shaded, as in report.html) and
prints the table; each run's report.html is under ``reports/bench/lab/NAME``.
"""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path

from chaos.lab.run import ScenarioRun, write_reports
from chaos.lab.scenario import load
from chaos.windows import fault_windows

RUNS = [("no fault", "no-fault"), ("2/3 partition, healed at 10 s", "partition"),
        ("100 ms latency, 30 ms jitter", "latency"), ("10% loss per link", "loss")]
OUT = Path("reports/bench")


def _when(record: dict) -> float:
    return datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00")).timestamp()


def propagation(log_dir: Path) -> list[float]:
    """Seconds from an event's "published" record to each other member's first "admitted"."""
    return [delay for _sent, delay in propagation_over_time(log_dir)]


def propagation_over_time(log_dir: Path) -> list[tuple[float, float]]:
    """(wall seconds it was published, seconds until a member admitted it), per delivery."""
    published: dict[str, float] = {}
    admitted: dict[tuple[str, str], float] = {}
    for log in sorted(log_dir.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("event") == "published":
                published[record["event_id"]] = _when(record)
            elif record.get("event") == "admitted" and record.get("via") != "self":
                key = (log.stem, record["event_id"])
                admitted[key] = min(admitted.get(key, float("inf")), _when(record))
    delays = []
    for (_member, event_id), at in admitted.items():
        sent = published.get(event_id[:12])
        if sent is not None and at >= sent:
            delays.append((sent, at - sent))
    return delays


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    from chaos.sim.runner import quiet_logs

    quiet_logs()
    rows = []
    timelines = []
    for label, name in RUNS:
        scenario = load(Path("bench/scenarios") / f"{name}.yaml")
        report_dir = OUT / "lab" / name
        run = ScenarioRun(scenario, report_dir, progress=lambda _line: None, log_level="debug")
        try:
            verdicts = run.run()
        finally:
            run.close()
        write_reports(report_dir, scenario, run.history, verdicts, run.history.ended_at)
        done = [m.completed_at for m in run.history.members.values() if m.completed_at is not None]
        complete_s = max(done) if len(done) == len(run.history.members) else float("nan")
        timed = [(sent - run.t0_wall_ms / 1000, delay) for sent, delay in propagation_over_time(report_dir / "logs")]
        delays = [delay for _at, delay in timed]
        rows.append((label, complete_s, delays, all(v.passed for v in verdicts)))
        timelines.append((label, timed, fault_windows(run.history)))
        print(f"  {label}: complete in {complete_s:.1f} s, {len(delays)} deliveries", flush=True)

    base = rows[0][1]
    lines = ["| run | plan complete (s) | x no-fault | propagation p50 (ms) | p99 (ms) | deliveries | checks |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for label, complete_s, delays, passed in rows:
        lines.append(f"| {label} | {complete_s:.1f} | {complete_s / base:.2f} | "
                     f"{1000 * statistics.median(delays):.0f} | {1000 * _percentile(delays, 0.99):.0f} | "
                     f"{len(delays)} | {'pass' if passed else 'FAIL'} |")
    table = "\n".join(lines)
    print("\n## latency under faults (containers, 3/3/3 + observer, scripted model)\n" + table)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "lab.md").write_text("# Latency under faults\n\n" + (__doc__ or "") + "\n" + table + "\n")
    _plot(rows, OUT / "lab.png")
    plot_over_time(timelines, OUT / "lab-timeline.png")
    print(f"\nplots: {OUT / 'lab.png'}, {OUT / 'lab-timeline.png'} (faults shaded)")


def _plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (cdf, bars) = plt.subplots(1, 2, figsize=(11, 4))
    for label, _complete, delays, _passed in rows:
        ordered = sorted(1000 * d for d in delays)
        if ordered:
            cdf.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)
    cdf.set_xscale("log")
    cdf.set_xlabel("event propagation to a member (ms, log scale)")
    cdf.set_ylabel("fraction of deliveries")
    cdf.legend(fontsize=8)
    bars.bar(range(len(rows)), [r[1] for r in rows])
    bars.set_xticks(range(len(rows)), [r[0] for r in rows], rotation=20, ha="right", fontsize=8)
    bars.set_ylabel("plan complete after submit (s)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)



def plot_over_time(timelines, path: Path) -> None:
    """One panel per run: each delivery's propagation delay at the moment it was published,
    with the fault windows of that run shaded (the same windows as report.html)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(timelines), 1, figsize=(11, 2.2 * len(timelines)), sharex=True, squeeze=False)
    for axis, (label, timed, windows) in zip(axes[:, 0], timelines, strict=True):
        for window in windows:
            axis.axvspan(window.start, window.end, color="tab:red", alpha=0.12, lw=0)
            axis.text(window.start, 1.0, f" {window.kind}", transform=axis.get_xaxis_transform(), va="top",
                      fontsize=7, color="tab:red")
        if timed:
            axis.scatter([at for at, _d in timed], [1000 * d for _a, d in timed], s=4)
            axis.set_yscale("log")
        axis.set_ylabel("ms", fontsize=8)
        axis.set_title(label, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds since the goal was submitted")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
