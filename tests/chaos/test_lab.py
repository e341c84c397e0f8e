"""The container lab's parts: scenarios parse strictly, and the nemesis really cuts links.

These start real containers (the swarm image, built by ``make image``) and put real
iptables rules in their network namespaces, so they need root and a Docker engine,
as ``make test`` provides.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import docker
import docker.errors
import pytest

from chaos.lab.cluster import LabCluster, LabError, MemberSpec, sweep
from chaos.lab.nemesis import Nemesis
from chaos.lab.scenario import ScenarioError, load

SCENARIOS = sorted(Path("scenarios").glob("*.yaml"))


def test_the_shipped_scenarios_all_load_and_draw_the_same_schedule_for_a_seed() -> None:
    assert len(SCENARIOS) >= 9
    for path in SCENARIOS:
        first, again = load(path, seed=4), load(path, seed=4)
        assert first.timeline == again.timeline, path
        assert first.member_names()[0] == "decomposer-1"
    drawn = {load(Path("scenarios/partition-heals.yaml"), seed=s).timeline[-1].at for s in range(6)}
    assert len(drawn) > 1, "a time range should be drawn from the seed"


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\ntimeline:\n  - {at: 1, kill: decomposer-9}\n", "'decomposer-9' is not a member"),
    ("name: x\ntimeline:\n  - {at: 1, explode: scorer-1}\n", "expected exactly one action"),
    ("name: x\ntimeline:\n  - {at: soon, kill: scorer-1}\n", "'at' must be seconds"),
    ("name: x\nquorum: 4\n", "quorum 4 can never be reached by 3 scorers"),
    ("name: x\nexpect: {invariants: [happiness]}\n", "unknown invariant(s) happiness"),
    ("name: x\ncluster: {skew_ms: {executor-7: 100}}\n", "'executor-7', which is not a member"),
    ("- just a list\n", "expected a mapping"),
    ("name: x\ntimeline:\n  - {at: 5, disk_free: executor-1}\n  - {at: 9, disk_full: executor-1}\n",
     "the disk_free of executor-1 at 5 s frees a disk no disk_full before it filled: add a disk_full"),
    ("name: x\ntimeline:\n  - {at: 5, disk_full: claim holder}\n  - {at: 6, disk_full: claim holder}\n"
     "  - {at: complete, disk_free: claim holder}\n", "the disk_full of claim holder at 6 s fills a disk already full"),
    ("name: x\ntimeline:\n  - {at: 5, disk_full: any executor}\n",
     "disk_full takes a member's name or 'claim holder', not 'any executor'"),
])
def test_bad_scenarios_are_refused_with_the_field_and_the_fix(tmp_path, text, message) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as refused:
        load(path)
    assert message in str(refused.value) and str(path) in str(refused.value)


def test_swarm_chaos_run_names_a_missing_scenario_and_exits_2() -> None:
    done = subprocess.run([sys.executable, "-m", "agents.cli.main", "chaos", "run", "scenarios/nope.yaml"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no such scenario file" in done.stderr


def test_no_docker_engine_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    with pytest.raises(LabError, match=r"no Docker engine answers.*make engine"):
        LabCluster(run_id="t", root=tmp_path, cluster="t")


@pytest.mark.slow
def test_members_are_testcontainers_restarted_in_place_and_an_abandoned_run_is_swept(tmp_path) -> None:
    run_id = f"t{uuid.uuid4().hex[:6]}"
    cluster = LabCluster(run_id=run_id, root=tmp_path, cluster="lifecycle-test")
    addrs = tmp_path / "members" / "scorer-1" / "addrs"
    try:
        cluster.add(MemberSpec("scorer-1", "scorer"))
        cluster.start("scorer-1")
        cluster.wait_listening(["scorer-1"])
        container = cluster.members["scorer-1"].docker
        assert container.labels["org.testcontainers"] == "true", "testcontainers created it"
        assert container.labels["swarm-lab"] == run_id, "and it carries the lab's label for the sweep"
        first_peers = {line.rsplit("/p2p/", 1)[1] for line in addrs.read_text().split()}

        cluster.kill("scorer-1")
        cluster.start("scorer-1")  # the same container again: same store, same identity
        cluster.wait_listening(["scorer-1"])
        assert cluster.members["scorer-1"].docker.id == container.id
        assert {line.rsplit("/p2p/", 1)[1] for line in addrs.read_text().split()} == first_peers

        # the run is abandoned without close (no Ryuk here): the sweep finds it by its label
        engine = docker.from_env()
        selector = {"label": f"swarm-lab={run_id}"}
        assert engine.containers.list(all=True, filters=selector) and engine.networks.list(filters=selector)
        assert sweep(run_id) == 2
        assert not engine.containers.list(all=True, filters=selector)
        assert not engine.networks.list(filters=selector)
    finally:
        sweep(run_id)


@pytest.mark.slow
def test_a_member_that_exits_at_start_is_a_lab_error_with_its_log(tmp_path) -> None:
    cluster = LabCluster(run_id=f"t{uuid.uuid4().hex[:6]}", root=tmp_path, cluster="exit-test",
                         llm="no-such-backend")
    try:
        cluster.add(MemberSpec("scorer-1", "scorer"))
        cluster.start("scorer-1")
        with pytest.raises(LabError, match=r"(?s)scorer-1 exited at start; its log:.*no-such-backend"):
            cluster.wait_listening(["scorer-1"], timeout=60)
    finally:
        cluster.close()


_ASK_THE_MODEL = (
    "import json, urllib.request\n"
    "body = json.dumps({'messages': [{'role': 'user', 'content': 'Name one city in Japan.'}], 'max_tokens': 8})\n"
    "request = urllib.request.Request('http://model:8090/v1/chat/completions', data=body.encode(),\n"
    "                                 headers={'Content-Type': 'application/json'})\n"
    "print(json.load(urllib.request.urlopen(request, timeout=120))['choices'][0]['message']['content'])\n")


@pytest.mark.slow
@pytest.mark.llm
def test_with_the_real_model_the_run_has_one_model_service_that_members_reach_by_name(tmp_path) -> None:
    from agents.llm.model_files import resolve

    cluster = LabCluster(run_id=f"t{uuid.uuid4().hex[:6]}", root=tmp_path, cluster="model-test", llm="llama",
                         model_file=resolve(None).path)
    try:
        for name in ("scorer-1", "executor-1"):
            cluster.add(MemberSpec(name, name.split("-")[0]))
            cluster.start(name)  # the first start brings the service up and waits for its /health
        cluster.wait_listening(["scorer-1", "executor-1"])
        assert cluster.model_service is not None
        member = cluster.members["executor-1"].docker
        command = member.attrs["Config"]["Cmd"]
        assert command[command.index("--llm") + 1] == "openai" and "http://model:8090/v1" in command
        assert all(mount["Destination"] != "/models/model.gguf" for mount in member.attrs["Mounts"]), \
            "members do not load the model themselves"
        answer = cluster.members["executor-1"].container.exec(["python3", "-c", _ASK_THE_MODEL])
        assert answer.exit_code == 0 and answer.output.decode().strip(), answer.output.decode()[-2000:]
        service = cluster.model_service.get_wrapped_container()
    finally:
        cluster.close()
    with pytest.raises(docker.errors.NotFound):
        service.reload()  # close removed the service with the members


def _reaches(cluster: LabCluster, source: str, target: str) -> bool:
    """Can ``source`` open a TCP connection to ``target``'s libp2p port?"""
    probe = (f"import socket; socket.create_connection(('{cluster.ip(target)}', 4001), timeout=1.5); "
             "print('open')")
    result = cluster.members[source].container.exec(["python3", "-c", probe])
    return result.exit_code == 0


@pytest.mark.slow
def test_a_partition_blocks_both_directions_and_heal_restores_them(tmp_path) -> None:
    faults: list[tuple[str, str]] = []
    cluster = LabCluster(run_id=f"t{uuid.uuid4().hex[:6]}", root=tmp_path, cluster="partition-test")
    try:
        for i in (1, 2, 3):
            cluster.add(MemberSpec(f"scorer-{i}", "scorer"))
            cluster.start(f"scorer-{i}")
        cluster.wait_listening(["scorer-1", "scorer-2", "scorer-3"])
        nemesis = Nemesis(cluster, lambda kind, detail: faults.append((kind, detail)))
        assert _reaches(cluster, "scorer-1", "scorer-2") and _reaches(cluster, "scorer-2", "scorer-1")

        nemesis.partition([["scorer-1"], ["scorer-2", "scorer-3"]])
        assert not _reaches(cluster, "scorer-1", "scorer-2")
        assert not _reaches(cluster, "scorer-2", "scorer-1")
        assert _reaches(cluster, "scorer-2", "scorer-3"), "members on the same side still talk"

        nemesis.heal()
        assert _reaches(cluster, "scorer-1", "scorer-2") and _reaches(cluster, "scorer-2", "scorer-1")

        nemesis.set_loss("scorer-3", 1.0)
        assert not _reaches(cluster, "scorer-1", "scorer-3")
        nemesis.set_loss("scorer-3", 0.0)
        assert _reaches(cluster, "scorer-1", "scorer-3")

        nemesis.kill("scorer-2")  # a restarted member is a fresh namespace: the partition is re-applied
        nemesis.partition([["scorer-1"], ["scorer-2", "scorer-3"]])
        nemesis.start("scorer-2")
        cluster.wait_listening(["scorer-2"])
        assert not _reaches(cluster, "scorer-2", "scorer-1")
        assert not _reaches(cluster, "scorer-1", "scorer-2"), "the others' rules follow its address"
        assert [k for k, _ in faults] == ["partition", "heal", "loss", "loss", "kill", "partition", "restart"]
    finally:
        cluster.close()
