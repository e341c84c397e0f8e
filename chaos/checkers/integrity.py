"""What the end of a run must look like beyond the plan: the same events everywhere, honest
feeds intact, what the observer printed was the truth, and wasted work within a budget.

* ``event_sets``: every live member holds exactly the same event ids (the digest could hide a
  difference in events that do not change the tree; the set cannot).
* ``honest_feeds``: no member of the cluster (the nemesis's hostile peers aside) ends as an
  equivocator, or with any of its events outside its feed (pending or cut), in any live
  member's copy: judged with the reference model, not the fold. (A member whose store the
  nemesis destroyed may leave a hole: the events before it existed nowhere else.)
* ``observer_truth``: what an observer showed when it first showed the plan complete (its
  transition log up to its ``complete`` record) is the final plan, every split and result.
* ``wasted_work``: results never accepted (duplicate executions) stay within a budget of one
  per leaf; the figures are reported either way.
"""

from __future__ import annotations

from chaos.checkers.safety import _models, _union_model, duplicate_executions
from chaos.checkers.verdict import Verdict, short
from chaos.history import History


def event_sets(history: History) -> Verdict:
    """Every live member holds the same event ids at the end."""
    live = history.live()
    if not live:
        return Verdict("event_sets", "fail", "no member was alive at the end")
    sets = {m.name: frozenset(e.id for e in m.events) for m in live}
    distinct = set(sets.values())
    if len(distinct) > 1:
        union = frozenset().union(*distinct)
        worst = max(sets, key=lambda n: len(union - sets[n]))
        missing = sorted(union - sets[worst])
        return Verdict("event_sets", "fail",
                       f"{len(distinct)} different event sets among {len(live)} live members; {worst} lacks "
                       f"{len(missing)} of {len(union)}: {', '.join(short(i) for i in missing[:4])}")
    return Verdict("event_sets", "pass", f"all {len(live)} live members hold the same {len(next(iter(distinct)))} events")


def honest_feeds(history: History) -> Verdict:
    """No honest member is an equivocator or has an event outside its feed, anywhere."""
    honest = {m.peer: m.name for m in history.members.values()}
    # a member whose store the nemesis destroyed may leave a hole for good: the events before
    # it existed nowhere else (it then refuses to sign, see liveness); so may one stopped for
    # good, whose last events got out by gossip while one before them did not (seed 1206).
    # Either must still never fork.
    destroyed = {m.peer for m in history.members.values() if any(r.fault for r in m.restarts) or not m.alive}
    models = _models(history)
    for member in sorted(history.live(), key=lambda m: m.name):
        model = models[member.name]
        forked = sorted(honest[p] for p in model.equivocators() if p in honest)
        if forked:
            return Verdict("honest_feeds", "fail", f"{member.name} holds a fork by honest member(s) {', '.join(forked)}")
        outside = [e for e in member.events
                   if e.author in honest and e.author not in destroyed and e.id not in model.feed]
        if outside:
            e = outside[0]
            return Verdict("honest_feeds", "fail",
                           f"{member.name} holds {len(outside)} event(s) of honest members outside their feeds, e.g. "
                           f"{honest[e.author]}'s seq {e.seq} ({short(e.id)})")
    return Verdict("honest_feeds", "pass",
                   f"every honest feed is whole and unforked in all {len(history.live())} live members")


def observer_truth(history: History) -> Verdict:
    """What an observer showed at the moment it showed the plan complete is the final plan.

    Judged by its transition log, in the log's order, up to its first ``complete`` record:
    not at the moment the recorder first found it complete (the lab folds stores from the
    host, and a pull may store the plan a sync interval before the member folds and shows
    it). An observer alive at the end that was found complete at least
    ``history.show_within_s`` before the end but never logged the plan complete fails too
    (the lab waits for the observers' logs before it ends a run,
    ``chaos.lab.run.ScenarioRun._settle``); one found complete later is a stall, said so."""
    union = _union_model(history)
    truth = {("split", n.id): n.split for n in union.nodes.values() if n.split}
    truth |= {("result", n.id): n.result for n in union.nodes.values() if n.result}
    judged = 0
    stalled = ""  # an observer the run ended on before it could show what its store held
    for observer in sorted((m for m in history.members.values() if m.role == "observer"), key=lambda m: m.name):
        state: dict[tuple[str, str], str] = {}
        printed_at: float | None = None
        for shown in observer.shown:
            if shown.kind == "start":  # a restart: its first fold shows everything again
                state = {}
            elif shown.kind == "complete" and shown.after is not None:
                printed_at = shown.at
                break
            elif shown.kind in ("split", "result"):
                key = (shown.kind, shown.node)
                if shown.after is None:
                    state.pop(key, None)
                else:
                    state[key] = shown.after
        if printed_at is None:
            if observer.alive and observer.completed_at is not None:
                unshown = (f"{observer.name} was found complete at t={observer.completed_at:.1f}s, "
                           f"{history.ended_at - observer.completed_at:.1f}s before the run ended, but never "
                           f"showed the plan complete (allowed {history.show_within_s:g}s to show it)")
                if history.ended_at - observer.completed_at >= history.show_within_s:  # the sim's 0: always
                    return Verdict("observer_truth", "fail", unshown)
                stalled = stalled or unshown
            continue
        judged += 1
        if state != truth:
            wrong = sorted(k for k in truth.keys() | state.keys() if truth.get(k) != state.get(k))
            kind, node = wrong[0]
            return Verdict("observer_truth", "fail",
                           f"{observer.name} printed a complete plan at t={printed_at:.1f}s whose {kind} "
                           f"of {short(node)} is {short(state.get(wrong[0]) or '-')}, the final plan's "
                           f"{short(truth.get(wrong[0]) or '-')} ({len(wrong)} difference(s))")
    if stalled:
        return Verdict("observer_truth", "stall", stalled)
    if not judged:
        return Verdict("observer_truth", "pass", "no observer saw the plan complete in this run")
    return Verdict("observer_truth", "pass",
                   f"{judged} observer(s) printed, at completion, exactly the final plan "
                   f"({len(truth)} decisions)")


def wasted_work(history: History) -> Verdict:
    """Duplicate executions within one per leaf; model calls reported."""
    union = _union_model(history)
    leaves = sum(1 for n in union.nodes.values() if n.leaf)
    wasted = duplicate_executions(history)
    calls = sum(m.model_calls for m in history.members.values())
    evidence = (f"{wasted} duplicate execution(s) for {leaves} leaves (budget {leaves}); "
                f"{calls} model calls in all")
    return Verdict("wasted_work", "fail" if wasted > max(leaves, 1) else "pass", evidence)
