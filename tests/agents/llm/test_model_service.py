"""The shared model service (``swarm model-service``) with the real local model, over real HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from agents.cli.plan import free_port, start_model_service, swarm_command
from agents.llm.base import CallDropped, ModelUnavailable
from agents.llm.openai_compat import OpenAIBackend
from agents.llm.prompted import SCORE_SCHEMA, SYSTEM
from tests.agents.llm.dropping import LONG_ANSWER, generate_on_a_thread

pytestmark = pytest.mark.llm


def start_service(port: int, log: Path) -> subprocess.Popen[bytes]:
    return start_model_service(log, None, threads=2, timeout=120, listen=f"127.0.0.1:{port}").process


def health(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/health", timeout=5).json()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    port = free_port()
    process = start_service(port, tmp_path_factory.mktemp("service") / "service.log")
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    process.wait(20)


def score_request(topic: str, **extra) -> dict:
    return {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": f"Score this split of '{topic}' from 1 to 5 for clarity, "
                                                     "non_overlap and coverage, with a short reason: "
                                                     "- Book flights - Book hotels - Plan the days"}],
            "max_tokens": 120, "temperature": 0.2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SCORE_SCHEMA}},
            **extra}


def test_eight_concurrent_grammar_bound_requests_are_decoded_together_and_each_is_valid_json(service) -> None:
    topics = ["a trip to Japan", "a wedding", "a house move", "a survey", "a library release", "a bakery",
              "a marathon", "a language course"]
    before = health(service)
    steps_before = before["steps"]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda t: httpx.post(f"{service}/chat/completions", json=score_request(t),
                                                     timeout=120), topics))
    assert [a.status_code for a in answers] == [200] * 8
    tokens = 0
    for answer in answers:
        choice = answer.json()["choices"][0]
        assert choice["finish_reason"] == "stop"
        data = json.loads(choice["message"]["content"])
        assert {data["clarity"], data["non_overlap"], data["coverage"]} <= {1, 2, 3, 4, 5}
        assert isinstance(data["reason"], str)
        tokens += answer.json()["usage"]["completion_tokens"]
    after = health(service)
    assert after["peak_batch"] == 8, "the eight requests were never decoded in one step"
    # decoded together: far fewer steps than tokens (one request at a time needs a step per token)
    assert after["steps"] - steps_before < tokens / 2
    assert after["busy"] == 0
    # where the stepping time went (``bench.model`` prints it): the engine's share within the
    # service's, the grammar's fallbacks within the rest
    busy, decode, fallback = (after[k] - before[k] for k in ("busy_s", "decode_s", "fallback_s"))
    assert 0 < decode < busy  # sampling, at the least, is the loop's own
    assert fallback <= busy - decode
    assert (fallback > 0) == (after["grammar_fallbacks"] > before["grammar_fallbacks"])


def test_a_request_past_its_timeout_is_abandoned_without_holding_up_the_others(service) -> None:
    long = {"messages": [{"role": "user", "content": "Write a very long essay about the history of Japan."}],
            "max_tokens": 1500, "timeout": 2}
    abandoned_before = health(service)["abandoned"]
    with ThreadPoolExecutor(4) as pool:
        started = time.monotonic()
        slow = pool.submit(lambda: (httpx.post(f"{service}/chat/completions", json=long, timeout=60),
                                    time.monotonic() - started))
        quick = [pool.submit(httpx.post, f"{service}/chat/completions", json=score_request(t), timeout=60)
                 for t in ("a trip", "a move", "a party")]
        response, seconds = slow.result()
        answers = [f.result() for f in quick]
    assert response.status_code == 504 and "abandoned" in response.json()["error"]["message"]
    assert seconds < 10, f"the abandoned request took {seconds:.1f} s to give up"
    assert all(a.status_code == 200 and json.loads(a.json()["choices"][0]["message"]["content"]) for a in answers)
    after = health(service)
    assert after["abandoned"] == abandoned_before + 1 and after["busy"] == 0


def test_a_call_a_member_drops_is_stopped_by_the_service_and_the_others_go_on(service) -> None:
    """What a member does with a call the tree no longer wants (``agents.acting._drop_moot``):
    the backend hangs up between two tokens and the service stops drawing them."""
    backend, drop = OpenAIBackend(service, timeout_s=120, retries=0), threading.Event()
    before = health(service)
    with ThreadPoolExecutor(1) as pool:
        call = generate_on_a_thread(backend, drop, LONG_ANSWER, max_tokens=1000, allow_cut=True)
        other = pool.submit(httpx.post, f"{service}/chat/completions", json=score_request("a party"), timeout=120)
        deadline = time.monotonic() + 60
        while health(service)["tokens"] - before["tokens"] < 10:  # both are being decoded
            assert time.monotonic() < deadline, "the service drew no tokens"
            time.sleep(0.2)
        drop.set()
        dropped_at = time.monotonic()
        with pytest.raises(CallDropped):
            call.result(30)
        assert time.monotonic() - dropped_at < 5  # a 1,000-token answer: about a minute
        answer = other.result(120)
    assert answer.status_code == 200 and json.loads(answer.json()["choices"][0]["message"]["content"])
    deadline = time.monotonic() + 10
    while (after := health(service))["abandoned"] == before["abandoned"] or after["busy"]:
        assert time.monotonic() < deadline, f"the service never stopped the dropped call: {after}"
        time.sleep(0.2)
    assert after["abandoned"] == before["abandoned"] + 1
    drawn = after["tokens"] - before["tokens"] - answer.json()["usage"]["completion_tokens"]
    assert drawn < 500, f"the dropped call drew {drawn} of its 1,000 tokens"
    assert backend.calls == 0


def test_a_streamed_answer_arrives_in_chunks_that_join_into_the_grammar_bound_json(service) -> None:
    with httpx.stream("POST", f"{service}/chat/completions", json={**score_request("a trip"), "stream": True},
                      timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event)["choices"][0] for event in events[:-1]]
    assert chunks[-1]["finish_reason"] == "stop" and len(chunks) > 5, "the answer came whole, not streamed"
    data = json.loads("".join(chunk["delta"].get("content", "") for chunk in chunks))
    assert {data["clarity"], data["non_overlap"], data["coverage"]} <= {1, 2, 3, 4, 5}


def test_bad_requests_are_refused_with_the_field_named(service) -> None:
    cases = [({"messages": []}, "'messages'"), ({**score_request("x"), "max_tokens": 10**6}, "'max_tokens'"),
             ({**score_request("x"), "timeout": float("nan")}, "'timeout'"),
             ({**score_request("x"), "messages": [{"role": "user", "content": "word " * 3000}]}, "--ctx-per-slot"),
             ({**score_request("x"), "response_format": {"type": "xml"}}, "'response_format'")]
    for body, named in cases:
        answer = httpx.post(f"{service}/chat/completions", content=json.dumps(body).encode(),  # NaN allowed
                            headers={"Content-Type": "application/json"}, timeout=10)
        assert answer.status_code == 400 and named in answer.json()["error"]["message"], answer.text
    assert httpx.post(f"{service}/chat/completions", content=b"{not json", timeout=10).status_code == 400


def test_a_backend_whose_service_dies_reports_it_and_recovers_when_it_returns(tmp_path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    process = start_service(port, tmp_path / "service.log")
    backend = OpenAIBackend(url, timeout_s=60, retries=0)
    messages = [{"role": "user", "content": "Name one city in Japan."}]
    try:
        assert backend._call(messages, None, 10, allow_cut=True) and backend.unavailable is None
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        with pytest.raises(ModelUnavailable, match="cannot reach the model server"):
            backend._call(messages, None, 10, allow_cut=True)
        assert backend.unavailable is not None
        process = start_service(port, tmp_path / "service.log")
        assert backend._call(messages, None, 10, allow_cut=True) and backend.unavailable is None
    finally:
        process.terminate()
        process.wait(20)


def test_a_swarm_whose_model_service_dies_mid_plan_says_so_and_completes_when_it_returns(tmp_path) -> None:
    """Members report the outage (a warning each), start no model work while it lasts, and finish the
    plan once the service is back on its address."""
    port = free_port()
    log = tmp_path / "service.log"
    process = start_service(port, log)
    out = tmp_path / "out"
    plan = subprocess.Popen([*swarm_command(), "plan", "Plan a weekend in Kyoto", "--llm", "openai",
                             "--llm-url", f"http://127.0.0.1:{port}/v1", "--out", str(out), "--timeout", "400",
                             "--max-depth", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while '"answered"' not in log.read_text():  # the swarm is using it
            assert time.monotonic() < deadline and plan.poll() is None, "the swarm never asked the service"
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        time.sleep(6)
        process = start_service(port, log)
        output, _ = plan.communicate(timeout=400)
    finally:
        plan.kill()
        process.terminate()
        process.wait(20)
    assert plan.returncode == 0, output.decode()[-2000:]
    logs = "".join(p.read_text() for p in (out / "members").glob("*/agent.log"))
    assert '"model unreachable' in logs and '"model reachable again"' in logs
    assert json.loads((out / "plan.json").read_text())["complete"]

