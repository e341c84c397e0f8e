"""Whole clusters as a user brings them up, with the scripted model (these tests are about
coordination): thirty members in containers with `make swarm` and the shape knobs, and
`make stack` on a one-node Docker Swarm, whose members found each other from a single
bootstrap address (peer exchange, no mDNS). In each the plan completes and every member
ends with one digest.

Real containers; for the stack, a real overlay network, deployed by ``docker stack deploy``
from the file ``chaos/docker/stack.py`` writes. An engine that was in no swarm is left in
none again.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from agents.core.fold import fold
from agents.store import EventStore
from chaos.docker.compose import ROOT, Shape
from chaos.docker.stack import render_stack

STACK = "swarm-plan-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _swarm_state() -> str:
    return subprocess.run(["docker", "info", "--format", "{{.Swarm.LocalNodeState}}"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _digest(data_dir: Path) -> str:
    """The member's digest from its store (as ``swarm inspect`` shows it), when its tree is complete."""
    with EventStore.open(data_dir) as store:
        tree = fold(store.events())
    return tree.digest if tree.complete else f"incomplete ({tree.events} events)"


def _plan_by_make(make: list[str], out: Path, target: str, swarm_timeout: int, timeout: int) -> dict:
    """Run ``make TARGET`` as a user would (a free page port, a short goal) and return the
    plan it wrote, once it says the plan is complete, with no refusal or reorganisation."""
    done = subprocess.run([*make, target, f"WEB_PORT={_free_port()}", "GOAL=Plan a weekend in Kyoto",
                           f"SWARM_TIMEOUT={swarm_timeout}"], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["complete"] and plan["reorganisations"] == 0 and plan["refused"] == 0, plan
    return plan


def _assert_one_complete_digest(lab: Path, members: list[str]) -> None:
    """Every member's store folds to one complete tree (waiting up to 120 s): the watcher
    stopped at the first complete tree, and the members hold what came after too."""
    deadline = time.monotonic() + 120
    while (digests := {m: _digest(lab / "members" / m) for m in members}) and \
            (len(set(digests.values())) != 1 or "incomplete" in next(iter(digests.values()))) \
            and time.monotonic() < deadline:
        time.sleep(3)
    assert len(set(digests.values())) == 1 and "incomplete" not in next(iter(digests.values())), digests


@pytest.mark.slow
def test_thirty_members_in_containers_complete_a_plan_with_one_digest(tmp_path) -> None:
    out = tmp_path / "out"
    shape = ["DECOMPOSERS=8", "SCORERS=8", "EXECUTORS=10", "OBSERVERS=4"]
    make = ["make", "-C", str(ROOT), f"OUT={out}", "LLM=scripted", *shape]
    try:
        _plan_by_make(make, out, "swarm", swarm_timeout=600, timeout=1200)
        members = [name for name, _ in Shape(8, 8, 10, 4).members()]
        assert len(members) == 30
        _assert_one_complete_digest(out / "lab", members)
    finally:
        subprocess.run([*make, "swarm-down"], capture_output=True, timeout=300)


@pytest.mark.slow
def test_make_stack_completes_a_plan_on_a_one_node_swarm_from_one_bootstrap_address(tmp_path) -> None:
    was = _swarm_state()
    out = tmp_path / "out"
    make = ["make", "-C", str(ROOT), f"OUT={out}", f"STACK={STACK}", "LLM=scripted"]
    try:
        _plan_by_make(make, out, "stack", swarm_timeout=300, timeout=900)

        lab = out / "lab"
        stack_file = yaml.safe_load((lab / "docker-stack.yml").read_text())
        bootstraps = {s["environment"]["SWARM_BOOTSTRAP"] for s in stack_file["services"].values()}
        assert len(bootstraps) == 1 and len(next(iter(bootstraps)).split()) == 1, bootstraps
        assert "--no-mdns" in stack_file["services"]["scorer-1"]["command"]

        _assert_one_complete_digest(lab, [name for name, _ in Shape().members()])

        # each member was told only of the observer, yet connected to others it learned of
        logs = subprocess.run(["docker", "service", "logs", f"{STACK}_executor-1"], capture_output=True,
                              text=True, timeout=60)
        learned = logs.stdout + logs.stderr  # a member logs to its stderr
        assert '"peers learned"' in learned, learned[-2000:]
    finally:
        subprocess.run([*make, "stack-down"], capture_output=True, timeout=180)
        if was == "inactive":
            subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True, timeout=60)


def test_the_stack_file_needs_an_admitted_lab_and_names_the_way_out(tmp_path) -> None:
    with pytest.raises(ValueError, match="make admit"):
        render_stack(Shape(), tmp_path)
    (tmp_path / "admin").mkdir()
    (tmp_path / "admin" / "members.json").write_text(json.dumps([{"peer": "12D3KooWx", "role": "scorer",
                                                                   "name": "scorer-1"}]))
    with pytest.raises(ValueError, match="no member named 'observer'"):
        render_stack(Shape(), tmp_path)
    done = subprocess.run([sys.executable, "-m", "chaos.docker.stack", "--lab", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "make admit" in done.stderr
