"""One model, many requests at once: continuous batching over llama.cpp's C API.

A member asking the model one question at a time leaves most of the machine
idle: on two cores one sequence generates ~56 tokens/s, eight sequences decoded
together ~115 (LLM.md). ``BatchedModel`` holds one model and one context with a
KV-cache stream per *slot*; a worker thread steps every running request by one
token per ``llama_decode`` call, and a request that arrives joins the next step
(its prompt is read in chunks beside the others' tokens) instead of waiting for
the running ones to finish.

Each request keeps its own sampler chain, so its own JSON-schema grammar, its
own seed, and its own deadline: a request past its deadline is dropped between
two steps, its slot freed, and the others never notice. Grammar checks are the
costly part of constrained sampling (every candidate of a 151k-token vocabulary
against the grammar's stacks), so a token is first drawn without the grammar
and only checked against it; only when the grammar refuses it is the grammar
applied to the whole vocabulary (the same order llama.cpp's own server uses).

Why our own loop rather than llama.cpp's ``llama-server``: it needs no second
build (22 minutes on these two cores), it runs from the wheel ``make install``
already caches, and the members' grammar patch (``llama.py: grammar_for``) stays
one code path. ``bench.model`` measures what it gives against the ceiling.
"""

from __future__ import annotations

import ctypes
import math
import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agents.llm.base import LLMError

TOP_K = 40
log = structlog.get_logger("swarm.model")


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "stop" (the model ended it) or "length" (``max_tokens`` reached)
    prompt_tokens: int
    completion_tokens: int


class RequestAbandoned(LLMError):
    """The request ran past its deadline or was cancelled; its slot went to the others."""


class RequestRefused(LLMError):
    """The request cannot be served as asked (too long for a slot, a grammar llama.cpp refuses)."""


@dataclass(eq=False)
class _Request:
    messages: list[dict[str, str]]
    grammar: str | None
    max_tokens: int
    temperature: float
    seed: int
    timeout_s: float
    deadline: float
    future: Future = field(default_factory=Future)
    prompt: list[int] = field(default_factory=list)
    slot: int = -1
    fed: int = 0  # prompt tokens already in the KV cache
    pending: int = -1  # the last sampled token, fed at the next step
    output: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    logits_at: int = -1  # this step's batch index whose logits are ours
    free_chain: Any = None  # top-k, temperature, dist: draws a token without the grammar
    full_chain: Any = None  # grammar, top-k, temperature, dist: used when the grammar refuses the draw
    grammar_sampler: Any = None  # the first sampler of ``full_chain``, owned by it
    pieces: queue.SimpleQueue | None = None  # streaming: each piece's bytes as it is drawn, then None


class BatchedModel:
    """A GGUF model serving up to ``slots`` requests at once. Thread-safe ``submit``; ``close`` ends it."""

    def __init__(self, path: Path | str, *, slots: int = 8, ctx_per_slot: int = 2048, threads: int = 2,
                 batch_tokens: int = 512) -> None:
        import llama_cpp as lib
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's own load and graph chatter: errors only
        self._lib = lib
        self.slots = slots
        self.ctx_per_slot = ctx_per_slot
        self.batch_tokens = batch_tokens
        lib.llama_backend_init()
        self._model = lib.llama_model_load_from_file(str(path).encode(), lib.llama_model_default_params())
        if not self._model:
            raise LLMError(f"llama.cpp could not load the model file {path} (not a GGUF model?)")
        self._vocab = lib.llama_model_get_vocab(self._model)
        self.n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        params = lib.llama_context_default_params()
        params.n_ctx = slots * ctx_per_slot
        params.n_batch = params.n_ubatch = batch_tokens
        params.n_seq_max = slots
        params.n_threads = params.n_threads_batch = threads
        # One cache for all slots. Separate streams per slot were measured at no gain over one
        # request at a time (27 tok/s at 8 requests against 60 unified, two cores); admission keeps
        # every request within ``ctx_per_slot``, so the slots together never outgrow ``n_ctx``.
        params.kv_unified = True
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise LLMError(f"llama.cpp could not make a context of {slots} x {ctx_per_slot} tokens")
        self._memory = lib.llama_get_memory(self._ctx)
        self._template = lib.llama_model_chat_template(self._model, None)
        self._batch = lib.llama_batch_init(batch_tokens, 0, 1)
        self._incoming: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._running: list[_Request] = []
        self._waiting: list[_Request] = []
        self._free_slots = list(range(slots))
        self._closed = False
        # busy_s: stepping; decode_s: inside llama_decode (the engine); fallback_s: the grammar
        # applied to the whole vocabulary after it refused a draw. What busy_s holds beyond
        # decode_s is this loop's own cost (sampling, grammar, bookkeeping): ``bench.model``
        # prints it per token beside the engine's share
        self.stats = {"steps": 0, "tokens": 0, "grammar_fallbacks": 0, "abandoned": 0, "busy_s": 0.0,
                      "decode_s": 0.0, "fallback_s": 0.0, "peak_batch": 0}
        self._thread = threading.Thread(target=self._loop, name="batched-model", daemon=True)
        self._thread.start()

    # --- the public side ---------------------------------------------------------

    def submit(self, messages: list[dict[str, str]], *, grammar: str | None = None, max_tokens: int = 256,
               temperature: float = 0.2, seed: int = 0, timeout_s: float = 120.0,
               pieces: queue.SimpleQueue | None = None) -> Future:
        """A future of a ``Completion``; it fails with ``LLMError`` (``RequestAbandoned`` past ``timeout_s``).
        With ``pieces``, each piece of text (bytes) is also put there as it is drawn, and None at the end.
        Cancelling the future abandons the request at the next step."""
        if self._closed or not self._thread.is_alive():
            raise LLMError("the model service is shutting down")
        request = _Request(messages, grammar, max(1, max_tokens), temperature, seed, timeout_s,
                           time.monotonic() + timeout_s, pieces=pieces)
        self._incoming.put(request)
        return request.future

    @property
    def busy(self) -> int:
        return len(self._running) + len(self._waiting)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._closed

    def close(self) -> None:
        self._closed = True
        self._incoming.put(None)
        self._thread.join(timeout=30)

    # --- the worker --------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while self._take_incoming(block=not (self._running or self._waiting)):
                self._admit()
                if self._running:
                    started = time.monotonic()
                    try:
                        self._step()
                    except Exception as exc:  # whatever broke, the running requests learn it
                        log.exception("a decoding step failed; its requests are answered with the error")
                        for request in list(self._running):
                            self._finish(request, error=LLMError(f"the model failed: {exc!r}"))
                    self.stats["busy_s"] += time.monotonic() - started
        finally:
            self._closed = True
            leftover = [*self._running, *self._waiting]
            while True:
                try:
                    item = self._incoming.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    leftover.append(item)
            for request in leftover:
                self._finish(request, error=LLMError("the model service shut down"))
        self._lib.llama_batch_free(self._batch)
        self._lib.llama_free(self._ctx)
        self._lib.llama_model_free(self._model)

    def _take_incoming(self, block: bool) -> bool:
        """Move new requests to the waiting line; False once ``close`` was called."""
        try:
            item = self._incoming.get(block=block)
            while True:
                if item is None:
                    return False
                self._waiting.append(item)
                item = self._incoming.get_nowait()
        except queue.Empty:
            return True

    def _admit(self) -> None:
        now = time.monotonic()
        for request in list(self._waiting):
            if now > request.deadline or request.future.cancelled():
                self._waiting.remove(request)
                self.stats["abandoned"] += 1
                self._finish(request, error=RequestAbandoned(
                    f"abandoned: waited for a free slot past its {request.timeout_s:g} s"))
        while self._waiting and self._free_slots:
            request = self._waiting.pop(0)
            try:
                request.prompt = self._tokenize(self._render(request.messages))
                if len(request.prompt) + request.max_tokens > self.ctx_per_slot:
                    raise RequestRefused(f"prompt ({len(request.prompt)} tokens) plus max_tokens "
                                         f"({request.max_tokens}) exceeds a slot's context of {self.ctx_per_slot} "
                                         "tokens; shorten it or start the service with a larger --ctx-per-slot")
                self._make_samplers(request)
            except LLMError as exc:
                self._finish(request, error=exc)
                continue
            except Exception as exc:  # one odd request must not stop the others
                self._finish(request, error=RequestRefused(f"the request could not be prepared: {exc!r}"))
                continue
            request.slot = self._free_slots.pop()
            self._running.append(request)

    def _step(self) -> None:
        """One ``llama_decode``: every generating request's last token, then prompt chunks while room is left."""
        lib, batch = self._lib, self._batch
        now = time.monotonic()
        for request in list(self._running):
            if now > request.deadline or request.future.cancelled():
                self.stats["abandoned"] += 1
                self._finish(request, error=RequestAbandoned(
                    "cancelled" if request.future.cancelled()
                    else f"abandoned: no answer within its {request.timeout_s:g} s"))
        n = 0

        def put(token: int, pos: int, slot: int, wants_logits: bool) -> None:
            nonlocal n
            batch.token[n] = token
            batch.pos[n] = pos
            batch.n_seq_id[n] = 1
            batch.seq_id[n][0] = slot
            batch.logits[n] = 1 if wants_logits else 0
            n += 1

        for request in self._running:
            request.logits_at = -1
            if request.fed == len(request.prompt) and request.pending >= 0:
                request.logits_at = n
                put(request.pending, len(request.prompt) + len(request.output) - 1, request.slot, True)
        for request in self._running:
            room = self.batch_tokens - n
            if request.fed < len(request.prompt) and room > 0:
                chunk = request.prompt[request.fed:request.fed + room]
                for offset, token in enumerate(chunk):
                    last = request.fed + offset == len(request.prompt) - 1
                    if last:
                        request.logits_at = n
                    put(token, request.fed + offset, request.slot, last)
                request.fed += len(chunk)
        if n == 0:
            return
        batch.n_tokens = n
        together = sum(1 for request in self._running if request.logits_at >= 0 or request.fed > 0)
        self.stats["peak_batch"] = max(self.stats["peak_batch"], together)
        decoding = time.monotonic()
        status = lib.llama_decode(self._ctx, batch)
        self.stats["decode_s"] += time.monotonic() - decoding
        self.stats["steps"] += 1
        if status != 0:
            for request in list(self._running):
                self._finish(request, error=LLMError(f"llama_decode failed with status {status}"))
            return
        for request in list(self._running):
            if request.logits_at >= 0:
                self._sample(request, request.logits_at)

    def _sample(self, request: _Request, index: int) -> None:
        lib = self._lib
        token = lib.llama_sampler_sample(request.free_chain, self._ctx, index)
        if request.grammar_sampler is not None:
            if self._grammar_allows(request, token, index):
                lib.llama_sampler_accept(request.grammar_sampler, token)
            else:
                self.stats["grammar_fallbacks"] += 1
                refused = time.monotonic()
                token = lib.llama_sampler_sample(request.full_chain, self._ctx, index)  # accepts it too
                self.stats["fallback_s"] += time.monotonic() - refused
        self.stats["tokens"] += 1
        if lib.llama_vocab_is_eog(self._vocab, token):
            self._finish(request, finish_reason="stop")
            return
        request.output.append(token)
        piece = self._piece(token)
        request.text += piece
        if request.pieces is not None:
            request.pieces.put(piece)
        request.pending = token
        if len(request.output) >= request.max_tokens:
            self._finish(request, finish_reason="length")

    def _grammar_allows(self, request: _Request, token: int, index: int) -> bool:
        lib = self._lib
        logits = lib.llama_get_logits_ith(self._ctx, index)
        candidate = lib.llama_token_data(token, logits[token], 0.0)
        array = lib.llama_token_data_array(ctypes.pointer(candidate), 1, -1, False)
        lib.llama_sampler_apply(request.grammar_sampler, ctypes.byref(array))
        return not math.isinf(candidate.logit)

    def _finish(self, request: _Request, finish_reason: str = "", error: Exception | None = None) -> None:
        if request in self._running:
            self._running.remove(request)
        if request.slot >= 0:
            self._lib.llama_memory_seq_rm(self._memory, request.slot, -1, -1)
            self._free_slots.append(request.slot)
            request.slot = -1
        for chain in (request.free_chain, request.full_chain):
            if chain is not None:
                self._lib.llama_sampler_free(chain)
        request.free_chain = request.full_chain = request.grammar_sampler = None
        if request.pieces is not None:
            request.pieces.put(None)
        try:  # a handler may cancel the future at any moment, even between a check and a set
            if error is not None:
                request.future.set_exception(error)
            else:
                request.future.set_result(Completion(request.text.decode("utf-8", "replace"), finish_reason,
                                                     len(request.prompt), len(request.output)))
        except InvalidStateError:
            pass  # cancelled: nobody waits for it

    # --- text <-> tokens ---------------------------------------------------------

    def _render(self, messages: list[dict[str, str]]) -> bytes:
        lib = self._lib
        chat = (lib.llama_chat_message * len(messages))(
            *[lib.llama_chat_message(str(m.get("role", "user")).encode(errors="replace"),
                                     str(m.get("content", "")).encode(errors="replace")) for m in messages])
        size = 4096
        while True:
            buffer = ctypes.create_string_buffer(size)
            written = lib.llama_chat_apply_template(self._template, chat, len(messages), True, buffer, size)
            if written < 0:
                raise LLMError("the model's chat template could not be applied to these messages")
            if written <= size:
                return buffer.raw[:written]
            size = written

    def _tokenize(self, text: bytes) -> list[int]:
        lib = self._lib
        room = len(text) + 16
        tokens = (lib.llama_token * room)()
        count = lib.llama_tokenize(self._vocab, text, len(text), tokens, room, True, True)
        if count < 0:
            raise LLMError("the prompt could not be tokenized")
        return list(tokens[:count])

    def _piece(self, token: int) -> bytes:
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            written = self._lib.llama_token_to_piece(self._vocab, token, buffer, size, 0, False)
            if written >= 0:
                return buffer.raw[:written]
            size = -written  # a longer piece: the call says how long

    def _make_samplers(self, request: _Request) -> None:
        lib = self._lib

        def chain(*samplers: Any) -> Any:
            made = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
            for sampler in samplers:
                lib.llama_sampler_chain_add(made, sampler)
            return made

        def tail() -> list[Any]:
            if request.temperature <= 0:
                return [lib.llama_sampler_init_greedy()]
            return [lib.llama_sampler_init_top_k(TOP_K), lib.llama_sampler_init_temp(request.temperature),
                    lib.llama_sampler_init_dist(request.seed)]

        request.free_chain = chain(*tail())
        if request.grammar is not None:
            grammar = lib.llama_sampler_init_grammar(self._vocab, request.grammar.encode(), b"root")
            if not grammar:
                lib.llama_sampler_free(request.free_chain)
                request.free_chain = None
                raise RequestRefused("llama.cpp refused the request's grammar (not valid GBNF)")
            request.full_chain = chain(grammar, *tail())
            request.grammar_sampler = grammar
