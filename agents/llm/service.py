"""``swarm model-service``: one batched model for every member on a host, over HTTP.

It speaks the part of the OpenAI chat API the members use (``--llm openai
--llm-url http://HOST:PORT/v1``): ``POST /v1/chat/completions`` with
``messages``, ``max_tokens``, ``temperature``, ``seed`` and a JSON schema in
``response_format`` (OpenAI's ``json_schema`` form or llama.cpp's
``json_object`` + ``schema``), answered whole or, with ``"stream": true``, as
server-sent ``chat.completion.chunk`` events while the tokens are drawn (the last
with the ``usage``; an SSE comment every half second while none come). ``GET
/health`` says how busy it is (503 once the model's worker has stopped); ``GET
/v1/models`` names the model.

A thread per connection waits on the ``BatchedModel``'s future; the model
itself runs in one worker thread (``batching.py``), so a slow request never
holds up the server's socket. A request has ``--request-timeout`` seconds (a
body may ask for fewer with ``"timeout"``); past it the request is abandoned
with 504 and its slot goes to the others. A client that hangs up is noticed
while it waits and its request is cancelled the same way.
"""

from __future__ import annotations

import codecs
import json
import math
import queue
import select
import socket
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from agents.llm.base import LLMError
from agents.llm.batching import BatchedModel, RequestAbandoned, RequestRefused

MAX_BODY = 1 << 20  # members send a few kB; anything near this is not a chat request
MAX_TOKENS_CAP = 4096
log = structlog.get_logger("swarm.model")


class BadRequest(ValueError):
    """The body is not a request this service can answer; the message says which field and why."""


def parse_request(body: dict[str, Any], max_timeout: float) -> dict[str, Any]:
    """The ``BatchedModel.submit`` options for an OpenAI-style chat request, or ``BadRequest``."""
    from agents.llm.llama import grammar_for

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise BadRequest("'messages' must be a non-empty list of {role, content} strings")
    max_tokens = body.get("max_tokens", 256)
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS_CAP:
        raise BadRequest(f"'max_tokens' must be an integer from 1 to {MAX_TOKENS_CAP}")
    temperature = body.get("temperature", 0.2)
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or not 0 <= temperature <= 2:
        raise BadRequest("'temperature' must be a number from 0 to 2")
    seed = body.get("seed", 0)
    if not isinstance(seed, int) or seed < 0:
        raise BadRequest("'seed' must be a non-negative integer")
    timeout = body.get("timeout", max_timeout)
    if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise BadRequest("'timeout' must be a positive number of seconds")
    schema = None
    form = body.get("response_format")
    if isinstance(form, dict) and form.get("type") == "json_schema":
        schema = (form.get("json_schema") or {}).get("schema")
    elif isinstance(form, dict) and form.get("type") == "json_object":
        schema = form.get("schema") or {"type": "object"}
    elif form is not None and not (isinstance(form, dict) and form.get("type") == "text"):
        raise BadRequest("'response_format' must be of type json_schema, json_object or text")
    grammar = None
    if schema is not None:
        if not isinstance(schema, dict):
            raise BadRequest("the response_format schema must be a JSON object")
        try:
            grammar = grammar_for(schema)
        except (LLMError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise BadRequest(f"the response_format schema cannot be turned into a grammar: {exc}") from None
    return {"grammar": grammar, "max_tokens": max_tokens, "temperature": float(temperature), "seed": seed,
            "timeout_s": min(float(timeout), max_timeout)}


class ModelService:
    """The model and its HTTP server; ``serve_forever`` until ``shutdown``."""

    def __init__(self, model: BatchedModel, name: str, host: str, port: int, request_timeout: float = 120.0) -> None:
        self.model = model
        self.name = name
        self.request_timeout = request_timeout
        self.served = 0
        self.failed = 0
        self._lock = threading.Lock()
        self.http = ThreadingHTTPServer((host, port), _handler_for(self))
        self.http.daemon_threads = True

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.http.server_address[:2]
        return str(host), int(port)

    def serve_forever(self) -> None:
        self.http.serve_forever(poll_interval=0.5)

    def shutdown(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.model.close()

    def count(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.served += 1
            else:
                self.failed += 1


def _hung_up(connection: socket.socket) -> bool:
    """True when the client closed its end (readable with nothing to read)."""
    try:
        poller = select.poll()  # not select(): it cannot watch descriptors past 1023
        poller.register(connection, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(0):
            return False
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _handler_for(service: ModelService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: a member's client reuses its connection

        def log_message(self, format: str, *args: Any) -> None:
            pass  # every request is logged once, below, through structlog

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error"
                                          if status < 500 else "server_error"}})

        def do_GET(self) -> None:
            if self.path == "/health":
                alive = service.model.alive
                self._send(200 if alive else 503, {"status": "ok" if alive else "model stopped", "model": service.name, "slots": service.model.slots,
                                 "busy": service.model.busy, "served": service.served, "failed": service.failed,
                                 **{k: round(v, 4) if isinstance(v, float) else v
                                    for k, v in service.model.stats.items()}})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": service.name, "object": "model"}]})
            else:
                self._error(404, f"no such path {self.path}; try POST /v1/chat/completions or GET /health")

        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self.close_connection = True  # its body was not read: the connection cannot carry another
                self._error(404, f"no such path {self.path}; the service answers POST /v1/chat/completions")
                return
            try:
                length = int(self.headers.get("Content-Length") or -1)
            except ValueError:
                length = -1
            if not 0 < length <= MAX_BODY:
                self.close_connection = True
                self._error(413 if length > MAX_BODY else 411,
                            f"a request needs a Content-Length from 1 to {MAX_BODY} bytes")
                return
            try:
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                options = parse_request(body, service.request_timeout)
            except (ValueError, RecursionError, BadRequest) as exc:
                self._error(400, f"bad request: {exc}")
                return
            started = time.monotonic()
            stream = bool(body.get("stream"))
            pieces: queue.SimpleQueue | None = queue.SimpleQueue() if stream else None
            try:
                future = service.model.submit(body["messages"], pieces=pieces, **options)
            except LLMError as exc:
                self._error(503, str(exc))
                return
            if stream:
                assert pieces is not None
                self._stream(future, pieces, started)
                return
            try:
                completion = self._wait(future, options["timeout_s"])
            except RequestRefused as exc:
                service.count(False)
                self._error(400, f"bad request: {exc}")
                return
            except RequestAbandoned as exc:
                service.count(False)
                log.info("request abandoned", reason=str(exc), seconds=round(time.monotonic() - started, 2))
                self._error(504, str(exc))
                return
            except LLMError as exc:
                service.count(False)
                log.warning("request failed", error=str(exc))
                self._error(500, str(exc))
                return
            if completion is None:
                service.count(False)
                log.info("client hung up; request cancelled", seconds=round(time.monotonic() - started, 2))
                self.close_connection = True
                return
            service.count(True)
            seconds = time.monotonic() - started
            log.info("answered", tokens=completion.completion_tokens, prompt_tokens=completion.prompt_tokens,
                     seconds=round(seconds, 2), finish=completion.finish_reason, busy=service.model.busy)
            self._send(200, {
                "id": f"chatcmpl-{id(future):x}", "object": "chat.completion", "created": int(time.time()),
                "model": service.name,
                "choices": [{"index": 0, "finish_reason": completion.finish_reason,
                             "message": {"role": "assistant", "content": completion.text}}],
                "usage": {"prompt_tokens": completion.prompt_tokens,
                          "completion_tokens": completion.completion_tokens,
                          "total_tokens": completion.prompt_tokens + completion.completion_tokens},
            })

        def _wait(self, future: Future, timeout_s: float) -> Any:
            """The completion, or None if the client hung up first (the request is then cancelled).
            The model abandons a request at its deadline; this waits a little longer than that at
            most, so a handler never outlives a model that stopped answering."""
            give_up = time.monotonic() + timeout_s + 30
            while True:
                try:
                    return future.result(timeout=0.5)
                except FutureTimeout:
                    if _hung_up(self.connection):
                        future.cancel()
                        return None
                    if time.monotonic() > give_up:
                        future.cancel()
                        raise RequestAbandoned("the model did not answer (its worker may have stopped)") from None

        def _stream(self, future: Future, pieces: queue.SimpleQueue, started: float) -> None:
            """Server-sent chunks as the model draws them, then the finish reason and ``[DONE]``."""
            self.close_connection = True  # no length is known ahead: the end of the stream ends the connection
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            chunk_id = f"chatcmpl-{id(future):x}"
            decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a token may end mid-character

            def event(delta: dict[str, str], finish: str | None, **extra: Any) -> None:
                self.wfile.write(b"data: " + json.dumps({
                    "id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": service.name, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    **extra,
                }).encode() + b"\n\n")
                self.wfile.flush()

            try:
                event({"role": "assistant"}, None)
                while True:
                    try:
                        piece = pieces.get(timeout=0.5)
                    except queue.Empty:
                        if _hung_up(self.connection):
                            raise BrokenPipeError from None
                        # an SSE comment while the request waits for a slot or its prompt: a client
                        # that dropped the call reads it, sees it is dropped and hangs up
                        self.wfile.write(b": waiting\n\n")
                        self.wfile.flush()
                        continue
                    if piece is None:
                        break
                    if text := decoder.decode(piece):
                        event({"content": text}, None)
                try:
                    completion = future.result(timeout=5)
                except LLMError as exc:
                    service.count(False)
                    self.wfile.write(b"data: " + json.dumps({"error": {"message": str(exc)}}).encode() + b"\n\n")
                    return
                if tail := decoder.decode(b"", final=True):
                    event({"content": tail}, None)
                event({}, completion.finish_reason, usage={  # where OpenAI puts it (stream_options.include_usage)
                    "prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
                    "total_tokens": completion.prompt_tokens + completion.completion_tokens})
                self.wfile.write(b"data: [DONE]\n\n")
                service.count(True)
                log.info("answered", tokens=completion.completion_tokens, prompt_tokens=completion.prompt_tokens,
                         seconds=round(time.monotonic() - started, 2), finish=completion.finish_reason,
                         busy=service.model.busy, streamed=True)
            except (BrokenPipeError, ConnectionResetError):
                future.cancel()
                service.count(False)
                log.info("client hung up; streamed request cancelled")

    return Handler
