"""A second implementation of PROTOCOL.md, in JavaScript on js-libp2p (tests/js/), against ours.

The JavaScript side was written from PROTOCOL.md and the test vectors; these tests
hold both implementations to the same vectors and run them together: the JS member
submits the goal to a live Python cluster, follows the plan to the same digest,
has its malformed copy refused, and serves a Python late joiner by sync.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from agents.cli.plan import Proc, end_processes, free_port, start_agent, swarm_command
from agents.core.fold import fold
from agents.core.identity import Identity
from agents.keyfile import load_or_create
from agents.store import EventStore
from tests.cluster import LocalCluster

JS = Path(__file__).parents[1] / "js"
VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "protocol.json").read_text())


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    assert path, "Node.js is needed for the interop tests: install nodejs (Debian) or see README"
    assert (JS / "node_modules" / "libp2p").is_dir(), \
        "tests/js has no node_modules: run 'make js-deps' (npm ci in tests/js), as make test does"
    return path


def test_the_javascript_implementation_passes_the_protocol_vectors(node: str) -> None:
    run = subprocess.run([node, str(JS / "vectors.mjs")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    expected = (sum(len(VECTORS[k]) for k in ("keys", "tickets", "events", "refused", "sets"))
                + len(VECTORS["adversarial"]["sets"]))
    assert result == {"checked": expected, "failures": 0}


class JsMember:
    """The JavaScript member as a process; its stdout is one JSON record per line."""

    def __init__(self, node: str, config: dict, root: Path) -> None:
        path = root / "js-member.json"
        path.write_text(json.dumps(config))
        self.log = open(root / "js-member.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen([node, str(JS / "member.mjs"), str(path)], stdout=subprocess.PIPE,
                                        stderr=self.log, text=True)
        self.records: list[dict] = []
        self._copy = open(root / "js-member.jsonl", "w")  # noqa: SIM115 (closed by the reader)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self._copy:
            for line in self.process.stdout:
                self._copy.write(line)
                self._copy.flush()
                self.records.append(json.loads(line))

    def first(self, record: str, **fields) -> dict | None:
        return next((r for r in list(self.records) if r["event"] == record
                     and all(r.get(k) == v for k, v in fields.items())), None)

    def latest(self, kind: str) -> dict | None:
        return next((r for r in reversed(list(self.records)) if r["event"] == kind), None)

    def wait(self, what: str, condition, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while (found := condition()) in (None, False):
            assert self.process.poll() is None, f"the JS member exited; see its log: {self.log.name}"
            assert time.monotonic() < deadline, f"timed out waiting for the JS member to {what}: {self.records[-5:]}"
            time.sleep(0.2)
        return found

    def stop(self) -> None:
        end_processes([self.process])
        self.log.close()


@pytest.mark.slow
def test_a_javascript_client_submits_follows_the_plan_and_serves_a_python_late_joiner(node: str, tmp_path) -> None:
    cluster = LocalCluster(tmp_path, f"interop-{tmp_path.name}")
    names = cluster.shape(1, 3, 1)
    js_identity = Identity(hashlib.sha256(f"interop/{tmp_path.name}/js".encode()).digest())
    ticket = cluster.admin.admit(js_identity.peer_id, "client", "js-client")
    js_port = free_port()
    js = None
    observer: Proc | None = None
    try:
        cluster.start()
        js = JsMember(node, {
            "cluster": cluster.name, "authority": cluster.admin.authority.peer_id, "seed": js_identity.seed.hex(),
            "role": "client", "ticket": ticket.sig, "listen": f"/ip4/127.0.0.1/tcp/{js_port}",
            "bootstrap": [cluster.procs[n].address for n in names], "malformed": True,
            "offerPage": 2,  # its offers in pages of 2 entries (runs or ids): the late joiner pages through them
            "goal": {"text": "Plan a two-week trip to Japan", "scorers": list(cluster.admin.scorers()), "quorum": 2,
                     "max_depth": 2, "claim_lease_ms": 10_000, "hold_limit_ms": 60_000, "round_ms": 5_000},
        }, tmp_path)
        goal = js.wait("publish its goal", lambda: js.first("published", kind="goal"))

        # the Python members take the JavaScript member's goal and plan it to the end
        cluster.wait_for("every Python member to complete the JS member's goal",
                         lambda: all(cluster.tree(n).complete and goal["id"] in cluster.tree(n).roots for n in names),
                         timeout=120)
        digest = cluster.wait_converged(names)
        state = js.wait("reach the Python members' digest", lambda: (s := js.latest("state"))
                        and s["digest"] == digest and s, timeout=60)
        assert state["complete"] and state["refused"] == {}, state  # it verified every event the cluster made
        assert state["counted"] == len(cluster.event_ids(names[0]))

        # its malformed copy of the goal was refused by rule, counted, and stored nowhere
        def refused_canonical() -> int:
            total = 0
            for name in names:
                with EventStore.open(cluster.procs[name].data_dir) as store:
                    total += store.counters().get("refused:canonical", 0)
            return total
        assert js.first("sent-malformed") is not None
        cluster.wait_for("a Python member to count the malformed goal", lambda: refused_canonical() >= 1, 30)
        counted = next(n for n in names if "canonical" in _inspect(cluster.procs[n].data_dir))
        assert "refused (canonical 1)" in _inspect(cluster.procs[counted].data_dir)  # what an operator sees
        assert {e for n in names for e in cluster.event_ids(n)} == cluster.event_ids(names[0])

        # a Python observer that knows only the JavaScript member catches up from it by sync
        data_dir = cluster.admit("late-observer", "observer")
        peer = load_or_create(data_dir).peer_id
        observer = Proc("late-observer", data_dir, free_port(), peer)
        js_proc = Proc("js", tmp_path, js_port, js_identity.peer_id)
        start_agent(observer, "observer", [js_proc], cluster=cluster.name)

        def observer_digest() -> str | None:
            if not (data_dir / "events.sqlite3").exists():
                return None
            with EventStore.open(data_dir) as store:
                return fold(store.events()).digest
        cluster.wait_for("the late observer to rebuild the plan from the JS member",
                         lambda: observer_digest() == digest, timeout=60)
        served = js.first("served", peer=peer)
        assert served is not None and served["events"] > 7, js.records[-10:]  # runs of several feeds, asked by seq
    finally:
        if observer is not None and observer.process is not None:
            observer.process.terminate()
            observer.process.wait(10)
        if js is not None:
            js.stop()
        cluster.stop()


def _inspect(data_dir: Path) -> str:
    run = subprocess.run([*swarm_command(), "inspect", str(data_dir)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()[-1]
