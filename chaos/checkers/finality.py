"""Finality: judged from what every member showed at every moment, not from the end.

Members log each change of what they show (``agents.core.transitions``): the
accepted split of a node, the claim holding a leaf, the accepted result of a
leaf. A decision shown to a user is final, so across the whole history:

* no member ever takes back or replaces a split or a result it showed;
* no two members ever show different splits for one node, or different
  results for one leaf (at any two moments, alive or since dead);
* a member that restarts shows, in its first fold from its store, every split and
  result it showed before (a store that lost them, a power cut taking what it had
  shown, revokes them), unless the nemesis destroyed its store on purpose.

Holder changes are allowed (a lease ran out) and are only counted.
"""

from __future__ import annotations

from chaos.checkers.verdict import Verdict, short
from chaos.history import History, Shown

FINAL = ("split", "result")


def _describe(member: str, shown: Shown) -> str:
    return f"{member} at t={shown.at:.1f}s"


def no_revocation(history: History) -> Verdict:
    """No member ever un-accepts or replaces a split or result, or shows another than any member showed."""
    first: dict[tuple[str, str], tuple[str, str]] = {}  # (kind, node) -> (value, who/when)
    problems: list[str] = []
    decided = 0
    holder_changes = 0
    for name, member in sorted(history.members.items()):
        showing: dict[tuple[str, str], str] = {}
        before_restart: dict[tuple[str, str], str] | None = None
        # a store the nemesis destroyed on purpose (or one damaged past opening, moved aside)
        # comes back without what it held: that restart is excused. The k-th start after the
        # first is the k-th restart where the history records every restart (the simulation);
        # where it does not (the lab records wipes only), any such restart excuses them all
        starts = sum(1 for s in member.shown if s.kind == "start")
        spoiled = [bool(r.fault or r.error) for r in member.restarts]
        lives = 0
        for shown in member.shown:
            if shown.kind == "start":
                lives += 1
                # a life that ended before its first fold was shown (``loaded``) owes what the
                # one before it showed too
                merged = {**(before_restart or {}), **showing}
                before_restart = merged or None
                showing = {}
                continue
            if shown.kind == "loaded":  # its first fold from its store is shown: it shows all it did
                excused = spoiled[lives - 2] if len(spoiled) == starts - 1 and lives >= 2 else any(spoiled)
                for kind, node in [k for k in before_restart or {} if k[0] in FINAL and k not in showing
                                   and not excused][:3]:
                    problems.append(f"{_describe(name, shown)} came back from its store without the {kind} "
                                    f"of {short(node)} it showed before it went down")
                before_restart = None
                continue
            key = (shown.kind, shown.node)
            if shown.kind == "holder":
                holder_changes += shown.before is not None
                continue
            if shown.kind not in FINAL:  # "complete": when the plan shown turned complete
                continue
            if shown.before is not None:
                problems.append(f"{_describe(name, shown)} replaced its {shown.kind} of {short(shown.node)}: "
                                f"{short(shown.before)} -> {short(shown.after or 'nothing')}")
            if shown.after is None:
                showing.pop(key, None)
                continue
            showing[key] = shown.after
            seen = first.get(key)
            if seen is None:
                first[key] = (shown.after, _describe(name, shown))
                decided += 1
            elif seen[0] != shown.after:
                problems.append(f"{_describe(name, shown)} shows {shown.kind} {short(shown.after)} of "
                                f"{short(shown.node)}, but {seen[1]} showed {short(seen[0])}")
            if before_restart is not None and before_restart.get(key) not in (None, shown.after):
                problems.append(f"{_describe(name, shown)} came back from its store with {shown.kind} "
                                f"{short(shown.after)} of {short(shown.node)} instead of {short(before_restart[key])}")
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        return Verdict("no_revocation", "fail", "; ".join(problems[:3]) + more)
    if not any(m.shown for m in history.members.values()):
        return Verdict("no_revocation", "stall", "no member logged what it showed: nothing to judge")
    return Verdict("no_revocation", "pass",
                   f"{decided} decision(s) shown, never taken back or contradicted by any member "
                   f"at any moment; {holder_changes} holder change(s)")


def revocations(history: History) -> int:
    """How many times any member replaced or withdrew a split or result it showed."""
    return sum(1 for m in history.members.values() for s in m.shown
               if s.kind in FINAL and s.before is not None)


__all__ = ["no_revocation", "revocations"]
