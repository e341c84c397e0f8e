"""Safety, judged by the reference model (``chaos.checkers.reference``), never by the fold.

* ``reference_agreement``: every live member's fold agrees with the reference
  model on its own events: the same nodes, splits, holders, results, and
  whether the plan is complete. A disagreement is a bug in one of the two, and
  the evidence says where.
* ``quorum_safety``: across the union of every member's events, no node ever
  has two accepted splits (the model's breach report), and every split any
  member ever showed (its transition log) is the one the union accepts: a
  member cannot show a split the rules do not back.
* ``claim_safety``: the same for results: one accepted result per leaf, and
  every result any member showed is the union's; and every result was produced
  under a claim a quorum granted (an executor starts the model only once its
  claim is final). Duplicate executions (results never accepted) are counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from chaos.checkers.reference import Model
from chaos.checkers.verdict import Verdict, short
from chaos.history import History, MemberHistory


def _union(history: History) -> Model:
    """Every event any member ever held: at the end, or before a fault destroyed its store."""
    events = {e.id: e for m in history.members.values() for e in (*m.events, *m.destroyed)}
    return Model(events.values())


def _models(history: History) -> dict[str, Model]:
    cache = history.__dict__.setdefault("_reference_models", {})
    for name, member in history.members.items():
        if name not in cache or cache[name][0] != len(member.events):
            cache[name] = (len(member.events), Model(member.events))
    return {name: entry[1] for name, entry in cache.items()}


def _union_model(history: History) -> Model:
    total = sum(len(m.events) + len(m.destroyed) for m in history.members.values())
    cached = history.__dict__.get("_reference_union")
    if cached is None or cached[0] != total:
        cached = history.__dict__["_reference_union"] = (total, _union(history))
    return cached[1]


def _disagreement(member: MemberHistory, model: Model) -> str:
    tree = member.tree()
    fold_nodes, model_nodes = set(tree.nodes), set(model.nodes)
    if fold_nodes != model_nodes:
        extra = sorted(fold_nodes - model_nodes)
        missing = sorted(model_nodes - fold_nodes)
        return (f"{member.name}'s fold has {len(fold_nodes)} nodes, the reference {len(model_nodes)} "
                f"(only in the fold: {', '.join(short(n) for n in extra[:3]) or '-'}; only in the reference: "
                f"{', '.join(short(n) for n in missing[:3]) or '-'})")
    for node_id, expected in sorted(model.nodes.items()):
        node = tree.nodes[node_id]
        for what, ours, theirs in (("split", node.split, expected.split),
                                   ("result", node.result, expected.result),
                                   ("holder", node.claim if node.status == "claimed" else None,
                                    expected.holder if expected.result is None else None)):
            if ours != theirs:
                return (f"{member.name}'s fold shows {what} {short(ours or '-')} of node {short(node_id)}, "
                        f"the reference {short(theirs or '-')}")
    if tree.complete != model.complete:
        return f"{member.name}'s fold says complete={tree.complete}, the reference {model.complete}"
    return ""


def reference_agreement(history: History) -> Verdict:
    """Every live member's fold equals the reference model on the member's own events."""
    models = _models(history)
    checked = 0
    for name, member in sorted(history.members.items()):
        if not member.alive or not member.events:
            continue
        checked += 1
        problem = _disagreement(member, models[name])
        if problem:
            return Verdict("reference_agreement", "fail", problem)
    return Verdict("reference_agreement", "pass",
                   f"{checked} live member(s): fold and reference model agree on every node, split, holder "
                   "and result")


def _shown_against_truth(history: History, kind: str, truth: dict[str, str | None]) -> str:
    for name, member in sorted(history.members.items()):
        for shown in member.shown:
            if shown.kind != kind or shown.after is None:
                continue
            expected = truth.get(shown.node)
            if expected != shown.after:
                return (f"{name} showed {kind} {short(shown.after)} of {short(shown.node)} at t={shown.at:.1f}s, "
                        f"but the union of all events accepts {short(expected or 'nothing')}")
    return ""


def _count_shown(history: History, kind: str) -> int:
    return sum(1 for m in history.members.values() for s in m.shown if s.kind == kind and s.after is not None)


def quorum_safety(history: History) -> Verdict:
    """No node ever has two accepted splits; every split shown is the one a quorum accepted."""
    union = _union_model(history)
    splits = [b for b in union.breaches if b.startswith("node")]
    if splits:
        return Verdict("quorum_safety", "fail", "; ".join(splits[:3]))
    problem = _shown_against_truth(history, "split", {n.id: n.split for n in union.nodes.values()})
    if problem:
        return Verdict("quorum_safety", "fail", problem)
    accepted = sum(1 for n in union.nodes.values() if n.split)
    return Verdict("quorum_safety", "pass",
                   f"{accepted} split(s) accepted by a quorum of the roster in the union of all events, one per "
                   f"node; all {_count_shown(history, 'split')} split(s) members showed are those")


def claim_safety(history: History) -> Verdict:
    """Never two accepted results for a leaf; every result shown is the accepted one."""
    union = _union_model(history)
    leaves = [b for b in union.breaches if b.startswith("leaf")]
    if leaves:
        return Verdict("claim_safety", "fail", "; ".join(leaves[:3]))
    problem = _shown_against_truth(history, "result", {n.id: n.result for n in union.nodes.values()})
    if problem:
        return Verdict("claim_safety", "fail", problem)
    honest = {m.peer for m in history.members.values()}
    ungranted = [u for u in union.ungranted_results() if u[0].author in honest]  # a hostile peer may lie
    if ungranted:
        result, acks, quorum = ungranted[0]
        return Verdict("claim_safety", "fail",
                       f"{len(ungranted)} result(s) produced under a claim no quorum granted, e.g. {short(result.id)} "
                       f"by {short(result.author)} with {acks} ack(s) of a quorum of {quorum}: model time spent "
                       "before the claim was final")
    accepted = sum(1 for n in union.nodes.values() if n.result)
    return Verdict("claim_safety", "pass",
                   f"{accepted} result(s) accepted by a quorum, one per leaf; all {_count_shown(history, 'result')} "
                   f"result(s) members showed are those; {duplicate_executions(history)} duplicate execution(s)")


def duplicate_executions(history: History) -> int:
    """Executions beyond the first on each leaf: work done twice, whichever result counts.

    A leaf's only result is not a duplicate even while it waits for a quorum that a
    stalled run (too few scorers left) never gathers: the liveness checker judges that."""
    union = _union_model(history)
    per_leaf = Counter(r.body.leaf for r in union.results)  # type: ignore[union-attr]
    return sum(count - 1 for count in per_leaf.values())


def live_models(history: History) -> Iterable[tuple[MemberHistory, Model]]:
    models = _models(history)
    return ((m, models[m.name]) for m in history.members.values() if m.alive)
