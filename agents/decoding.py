"""Decoding a frame of events with the signature checks on other cores.

A late joiner verifies every event it is sent: 100k events are 100k ed25519
checks (60-90 us each here) beside the parsing, canonical and id checks of each.
The checks run on worker threads while this thread parses the next chunk: a
two-stage pipeline. Each worker thread hands its chunk's signatures to a child
process of its own (``agents.verifier``) and waits, holding no GIL, for the
verdicts: checking them on the thread itself took the GIL back after every
event, and the parsing thread held it meanwhile, so the checks crawled. A worker
whose child fails checks its chunk itself (same verdicts). Results come back in
the frame's order whatever the threads do, so what a member admits never depends
on their timing, and the caller blocks until the frame is done (no trio
checkpoint: a mock clock cannot jump meanwhile, which the simulated world relies
on).

``FramePipeline`` goes one frame further for a pull: the checks of one frame run
while this thread stores the frame before it and receives the next, so it
waits on the workers only when they are behind.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from agents.core.decode import bad_signature, decode_unverified, signature_bytes
from agents.core.events import Event, EventRefused
from agents.core.identity import public_key_of, verify
from agents.heap import settled
from agents.verifier import Verifier, VerifierGone

log = structlog.get_logger("decoding")

CHUNK = 128  # events handed to a worker at once: large enough to amortise the hand-off
PARALLEL_FROM = 2 * CHUNK  # smaller frames (gossip-sized, the simulation's) decode inline
WORKERS = max(1, min(4, os.cpu_count() or 1))  # every core: this thread waits on them more than it works
# SWARM_VERIFY_PROCESSES=0: no child processes (a sandbox that forbids them; a comparison)
_USE_PROCESSES = os.environ.get("SWARM_VERIFY_PROCESSES", "1") != "0"

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    # a forked child (the simulation's worker processes) inherits the pool but not its
    # threads, nor their verifier processes: it makes its own
    global _pool, _pool_lock, _local
    _pool, _pool_lock, _local = None, threading.Lock(), threading.local()


os.register_at_fork(after_in_child=_forget_pool)


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="verify")
        return _pool


def _verify_chunk(decoded: Sequence[tuple[Event, bytes] | EventRefused],
                  in_child: bool = False) -> list[Event | EventRefused]:
    """Each item's event if its signature verifies, else its refusal; in order. ``in_child``:
    the signatures go to this thread's verifier process (worker threads only: a frame small
    enough to check inline is not worth a round trip, nor the caller a child)."""
    out: list[Event | EventRefused] = []
    batch: list[tuple[str, bytes, bytes]] = []
    waiting: list[int] = []  # positions in ``out`` whose verdict the batch gives
    for item in decoded:
        if isinstance(item, EventRefused):
            out.append(item)
            continue
        event, message = item
        try:
            signature = signature_bytes(event)
        except EventRefused as exc:
            out.append(exc)
            continue
        if not in_child:  # inline: the author's key is cached, no batch to build
            out.append(event if verify(event.author, message, signature) else bad_signature(event))
            continue
        out.append(event)
        waiting.append(len(out) - 1)
        batch.append((event.author, message, signature))  # 64 bytes: the schema's pattern says so
    for at, valid in zip(waiting, _checked(batch), strict=True):
        if not valid:
            out[at] = bad_signature(out[at])  # type: ignore[arg-type]
    return out


_local = threading.local()
RETRY_AFTER = 30.0  # seconds a worker thread whose verifier failed checks signatures itself


def _checked(batch: list[tuple[str, bytes, bytes]]) -> list[bool]:
    """The verdicts on a batch of ``(author, message, signature)`` from this thread's verifier
    process, or from this thread while it has none: ``SWARM_VERIFY_PROCESSES=0``, or for
    ``RETRY_AFTER`` after one failed (a child killed for memory, no process to spare). The
    verdicts are the same either way."""
    verifier = getattr(_local, "verifier", None)
    if verifier is None and _USE_PROCESSES and time.monotonic() >= getattr(_local, "retry_at", 0.0):
        verifier = _local.verifier = Verifier()
    if verifier is not None:
        try:
            return verifier.check([(public_key_of(author), message, signature) for author, message, signature in batch])
        except VerifierGone as exc:
            _local.verifier, _local.retry_at = None, time.monotonic() + RETRY_AFTER
            log.warning("signature checks fall back to this process", reason=str(exc)[:200],
                        retry_after_s=RETRY_AFTER)
    return [verify(author, message, signature) for author, message, signature in batch]


def _unverified(raw: bytes) -> tuple[Event, bytes] | EventRefused:
    try:
        return decode_unverified(raw)
    except EventRefused as exc:
        return exc


Decoded = list[tuple[bytes, Event | EventRefused]]


class _Submitted:
    """A frame whose chunks are being checked: its results, in order, when they are done."""

    def __init__(self, raws: Sequence[bytes]) -> None:
        self.raws = raws
        if len(raws) < PARALLEL_FROM:  # gossip-sized: at once, here
            self._done: list[Event | EventRefused] | None = _verify_chunk([_unverified(raw) for raw in raws])
            return
        self._done = None
        pool = _workers()
        # a frame's events are kept, not garbage: the collector walking them as they are made
        # was an eighth of parsing them (100k events: 38 against 33 us each)
        with settled():
            self._chunks: list[Future[list[Event | EventRefused]]] = [
                pool.submit(_verify_chunk, [_unverified(raw) for raw in raws[start:start + CHUNK]], True)
                for start in range(0, len(raws), CHUNK)
            ]

    @property
    def checked(self) -> bool:
        return self._done is not None

    def results(self) -> list[Event | EventRefused]:
        if self._done is None:
            self._done = [item for future in self._chunks for item in future.result()]
        return self._done


def decode_frame(raws: Sequence[bytes]) -> list[Event | EventRefused]:
    """``decode_event`` over each raw event, in order: the event, or the refusal it earned."""
    return _Submitted(raws).results()


class FramePipeline:
    """Frames in, decoded events out one frame later, each with its raw bytes, in the order
    the frames came: ``push`` parses a frame and hands its signature checks to the workers,
    then returns the frame before it, whose checks ran meanwhile; ``drain`` returns the last.
    What comes out is exactly ``decode_frame`` of each frame in turn, whatever the timing."""

    def __init__(self) -> None:
        self._pending: _Submitted | None = None

    def push(self, raws: Sequence[bytes]) -> Decoded:
        submitted = _Submitted(raws)
        ready = self.drain()
        if submitted.checked and not ready:  # nothing waits before it: no lag needed
            return list(zip(submitted.raws, submitted.results(), strict=True))
        self._pending = submitted
        return ready

    def drain(self) -> Decoded:
        """The frame still held, decoded (waiting for its checks); empty when none is."""
        pending, self._pending = self._pending, None
        return [] if pending is None else list(zip(pending.raws, pending.results(), strict=True))


__all__ = ["FramePipeline", "decode_frame"]
