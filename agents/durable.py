"""Files that a power cut cannot take back once written.

A file is on the disk when its data is fsynced, but its *name* is an entry in its
directory, which is a file of its own: a rename (or a file just created) that only
the page cache holds is undone by a power cut, leaving the old content, or no file
at all, although the new data was fsynced. Linux's ``fsync(2)`` says so: "Calling
fsync() does not necessarily ensure that the entry in the directory containing the
file has also reached disk. For that an explicit fsync() on a file descriptor for
the directory is also needed." A killed process loses neither (the kernel holds
both): only a crash of the machine does.

What must outlive one here: a member's key (a new key is a new member, not
admitted), its own feed's head (``agents.ownfeed``: a head taken back could let it
sign at a seq it used, a fork), the cluster's files and reports, and the name of
the event store's write-ahead log, fsynced with the log's first fsync by the store
(``agents.store``).
"""

from __future__ import annotations

import os
from pathlib import Path


def sync_directory(directory: Path) -> None:
    """Put ``directory``'s entries (names created, replaced or removed in it) on the disk."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_durably(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``path`` so that a crash leaves either its old content or the new, never half, and
    once this returns the new one outlives a power cut: the data is fsynced under a temporary
    name, renamed over ``path``, then the directory is fsynced (the rename is in it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


__all__ = ["replace_durably", "sync_directory"]
