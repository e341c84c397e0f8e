"""A member's transition log: every change of what it shows, on record before it is shown.

``DATA_DIR/transitions.jsonl``, one JSON record a line (``agents.core.transitions``), is what
the checkers judge every moment of a member by. A batch of changes goes in with one write,
all or none: a full disk (ENOSPC, EDQUOT) leaves the log as it was (a torn tail is cut back)
and the changes are not shown yet (``record`` answers False and the member folds again
later, as a full disk's refused store writes are tried again); any other failure is a
failing disk (``DiskFailed``: the member stops), and stays one for every later batch.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

from agents.core.transitions import Transition
from agents.store import DiskFailed

FULL = (errno.ENOSPC, errno.EDQUOT)


class ShowLog:
    def __init__(self, path: Path, stamp: Callable[[], dict[str, object]]) -> None:
        """Open (append) the log at ``path``; ``stamp`` gives each record's time fields. A tail
        an earlier life left torn (a crash mid-line) is ended first, so the next record starts
        a line of its own instead of being lost with it."""
        self.path, self._stamp = path, stamp
        self._file = open(path, "a+b", buffering=0)  # noqa: SIM115 (closed in close()); read: its last byte
        self._failed: DiskFailed | None = None
        with contextlib.suppress(OSError):  # a tail that cannot be mended now (no room) stays torn
            size = os.fstat(self._file.fileno()).st_size
            if size and os.pread(self._file.fileno(), 1, size - 1) != b"\n":
                self._file.write(b"\n")

    def record(self, changes: list[Transition]) -> bool:
        """Put ``changes`` on record, all or none: True once they are, False when the disk is full."""
        if self._failed is not None:
            raise self._failed
        stamp = self._stamp()
        data = "".join(json.dumps({**stamp, **change.to_json()}) + "\n" for change in changes).encode()
        at: int | None = None
        try:
            at = os.fstat(self._file.fileno()).st_size  # not tell(): a short write cut back leaves it past the end
            written = self._file.write(data)
            if written != len(data):  # a short write: the disk filled up under it
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):  # cut what part of the batch went in (a device may refuse)
                if at is not None:
                    os.ftruncate(self._file.fileno(), at)
            if exc.errno in FULL:
                return False
            self._failed = DiskFailed(
                f"cannot record what this member shows in {self.path}: {exc.strerror}; the member stops rather "
                "than show what its log lacks (check the disk, then restart the member: its events are kept)")
            raise self._failed from None

    def close(self) -> None:
        self._file.close()
