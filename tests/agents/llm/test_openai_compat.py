"""The ``openai`` backend against a real OpenAI-compatible server: llama.cpp's own, started here."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agents.cli.plan import free_port
from agents.llm.base import CallDropped, DecomposeRequest, LLMError, ModelUnavailable, ScoreRequest
from agents.llm.model_files import default_model
from agents.llm.openai_compat import OpenAIBackend
from tests.agents.llm.dropping import generate_on_a_thread

GOAL = "Organise a wedding for 80 guests"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("server") / "server.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model().path), "--host", "127.0.0.1",
         "--port", str(port), "--n_threads", "2", "--n_ctx", "2048", "--interrupt_requests", "False"],
        stdout=log, stderr=log,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None, f"llama_cpp.server exited; see {log.name}"
        assert time.monotonic() < deadline, "llama_cpp.server did not answer within 120 s"
        time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(10)


@pytest.mark.llm
def test_the_openai_backend_splits_and_scores_through_a_real_server(server_url: str) -> None:
    backend = OpenAIBackend(server_url)
    split = backend.decompose(DecomposeRequest(GOAL, (GOAL,), "", 0, 2, "activity", ()))
    assert 2 <= len(split.subgoals) <= 6 and all(s.title for s in split.subgoals)
    vague = backend.score(ScoreRequest(GOAL, (GOAL,), "vague", ("Organise the wedding", "Do wedding things")))
    assert not vague.approve
    assert backend.calls >= 2 and backend.tokens > 0


def test_an_unreachable_server_is_a_clear_error() -> None:
    backend = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", timeout_s=2, retries=0)
    with pytest.raises(LLMError, match="cannot reach the model server"):
        backend._generate([{"role": "user", "content": "hi"}], None, 5)


def test_the_openai_backend_needs_a_url() -> None:
    with pytest.raises(LLMError, match="needs --llm-url"):
        OpenAIBackend(None)


# --- streaming, against a scripted server on a real socket -------------------------------------

class ScriptedStream:
    """A one-route HTTP server that answers each POST with a scripted server-sent stream: every
    item of ``script`` is written and flushed after ``gap`` seconds. It records how many items it
    wrote before the client hung up (``hung_up_after``, None while it has not)."""

    def __init__(self, script: list[bytes], gap: float = 0.0, status: int = 200,
                 content_type: str = "text/event-stream") -> None:
        self.script, self.gap, self.status, self.content_type = script, gap, status, content_type
        self.replies: list[tuple[int, str, list[bytes]]] = []  # per request, taken in turn before the above
        self.written = 0
        self.hung_up = threading.Event()
        self.hung_up_after: int | None = None
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, content_type, script = outer.replies.pop(0) if outer.replies else \
                    (outer.status, outer.content_type, outer.script)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for item in script:
                        time.sleep(outer.gap)
                        self.wfile.write(item)
                        self.wfile.flush()
                        outer.written += 1
                except (BrokenPipeError, ConnectionResetError):
                    outer.hung_up_after = outer.written
                    outer.hung_up.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def chunk(content: str | None = None, finish: str | None = None, **extra) -> bytes:
    delta = {"content": content} if content is not None else {}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "model": "scripted-server",
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                                   **extra}).encode() + b"\n\n"


def test_a_streamed_answer_is_joined_and_its_usage_and_model_read() -> None:
    server = ScriptedStream([chunk(""), chunk('{"a":'), b": a comment\n\n", chunk(" 1}"),
                             chunk(None, "stop", usage={"completion_tokens": 7}), b"data: [DONE]\n\n"])
    try:
        backend = OpenAIBackend(server.url, timeout_s=10)
        assert generate_on_a_thread(backend).result(10) == '{"a": 1}'
        assert backend.tokens == 7 and backend.calls == 1 and backend.model == "scripted-server"
        assert server.bodies[0]["stream"] is True
        server.script = [chunk("one"), chunk(" two"), chunk(None, "stop"), b"data: [DONE]\n\n"]  # no usage
        assert generate_on_a_thread(backend).result(10) == "one two" and backend.tokens == 7 + 2  # a chunk a token
    finally:
        server.close()


def test_a_dropped_call_hangs_up_between_two_tokens_and_the_server_sees_it() -> None:
    server = ScriptedStream([chunk(f"t{i} ") for i in range(500)] + [chunk(None, "stop"), b"data: [DONE]\n\n"],
                            gap=0.02)
    try:
        backend, drop = OpenAIBackend(server.url, timeout_s=30), threading.Event()
        call = generate_on_a_thread(backend, drop)
        deadline = time.monotonic() + 10
        while server.written < 5:
            assert time.monotonic() < deadline, "the scripted server never streamed"
            time.sleep(0.01)
        drop.set()
        written_at_drop = server.written
        with pytest.raises(CallDropped):
            call.result(5)  # not the 10 s the rest of the stream would take
        assert server.hung_up.wait(5), "the server never saw the client hang up"
        assert server.hung_up_after is not None and server.hung_up_after - written_at_drop < 100, \
            (written_at_drop, server.hung_up_after)  # of 500: a few tokens, two seconds at most
        assert backend.calls == 0  # nothing answered, nothing counted
    finally:
        server.close()


def test_a_dropped_call_still_waiting_for_its_first_token_hangs_up_on_the_services_keepalive() -> None:
    server = ScriptedStream([chunk(None)] + [b": waiting\n\n"] * 100 + [chunk("late"), chunk(None, "stop")],
                            gap=0.1)
    try:
        backend, drop = OpenAIBackend(server.url, timeout_s=30), threading.Event()
        call = generate_on_a_thread(backend, drop)
        time.sleep(0.5)
        drop.set()
        with pytest.raises(CallDropped):
            call.result(2)
        assert server.hung_up.wait(5) and server.hung_up_after is not None and server.hung_up_after < 20
    finally:
        server.close()


def test_a_stream_that_fails_or_is_cut_off_is_a_clear_error() -> None:
    server = ScriptedStream([chunk("{"), b'data: {"error": {"message": "the model worker stopped"}}\n\n'])
    try:
        backend = OpenAIBackend(server.url, timeout_s=10)
        with pytest.raises(LLMError, match=r"failed mid-answer.*the model worker stopped"):
            generate_on_a_thread(backend).result(10)
        server.script = [chunk("Kyoto has"), chunk(None, "length"), b"data: [DONE]\n\n"]
        with pytest.raises(LLMError, match="cut off"):
            generate_on_a_thread(backend).result(10)
        assert generate_on_a_thread(backend, allow_cut=True).result(10) == "Kyoto has"
        server.script = [b"data: {not json\n\n"]
        with pytest.raises(LLMError, match="not OpenAI chat completion chunks"):
            generate_on_a_thread(backend).result(10)
        server.script = [chunk(None), b'data: {"choices": [{"delta": {"content": ["not", "text"]}}]}\n\n']
        with pytest.raises(LLMError, match="not text"):
            generate_on_a_thread(backend).result(10)
        server.script = [b"event: ping\n\n"]
        with pytest.raises(LLMError, match="held no chunk"):
            generate_on_a_thread(backend).result(10)
    finally:
        server.close()


def test_a_server_that_answers_whole_or_refuses_the_schema_form_is_still_understood() -> None:
    whole = json.dumps({"model": "whole-server", "usage": {"completion_tokens": 4},
                        "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": '{"a": 2}'}}]})
    server = ScriptedStream([whole.encode()], content_type="application/json")  # "stream" ignored
    try:
        backend = OpenAIBackend(server.url, timeout_s=10)
        schema = {"type": "object"}
        assert generate_on_a_thread(backend, schema=schema).result(10) == '{"a": 2}'
        assert backend.tokens == 4 and backend.model == "whole-server"
        server.replies = [(422, "application/json", [b'{"detail": "unsupported response_format json_schema"}']),
                          (200, "text/event-stream", [chunk('{"a": 3}'), chunk(None, "stop"), b"data: [DONE]\n\n"])]
        assert generate_on_a_thread(backend, schema=schema).result(10) == '{"a": 3}'
        assert [b["response_format"]["type"] for b in server.bodies[1:]] == ["json_schema", "json_object"]
        server.replies = [(503, "application/json", [b'{"error": "loading"}'])]
        with pytest.raises(ModelUnavailable, match="not ready"):
            generate_on_a_thread(backend, schema=schema).result(10)
    finally:
        server.close()
