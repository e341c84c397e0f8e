"""report.html for a partition run, read back in a real headless Chromium: the cut is drawn
where the history says, the majority's acceptances inside it, the minority's not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio

from chaos.history import History
from chaos.sim.runner import judge, quiet_logs
from chaos.sim.world import SimConfig
from chaos.windows import Window, fault_windows, member_states
from tests.browser import Browser, Page

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "tests" / "report-html"
PARTITION = frozenset({"partition"})


def _accepted_in(history: History, window: Window, members) -> list[tuple[str, float]]:
    return [(name, s.at) for name, m in history.members.items() if name in members
            for s in m.shown if s.kind in ("split", "result") and s.after is not None and window.covers(s.at)]


def _a_cut_with_majority_progress() -> tuple[int, History, Window]:
    """The first seed whose partition saw the majority accept something and the minority nothing."""
    quiet_logs()
    for seed in range(30):
        outcome = judge(SimConfig(seed=seed, faults=PARTITION), keep_trace=True)
        history = outcome.history
        assert history is not None
        for window in fault_windows(history):
            majority = set(history.members) - set(window.members)
            if (window.kind == "partition" and window.members
                    and _accepted_in(history, window, majority) and not _accepted_in(history, window, window.members)):
                return seed, history, window
    raise AssertionError("no seed in 30 had a partition during which the majority accepted something")


def test_report_html_draws_the_cut_and_who_accepted_during_it(tmp_path) -> None:
    seed, history, window = _a_cut_with_majority_progress()
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "agents.cli.main", "sim", "--seed", str(seed), "--faults",
                           "partition", "--report", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    page = (out / "report.html").read_text()
    assert "<script" not in page

    drawn = trio.run(_read, (out / "report.html").as_uri())
    cuts = [c for c in drawn["faults"] if c["kind"] == "partition"]
    assert any(abs(c["start"] - window.start) < 1e-6 and abs(c["end"] - window.end) < 1e-6 for c in cuts), cuts
    inside = [(m["member"], m["at"]) for m in drawn["accepts"] if window.start <= m["at"] < window.end]
    majority = set(history.members) - set(window.members)
    assert sorted(inside) == sorted(_accepted_in(history, window, set(history.members)))
    assert any(name in majority for name, _ in inside), "the majority's acceptances during the cut are drawn"
    assert not any(name in window.members for name, _ in inside), "the minority accepted nothing during it"
    assert set(drawn["cut_lanes"]) == set(window.members) | {
        m for w in fault_windows(history) if w.kind == "partition" for m in w.members}
    states = member_states(history)
    assert set(drawn["lanes"]) == set(states), "one lane per member"


async def _read(url: str) -> dict:
    with Browser() as browser:
        async with Page(browser.new_page_url()) as page:
            await page.goto(url)
            REPORTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(REPORTS / "partition-report.png")
            return await page.evaluate("""({
              faults: [...document.querySelectorAll('#timeline rect.fault')].map(r => ({
                kind: r.dataset.kind, start: +r.dataset.start, end: +r.dataset.end})),
              accepts: [...document.querySelectorAll('#timeline .accept')].map(a => ({
                member: a.dataset.member, at: +a.dataset.at, kind: a.dataset.kind})),
              cut_lanes: [...new Set([...document.querySelectorAll('#timeline rect.cut')].map(r => r.dataset.member))],
              lanes: [...new Set([...document.querySelectorAll('#timeline rect.state')].map(r => r.dataset.member))],
            })""")
