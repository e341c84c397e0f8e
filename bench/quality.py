"""``make quality``: run a fixed set of goals through ``swarm plan`` and report on each plan.

Every figure comes from the plan itself and the deterministic checks
(``agents/llm/checks.py``): for every accepted split, coverage of the parent's
key terms, the worst word overlap between two subgoals, and vague subgoals
(that add nothing to the parent); then depth, leaves done, broad leaves (a leaf
whose title names a whole area of work: ``checks.needs_planning``), vague and
duplicate answers (``checks.answer_problem``, ``checks.duplicate_answers``),
proposals made and superseded, model calls and tokens, wall time. Nothing here is
hand-written.

    python -m bench.quality [--llm llama|scripted] [--out DIR] [--baseline OLD/report.json] [GOAL ...]
    python -m bench.quality --rescore DIR   # judge an earlier run's plans again with today's checks
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

from agents.cli.plan import swarm_command
from agents.llm.checks import answer_problem, check_split, duplicate_answers, needs_planning

GOALS = (
    "Plan a two-week trip to Japan",
    "Ship version 2.0 of an open-source library",
    "Organise a wedding for 80 guests",
    "Write a research survey on conflict-free replicated data types",
    "Move a family of four to another city",
)


def report_for(plan: dict) -> dict:
    nodes = {n["id"]: n for n in plan["nodes"]}
    splits = []
    for node in plan["nodes"]:
        if not node["split"]:
            continue
        children = [nodes[c] for c in node["children"]]
        check = check_split(node["title"], [(c["title"], c["description"]) for c in children])
        splits.append(check)
    leaves = [n for n in plan["nodes"] if n["leaf"]]
    vague_answers = duplicates = 0
    for node in plan["nodes"]:
        if not node["split"]:
            continue
        children = [nodes[c] for c in node["children"]]
        answered = [c for c in children if c["leaf"] and c["result"]]
        duplicates += duplicate_answers([c["result"] for c in answered])
        for child in answered:
            chain = [child["title"]]
            parent = child
            while parent["parent"] is not None:
                parent = nodes[parent["parent"]]
                chain.append(parent["title"])
            siblings = tuple(c["title"] for c in children if c is not child)
            if answer_problem(child["result"], tuple(reversed(chain)), siblings) is not None:
                vague_answers += 1
    return {
        "complete": plan["complete"],
        "depth": max((n["depth"] for n in plan["nodes"]), default=0),
        "leaves": len(leaves),
        "leaves_done": sum(1 for n in leaves if n["status"] == "done"),
        "splits": len(splits),
        "coverage": round(sum(s.coverage for s in splits) / len(splits), 2) if splits else None,
        "max_overlap": round(max((s.max_overlap for s in splits), default=0.0), 2),
        "vague_subgoals": sum(s.vague for s in splits),
        "broad_leaves": sum(1 for n in leaves if needs_planning(n["title"]) is not None),
        "vague_answers": vague_answers,
        "duplicate_answers": duplicates,
        "proposals": len(plan["proposals"]),
        "superseded": sum(1 for p in plan["proposals"] if p["status"] == "superseded"),
        "model_calls": plan.get("model_usage", {}).get("calls"),
        "tokens": plan.get("model_usage", {}).get("tokens"),
    }


COMPARED = (("depth", "depth"), ("leaves", "leaves"), ("broad_leaves", "broad leaves"),
            ("vague_subgoals", "vague subgoals"),
            ("vague_answers", "vague answers"), ("duplicate_answers", "duplicate answers"),
            ("model_calls", "model calls"), ("tokens", "tokens"), ("wall_s", "wall (s)"))


def before_after(before: list[dict], after: list[dict]) -> list[str]:
    """A Markdown table of each goal's figures, before -> after (a figure a run lacks shows as ?)."""
    earlier = {row["goal"]: row for row in before}
    lines = ["## Before -> after", "",
             "| goal | " + " | ".join(label for _, label in COMPARED) + " |",
             "|---|" + "---:|" * len(COMPARED)]
    for row in after:
        old = earlier.get(row["goal"], {})
        cells = [f"{old.get(key, '?')} -> {row.get(key, '?')}" for key, _ in COMPARED]
        lines.append(f"| {row['goal']} | " + " | ".join(cells) + " |")
    return lines


def rescore(run: Path) -> None:
    old = json.loads((run / "report.json").read_text())
    rows = []
    for index, row in enumerate(old):
        plan_file = run / f"goal-{index}" / "plan.json"
        judged = report_for(json.loads(plan_file.read_text())) if plan_file.exists() else {}
        rows.append({**row, **judged})
    (run / "report.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"rescored {len(rows)} plans in {run}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("goals", nargs="*", default=list(GOALS))
    parser.add_argument("--llm", default="llama")
    parser.add_argument("--out", default="reports/quality")
    parser.add_argument("--timeout", type=float, default=1200)
    parser.add_argument("--baseline", metavar="REPORT.json",
                        help="an earlier run's report.json (e.g. of an older commit): add a before/after table")
    parser.add_argument("--rescore", metavar="DIR",
                        help="recompute DIR/report.json from its plans with today's checks (wall times kept), "
                             "so that a run of an older commit compares with a new one")
    args = parser.parse_args()
    if args.rescore:
        rescore(Path(args.rescore))
        return
    out = Path(args.out)
    rows = []
    for index, goal in enumerate(args.goals):
        run_dir = out / f"goal-{index}"
        start = time.perf_counter()
        run = subprocess.run([*swarm_command(), "plan", goal, "--llm", args.llm, "--out", str(run_dir),
                              "--timeout", str(args.timeout)], capture_output=True, text=True)
        wall = time.perf_counter() - start
        plan_file = run_dir / "plan.json"
        if run.returncode != 0 or not plan_file.exists():
            rows.append((goal, wall, {"error": (run.stderr.strip().splitlines() or ["?"])[-1][:120]}))
        else:
            rows.append((goal, wall, report_for(json.loads(plan_file.read_text()))))
        print(f"{goal}: {wall:.0f} s, {rows[-1][2]}", flush=True)
    lines = [f"# Plan quality ({args.llm})", "",
             "| goal | wall (s) | complete | depth | leaves done | splits | coverage | max overlap | vague subgoals "
             "| vague answers | duplicate answers | proposals (superseded) | model calls | tokens |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for goal, wall, r in rows:
        if "error" in r:
            lines.append(f"| {goal} | {wall:.0f} | error: {r['error']} |||||||||||")
            continue
        lines.append(f"| {goal} | {wall:.0f} | {r['complete']} | {r['depth']} | {r['leaves_done']}/{r['leaves']} "
                     f"| {r['splits']} | {r['coverage']} | {r['max_overlap']} | {r['vague_subgoals']} "
                     f"| {r['vague_answers']} | {r['duplicate_answers']} "
                     f"| {r['proposals']} ({r['superseded']}) | {r['model_calls']} | {r['tokens']} |")
    report = [{"goal": g, "wall_s": round(w, 1), **r} for g, w, r in rows]
    if args.baseline:
        lines += ["", *before_after(json.loads(Path(args.baseline).read_text()), report)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
