"""Decoding a frame of events with the signature checks on other cores.

A late joiner verifies every event it is sent: 100k events are 100k ed25519
checks (60-90 us each here) beside the parsing, canonical and id checks of each.
PyNaCl releases the GIL inside the check, so it runs in worker threads while
this thread parses the next chunk: a two-stage pipeline with no process to
start and nothing to pickle. Results come back in the frame's order whatever
the threads do, so what a member admits never depends on their timing, and the
caller blocks until the frame is done (no trio checkpoint: a mock clock cannot
jump meanwhile, which the simulated world relies on).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from agents.core.events import Event, EventRefused, check_signature, decode_unverified

CHUNK = 128  # events handed to a worker at once: large enough to amortise the hand-off
PARALLEL_FROM = 2 * CHUNK  # smaller frames (gossip-sized, the simulation's) decode inline
WORKERS = max(1, min(4, (os.cpu_count() or 2) - 1))

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool() -> None:
    # a forked child (the simulation's worker processes) inherits the pool but not its
    # threads: it makes its own
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="verify")
        return _pool


def _verify_chunk(decoded: Sequence[tuple[Event, bytes] | EventRefused]) -> list[Event | EventRefused]:
    out: list[Event | EventRefused] = []
    for item in decoded:
        if isinstance(item, EventRefused):
            out.append(item)
            continue
        event, message = item
        try:
            check_signature(event, message)
        except EventRefused as exc:
            out.append(exc)
        else:
            out.append(event)
    return out


def _unverified(raw: bytes) -> tuple[Event, bytes] | EventRefused:
    try:
        return decode_unverified(raw)
    except EventRefused as exc:
        return exc


def decode_frame(raws: Sequence[bytes]) -> list[Event | EventRefused]:
    """``decode_event`` over each raw event, in order: the event, or the refusal it earned."""
    if len(raws) < PARALLEL_FROM:
        return _verify_chunk([_unverified(raw) for raw in raws])
    pool = _workers()
    pending: list[Future[list[Event | EventRefused]]] = []
    for start in range(0, len(raws), CHUNK):
        pending.append(pool.submit(_verify_chunk, [_unverified(raw) for raw in raws[start:start + CHUNK]]))
    return [item for future in pending for item in future.result()]


__all__ = ["decode_frame"]
