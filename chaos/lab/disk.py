"""A failing or full disk for a real member process: a shim preloaded into it answers for libc.

A disk that starts failing or fills up is not one the lab can make from outside a container
(a device mapper target needs a privileged engine and a block device per member; a small
tmpfs fills for every writer at once). What the member sees of it is all that matters, and
that is libc's answer: ``failing_fsync.c``, preloaded with ``LD_PRELOAD``, makes ``fsync``
and ``fdatasync`` fail with EIO while one flag file exists (``FLAG_ENV`` names it), and
every write to a regular file fail with ENOSPC while another does (``FULL_FLAG_ENV``). The
lab preloads it into every member of a scenario with a disk step and sets or removes a
member's flags in its data directory (a host directory mounted into the container). Built
here with the system's C compiler (which ``make install`` needs anyway), once per source.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("failing_fsync.c")
FLAG_ENV = "SWARM_FSYNC_FAILS_WHEN"
FLAG_NAME = "lab-disk-fails"  # in the member's data directory while its disk fails
FULL_FLAG_ENV = "SWARM_DISK_FULL_WHEN"
FULL_FLAG_NAME = "lab-disk-full"  # and while it is full
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swarm-plan" / "lab"


class ShimError(RuntimeError):
    """The failing-fsync shim could not be built; the message says what to install."""


def failing_fsync_shim(cache: Path = CACHE) -> Path:
    """The shim's shared object, compiled from ``failing_fsync.c`` unless a build of the same
    source is cached."""
    source = SOURCE.read_bytes()
    built = cache / f"failing-fsync-{hashlib.sha256(source).hexdigest()[:12]}.so"
    if built.exists():
        return built
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ShimError("a failing or full disk needs the lab's disk shim, built with a C compiler, and none is on "
                        "PATH: install gcc (Debian: apt-get install gcc), then run again")
    cache.mkdir(parents=True, exist_ok=True)
    partial = built.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SOURCE), "-ldl"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ShimError(f"{compiler} could not build {SOURCE.name}: {done.stderr.strip()[-500:]}")
    partial.replace(built)  # whole or absent: a build cut short is never taken for the shim
    return built
