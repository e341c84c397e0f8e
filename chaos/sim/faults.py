"""The simulated nemesis: a fault schedule drawn from the seed, before the run starts.

Each kind can be switched on or off (``swarm sim --faults``). All faults
happen inside the *fault window*; at its end the weather clears, partitions
heal, clocks settle, disks free up and crashed members restart, so the
checkers can ask for convergence and liveness after ``last_fault_at``. Only
``stop`` (a member gone for good) and an observer joining after completion
outlast the window.

Kinds: ``delay``, ``loss``, ``dup`` (the weather); ``partition`` and
``oneway`` (a cut in both directions, or in one); ``crash`` (restart from the
store), ``stop``, ``pause`` (SIGSTOP: traffic waits), ``late``; ``skew``
(a fixed offset per member), ``clock`` (jumps, strobes, offsets past the 10 s
hold bound, and a new offset after a restart); ``storeloss`` (a restart with
the store gone and the key kept), ``lostwrite`` (a crash loses what was not
fsynced), ``corrupt`` (a crash leaves a damaged page), ``diskfull`` (writes
fail for a while), ``eio`` (the disk fails every fsync for a while: the member
stops at its next one, ``agents.store.DiskFailed``, and is restarted once the
disk works, with its page cache or, half the time, without what no fsync covered);
``blackout`` (every member loses power at once and restarts without what no fsync
covered); ``slow`` (model latency); ``hostile`` (see
``chaos.sim.hostile``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FAULT_KINDS = ("delay", "loss", "dup", "partition", "crash", "stop", "late", "skew", "slow", "clock", "oneway",
               "pause", "storeloss", "lostwrite", "corrupt", "diskfull", "hostile", "eio", "blackout")


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
    action: str  # weather, clear, partition, oneway, heal, crash, restart, stop, pause, resume, clock, disk, eio
    members: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    weather: tuple[tuple[int, int], float, float] | None = None  # (delay range, loss, dup)
    value: int = 0  # clock: the member's new offset in ms; disk: 1 full, 0 free; eio: 1 failing, 0 working
    # crash: "blackout" (the power fails: whichever restart comes next finds only what an fsync covered)
    # restart: "wipe" (store lost), "unsynced" (lose what was not fsynced), "corrupt"; "eio": only a
    # member its failing disk stopped, its page cache kept; "eio-dropped": the same, with what no
    # fsync covered gone (the kernel dropped the pages its failed writeback held)
    flag: str = ""


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
            if step.action == "clock":
                what += f" {step.value:+d} ms"
            if step.action == "disk":
                what += " full" if step.value else " free"
            if step.action == "eio":
                what += " failing" if step.value else " working"
            if step.flag:
                what += f" ({step.flag})"
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

    candidates = [m for m in members if m not in stopped]
    if "crash" in kinds:
        for _ in range(rng.randint(1, 3)):
            name = rng.choice(candidates)
            down = rng.uniform(0, window_s * 0.9)
            up = min(window_s, down + rng.uniform(0.5, 20))
            steps.append(Step(round(down, 3), "crash", members=(name,)))
            steps.append(Step(round(up, 3), "restart", members=(name,)))
            if "clock" in kinds and rng.random() < 0.5:  # it comes back with another clock
                steps.append(Step(round(up, 3), "clock", members=(name,), value=rng.randint(-8000, 8000)))
    for flag in [f for f, kind in (("wipe", "storeloss"), ("unsynced", "lostwrite"), ("corrupt", "corrupt"))
                 if kind in kinds]:
        name = rng.choice(candidates)
        down = rng.uniform(0, window_s * 0.8)
        steps.append(Step(round(down, 3), "crash", members=(name,)))
        steps.append(Step(round(min(window_s, down + rng.uniform(0.5, 8)), 3), "restart", members=(name,),
                          flag=flag))
    if "pause" in kinds:
        for name in rng.sample(candidates, k=rng.randint(1, 2)):
            start = rng.uniform(0, window_s * 0.8)
            steps.append(Step(round(start, 3), "pause", members=(name,)))
            steps.append(Step(round(min(window_s, start + rng.uniform(2, 20)), 3), "resume", members=(name,)))
    if "oneway" in kinds:
        for _ in range(rng.randint(1, 2)):
            start = rng.uniform(0, window_s * 0.8)
            shuffled = members[:]
            rng.shuffle(shuffled)
            cut = rng.randint(1, len(shuffled) - 1)
            steps.append(Step(round(start, 3), "oneway",
                              groups=(tuple(sorted(shuffled[:cut])), tuple(sorted(shuffled[cut:])))))
            steps.append(Step(round(min(window_s, start + rng.uniform(2, window_s / 2)), 3), "heal"))
    if "clock" in kinds:
        for name in rng.sample(members, k=rng.randint(1, 3)):
            start = rng.uniform(0, window_s * 0.8)
            if rng.random() < 0.5:  # a jump, sometimes past the 10 s hold bound, either way
                steps.append(Step(round(start, 3), "clock", members=(name,),
                                  value=rng.choice([-1, 1]) * rng.randint(1000, 40_000)))
            else:  # a strobe: the clock flips between two offsets
                amplitude, period = rng.randint(2000, 15_000), rng.uniform(0.3, 2.0)
                t, sign = start, 1
                while t < min(window_s, start + rng.uniform(2, 10)):
                    steps.append(Step(round(t, 3), "clock", members=(name,), value=sign * amplitude))
                    t, sign = t + period, -sign
            steps.append(Step(window_s, "clock", members=(name,), value=0))  # the clock settles
    if "hostile" in kinds:
        from chaos.sim.hostile import draw_behaviours

        steps.append(Step(round(rng.uniform(1, window_s * 0.6), 3), "hostile", flag=",".join(draw_behaviours(rng))))
    if "diskfull" in kinds:
        for name in rng.sample(candidates, k=rng.randint(1, 2)):
            start = rng.uniform(0, window_s * 0.8)
            steps.append(Step(round(start, 3), "disk", members=(name,), value=1))
            steps.append(Step(round(min(window_s, start + rng.uniform(1, 10)), 3), "disk", members=(name,)))

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
    if "eio" in kinds:  # drawn last: the other kinds' draws are those of a schedule without it
        name = rng.choice(candidates)
        start = rng.uniform(0, window_s * 0.8)
        end = round(min(window_s, start + rng.uniform(1, 8)), 3)
        steps.append(Step(round(start, 3), "eio", members=(name,), value=1))
        steps.append(Step(end, "eio", members=(name,)))
        # if the failure stopped it; after a failed fsync Linux may drop the pages it could not
        # write (marked clean, then evicted), so the restart may find only what an fsync covered
        dropped = rng.random() < 0.5
        steps.append(Step(end, "restart", members=(name,), flag="eio-dropped" if dropped else "eio"))
    if "blackout" in kinds:  # drawn after eio: the other kinds' draws are those of a schedule without it
        # the power fails for every member at once (one home network, one fuse): no member keeps a
        # commit no fsync covered, so nothing lost can come back from a peer's page cache either
        # (members down already, or due to stop later, lose their page cache too: ``Slot.power_lost``)
        down = rng.uniform(0, window_s * 0.8)
        up = round(min(window_s, down + rng.uniform(0.5, 6)), 3)
        for name in members:
            steps.append(Step(round(down, 3), "crash", members=(name,), flag="blackout"))
            steps.append(Step(up, "restart", members=(name,), flag="unsynced"))
    ordered = sorted(steps, key=lambda s: (s.at, s.action, s.members, s.groups, s.value, s.flag))
    return FaultPlan(tuple(ordered), window_s, late, skew, latency, frozenset(stopped))
