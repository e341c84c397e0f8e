"""The simulated nemesis: a fault schedule drawn from the seed, before the run starts.

Each kind can be switched on or off (``swarm sim --faults``). All faults
happen inside the *fault window*; at its end the weather clears, partitions
heal and crashed members restart, so the checkers can ask for convergence and
liveness after ``last_fault_at``. Only ``stop`` (a member gone for good) and
an observer joining after completion outlast the window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FAULT_KINDS = ("delay", "loss", "dup", "partition", "crash", "stop", "late", "skew", "slow")


class FaultSpecError(ValueError):
    pass


def parse_faults(text: str) -> frozenset[str]:
    """``all``, ``none`` or a comma list of kinds (``partition,crash``)."""
    text = text.strip().lower()
    if text == "all":
        return frozenset(FAULT_KINDS)
    if text in ("none", ""):
        return frozenset()
    kinds = {k.strip() for k in text.split(",") if k.strip()}
    unknown = sorted(kinds - set(FAULT_KINDS))
    if unknown:
        raise FaultSpecError(
            f"unknown fault kind(s) {', '.join(unknown)}; choose from {', '.join(FAULT_KINDS)}, 'all' or 'none'"
        )
    return frozenset(kinds)


@dataclass(frozen=True)
class Step:
    at: float
    action: str  # weather, clear, partition, heal, crash, restart, stop, start
    members: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    weather: tuple[tuple[int, int], float, float] | None = None  # (delay range, loss, dup)


@dataclass(frozen=True)
class FaultPlan:
    steps: tuple[Step, ...]
    window_s: float
    late: dict[str, float] = field(default_factory=dict)  # member -> start time; inf = after completion
    skew_ms: dict[str, int] = field(default_factory=dict)
    latency_s: dict[str, float] = field(default_factory=dict)  # mean model latency per member
    stopped: frozenset[str] = frozenset()

    def describe(self) -> list[str]:
        lines = []
        for name, at in sorted(self.late.items()):
            lines.append(f"late start: {name} at {'completion' if at == float('inf') else f'{at:.1f}s'}")
        for name, skew in sorted(self.skew_ms.items()):
            if skew:
                lines.append(f"clock skew: {name} {skew:+d} ms")
        for name, lat in sorted(self.latency_s.items()):
            lines.append(f"model latency: {name} {lat:.2f}s mean")
        for step in self.steps:
            what = step.action
            if step.members:
                what += " " + ",".join(step.members)
            if step.groups:
                what += " " + " | ".join(",".join(g) for g in step.groups)
            if step.weather:
                (low, high), loss, dup = step.weather
                what += f" delay {low}-{high}ms loss {loss:.0%} dup {dup:.0%}"
            lines.append(f"{step.at:7.2f}s {what}")
        return lines


def draw_plan(rng: random.Random, members: list[str], kinds: frozenset[str], window_s: float,
              model_latency_s: float = 2.0) -> FaultPlan:
    """Draw the schedule. ``members`` excludes the client; order matters (it is the draw order)."""
    if not kinds:
        return FaultPlan((), 0.0, {}, {m: 0 for m in members}, {m: model_latency_s for m in members})
    steps: list[Step] = []
    normal = ((1, 30), 0.0, 0.0)
    if kinds & {"delay", "loss", "dup"}:
        at = rng.uniform(0, window_s / 4)
        while at < window_s:
            delay = (rng.choice([(1, 30), (50, 400), (200, 2000)]) if "delay" in kinds else (1, 30))
            loss = rng.choice([0.0, 0.05, 0.2, 0.5]) if "loss" in kinds else 0.0
            dup = rng.choice([0.0, 0.1, 0.3]) if "dup" in kinds else 0.0
            steps.append(Step(round(at, 3), "weather", weather=(delay, loss, dup)))
            at += rng.uniform(3, window_s / 3)
    steps.append(Step(window_s, "clear", weather=normal))

    if "partition" in kinds:
        for _ in range(rng.randint(1, 3)):
            start = rng.uniform(0, window_s * 0.8)
            end = min(window_s, start + rng.uniform(2, window_s / 2))
            shuffled = members[:]
            rng.shuffle(shuffled)
            cuts = sorted(rng.sample(range(1, len(shuffled)), k=min(len(shuffled) - 1, rng.randint(1, 2))))
            groups, last = [], 0
            for cut in [*cuts, len(shuffled)]:
                groups.append(tuple(sorted(shuffled[last:cut])))
                last = cut
            steps.append(Step(round(start, 3), "partition", groups=tuple(groups)))
            steps.append(Step(round(end, 3), "heal"))

    stopped: set[str] = set()
    if "stop" in kinds and rng.random() < 0.5:
        victims = rng.sample(members, k=rng.choice([1, 1, 2]))
        for name in victims:
            steps.append(Step(round(rng.uniform(0, window_s), 3), "stop", members=(name,)))
        stopped.update(victims)

    if "crash" in kinds:
        candidates = [m for m in members if m not in stopped]
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(candidates)
            down = rng.uniform(0, window_s * 0.9)
            up = min(window_s, down + rng.uniform(0.5, 20))
            steps.append(Step(round(down, 3), "crash", members=(name,)))
            steps.append(Step(round(up, 3), "restart", members=(name,)))

    late: dict[str, float] = {}
    if "late" in kinds:
        observers = [m for m in members if m.startswith("observer")]
        if observers and rng.random() < 0.5:
            late[observers[0]] = float("inf")  # joins after the plan is complete
        others = [m for m in members if m not in stopped and m not in late]
        for name in rng.sample(others, k=rng.randint(0, 2)):
            late[name] = round(rng.uniform(1, window_s), 3)

    skew = {m: (rng.randint(-4000, 4000) if "skew" in kinds else 0) for m in members}
    latency = {m: model_latency_s * (rng.choice([0.25, 1.0, 1.0, 2.0, 4.0]) if "slow" in kinds else 1.0)
               for m in members}
    ordered = sorted(steps, key=lambda s: (s.at, s.action, s.members, s.groups))
    return FaultPlan(tuple(ordered), window_s, late, skew, latency, frozenset(stopped))
