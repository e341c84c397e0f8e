"""Convergence, late joins and durability: did every member end with the same plan, and keep it?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from chaos.checkers.verdict import Verdict
from chaos.history import History, MemberHistory


def _reference_digest(members: Iterable[MemberHistory]) -> str | None:
    counts = Counter(m.digest for m in members)
    return min(counts, key=lambda d: (-counts[d], d)) if counts else None


def _disagreements(history: History) -> list[tuple[float, float]]:
    """Stretches of time (start, end) when live members' digests differed, from the samples."""
    names = {m.name for m in history.live()}
    current: dict[str, str] = {}
    spans: list[tuple[float, float]] = []
    since: float | None = None
    for at, name, digest in sorted(history.samples):
        if name not in names:
            continue
        current[name] = digest
        split = len(set(current.values())) > 1
        if split and since is None:
            since = at
        elif not split and since is not None:
            spans.append((since, at))
            since = None
    if since is not None:
        spans.append((since, history.ended_at))
    return spans


def convergence(history: History) -> Verdict:
    """Live members end with one digest, and after the last fault they never disagree for
    longer than the bound (a member that is behind catches up within it)."""
    live = history.live()
    if not live:
        return Verdict("convergence", "fail", "no member was alive at the end")
    digests = Counter(m.digest for m in live)
    if len(digests) > 1:
        groups = "; ".join(
            f"{d[:12]}: {', '.join(sorted(m.name for m in live if m.digest == d))}" for d in sorted(digests)
        )
        return Verdict("convergence", "fail",
                       f"{len(live)} live members ended with {len(digests)} digests ({groups}) "
                       f"at t={history.ended_at:.1f}s, {history.ended_at - history.last_fault_at:.1f}s "
                       "after the last fault")
    bound = history.convergence_bound_s
    late = [(a, b) for a, b in _disagreements(history) if b > history.last_fault_at]
    longest = max(late, key=lambda span: span[1] - max(span[0], history.last_fault_at), default=None)
    if longest is not None:
        lasted = longest[1] - max(longest[0], history.last_fault_at)
        if lasted > bound:
            return Verdict("convergence", "fail",
                           f"live members disagreed from t={longest[0]:.1f}s to t={longest[1]:.1f}s, {lasted:.1f}s "
                           f"after the last fault at t={history.last_fault_at:.1f}s (bound {bound:.0f}s)")
    settle = (late[0][1] - history.last_fault_at) if late else 0.0
    return Verdict("convergence", "pass",
                   f"all {len(live)} live members at digest {next(iter(digests))[:12]}; after the last fault "
                   f"they agreed within {max(settle, 0.0):.1f}s and never disagreed longer "
                   f"(bound {bound:.0f}s)")


def late_join(history: History) -> Verdict:
    """A member that joined late rebuilt the same plan as everyone else."""
    late = [m for m in history.live() if m.late]
    if not late:
        return Verdict("late_join", "pass", "no member joined late in this run")
    reference = _reference_digest(m for m in history.live() if not m.late) or _reference_digest(late)
    wrong = [m.name for m in late if m.digest != reference]
    if wrong:
        return Verdict("late_join", "fail",
                       f"late joiner(s) {', '.join(wrong)} differ from the others' digest {str(reference)[:12]}")
    return Verdict("late_join", "pass",
                   f"{len(late)} late joiner(s) ({', '.join(m.name for m in late)}) rebuilt digest {str(reference)[:12]}")


def durability(history: History) -> Verdict:
    """A restarted member lost nothing it had stored before it went down (unless the nemesis
    destroyed its store on purpose: then the others' copies bring it back, see honest_feeds),
    with one exception: a power cut may take events of *other* authors whose commit no fsync
    covered (their authors hold them durably, and sync brings them back); never one of its own,
    which nobody else may hold, nor the goal once it told the goal's client it held it
    (``History.goal_held_by``): the client has left on its word (which holds until the nemesis
    destroys the store it was given with). (What it showed before the
    cut is judged by no_revocation.)"""
    restarts = [(m, r) for m in history.members.values() for r in m.restarts]
    cut_away = 0
    for member, restart in restarts:
        if not restart.lost or restart.fault:
            continue
        authors = dict(zip(restart.lost, restart.lost_by, strict=False))  # the lab names no authors
        own = [i for i in restart.lost if authors.get(i) == member.peer]
        said_at = history.goal_held_by.get(member.name)
        # its word holds until the nemesis destroys its store (what it held then is gone on purpose)
        wiped = [r.at for r in member.restarts if r.fault and said_at is not None and said_at <= r.at < restart.at]
        if history.goal in restart.lost and said_at is not None and said_at <= restart.at and not wiped:
            return Verdict("durability", "fail",
                           f"{member.name} restarted at t={restart.at:.1f}s without the goal {history.goal[:8]}, "
                           f"which it told the goal's client it held at t={said_at:.1f}s: the client has left")
        if own or not restart.power_cut:
            what = (f"{len(own)} of its own events (they must be on the disk before they are sent)" if own
                    else f"{len(restart.lost)} of the {restart.held_before} events it held")
            return Verdict("durability", "fail",
                           f"{member.name} restarted at t={restart.at:.1f}s without {what}: "
                           f"{', '.join(i[:8] for i in (own or restart.lost)[:5])}")
        cut_away += len(restart.lost)
    kept = [(m.name, r) for m, r in restarts if not r.fault]
    held = sum(r.held_before for _, r in kept)
    destroyed = [f"{m.name} ({r.fault}{': ' + r.error[:60] if r.error else ''})" for m, r in restarts if r.fault]
    if not restarts:
        return Verdict("durability", "pass", "no member restarted in this run")
    kept_all = (f"all {held} previously held events still there" if not cut_away else
                f"{held - cut_away} of {held} previously held events still there, {cut_away} of other "
                "authors taken by power cuts before any fsync")
    return Verdict("durability", "pass", f"{len(kept)} restart(s), {kept_all}"
                   + (f"; stores destroyed on purpose: {', '.join(destroyed)}" if destroyed else ""))


