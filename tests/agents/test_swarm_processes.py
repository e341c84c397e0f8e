"""The swarm as real processes on loopback: libp2p, SIGKILL, restarts from data directories."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import time
from collections import Counter

import pytest

from agents.cli.plan import swarm_command
from agents.core.events import ResultBody
from agents.net.liveness import PING_INTERVAL, PING_TIMEOUT, QUIET_BEFORE_PING
from agents.store import EventStore
from tests.cluster import LocalCluster
from tests.spans import most_leaves_worked_at_once

pytestmark = pytest.mark.slow
_ids = itertools.count()


@pytest.fixture
def make_cluster(tmp_path):
    clusters: list[LocalCluster] = []

    def make(**options) -> LocalCluster:
        cluster = LocalCluster(tmp_path / f"c{len(clusters)}", f"test-{next(_ids)}-{tmp_path.name}", **options)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


def _no_leaf_with_two_results(tree) -> None:
    accepted = Counter(r.leaf for r in tree.results.values() if r.status == "accepted")
    assert all(n == 1 for n in accepted.values())


def _quorum_respected(tree, quorum: int) -> None:
    for node in tree.nodes.values():
        if node.split is not None:
            assert len(tree.proposals[node.split].ballots) >= quorum


def _shown(cluster: LocalCluster) -> dict[str, list[dict]]:
    """Every member's transition log: each change of what it showed."""
    logs = {}
    for name, proc in cluster.procs.items():
        path = proc.data_dir / "transitions.jsonl"
        logs[name] = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return logs


def _never_revoked(cluster: LocalCluster) -> int:
    """No member ever replaced a split or result it showed, nor showed another than any other member."""
    decided: dict[tuple[str, str], str] = {}
    for name, records in _shown(cluster).items():
        for record in records:
            if record["kind"] not in ("split", "result"):
                continue
            assert record["before"] is None, f"{name} replaced a {record['kind']}: {record}"
            key = (record["kind"], record["node"])
            assert decided.setdefault(key, record["after"]) == record["after"], f"{name} contradicts: {record}"
    return len(decided)


def test_plan_completes_every_member_agrees_and_a_late_observer_rebuilds_it(make_cluster, tmp_path) -> None:
    cluster = make_cluster()
    cluster.shape(2, 3, 2)
    cluster.start()
    cluster.submit("Plan a two-week trip to Japan")
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-0").complete)
    cluster.wait_converged()
    tree = cluster.tree("scorer-0")
    _quorum_respected(tree, 2)
    _no_leaf_with_two_results(tree)

    # leave one member up, so nothing changes while the newcomer syncs from it
    for name in cluster.procs:
        if name != "scorer-1":
            cluster.kill(name)
    digest = cluster.tree("scorer-1").digest

    # a member that joins after completion learns everything from sync alone, and never speaks
    observer_dir = cluster.admit("late-observer", "observer")
    from agents.keyfile import load_or_create

    observer = load_or_create(observer_dir).peer_id
    plan = tmp_path / "late.json"
    run = subprocess.run([*swarm_command(), "observe", "--json", str(plan), "--timeout", "30",
                          "--data-dir", str(observer_dir), *cluster.bootstrap_args(["scorer-1"])],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(plan.read_text())["digest"] == digest
    for name in cluster.procs:
        assert observer not in {e.author for e in _events(cluster, name)}
    assert observer not in {e.author for e in _events_in(observer_dir)}


def test_a_decomposer_killed_half_way_does_not_stop_the_plan(make_cluster) -> None:
    cluster = make_cluster()
    cluster.shape(3, 3, 2)
    cluster.start()
    cluster.submit("Organise a wedding")
    victim = cluster.procs["decomposer-0"].peer_id
    cluster.wait_for("decomposer-0's first proposal",
                     lambda: any(p.author == victim for p in cluster.tree("decomposer-0").proposals.values()))
    cluster.kill("decomposer-0")
    alive = [n for n in cluster.procs if n != "decomposer-0"]
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-1").complete)
    cluster.wait_converged(alive)


def test_two_of_three_scorers_down_nothing_is_accepted_then_one_returns_and_it_completes(make_cluster) -> None:
    cluster = make_cluster()
    cluster.shape(2, 3, 2)
    cluster.start()
    cluster.kill("scorer-1")
    cluster.kill("scorer-2")
    goal = cluster.submit("Release version 2.0 of a library", quorum=2)
    survivor = cluster.procs["scorer-0"].peer_id

    def survivor_voted_on_every_root_proposal() -> bool:
        tree = cluster.tree("scorer-0")
        root = [p for p in tree.proposals.values() if p.node == goal]
        return len(root) == 2 and all(survivor in tree.voters.get(p.id, ()) for p in root)

    cluster.wait_for("the surviving scorer to vote on both root proposals", survivor_voted_on_every_root_proposal)
    waiting = cluster.tree("decomposer-0")
    assert waiting.nodes[goal].status == "open"  # visibly waiting: drafts, no accepted split
    assert all(p.status == "draft" and len(p.approvals) <= 1 for p in waiting.proposals.values())

    cluster.start("scorer-1")
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-0").complete)
    tree = cluster.tree("executor-0")
    _quorum_respected(tree, 2)
    votes = Counter((e.author, e.body.proposal) for e in _events(cluster, "scorer-0") if e.kind == "vote")
    assert votes and max(votes.values()) == 1  # never two votes by one scorer on one proposal


def _events(cluster: LocalCluster, name: str):
    return _events_in(cluster.procs[name].data_dir)


def _events_in(data_dir):
    with EventStore.open(data_dir) as store:
        return store.events()


def test_an_executor_killed_holding_a_claim_loses_it_when_the_lease_lapses(make_cluster) -> None:
    # executors think slowly (1.5-4.5 s a leaf) under a 2 s lease that they renew while working
    cluster = make_cluster(latency_by_role={"executor": 3.0})
    cluster.shape(1, 2, 2)
    cluster.start()
    cluster.submit("Move house to another city", quorum=2, max_depth=1, lease=2.0)
    victim = cluster.procs["executor-0"].peer_id

    def holding():
        tree = cluster.tree("executor-0")
        return [n for n in tree.leaves() if n.status == "claimed" and n.executor == victim]

    cluster.wait_for("executor-0 to hold a granted claim", lambda: bool(holding()))
    held = holding()[0]
    cluster.kill("executor-0")
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-1").complete, timeout=90)
    tree = cluster.tree("executor-1")
    leaf = tree.nodes[held.id]
    assert leaf.executor == cluster.procs["executor-1"].peer_id and leaf.epoch > held.epoch
    _no_leaf_with_two_results(tree)
    assert _never_revoked(cluster) > 0


def test_a_member_restarted_from_its_data_dir_keeps_everything_and_catches_up(make_cluster) -> None:
    cluster = make_cluster()
    cluster.shape(2, 3, 2)
    cluster.start()
    goal = cluster.submit("Write a research survey on CRDTs")
    scorers = {cluster.procs[n].peer_id: n for n in ("scorer-0", "scorer-1", "scorer-2")}

    def first_voter() -> str | None:
        voted = {a for v in cluster.tree("executor-0").voters.values() for a in v}
        return next((name for peer, name in sorted(scorers.items()) if peer in voted), None)

    cluster.wait_for("a scorer's first vote", lambda: first_voter() is not None)
    victim = first_voter()
    assert victim is not None
    cluster.kill(victim)
    before = cluster.event_ids(victim)
    assert any(e.kind == "vote" for e in _events(cluster, victim))
    cluster.wait_for("the plan to complete without it", lambda: cluster.tree("executor-0").complete)
    cluster.start(victim)
    cluster.wait_converged()
    assert before <= cluster.event_ids(victim)
    tree = cluster.tree(victim)
    assert tree.complete and goal in tree.nodes
    assert not tree.equivocators  # it continued its own feed, no fork after the restart


def test_a_stall_of_every_member_drops_no_peer_and_the_plan_completes(make_cluster) -> None:
    """A starved machine stops every member at once; each wakes with its pings' deadlines past
    and its peers' answers unread. One missed ping must not drop a peer (it dropped them all)."""
    cluster = make_cluster(llm_latency=1.0)
    names = cluster.shape(1, 3, 1)
    cluster.start()
    goal = cluster.submit("Plan a two-week trip to Japan")
    cluster.wait_for("the goal on every member", lambda: all(goal in cluster.tree(n).nodes for n in names))
    for _ in range(2):
        for name in names:
            cluster.procs[name].process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        time.sleep(QUIET_BEFORE_PING + PING_TIMEOUT + 1)  # every peer due a ping at the wake
        for name in names:
            cluster.procs[name].process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        time.sleep(PING_INTERVAL + 1)
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-0").complete, timeout=90)
    cluster.wait_converged()
    # the verdict "unresponsive" (pings unanswered to their deadlines) must fall on no live peer;
    # a connection found already broken at a wake is closed without one (and redialled)
    members = {cluster.procs[name].peer_id for name in names}  # the client has left: it may be dropped
    dropped = {name: [r["peer"][-8:] for r in cluster.log_records(name)
                      if r.get("event") == "peer unresponsive; disconnecting" and r.get("peer") in members]
               for name in names}
    assert not any(dropped.values()), f"members dropped live peers after a stall: {dropped}"


def test_an_executor_process_with_two_model_calls_at_once_works_two_leaves_together(make_cluster) -> None:
    """``--llm-parallel 2`` in a real member: its model calls run on worker threads side by side,
    and the signed events show two of its leaves claimed and unanswered together, with every
    leaf answered once and nothing any member showed ever taken back."""
    cluster = make_cluster(llm_latency=1.0)
    cluster.shape(1, 3, 1)
    cluster.extra_args["executor-0"] = ("--llm-parallel", "2")
    cluster.start()
    cluster.submit("Plan a two-week trip to Japan")
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-0").complete, timeout=90)
    cluster.wait_converged()
    tree = cluster.tree("scorer-0")
    assert len(list(tree.leaves())) >= 3
    _no_leaf_with_two_results(tree)
    assert _never_revoked(cluster) > 0
    events = _events(cluster, "executor-0")
    assert most_leaves_worked_at_once(events) == 2
    executor = cluster.procs["executor-0"].peer_id
    assert {e.author for e in events if isinstance(e.body, ResultBody)} == {executor}


@pytest.fixture
def lab():
    from tests.netns import NetnsLab

    lab = NetnsLab()
    yield lab
    lab.cleanup()


def test_a_partition_then_a_heal_converges_every_member_to_one_digest(make_cluster, lab) -> None:
    cluster = make_cluster(llm_latency=1.0)  # slow enough that the cut lands mid-plan
    left = cluster.add("decomposer", 1, lab) + cluster.add("scorer", 2, lab) + cluster.add("executor", 1, lab)
    right = cluster.add("decomposer", 1, lab) + cluster.add("scorer", 1, lab) + cluster.add("executor", 1, lab)
    cluster.start()
    goal = cluster.submit("Plan a two-week trip to Japan", quorum=2)
    cluster.wait_for("the goal on every member", lambda: all(goal in cluster.tree(n).nodes for n in cluster.procs))
    assert lab.can_reach("executor-0", "executor-1", 4001)
    lab.partition(left, right)
    before = cluster.tree("executor-1")
    assert not lab.can_reach("executor-0", "executor-1", 4001)
    assert not lab.can_reach("executor-1", "scorer-0", 4001)
    # the majority side (two scorers) completes; the minority side accepts nothing new and,
    # with no claim granted there, its executor starts no new work (a claim granted before
    # the cut, which the cut can land after under load, may still be finished)
    cluster.wait_for("the left side to complete", lambda: cluster.tree("executor-0").complete, timeout=90)
    minority = cluster.tree("executor-1")
    assert not minority.complete
    assert set(cluster.event_ids("executor-1")) != set(cluster.event_ids("executor-0"))
    me = cluster.procs["executor-1"].peer_id
    granted_before = {c.id for c in before.claims.values() if c.granted and c.executor == me}
    assert all(e.body.claim in granted_before for e in _events(cluster, "executor-1")
               if e.kind == "result" and e.author == me)
    lab.heal()
    assert lab.can_reach("executor-0", "executor-1", 4001)
    digest = cluster.wait_converged(timeout=90)
    tree = cluster.tree("scorer-2")
    assert tree.complete and tree.digest == digest
    _quorum_respected(tree, 2)
    _no_leaf_with_two_results(tree)
    assert _never_revoked(cluster) >= len(tree.leaves())  # judged from what every member showed


def test_members_with_no_bootstrap_find_each_other_by_mdns(make_cluster, lab) -> None:
    cluster = make_cluster(mdns_only=True)
    cluster.shape(1, 1, 1, lab)
    cluster.start()
    client_ip, prefix = lab.add_host("client")
    run = subprocess.run(
        [*prefix, *swarm_command(), "submit", "Organise a team offsite", "--quorum", "1", "--max-depth", "2",
         "--cluster", cluster.name, "--listen", f"/ip4/{client_ip}/tcp/0", "--timeout", "40",
         "--data-dir", str(cluster.admit("client", "client")), "--roster", str(cluster.admin.path / "members.json")],
        capture_output=True, text=True, timeout=90,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    cluster.wait_for("the plan to complete", lambda: cluster.tree("executor-0").complete)
    cluster.wait_converged()
    for name, proc in cluster.procs.items():
        log = (proc.data_dir / "agent.log").read_text()
        assert '"discovered by mdns"' in log, f"{name} found nobody by mDNS"
