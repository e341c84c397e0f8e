"""Signature checks in a child process, a batch per round trip.

PyNaCl releases the GIL inside each ed25519 check, but a worker *thread* takes it
back after every event (and again for the Python around the call), and the
thread parsing the next frame holds it for up to the switch interval each time: a
late joiner's verify threads crawled while its main thread parsed, and the
joiner used one core of two (measured with a 100k-event catch-up: 41 s of CPU
in 38 s of wall). A ``Verifier`` owns one child interpreter that checks a whole
batch of signatures per request; the thread that waits on it holds the GIL once
to send the batch and once to read the verdicts.

The child runs ``_CHILD`` (PyNaCl alone, no import of this package, ``-I``: nothing
in the working directory shadows it) and reads requests on its stdin until end of
file: a parent that exits, or is killed, takes its children with it; it ignores
Ctrl-C, which its parent handles. Each verdict is exactly ``identity.verify``'s
for the same key, message and signature (``VerifyKey.verify``, the same
exceptions meaning *no*). A child that cannot be started, dies, or leaves a
request unanswered for ``ANSWER_WITHIN`` seconds gives ``VerifierGone`` (and is
killed), and the caller checks the batch itself: the verdicts are the same
either way. A process keeps its children (one per worker thread, at most four,
about 15 MB each) for the next catch-up.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import subprocess
import sys
import time
from collections.abc import Sequence

# A request: u32 length, then per signature: 32-byte key, 64-byte signature, u32
# message length, message. A reply: u32 count, then one byte per signature (1 = valid).
_CHILD = r"""
import signal, struct, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

source, sink = sys.stdin.buffer, sys.stdout.buffer

def read(size):
    data = source.read(size)
    if len(data) < size:
        raise SystemExit(0)
    return data

while True:
    (size,) = struct.unpack(">I", read(4))
    request = read(size)
    verdicts = bytearray()
    at = 0
    while at < size:
        key, signature = request[at:at + 32], request[at + 32:at + 96]
        (length,) = struct.unpack_from(">I", request, at + 96)
        message = request[at + 100:at + 100 + length]
        at += 100 + length
        try:
            VerifyKey(key).verify(message, signature)
        except (BadSignatureError, ValueError):
            verdicts.append(0)
        else:
            verdicts.append(1)
    sink.write(struct.pack(">I", len(verdicts)) + verdicts)
    sink.flush()
"""


ANSWER_WITHIN = 30.0  # seconds a child may take over one request (a chunk takes milliseconds)


class VerifierGone(Exception):
    """The child could not be started, died or stopped answering; check the batch here instead."""


class Verifier:
    """One child process checking signatures; one request at a time (a thread of its own)."""

    def __init__(self, child_code: str = _CHILD, answer_within: float = ANSWER_WITHIN) -> None:
        self._code = child_code
        self._answer_within = answer_within
        self._child: subprocess.Popen[bytes] | None = None

    def check(self, batch: Sequence[tuple[bytes, bytes, bytes]]) -> list[bool]:
        """Whether each ``(public key, message, signature)`` verifies. Keys must be 32 bytes and
        signatures 64 (a decoded event's are: ``events.SIGNATURE_PATTERN`` admits no other
        length): one of another length would shift every later item of the request."""
        if not batch:
            return []
        if any(len(key) != 32 or len(signature) != 64 for key, _, signature in batch):
            raise ValueError("a verifier request needs 32-byte keys and 64-byte signatures")
        request = b"".join(key + signature + struct.pack(">I", len(message)) + message
                           for key, message, signature in batch)
        child = self._started()
        deadline = time.monotonic() + self._answer_within
        try:
            assert child.stdin is not None and child.stdout is not None
            _write_all(child.stdin.fileno(), struct.pack(">I", len(request)) + request, deadline)
            (count,) = struct.unpack(">I", _read_exactly(child.stdout.fileno(), 4, deadline))
            if count != len(batch):
                raise VerifierGone(f"the verifier answered {count} verdicts for {len(batch)} signatures")
            verdicts = _read_exactly(child.stdout.fileno(), count, deadline)
        except (OSError, ValueError, VerifierGone) as exc:  # a broken pipe, a closed file, an end
            self.close()
            raise VerifierGone(f"the verifier process failed: {exc}") from None
        return [verdict == 1 for verdict in verdicts]

    def _started(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self.close()
            try:
                self._child = subprocess.Popen([sys.executable, "-I", "-c", self._code], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
            except OSError as exc:
                raise VerifierGone(f"cannot start a verifier process: {exc!r}") from None
            assert self._child.stdin is not None
            os.set_blocking(self._child.stdin.fileno(), False)  # a write that cannot go on waits in select
        return self._child

    def close(self) -> None:
        """End the child and reap it: it exits at the end of its input, or is killed."""
        child, self._child = self._child, None
        if child is None:
            return
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        try:
            child.wait(timeout=1)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        _, ready, _ = select.select([], [fd], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise VerifierGone("the verifier took no request for too long")
        with contextlib.suppress(BlockingIOError):  # select said some room; none after all
            view = view[os.write(fd, view):]


def _read_exactly(fd: int, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise VerifierGone("the verifier did not answer in time")
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise VerifierGone("the verifier process ended")
        data += chunk
    return bytes(data)


__all__ = ["ANSWER_WITHIN", "Verifier", "VerifierGone"]
