"""A member whose disk fails stops by itself, cleanly; one whose disk is full runs on.

After an fsync has failed nothing may rest on the store (``agents.store.DiskFailed``): the
member must end at its next fsync (its own event, a change it is about to show) with the
store's message, exit status 1 and no traceback. What it showed before is judged across its
restart by ``no_revocation`` and what it kept by ``durability``; that it showed nothing
*after* the failure is judged exactly by ``tests/agents/test_failing_disk_process.py``, not
here: the flag that fails the disk and the member's own record of a change are stamped by
two processes, and a change whose fsync came just before the flag would look like one after.
"""

from __future__ import annotations

from chaos.checkers.verdict import Verdict
from chaos.history import History


def disk_failure(history: History) -> Verdict:
    """Every member whose disk failed stopped by itself, saying so: exit status 1 (where there
    is a process), a message naming the disk, no traceback; every member whose disk was full
    ran on (judged in the lab, where a disk_free step ends the full disk)."""
    failures = [(m.name, f) for m in history.members.values() for f in m.disk_failures]
    if not failures:
        return Verdict("disk_failure", "pass", "no member's disk failed in this run")
    for name, failure in failures:
        if failure.kind == "full":
            if failure.stopped_at is not None:
                return Verdict("disk_failure", "fail",
                               f"{name}'s disk was full from t={failure.at:.1f}s and it stopped (exit "
                               f"{failure.exit_code}): a full disk refuses writes, which the member tries again; "
                               f"it said {_last_line(failure.last_words)!r}")
            if failure.refused == 0:
                return Verdict("disk_failure", "fail",
                               f"{name}'s disk was full from t={failure.at:.1f}s and it never said a write was "
                               "refused: the full disk did not take (the shim not preloaded?), or it wrote nothing")
            continue
        where = f"{name}'s disk failed at t={failure.at:.1f}s"
        if failure.stopped_at is None:
            return Verdict("disk_failure", "fail",
                           f"{where} and it was still running when the lab stopped waiting: a member must stop "
                           "at its first fsync after the failure (the lab fails the disk of one that writes soon)")
        said = _last_line(failure.last_words)
        if failure.traceback:
            return Verdict("disk_failure", "fail", f"{where}; it ended with a Python traceback, not a message: {said!r}")
        if failure.exit_code not in (None, 1):
            return Verdict("disk_failure", "fail", f"{where}; it exited with status {failure.exit_code}, not 1: {said!r}")
        if "disk" not in said.lower():
            return Verdict("disk_failure", "fail", f"{where}; it stopped without saying its disk failed: {said!r}")
    failing = [(n, f) for n, f in failures if f.kind != "full"]
    full = sorted({n for n, f in failures if f.kind == "full"})
    parts = []
    if failing:
        slowest = max(f.stopped_at - f.at for _, f in failing if f.stopped_at is not None)
        parts.append(f"{len(failing)} disk failure(s) ({', '.join(sorted({n for n, _ in failing}))}): each member "
                     f"stopped by itself within {max(slowest, 0.0):.1f}s, without a traceback, saying its disk failed")
    if full:
        parts.append(f"{len(full)} member(s) ran on through a full disk ({', '.join(full)}), its writes refused")
    return Verdict("disk_failure", "pass", "; ".join(parts))


def _last_line(words: str) -> str:
    """The last line of ``words`` that says something (a traceback ends in lines of its
    exception groups' box drawing: ``+----``, ``|``)."""
    for line in reversed(words.splitlines()):
        text = line.strip().strip("|+-").strip()
        if any(c.isalpha() for c in text):
            return text[:200]
    return ""
