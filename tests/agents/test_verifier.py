"""Signature checks in a child process give ``identity.verify``'s verdicts; a child that
dies is replaced by checks in the parent, with the same verdicts; a parent killed with
SIGKILL leaves no child behind."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents import decoding
from agents.core.decode import decode_event, decode_unverified
from agents.core.events import EventRefused
from agents.core.identity import public_key_of, verify
from agents.verifier import Verifier, VerifierGone
from tests.builders import Feed, goal

ROOT = Path(__file__).resolve().parents[2]


def _signed(count: int) -> list[tuple[str, bytes, bytes]]:
    """(author, message, signature) of ``count`` events, every third signature spoiled."""
    feed = Feed("writer", "client")
    out = []
    for i in range(count):
        event, message = decode_unverified(feed.at(1_000 + i, goal(f"Goal {i}", [feed.peer_id], 1)).to_wire())
        signature = base64.b64decode(event.sig)
        if i % 3 == 0:
            signature = bytes([signature[0] ^ 1]) + signature[1:]
        out.append((event.author, message, signature))
    return out


def test_a_child_gives_the_verdicts_identity_verify_gives() -> None:
    signed = _signed(30)
    verifier = Verifier()
    try:
        got = verifier.check([(public_key_of(author), message, sig) for author, message, sig in signed])
        again = verifier.check([(public_key_of(author), message, sig) for author, message, sig in signed[:4]])
    finally:
        verifier.close()
    expected = [verify(*item) for item in signed]
    assert got == expected and again == expected[:4]
    assert expected.count(False) == 10


def test_a_dead_child_is_started_again_and_one_that_fails_mid_request_is_given_up() -> None:
    verifier = Verifier()
    batch = [(public_key_of(author), message, sig) for author, message, sig in _signed(3)]
    assert verifier.check(batch) == [False, True, True]
    dead = verifier._child
    assert dead is not None
    dead.kill()
    dead.wait()
    assert verifier.check(batch) == [False, True, True]  # a child found dead is started again
    assert verifier._child is not dead
    verifier.close()
    with pytest.raises(ValueError, match="32-byte keys"):
        verifier.check([(batch[0][0][:31], batch[0][1], batch[0][2])])

    ends = Verifier(child_code="import sys; sys.stdin.buffer.read(4)")  # reads a little, then exits
    with pytest.raises(VerifierGone):  # a broken pipe, or the end of its answers
        ends.check(batch * 200)
    assert ends._child is None  # closed and reaped


def test_a_child_that_stops_answering_is_killed_after_its_deadline() -> None:
    stuck = Verifier(child_code="import time; time.sleep(600)", answer_within=0.5)
    batch = [(public_key_of(author), message, sig) for author, message, sig in _signed(2)] * 400  # > a pipe
    started = time.monotonic()
    with pytest.raises(VerifierGone, match=r"too long|in time"):
        stuck.check(batch)
    assert time.monotonic() - started < 30  # the deadline, not the child's 600 s sleep
    assert stuck._child is None


def test_a_frame_whose_verifier_fails_is_checked_here_with_the_same_outcome(monkeypatch) -> None:
    calls = []

    class Broken(Verifier):
        def check(self, batch):
            calls.append(len(batch))
            raise VerifierGone("the verifier process ended")

    feed = Feed("writer", "client")
    raws = [feed.at(1_000 + i, goal(f"Goal {i}", [feed.peer_id], 1)).to_wire() for i in range(decoding.PARALLEL_FROM)]
    spoiled = base64.b64decode(decode_event(raws[3]).sig)
    spoiled = base64.b64encode(bytes([spoiled[0] ^ 1]) + spoiled[1:])
    raws[3] = raws[3].replace(decode_event(raws[3]).sig.encode(), spoiled)
    raws[9] = raws[9].replace(decode_event(raws[9]).sig.encode(), base64.b64encode(bytes(64)))
    monkeypatch.setattr(decoding, "Verifier", Broken)
    monkeypatch.setattr(decoding, "_local", type(decoding._local)())  # every worker thread starts afresh
    got = decoding.decode_frame(raws)
    assert calls, "the frame never went to a verifier"
    assert [type(item) for item in got].count(EventRefused) == 2
    assert got[3].rule == got[9].rule == "signature"  # type: ignore[union-attr]
    assert all(not isinstance(item, EventRefused) for i, item in enumerate(got) if i not in (3, 9))

    # and with processes turned off (SWARM_VERIFY_PROCESSES=0) no verifier is made at all
    monkeypatch.setattr(decoding, "_USE_PROCESSES", False)
    monkeypatch.setattr(decoding, "_local", type(decoding._local)())
    calls.clear()
    assert [type(item) for item in decoding.decode_frame(raws)] == [type(item) for item in got]
    assert not calls


def test_a_parent_killed_with_sigkill_takes_its_child_with_it() -> None:
    script = ("import sys\n"
              "from agents.verifier import Verifier\n"
              "v = Verifier()\n"
              "v._started()\n"
              "print(v._child.pid, flush=True)\n"
              "sys.stdin.read()\n")
    with subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            assert _running(child)
        finally:
            os.kill(parent.pid, signal.SIGKILL)
            parent.wait()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child), "the verifier outlived its parent"


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited child of a dead parent is reaped by init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
