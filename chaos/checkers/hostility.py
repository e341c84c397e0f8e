"""What a hostile peer got: refusals, counted by rule, and nothing in any honest member's store
that an admitted author did not sign; memory stays bounded.

Judged from each live member's final events and counters, whatever the hostile peer did
(``History.hostile`` names its behaviours). Tickets are checked with the cluster's
authority, recomputed here from the events (the member's own gate is what is judged).
"""

from __future__ import annotations

from collections import Counter

from agents.core.intake import MAX_HELD
from chaos.checkers.verdict import Verdict
from chaos.history import History

MAX_STORED = 20_000  # events a member may end with in a simulated run


def hostile_refused(history: History) -> Verdict:
    """With a hostile peer about: its junk was refused (and counted) and never stored."""
    if not history.hostile:
        return Verdict("hostile_refused", "pass", "no hostile peer in this run")
    live = history.live()
    admitted = history.admitted or set()
    for member in live:
        strangers = [e for e in member.events if e.author not in admitted]
        if strangers:
            return Verdict("hostile_refused", "fail",
                           f"{member.name} stored {len(strangers)} event(s) by authors the cluster never admitted")
        if member.held > MAX_HELD or len(member.events) > MAX_STORED:
            return Verdict("hostile_refused", "fail",
                           f"{member.name} ended holding {member.held} events back and storing {len(member.events)}")
    refused: Counter[str] = Counter()
    for member in live:
        refused.update(member.refused)
    # (what a partition kept from every member was refused by nobody: counts are evidence only)
    by_rule = ", ".join(f"{rule} {n}" for rule, n in sorted(refused.items()))
    return Verdict("hostile_refused", "pass",
                   f"hostile peer ({', '.join(history.hostile)}): refusals across {len(live)} live members: "
                   f"{by_rule or 'none'}; sync refused {sum(m.sync_refused for m in live)}, "
                   f"timed out {sum(m.sync_timeouts for m in live)}; at most "
                   f"{max(len(m.events) for m in live)} events stored and {max(m.held for m in live)} held")
