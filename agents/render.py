"""How a plan looks to people and programs: the text tree, plan.json and plan.md.

``plan_json`` is a contract other tools read (the lab, the tests, users'
scripts): keys are only ever added, never renamed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.core.clock import ts_list
from agents.core.tree import Node, PlanTree


def short(peer_id: str | None) -> str:
    return f"…{peer_id[-6:]}" if peer_id else "-"


def _line(tree: PlanTree, node: Node) -> str:
    text = f"{node.title}  [{node.status}]"
    if node.split is not None:
        proposal = tree.proposals[node.split]
        approvers = ", ".join(short(a) for a in proposal.ballots)
        text += f"  split by {proposal.strategy} ({proposal.id[:8]}, round {node.split_round}, accepted by {approvers})"
    elif not node.leaf:
        drafts = tree.drafts(node.id)
        if drafts:
            entered = tree.entered.get(node.id, {})
            text += f"  {len(drafts)} draft(s), round {max(entered.values(), default=1)}"
    if node.leaf and node.executor:
        text += f"  executor {short(node.executor)} (epoch {node.epoch})"
    return text


def render_tree(tree: PlanTree, *, outputs: bool = True) -> str:
    """The plan as an indented tree, one node per line, each leaf's result under it."""
    if not tree.goals:
        return "(no goal yet)"
    lines: list[str] = []

    def visit(node: Node, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        lines.append(prefix + branch + _line(tree, node))
        inner = prefix if top else prefix + ("    " if last else "│   ")
        if outputs and node.output:
            lines.append(inner + ("    " if not node.children else "│   ") + "→ " + node.output.replace("\n", " ")[:160])
        for i, child in enumerate(node.children):
            visit(tree.nodes[child], inner, i == len(node.children) - 1, False)

    for goal in tree.goals:
        visit(tree.nodes[goal.id], "", True, True)
    return "\n".join(lines)


def summary(tree: PlanTree, refused: int = 0, reorganisations: int | None = None,
            by_rule: Mapping[str, int] | None = None) -> str:
    leaves = tree.leaves()
    done = sum(1 for n in leaves if n.status == "done")
    parts = [
        f"digest {tree.digest}",
        f"{'complete' if tree.complete else 'incomplete'}: {done}/{len(leaves)} leaves done",
        f"{tree.events} events",
    ]
    if tree.pending:
        parts.append(f"{tree.pending} pending")
    rules = ", ".join(f"{rule} {count}" for rule, count in sorted((by_rule or {}).items()) if count)
    parts.append(f"{refused} refused" + (f" ({rules})" if rules else ""))
    if reorganisations is not None:
        parts.append(f"{reorganisations} reorganisations")
    if tree.duplicate_results:
        parts.append(f"{tree.duplicate_results} duplicate results")
    if tree.ignored:
        parts.append(f"{tree.ignored} ignored")
    if tree.equivocators:
        parts.append(f"{len(tree.equivocators)} equivocating author(s)")
    return " | ".join(parts)


def plan_json(tree: PlanTree, *, refused: int = 0, extra: dict[str, Any] | None = None,
              by_rule: Mapping[str, int] | None = None) -> dict[str, Any]:
    first = tree.goals[0] if tree.goals else None
    record: dict[str, Any] = {
        "goal": first.text if first else None,
        "goal_id": first.id if first else None,
        "complete": tree.complete,
        "digest": tree.digest,
        "quorum": first.quorum if first else None,
        "max_depth": first.max_depth if first else None,
        "claim_lease_ms": first.claim_lease_ms if first else None,
        "scorers": list(first.scorers) if first else [],
        "goals": [
            {"id": g.id, "text": g.text, "author": g.author, "quorum": g.quorum,
             "max_depth": g.max_depth, "claim_lease_ms": g.claim_lease_ms, "scorers": list(g.scorers),
             "hold_limit_ms": g.hold_limit_ms, "round_ms": g.round_ms}
            for g in tree.goals
        ],
        "nodes": [
            {"id": n.id, "parent": n.parent, "goal": n.goal, "depth": n.depth, "title": n.title,
             "description": n.description, "leaf": n.leaf, "status": n.status, "split": n.split,
             "split_round": n.split_round, "children": list(n.children), "claim": n.claim,
             "executor": n.executor, "epoch": n.epoch,
             "lease_until": ts_list(n.heartbeat.plus_ms(tree.goal_of(n).claim_lease_ms))
             if n.heartbeat is not None and n.status == "claimed" else None,
             "result": n.output, "result_event": n.result}
            for n in tree.walk()
        ],
        "proposals": [
            {"id": p.id, "node": p.node, "author": p.author, "strategy": p.strategy,
             "subgoals": list(p.subgoals), "status": p.status, "draft": p.draft_number,
             "approvals": list(p.approvals), "rejections": list(p.rejections), "score": p.score,
             "accepted_by": list(p.ballots)}
            for p in sorted(tree.proposals.values(), key=lambda p: (p.at, p.id))
        ],
        "rounds": [
            {"node": r.node, "round": r.round, "coordinator": r.coordinator, "candidate": r.candidate,
             "value": r.value, "forced": r.forced, "approvals": list(r.approvals),
             "rejections": list(r.rejections), "promised": list(r.promised)}
            for _, r in sorted(tree.rounds.items())
        ],
        "claims": [
            {"id": c.id, "leaf": c.leaf, "executor": c.executor, "at": ts_list(c.at), "epoch": c.epoch,
             "acks": list(c.acks), "status": "granted" if c.granted else "waiting"}
            for c in sorted(tree.claims.values(), key=lambda c: (c.at, c.id))
        ],
        "results": [
            {"id": r.id, "leaf": r.leaf, "claim": r.claim, "executor": r.executor, "at": ts_list(r.at),
             "status": r.status, "accepted_by": list(r.ballots)}
            for r in sorted(tree.results.values(), key=lambda r: (r.at, r.id))
        ],
        "members": [{"peer": peer, "role": role, "models": list(models)}
                    for peer, (role, models) in tree.members.items()],
        "events": tree.events,
        "pending": tree.pending,
        "refused": refused,
        "refused_by_rule": dict(sorted((by_rule or {}).items())),
        "duplicate_results": tree.duplicate_results,
        "ignored": tree.ignored,
        "equivocators": sorted(tree.equivocators),
        "feed_issues": [
            {"author": i.author, "seq": i.seq, "rule": i.rule, "detail": i.detail} for i in tree.issues
        ],
    }
    if extra:
        record.update(extra)
    return record


def plan_markdown(tree: PlanTree) -> str:
    """A readable plan: headings for subgoals, each leaf's result as its text."""
    if not tree.goals:
        return "# (no goal yet)\n"
    out: list[str] = []
    for node in tree.walk():
        if node.depth == 0:
            out.append(f"# {node.title}\n")
            out.append(f"Status: {'complete' if node.status == 'done' else node.status}. Digest `{tree.digest[:16]}`.\n")
            continue
        if node.leaf:
            out.append(f"{'#' * min(node.depth + 1, 6)} {node.title}\n")
            out.append((node.output or f"_not done yet ({node.status})_") + "\n")
        else:
            out.append(f"{'#' * min(node.depth + 1, 6)} {node.title}\n")
            if node.description:
                out.append(node.description + "\n")
    return "\n".join(out)
