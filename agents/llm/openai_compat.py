"""``openai``: any OpenAI-compatible chat endpoint (llama.cpp's server, Ollama, vLLM, ...).

``--llm-url`` is the API base (e.g. ``http://127.0.0.1:8080/v1``); the key, if
the server wants one, comes from ``SWARM_LLM_API_KEY`` (never from a flag, so it
stays out of process listings and logs). Structured answers ask for
``response_format: json_schema`` (OpenAI's form); a server that rejects it (as
``llama_cpp.server`` 0.3.36 does) is asked with ``json_object`` plus ``schema``,
its own form, from then on. Answers are streamed (``"stream": true``), so a
call the member drops (``PromptedBackend.drop_when``) hangs up between two tokens
and the server stops drawing them. The prompts, retries and deterministic checks are the
same as for the local model (``prompted.py``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from agents.llm.base import CallDropped, LLMError, ModelUnavailable
from agents.llm.prompted import PromptedBackend, trim_cut

API_KEY_VARIABLE = "SWARM_LLM_API_KEY"


class OpenAIBackend(PromptedBackend):
    name = "openai"

    def __init__(self, url: str | None, model: str | None = None, timeout_s: float = 120.0,
                 retries: int = 2, seed: int = 0, parallel: int = 1) -> None:
        super().__init__()
        self.parallel = parallel  # calls a member sends at once: worth more than 1 only if the server batches
        if not url:
            raise LLMError("--llm openai needs --llm-url, the API base of an OpenAI-compatible server "
                           "(e.g. http://127.0.0.1:8080/v1)")
        self.url = url.rstrip("/")
        self.model = model or "default"  # without --model, the name the server answers with (after a call)
        self._named = model is not None
        self.seed = seed  # each member's own, so members asking the same question need not answer alike
        self.retries = retries
        headers = {"Authorization": f"Bearer {key}"} if (key := os.environ.get(API_KEY_VARIABLE)) else {}
        self.timeout_s = timeout_s  # for a whole answer; httpx's timeout is per read, between chunks
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._schema_forms = ["json_schema", "json_object"]  # the first one the server accepts stays first
        self._asked = 0  # calls sent: each draws the next seed

    def _generate(self, messages: list[dict[str, str]], schema: dict[str, Any] | None, max_tokens: int,
                  allow_cut: bool = False) -> str:
        with self._totals:  # calls on other threads draw their own seeds and share the learned schema form
            self._asked += 1
            seed = (self.seed + self._asked - 1) % 2**31
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.2, "seed": seed, "stream": True}
        started = time.monotonic()
        while True:
            form = self._schema_forms[0]
            if schema is not None:
                body["response_format"] = (
                    {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
                    if form == "json_schema" else {"type": "json_object", "schema": schema}
                )
            try:
                with self._client.stream("POST", f"{self.url}/chat/completions", json=body) as response:
                    if response.status_code == 200:
                        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
                        # a server (or a proxy) that ignores "stream" answers whole: read it so
                        answer = self._read_stream(response, started) if streamed else self._read_whole(response)
                        break
                    response.read()
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError) as exc:
                raise ModelUnavailable(f"cannot reach the model server at {self.url}: {exc!r}") from None
            except httpx.HTTPError as exc:
                raise LLMError(f"the model server at {self.url} failed: {exc!r}") from None
            rejected_form = schema is not None and response.status_code in (400, 422, 500) \
                and "response_format" in response.text and form != self._schema_forms[-1]
            if not rejected_form:
                if response.status_code in (502, 503):
                    raise ModelUnavailable(f"the model server at {self.url} is not ready ({response.status_code})")
                raise LLMError(f"the model server answered {response.status_code}: {response.text[:300]}")
            with self._totals:  # another call may have learned it already: drop the form once
                if self._schema_forms[0] == form and len(self._schema_forms) > 1:
                    self._schema_forms.pop(0)
        text, finish, tokens, served_by = answer
        self._used(tokens, time.monotonic() - started)
        if not self._named and served_by:
            self.model = served_by[:100]  # recorded in events and plan.json: which model answered
        if finish != "stop" and not (allow_cut and finish == "length"):
            raise LLMError(f"the answer was cut off (finish_reason {finish!r})")
        return trim_cut(text) if finish == "length" else text

    def _read_whole(self, response: httpx.Response) -> tuple[str, str | None, int, str | None]:
        """A completion answered whole: its text, finish reason, completion tokens and model name."""
        response.read()
        try:
            whole = response.json()
            choice = whole["choices"][0]
            text = choice["message"]["content"] or ""
            usage = whole.get("usage") or {}
            served_by = whole.get("model")
            return (str(text), choice.get("finish_reason"), int(usage.get("completion_tokens") or 0),
                    served_by if isinstance(served_by, str) else None)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMError(f"the model server's answer is not an OpenAI chat completion: {exc!r} "
                           f"({response.text[:120]!r})") from None

    def _read_stream(self, response: httpx.Response, started: float) -> tuple[str, str | None, int, str | None]:
        """The streamed answer's text, finish reason, completion tokens (the server's usage where it
        says, else one a chunk) and model name. Checked between chunks: a dropped call
        (``drop_when``) hangs up at once, which tells the server to stop drawing its tokens, and
        a call past ``timeout_s`` in all is given up the same way. Both are checked when a line
        arrives: a server silent for ``timeout_s`` fails the read itself (so at worst about twice
        ``timeout_s`` in all), and one that sends nothing while a request is queued (llama.cpp's
        own server; ours sends a comment every half second) is hung up on at its first token."""
        pieces: list[str] = []
        finish: str | None = None
        chunks, usage, served_by, events = 0, None, None, 0
        for line in response.iter_lines():
            if self._dropped():
                raise CallDropped(f"dropped after {chunks} chunks")
            if time.monotonic() - started > self.timeout_s:
                raise LLMError(f"the model server took longer than {self.timeout_s:g} s")
            if not line.startswith("data:"):
                continue  # blank separators, comments, other SSE fields
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                break
            if not data:
                continue  # an empty data line: some servers keep the connection alive so
            events += 1
            try:
                event = json.loads(data)
                if event.get("error"):
                    raise LLMError(f"the model server failed mid-answer: {str(event['error'])[:300]}")
                served_by = event.get("model") if isinstance(event.get("model"), str) else served_by
                usage = event.get("usage") or usage
                for choice in event.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        if not isinstance(content, str):
                            raise TypeError(f"a chunk's content is {type(content).__name__}, not text")
                        pieces.append(content)
                        chunks += 1
                    finish = choice.get("finish_reason") or finish
                tokens = int(usage.get("completion_tokens") or 0) if isinstance(usage, dict) else chunks
            except (ValueError, AttributeError, TypeError) as exc:
                raise LLMError(f"the model server's stream is not OpenAI chat completion chunks: {exc!r}") from None
        if not events:
            raise LLMError("the model server's stream held no chunk (is it an OpenAI-compatible chat endpoint?)")
        return "".join(pieces), finish, tokens, served_by
