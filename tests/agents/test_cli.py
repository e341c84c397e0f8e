"""The ``swarm`` command as a user types it: a real subprocess, real files."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOAL = "Plan a two-week trip to Japan"


MODULE = [sys.executable, "-m", "agents.cli.main"]
SCRIPT = [str(Path(sys.executable).parent / "swarm")]  # what pip installed


def swarm(*args: str, command: list[str] = MODULE, **options) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, **options)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    run = swarm("simulate", GOAL, "--llm", "scripted", "--seed", "4", "--events", str(out / "e.jsonl"),
                "--json", str(out / "plan.json"), "--md", str(out / "plan.md"))
    assert run.returncode == 0, run.stderr
    return out, run


def test_simulate_prints_the_tree_and_writes_the_plan_contract(simulated) -> None:
    out, run = simulated
    plan = json.loads((out / "plan.json").read_text())
    assert plan["goal"] == GOAL and plan["complete"] is True and plan["quorum"] == 2
    assert plan["digest"] in run.stdout and "complete" in run.stdout
    for node in plan["nodes"]:
        assert {"id", "parent", "title", "status", "result", "executor"} <= node.keys()
        if node["leaf"]:
            assert node["status"] == "done" and node["result"] and node["executor"]
    for proposal in plan["proposals"]:
        assert {"id", "node", "author", "status", "approvals"} <= proposal.keys()
    assert plan["refused"] == 0
    assert (out / "plan.md").read_text().startswith(f"# {GOAL}")


def test_replay_in_any_order_with_duplicates_gives_the_same_digest(simulated, tmp_path) -> None:
    out, _ = simulated
    lines = (out / "e.jsonl").read_bytes().splitlines()
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(reversed(lines)) + b"\n")
    (tmp_path / "b.jsonl").write_bytes(b"\n".join(lines[::2]) + b"\n")
    run = swarm("replay", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--json", str(tmp_path / "p.json"))
    assert run.returncode == 0, run.stderr
    digest = json.loads((out / "plan.json").read_text())["digest"]
    assert json.loads((tmp_path / "p.json").read_text())["digest"] == digest


def test_replay_names_each_refused_line_and_keeps_the_rest(simulated, tmp_path) -> None:
    out, _ = simulated
    lines = (out / "e.jsonl").read_bytes().splitlines()
    forged = json.loads(lines[3])
    forged["body"]["approve" if "approve" in forged["body"] else "strategy"] = "tampered"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([*lines, json.dumps(forged).encode(), b"garbage"]) + b"\n")
    run = swarm("replay", str(bad), "--json", str(tmp_path / "p.json"))
    assert run.returncode == 0
    assert f"{bad}:{len(lines) + 1}: event" in run.stderr and "refused (" in run.stderr
    assert f"{bad}:{len(lines) + 2}: event (unparsed) refused (json)" in run.stderr
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["refused"] == 2 and plan["complete"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", GOAL, "--quorum", "4"], "quorum 4 must be a majority of the 3 scorer(s)"),
        (["simulate", GOAL, "--quorum", "1"], "quorum 1 must be a majority of the 3 scorer(s)"),
        (["sim", "--members", "3/5/3", "--quorum", "2"], "quorum 2 must be a majority of the 5 scorer(s) "
                                                         "(from 3 to 5); change --quorum or the scorers in --members"),
        (["simulate", GOAL, "--llm", "gpt"], "supports only --llm scripted"),
        (["simulate", GOAL, "--scorers", "0"], "must be at least 1"),
        (["replay", "/nonexistent/file.jsonl"], "cannot read event file /nonexistent/file.jsonl"),
    ],
)
def test_bad_usage_exits_2_and_says_what_to_do(args, message) -> None:
    run = swarm(*args)
    assert run.returncode == 2
    assert message in run.stderr


def test_the_installed_entry_point_runs() -> None:
    run = swarm("--help", command=SCRIPT)
    assert run.returncode == 0 and "simulate" in run.stdout and "replay" in run.stdout


@pytest.mark.parametrize("command", [MODULE, SCRIPT], ids=["module", "installed script"])
def test_output_to_a_pipe_arrives_whole_and_the_exit_code_is_the_commands(simulated, tmp_path, command) -> None:
    """``swarm`` leaves without the interpreter's teardown (``agents.cli.main.run``): what a
    command printed must still reach a pipe whole, where the streams are block-buffered (no
    PYTHONUNBUFFERED, as in a user's shell), its exit code must be the command's, and output
    it could not write is said, not lost in silence."""
    out, _ = simulated
    if command == SCRIPT:  # the script pip wrote calls ``run``, not ``main`` (a stale install would)
        scripts = importlib.metadata.entry_points(group="console_scripts", name="swarm")
        assert [script.value for script in scripts] == ["agents.cli.main:run"]
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    run = swarm("replay", str(out / "e.jsonl"), "--json", str(tmp_path / "p.json"), command=command, env=env)
    assert run.returncode == 0, run.stderr
    digest = json.loads((out / "plan.json").read_text())["digest"]
    assert json.loads((tmp_path / "p.json").read_text())["digest"] == digest
    assert GOAL in run.stdout.partition("\n")[0], run.stdout[:200]  # the tree, printed first
    assert digest in run.stdout.rstrip("\n").rpartition("\n")[2], run.stdout[-300:]  # the summary, printed last
    refused = swarm("replay", str(tmp_path / "missing.jsonl"), command=command, env=env)
    assert refused.returncode == 2
    assert "cannot read event file" in refused.stderr and "missing.jsonl" in refused.stderr
    with open("/dev/full", "w") as full:  # every write fails: no space left on the device
        cut = subprocess.run([*command, "replay", str(out / "e.jsonl")], stdout=full, stderr=subprocess.PIPE,
                             text=True, timeout=120, env=env)
    assert cut.returncode == 1
    assert "could not write all of the output" in cut.stderr and "No space left" in cut.stderr, cut.stderr[-500:]
