"""The networked commands as a user types them: swarm plan, and clear errors for bad input."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.clusterdir import read_members
from agents.core.events import GoalBody
from agents.store import EventStore


def swarm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agents.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_swarm_plan_runs_a_whole_swarm_and_writes_the_plan(tmp_path) -> None:
    run = swarm("plan", "Plan a two-week trip to Japan", "--out", str(tmp_path), "--llm", "scripted", "--llm-latency", "0.1",
                "--timeout", "120")
    assert run.returncode == 0, run.stderr[-3000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["complete"] is True and plan["goal"] == "Plan a two-week trip to Japan"
    assert plan["digest"] in run.stdout and "plan complete in" in run.stdout
    assert "leaves done" in run.stdout  # the progress lines
    # and between them, what happened: peers found, splits accepted, leaves held and done
    assert "  found " in run.stdout and "split of 'Plan a two-week trip to Japan' accepted" in run.stdout
    assert " held by executor " in run.stdout and " done by executor " in run.stdout
    assert (tmp_path / "plan.md").read_text().startswith("# Plan a two-week trip to Japan")
    members = sorted(p.name for p in (tmp_path / "members").iterdir()
                     if (p / "addrs").exists() and p.name not in ("observer", "client"))
    assert len(members) == 9
    # every member ends with the decisions the observer printed (a slower scorer's ballot may
    # still land after the quorum, so digests may differ by such tallies); swarm plan waits for
    # a member that gossip left behind until sync catches it up; inspect reads offline
    assert "every member holds the finished plan" in run.stdout
    decided = {n["id"]: (n["split"], n["result_event"]) for n in plan["nodes"]}
    for name in members:
        inspect = swarm("inspect", str(tmp_path / "members" / name), "--json", str(tmp_path / f"{name}.json"))
        assert inspect.returncode == 0
        theirs = json.loads((tmp_path / f"{name}.json").read_text())
        assert {n["id"]: (n["split"], n["result_event"]) for n in theirs["nodes"]} == decided, name
        assert theirs["complete"] is True
    # and every process was stopped
    ps = subprocess.run(["pgrep", "-f", str(tmp_path / "members")], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


NOBODY = "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWGSrXQQXYp31AUbZ64eJMb3hGywN4dmzpaZW3rWW22EfF"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """An operator's cluster with an admitted client, observer, executor and scorer."""
    root = tmp_path_factory.mktemp("cluster")
    assert swarm("cluster", "init", str(root / "admin"), "--name", "lab").returncode == 0
    for role in ("client", "observer", "executor", "scorer"):
        run = swarm("admit", str(root / "admin"), "--role", role, "--data-dir", str(root / role))
        assert run.returncode == 0 and f"as {role} in cluster 'lab'" in run.stdout, run.stderr
    return root


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["plan", "g", "--scorers", "1", "--quorum", "2"], 1, "quorum 2 can never be reached by 1 scorer"),
        (["plan", "g", "--scorers", "4", "--quorum", "2"], 1, "quorum 2 is not a majority of 4 scorers"),
        (["plan", "g", "--model-per-member", "--llm-parallel", "2"], 1,
         "with --model-per-member each member's own model answers one call at a time"),
        (["plan", "g", "--llm-parallel", "9"], 2, "--llm-parallel: invalid choice: 9"),
        (["agent", "--data-dir", "{root}/executor", "--no-mdns", "--llm", "llama", "--llm-parallel", "2"], 1,
         "--llm llama's one model in this process answers one call at a time"),
        (["agent", "--role", "boss", "--data-dir", "x"], 2, "invalid choice: 'boss'"),
        (["submit", "g", "--no-mdns", "--data-dir", "{root}/client", "--roster", "{root}/admin/members.json"], 1,
         "needs a peer: give --bootstrap"),
        (["submit", "g", "--no-mdns", "--data-dir", "{root}/client", "--bootstrap", NOBODY], 2,
         "a goal names the scorers who decide it: give --roster"),
        (["submit", "g", "--no-mdns", "--data-dir", "{root}/client", "--roster", "{root}/admin/members.json",
          "--bootstrap", "/ip4/127.0.0.1/tcp/notaport"], 1, "bad multiaddr"),
        (["agent", "--data-dir", "{root}/nobody", "--no-mdns"], 1, "holds no admission ticket"),
        (["agent", "--role", "scorer", "--data-dir", "{root}/executor", "--no-mdns"], 1,
         "admits this member as a executor, not a scorer"),
        (["agent", "--data-dir", "{root}/executor", "--cluster", "prod", "--no-mdns"], 1,
         "is a ticket for cluster 'lab', not 'prod'"),
        (["cluster", "init", "{root}/admin"], 1, "already holds a cluster authority"),
        (["admit", "{root}/admin", "--role", "scorer"], 2, "admit either a local member"),
        (["admit", "{root}/not-a-cluster", "--role", "scorer", "--peer", "x"], 1, "is not a cluster directory"),
        (["inspect", "/nonexistent/dir"], 1, "holds no event store"),
    ],
)
def test_bad_input_names_the_problem(cluster, args, code, message) -> None:
    run = swarm(*(a.replace("{root}", str(cluster)) for a in args))
    assert run.returncode == code, run.stderr[-2000:]
    assert message in run.stderr


def test_a_member_without_a_ticket_is_told_how_to_get_one(cluster) -> None:
    run = swarm("agent", "--role", "scorer", "--data-dir", str(cluster / "stranger"), "--no-mdns")
    assert run.returncode == 1
    assert f"swarm admit CLUSTER_DIR --role scorer --data-dir {cluster / 'stranger'}" in run.stderr


def test_observe_with_nobody_to_ask_fails_instead_of_printing_an_empty_plan(cluster) -> None:
    run = swarm("observe", "--no-mdns", "--timeout", "2", "--data-dir", str(cluster / "observer"),
                "--bootstrap", NOBODY)
    assert run.returncode == 1
    assert "no peer answered within 2 s" in run.stderr


def test_observe_whose_every_pull_is_refused_fails_instead_of_printing_a_partial_plan(cluster, tmp_path) -> None:
    """Connected, but no pull ran to its end (here: the peer is of another cluster and refuses
    the conversation): the one-shot says so and exits 1, rather than print what it has as if
    it were the plan."""
    assert swarm("cluster", "init", str(tmp_path / "other"), "--name", "other").returncode == 0
    assert swarm("admit", str(tmp_path / "other"), "--role", "observer",
                 "--data-dir", str(tmp_path / "stranger")).returncode == 0
    with _running(cluster / "executor") as address:
        run = swarm("observe", "--no-mdns", "--timeout", "30", "--data-dir", str(tmp_path / "stranger"),
                    "--bootstrap", address)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "no pull from a peer ran to its end" in run.stderr


@contextlib.contextmanager
def _running(data_dir: Path) -> Iterator[str]:
    """``swarm agent`` on ``data_dir`` (its role from its ticket, the scripted model), as a
    process; yields its address once it listens, and stops it however the test ends."""
    member = subprocess.Popen([sys.executable, "-m", "agents.cli.main", "agent", "--data-dir", str(data_dir),
                               "--no-mdns", "--llm", "scripted", "--listen", "/ip4/127.0.0.1/tcp/0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    addrs = data_dir / "addrs"
    try:
        deadline = time.monotonic() + 60
        while not addrs.exists() and member.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert addrs.exists(), "the member did not start"
        yield addrs.read_text().split()[0]
    finally:
        member.terminate()
        member.wait(timeout=30)
        addrs.unlink(missing_ok=True)


def test_submit_to_nobody_gives_up_with_a_reason(cluster) -> None:
    run = swarm("submit", "g", "--no-mdns", "--timeout", "2", "--data-dir", str(cluster / "client"),
                "--roster", str(cluster / "admin" / "members.json"), "--bootstrap", NOBODY)
    assert run.returncode == 1
    assert "no peer reachable within 2 s" in run.stderr


def test_submit_waits_for_the_holders_it_asks_for_and_names_them(cluster) -> None:
    """One member runs: the default two holders never come, and submit says how many did and
    how to ask for fewer; asking for one, it exits 0 naming that member. The goal stays
    published either way (the member holds both)."""
    with _running(cluster / "scorer") as address:
        common = ("--no-mdns", "--data-dir", str(cluster / "client"), "--roster", str(cluster / "admin" / "members.json"),
                  "--bootstrap", address)
        short = swarm("submit", "Plan a day in Kyoto", "--timeout", "15", *common)
        one = swarm("submit", "Plan a day in Nara", "--timeout", "30", "--holders", "1", *common)
    assert short.returncode == 1, short.stdout + short.stderr[-2000:]
    assert "but 1 of the 2 members --holders asks for confirmed holding it within 15 s" in short.stderr
    assert "fewer members than that? give --holders 1" in short.stderr
    assert one.returncode == 0, one.stderr[-2000:]
    peer = next(m["peer"] for m in read_members(cluster / "admin" / "members.json") if m["role"] == "scorer")
    assert one.stdout.strip().endswith(f"submitted; held by {peer}"), one.stdout
    with EventStore.open(cluster / "scorer") as store:
        goals = sorted(e.body.text for e in store.events() if isinstance(e.body, GoalBody))
    assert goals == ["Plan a day in Kyoto", "Plan a day in Nara"]


def test_a_damaged_identity_key_is_refused_and_the_store_is_untouched(tmp_path) -> None:
    with EventStore.open(tmp_path) as store:
        store.bump("refused", 5)
    (tmp_path / "identity.key").write_text("not hex\n")
    run = swarm("agent", "--role", "scorer", "--data-dir", str(tmp_path), "--no-mdns")
    assert run.returncode == 1 and "identity.key is not a 64-hex-digit ed25519 seed" in run.stderr
    with EventStore.open(tmp_path) as store:
        assert store.counters() == {"refused": 5}
