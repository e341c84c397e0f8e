"""The live page (``swarm observe --web``) in a real headless Chromium, against a real swarm;
and the status channel that tells it what each member is doing."""

from __future__ import annotations

import itertools
import json
import signal
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trio

from agents.cli.plan import end_processes, free_port, swarm_command
from agents.clusterdir import credentials
from agents.core.identity import Identity
from agents.keyfile import load_or_create
from agents.status import (
    CLUSTER_HEARTBEATS,
    STATUS_EVERY_S,
    StatusBoard,
    heartbeat_every,
    read_status,
    sign_status,
    stale_after,
)
from agents.web.server import read_faults
from tests.browser import Browser, Page
from tests.cluster import LocalCluster

REPORTS = Path(__file__).resolve().parents[2] / "reports" / "tests" / "web"

# Runs inside the page: when each thing first showed (wall ms), and a mark a reload would erase.
RECORDER = """
window.__mark = "loaded once";
window.__seen = {goal: null, complete: null, lost: null, splits: {}, done: {}};
setInterval(() => {
  const now = Date.now(), seen = window.__seen;
  if (seen.goal === null && document.getElementById("goal").textContent.startsWith("Plan")) seen.goal = now;
  for (const li of document.querySelectorAll("li[data-split]")) seen.splits[li.dataset.node] ??= now;
  for (const li of document.querySelectorAll("li[data-leaf=true][data-status=done]")) seen.done[li.dataset.node] ??= now;
  if (seen.complete === null && document.getElementById("state").textContent === "complete") seen.complete = now;
  if (seen.lost === null && document.getElementById("link").textContent !== "live") seen.lost = now;
}, 20);
"""


def _status_record(creds, at: int, doing: str = "idle") -> dict:
    return {"v": 1, "cluster": creds.cluster, "peer": creds.identity.peer_id, "role": creds.role,
            "ticket": creds.ticket.sig, "at": at, "doing": doing, "about": "", "since": at, "model_calls": 0,
            "tokens": 0, "events": 0, "refused": 0, "held": 0}


def test_a_status_is_believed_only_from_an_admitted_peer_about_itself(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, "status")
    data_dir = cluster.admit("scorer-0", "scorer")
    creds = credentials(data_dir, load_or_create(data_dir), None, None)
    gate = creds.gate
    wall = [1_000_000]
    raw = sign_status(creds, _status_record(creds, wall[0], "score"))
    assert read_status(raw, gate).doing == "score"

    clock = [0.0]
    heard: list = []  # what the board tells its member (whether a peer holds more events)
    board = StatusBoard(gate, clock=lambda: clock[0], wall=lambda: wall[0], on_status=heard.append)
    assert board.screen(raw)
    assert not board.screen(raw), "a replay is not news and is not forwarded"
    assert not board.screen(sign_status(creds, _status_record(creds, wall[0] + 100))), "too soon after the last"
    forged = raw.replace(b'"score"', b'"execute"')
    sybil_key = Identity.generate()
    sybil = dict(_status_record(creds, wall[0]), peer=sybil_key.peer_id)
    sybil_raw = sign_status(type(creds)(sybil_key, creds.ticket, gate), sybil)
    other_cluster = sign_status(creds, dict(_status_record(creds, wall[0]), cluster="elsewhere"))
    recorded = sign_status(creds, _status_record(creds, wall[0] - 120_000))
    spaced = json.dumps(json.loads(sign_status(creds, _status_record(creds, wall[0] + 1000)))).encode()
    surrogate = sign_status(creds, _status_record(creds, wall[0] + 3000)).replace(b'"about":""', b'"about":"\\ud800"')
    for bad in (forged, sybil_raw, other_cluster, recorded, spaced, surrogate, b"x" * 5000, b"{not json", b"[]"):
        assert not board.screen(bad)
    assert board.refused == {"replay": 1, "rate": 1, "signature": 1, "ticket": 1, "cluster": 1, "stale": 1,
                             "canonical": 2, "size": 1, "json": 1, "schema": 1}

    never = Identity.generate().peer_id
    rows = {r["peer"]: r for r in board.members({never: "executor"})}
    assert rows[creds.identity.peer_id]["alive"] and rows[creds.identity.peer_id]["doing"] == "score"
    assert not rows[never]["alive"] and rows[never]["doing"] == "never heard", "a member never heard is listed"
    clock[0] = stale_after(1) + 0.1
    assert not board.members()[0]["alive"], "a member silent for longer than the bound is unreachable"
    assert board.screen(sign_status(creds, _status_record(creds, wall[0] + 2000)))
    assert board.members()[0]["alive"] and board.members()[0]["doing"] == "idle"
    assert [status.doing for status in heard] == ["score", "idle"], "only believed statuses are passed on"


def test_heartbeats_slow_down_as_the_cluster_grows_and_so_does_the_silence_allowed(tmp_path) -> None:
    """Every status reaches every member: the cluster's heartbeats a second are bounded, not
    its members; a reader allows a big cluster's slower heartbeats before calling one silent."""
    for members in range(1, 200):  # a small cluster as before; a big one at a bounded rate
        every = heartbeat_every(members)
        assert every == STATUS_EVERY_S or members / every <= CLUSTER_HEARTBEATS
        assert every >= STATUS_EVERY_S
    assert heartbeat_every(50) == 50 / CLUSTER_HEARTBEATS
    cluster = LocalCluster(tmp_path, "status")
    data_dir = cluster.admit("scorer-0", "scorer")
    creds = credentials(data_dir, load_or_create(data_dir), None, None)
    clock, wall = [0.0], [1_000_000]
    board = StatusBoard(creds.gate, clock=lambda: clock[0], wall=lambda: wall[0])
    assert board.screen(sign_status(creds, _status_record(creds, wall[0])))
    others = {Identity.generate().peer_id: "executor" for _ in range(49)}
    clock[0] = stale_after(1) + 1  # silent past a small cluster's bound ...
    assert not board.members()[0]["alive"]
    row = next(r for r in board.members(others) if r["peer"] == creds.identity.peer_id)
    assert row["alive"], "... but not past a fifty-member cluster's"


async def test_a_member_connected_to_a_few_of_a_big_cluster_beats_at_the_big_clusters_pace(tmp_path,
                                                                                          autojump_clock) -> None:
    """With a bounded active view a member of 50 is connected to about 12: its heartbeat
    must follow the cluster it hears statuses from, or every member beats four times too fast.
    And two members started together do not beat in step: fifty that did sent fifty statuses
    in one second every 25 s, each to every member, and saturated both cores of this machine
    (``BEAT_JITTER``); each beat is drawn apart, the mean is the cluster's pace."""
    from types import SimpleNamespace

    from agents.status import BEAT_JITTER, publish_statuses
    cluster = LocalCluster(tmp_path, "status")
    sent: dict[str, list[float]] = {}

    def member_of(name: str) -> SimpleNamespace:
        data_dir = cluster.admit(name, "scorer")
        creds = credentials(data_dir, load_or_create(data_dir), None, None)
        return SimpleNamespace(doing=None, role="scorer", mute=False, cluster=creds.cluster, credentials=creds,
                               stats=SimpleNamespace(model_calls=0, refused=0), backend=None, index=(),
                               intake=SimpleNamespace(held=0), now_ms=lambda: int(trio.current_time() * 1000))

    def network_of(name: str) -> SimpleNamespace:
        async def publish_status(data: bytes) -> None:
            sent.setdefault(name, []).append(trio.current_time())

        return SimpleNamespace(connected_peers=lambda: [f"p{i}" for i in range(12)], publish_status=publish_status)

    members = {name: member_of(name) for name in ("scorer-0", "scorer-1")}
    board = StatusBoard(members["scorer-0"].credentials.gate)
    board.latest.update({Identity.generate().peer_id: (None, 0.0) for _ in range(50)})
    async with trio.open_nursery() as nursery:
        for name, member in members.items():
            nursery.start_soon(publish_statuses, member, network_of(name), board)
        await trio.sleep(1000)
        nursery.cancel_scope.cancel()
    every = heartbeat_every(50)  # not heartbeat_every(13)
    for times in sent.values():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(every * (1 - BEAT_JITTER) <= gap <= every * (1 + BEAT_JITTER) + 0.5 for gap in gaps), gaps
        assert abs(statistics.mean(gaps) - every) < 0.15 * every, gaps
    first, second = ({int(at) for at in times[1:]} for times in sent.values())  # both beat at 0
    # their keys are drawn per run, so their beats are too: unrelated sequences share a second or
    # two of about forty; in step they shared every one
    assert len(first & second) <= len(first) // 4, (sorted(first), sorted(second))


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return answer.read()


def _put(url: str, body: bytes, token: str) -> int:
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _wait_serving(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            _get(url + "state")
            return
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, f"swarm observe --web exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"the page never answered: {log.read_text()[-2000:]}"
            time.sleep(0.2)


def _first_split_shown(cluster: LocalCluster) -> dict[str, int]:
    """node -> the earliest wall ms any member showed its split (from its transitions log)."""
    first: dict[str, int] = {}
    for proc in cluster.procs.values():
        for line in (proc.data_dir / "transitions.jsonl").read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == "split" and record["after"]:
                first[record["node"]] = min(first.get(record["node"], record["at_ms"]), record["at_ms"])
    return first


async def _wait_for(page: Page, expression: str, what: str, timeout: float) -> None:
    with trio.move_on_after(timeout):
        while not await page.evaluate(expression):
            await trio.sleep(0.1)
        return
    raise AssertionError(f"the page never showed {what} within {timeout:g} s")


@pytest.mark.slow
def test_the_live_page_shows_the_plan_grow_across_an_observer_restart_and_a_late_page_the_same_digest(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, "web", llm_latency=0.8)
    cluster.shape(1, 3, 2)
    cluster.start()
    observer = cluster.admit("observer", "observer")
    url = f"http://127.0.0.1:{free_port()}/"
    log = tmp_path / "observer.log"
    command = [*swarm_command(), "observe", "--web", url[len("http://"):-1], "--data-dir", str(observer),
               *cluster.bootstrap_args()]
    processes = [subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT)]

    def restart_observer() -> None:
        processes[-1].terminate()
        processes[-1].wait(10)
        processes.append(subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT))

    try:
        _wait_serving(url, processes[0], log)
        with Browser() as browser:
            seen, first_digest = trio.run(_watch_a_run, browser, url, cluster, restart_observer)
            second_digest = trio.run(_open_late, browser, url)
        digest = cluster.wait_converged()
    finally:
        processes[-1].terminate()
        processes[-1].wait(10)
        cluster.stop()

    assert seen["mark"] == "loaded once", "the page reloaded"
    assert seen["goal"] is not None and seen["splits"] and seen["complete"] is not None
    assert seen["goal"] <= min(seen["splits"].values()) <= seen["complete"], seen
    assert seen["done"] and max(seen["done"].values()) <= seen["complete"], seen
    tree = cluster.tree("scorer-0")
    assert set(seen["done"]) == {n.id for n in tree.leaves()}, "every leaf was shown done"
    assert set(seen["splits"]) == {n.id for n in tree.nodes.values() if n.split}
    assert first_digest == second_digest == digest == tree.digest

    # how long the page took to reflect an accepted split, from the first member that showed it
    first_shown = _first_split_shown(cluster)
    lags = [seen["splits"][node] - first_shown[node] for node in seen["splits"]]
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "split-lag.json").write_text(json.dumps({"lags_ms": lags, "median_ms": statistics.median(lags)}))
    print(f"page reflected {len(lags)} accepted split(s) a median {statistics.median(lags):.0f} ms after the "
          f"first member showed them (each: {lags})")


async def _watch_a_run(browser: Browser, url: str, cluster: LocalCluster, restart) -> tuple[dict, str]:
    async with Page(browser.new_page_url()) as page:
        await page.goto(url)
        await page.evaluate(RECORDER)
        await _wait_for(page, "document.querySelectorAll('#members tr').length >= 7", "every member", 30)
        fault = "partition: scorer-0 | the rest (a test's word, not a real fault)"
        token = (cluster.root / "observer" / "web.token").read_text()
        body = json.dumps([fault]).encode()
        assert await trio.to_thread.run_sync(_put, url + "faults", body, "guessed") == 401
        assert await trio.to_thread.run_sync(_put, url + "faults", b"[" + b'"x",' * 9000 + b'"x"]', token) == 413
        assert await trio.to_thread.run_sync(_put, url + "faults", body, token) == 200
        await _wait_for(page, f"document.getElementById('faults').textContent.includes({json.dumps(fault)})",
                        "the faults in force", 10)
        await trio.to_thread.run_sync(lambda: cluster.submit("Plan a two-week trip to Japan", max_depth=2))
        await _wait_for(page, "document.getElementById('state').textContent === 'complete'", "a complete plan", 180)
        # the recorder samples every 20 ms: the wait above can see the state before it does
        await _wait_for(page, "window.__seen.complete !== null", "the recorder's note of completion", 5)
        seen = await page.evaluate("({...window.__seen, mark: window.__mark})")
        # bookkeeping may still arrive after completion: the page follows it to the final digest
        digest = await trio.to_thread.run_sync(cluster.wait_converged)
        shows_final = f"document.getElementById('digest').dataset.digest === {json.dumps(digest)}"
        await _wait_for(page, shows_final, "the members' final digest", 30)
        await page.screenshot(REPORTS / "live-page.png")
        # the page stays open across the observer's restart: it reconnects and shows the plan again
        await trio.to_thread.run_sync(restart)
        await _wait_for(page, f"window.__seen.lost !== null && document.getElementById('link').textContent === "
                        f"'live' && {shows_final}", "the plan again after the observer's restart", 60)
        assert await page.evaluate("window.__mark") == "loaded once"
        return seen, digest


async def _open_late(browser: Browser, url: str) -> str:
    async with Page(browser.new_page_url()) as page:
        await page.goto(url)
        await _wait_for(page, "document.getElementById('state').textContent === 'complete'", "the final plan", 30)
        await page.screenshot(REPORTS / "late-page.png")
        return await page.evaluate("document.getElementById('digest').dataset.digest")


def test_observe_refuses_a_bad_web_address_and_a_busy_port(tmp_path) -> None:
    done = subprocess.run([*swarm_command(), "observe", "--web", "nowhere", "--data-dir", "x"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "HOST:PORT" in done.stderr, done.stderr
    observer = LocalCluster(tmp_path, "busy").admit("observer", "observer")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*swarm_command(), "observe", "--web", f"127.0.0.1:{port}", "--data-dir",
                               str(observer), "--cluster", "busy", "--no-mdns"],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert f"cannot serve the page on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_with_two_observers_on_one_address_the_first_serves_the_page_and_the_second_takes_over(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, "pair")
    port = free_port()
    observers: list[tuple[subprocess.Popen, Path, str]] = []
    try:
        for name in ("observer-a", "observer-b"):
            data_dir = cluster.admit(name, "observer")
            log = tmp_path / f"{name}.log"
            process = subprocess.Popen([*swarm_command(), "observe", "--web", f"127.0.0.1:{port}", "--data-dir",
                                        str(data_dir), "--cluster", "pair", "--no-mdns"],
                                       stdout=log.open("wb"), stderr=subprocess.STDOUT)
            observers.append((process, log, load_or_create(data_dir).peer_id))
            _wait_until(lambda log=log: "live page is at" in log.read_text() or "standing by" in log.read_text(),
                      f"{name} to serve or stand by", process, log)
        (first, first_log, first_peer), (second, second_log, second_peer) = observers
        assert "live page is at" in first_log.read_text()
        assert f"observer {first_peer[-8:]} already serves the page" in second_log.read_text()
        assert _state(port)["observer"] == first_peer
        first.send_signal(signal.SIGTERM)
        first.wait(30)
        _wait_until(lambda: "live page is at" in second_log.read_text(), "the second observer to take over",
                  second, second_log)
        assert _state(port)["observer"] == second_peer
    finally:
        end_processes([process for process, _, _ in observers])


def _state(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=10) as answer:
        return json.loads(answer.read())


def _wait_until(condition, what: str, process: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"the observer exited while waiting for {what}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {log.read_text()[-2000:]}"
        time.sleep(0.2)


@pytest.mark.parametrize("body", [b"not json", b'{"a": 1}', json.dumps(["x"] * 65).encode(), b'[1, 2]'])
def test_the_faults_endpoint_refuses_what_is_not_a_short_list_of_strings(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"JSON list of at most 64 strings|not JSON"):
        read_faults(body)
    assert read_faults(b'["partition scorer-0 | the rest"]') == ["partition scorer-0 | the rest"]
