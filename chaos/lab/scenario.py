"""Scenario files: the cluster shape, the fault timeline, the model and the expectations.

A scenario is YAML (see ``scenarios/*.yaml``)::

    name: two-thirds-partition
    description: ...
    cluster: {decomposers: 3, scorers: 3, executors: 3, observer: true,
              skew_ms: {executor-2: 3000}, toxiproxy: [executor-1], late: [observer-1]}
    goal: Plan a two-week trip to Japan          # optional; this is the default
    quorum: 2
    claim_lease_s: 20
    llm: {backend: scripted, latency_s: 2.0}
    timeline:                                     # times in seconds after the goal
      - {at: 2, partition: [[decomposer-1, scorer-1, executor-1], rest]}
      - {at: [10, 20], heal: true}                # a range: drawn from the seed
      - {at: 3, kill: any executor}               # a target: a name, "any ROLE", or
      - {at: 3, kill: claim holder}               #   the executor holding a claim
      - {at: 30, restart: decomposer-1}
      - {at: complete, start: observer-1}         # when the plan is complete
    expect:
      complete_within_s: 180                      # after the last fault
      invariants: [convergence, quorum_safety, claim_safety, liveness, late_join, durability]

Actions: kill, stop, pause, unpause, restart/start, partition, heal, loss
({member, probability}), bandwidth ({member, rate}), toxic ({member, type,
attributes, stream}), untoxic, restart_all (kill every member, then start them
all from their volumes), disk_fails (from then on every fsync of the member fails
with EIO, ``chaos.lab.disk``: it must stop by itself; a later restart replaces the
disk and keeps the store), disk_full and disk_free (every write of the member to a
file fails with ENOSPC, until disk_free: it must go on running, refusing what it cannot
store, and catch up once there is room; a member's name or ``claim holder``, and a disk
still full when the timeline ends is freed then). ``at`` may be ``complete`` (when a member first sees
the plan complete). Same seed, same drawn schedule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chaos.checkers import CHECKERS

ACTIONS = ("kill", "stop", "pause", "unpause", "restart", "start", "partition", "oneway", "wipe", "hostile", "heal", "loss",
           "bandwidth", "toxic", "untoxic", "restart_all", "disk_fails", "disk_full", "disk_free")
ROLES = ("decomposer", "scorer", "executor", "observer")


class ScenarioError(ValueError):
    """A scenario file that cannot run; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class Step:
    at: float | str  # seconds after submit, or "complete"
    action: str
    target: Any


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    path: Path
    shape: dict[str, int]
    observer: bool
    skew_ms: dict[str, int]
    toxiproxy: tuple[str, ...]
    late: tuple[str, ...]
    goal: str
    quorum: int
    claim_lease_s: float
    round_s: float
    llm: str
    llm_latency_s: float
    timeline: tuple[Step, ...]
    complete_within_s: float
    invariants: tuple[str, ...]
    seed: int = 0
    notes: dict[str, Any] = field(default_factory=dict)

    def member_names(self) -> list[str]:
        names = [f"{role}-{i}" for role in ("decomposer", "scorer", "executor")
                 for i in range(1, self.shape[role] + 1)]
        return names + (["observer-1"] if self.observer else [])

    def role_of(self, name: str) -> str:
        return name.rsplit("-", 1)[0]


def _fail(path: Path, what: str) -> ScenarioError:
    return ScenarioError(f"{path}: {what}")


def load(path: Path, seed: int = 0) -> Scenario:
    """Read and check a scenario, drawing its random times with ``seed``."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file (they live in scenarios/)") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise _fail(path, "expected a mapping with name, cluster, timeline and expect")
    rng = random.Random(f"swarm-lab/{data.get('name')}/{seed}")
    cluster = data.get("cluster") or {}
    shape = {role: int(cluster.get(f"{role}s", 3)) for role in ("decomposer", "scorer", "executor")}
    if min(shape.values()) < 1:
        raise _fail(path, "cluster needs at least one decomposer, scorer and executor")
    quorum = int(data.get("quorum", 2))
    if quorum > shape["scorer"]:
        raise _fail(path, f"quorum {quorum} can never be reached by {shape['scorer']} scorers")
    if 2 * quorum <= shape["scorer"]:
        raise _fail(path, f"quorum {quorum} is not a majority of {shape['scorer']} scorers: two quorums could "
                          "decide differently; raise it")
    llm = data.get("llm") or {}
    scenario = Scenario(
        name=str(data.get("name") or path.stem),
        description=str(data.get("description", "")).strip(),
        path=path,
        shape=shape,
        observer=bool(cluster.get("observer", True)),
        skew_ms={str(k): int(v) for k, v in (cluster.get("skew_ms") or {}).items()},
        toxiproxy=tuple(cluster.get("toxiproxy") or ()),
        late=tuple(cluster.get("late") or ()),
        goal=str(data.get("goal", "Plan a two-week trip to Japan")),
        quorum=quorum,
        claim_lease_s=float(data.get("claim_lease_s", 20)),
        round_s=float(data.get("round_s", 8)),
        llm=str(llm.get("backend", "scripted")),
        llm_latency_s=float(llm.get("latency_s", 1.0)),
        timeline=(),
        complete_within_s=float((data.get("expect") or {}).get("complete_within_s", 180)),
        invariants=tuple((data.get("expect") or {}).get("invariants") or CHECKERS),
        seed=seed,
    )
    unknown = sorted(set(scenario.invariants) - set(CHECKERS))
    if unknown:
        raise _fail(path, f"unknown invariant(s) {', '.join(unknown)}; known: {', '.join(CHECKERS)}")
    names = scenario.member_names()
    for name in [*scenario.skew_ms, *scenario.toxiproxy, *scenario.late]:
        if name not in names:
            raise _fail(path, f"cluster names {name!r}, which is not a member (members: {', '.join(names)})")
    steps = []
    for number, raw in enumerate(data.get("timeline") or [], start=1):
        steps.append(_step(path, number, raw, names, rng))
    timed = sorted((s for s in steps if isinstance(s.at, float)), key=lambda s: s.at)
    timeline = tuple(timed + [s for s in steps if s.at == "complete"])
    _check_full_disks(path, timeline)
    return Scenario(**{**scenario.__dict__, "timeline": timeline})


def _check_full_disks(path: Path, timeline: tuple[Step, ...]) -> None:
    """A disk_free follows a disk_full of the same target, and a full disk is not filled again
    before it is freed (the lab would otherwise stop mid-run; a disk the timeline leaves full
    is freed, and judged, when the timeline ends)."""
    full: set[str] = set()
    for step in timeline:
        when = f"at {step.at}" if step.at == "complete" else f"at {step.at:g} s"
        if step.action == "disk_full":
            if step.target in full:
                raise _fail(path, f"the disk_full of {step.target} {when} fills a disk already full: put a "
                                  f"disk_free of {step.target} before it, or drop it")
            full.add(step.target)
        elif step.action == "disk_free":
            if step.target not in full:
                raise _fail(path, f"the disk_free of {step.target} {when} frees a disk no disk_full before it "
                                  f"filled: add a disk_full of {step.target} earlier, or drop it")
            full.discard(step.target)


def _step(path: Path, number: int, raw: Any, names: list[str], rng: random.Random) -> Step:
    where = f"timeline step {number}"
    if not isinstance(raw, dict) or "at" not in raw:
        raise _fail(path, f"{where}: expected a mapping with 'at' and one action ({', '.join(ACTIONS)})")
    actions = [k for k in raw if k != "at"]
    if len(actions) != 1 or actions[0] not in ACTIONS:
        raise _fail(path, f"{where}: expected exactly one action of {', '.join(ACTIONS)}, found {actions}")
    action = actions[0]
    at_raw = raw["at"]
    if at_raw == "complete":
        at: float | str = "complete"
    elif isinstance(at_raw, (int, float)):
        at = float(at_raw)
    elif isinstance(at_raw, list) and len(at_raw) == 2:
        at = round(rng.uniform(float(at_raw[0]), float(at_raw[1])), 2)
    else:
        raise _fail(path, f"{where}: 'at' must be seconds, [low, high] or 'complete', found {at_raw!r}")
    target = raw[action]
    if action == "oneway":
        if not (isinstance(target, list) and len(target) == 2 and all(isinstance(g, list) for g in target)):
            raise _fail(path, f"{where}: oneway takes [senders, receivers]: what senders send receivers is lost")
        target = [[_member(path, where, n, names, rng) for n in g] for g in target]
    elif action == "partition":
        if not isinstance(target, list) or not all(isinstance(g, (list, str)) for g in target):
            raise _fail(path, f"{where}: partition takes a list of groups (lists of members, or 'rest')")
        named = [n for g in target if isinstance(g, list) for n in g]
        groups = [[_member(path, where, n, names, rng) for n in g] if isinstance(g, list)
                  else [n for n in names if n not in named] for g in target]
        target = groups
    elif action in ("kill", "stop", "pause", "unpause", "restart", "start", "untoxic", "wipe", "disk_fails",
                    "disk_full", "disk_free"):
        if action in ("disk_full", "disk_free") and isinstance(target, str) and target.startswith("any "):
            # each "any ROLE" is drawn on its own: a disk_free's draw need not be its disk_full's member
            raise _fail(path, f"{where}: {action} takes a member's name or 'claim holder', not {target!r} "
                              "(drawn anew at each step, a full disk and its freeing could name two members)")
        target = _member(path, where, target, names, rng)
    elif action == "hostile":
        if not isinstance(target, (int, float)) or target <= 0:
            raise _fail(path, f"{where}: hostile takes the seconds the hostile peer attacks for")
        target = float(target)
    elif action in ("loss", "bandwidth", "toxic"):
        if not isinstance(target, dict) or "member" not in target:
            raise _fail(path, f"{where}: {action} takes a mapping with 'member' and its settings")
        target = {**target, "member": _member(path, where, target["member"], names, rng)}
    return Step(at, action, target)


def _member(path: Path, where: str, target: Any, names: list[str], rng: random.Random) -> str:
    """A member name; "any ROLE" is drawn from the seed; "claim holder" is resolved when it runs."""
    if target == "claim holder":
        return target
    if isinstance(target, str) and target.startswith("any "):
        role = target[4:]
        pool = [n for n in names if n.rsplit("-", 1)[0] == role]
        if not pool:
            raise _fail(path, f"{where}: no member has role {role!r}")
        return rng.choice(pool)
    if target not in names:
        raise _fail(path, f"{where}: {target!r} is not a member (members: {', '.join(names)}; "
                          "or 'any ROLE', 'claim holder')")
    return str(target)
