"""One simulated run: every member in one trio process, on virtual time, from one seed.

The members are the real ``agents.member.Member`` (the same roles, fold, store
and sync protocol as over libp2p), each with its own SQLite store in a
scratch directory, talking through ``chaos.sim.network``. The run is a pure
function of its ``SimConfig``:

* time is trio's ``MockClock`` with autojump: nothing waits for real, and a
  member's wall clock is the virtual time plus its own skew;
* every random draw (message fate, fault schedule, keys, model answers and
  latency) comes from streams derived from the seed;
* trio shuffles each batch of runnable tasks with a module-level RNG; we seed
  it per run, so the interleaving is the same too;
* model calls run inline, never in a thread, so no real duration leaks in.

``run_seed`` returns the ``History`` the checkers judge and a trace: the
faults and every member's actions in virtual-time order.
"""

from __future__ import annotations

import math
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import trio
import trio.testing

from agents.core.admission import Credentials, Gate, issue
from agents.core.events import Event, GoalBody
from agents.member import Member
from agents.net.base import StreamClosed
from agents.store import EventStore
from agents.syncproto import SyncProtocolError, SyncRefused, peek
from chaos.history import History
from chaos.sim.faults import FaultPlan, Step, draw_plan
from chaos.sim.identities import EPOCH_MS, identity_for
from chaos.sim.network import LinkWeather, SimFabric, SimNetwork
from chaos.sim.slot import Slot

GOAL = "Plan a two-week trip to Japan"
DRAIN_S = 20.0  # the longest a stalled run's members hold still before the final read


@dataclass(frozen=True)
class SimConfig:
    seed: int
    decomposers: int = 3
    scorers: int = 3
    executors: int = 3
    observers: int = 1
    quorum: int = 2
    faults: frozenset[str] = frozenset()
    goal: str = GOAL
    window_s: float = 20.0  # faults happen inside this window
    settle_s: float = 240.0  # the run ends at the latest this long after the window
    convergence_bound_s: float = 90.0  # every live member must agree this long after the last fault
    claim_lease_ms: int = 15_000
    hold_limit_ms: int = 60_000
    round_ms: int = 10_000
    model_latency_s: float = 2.0  # mean per scripted model call, in virtual seconds
    max_depth: int = 3
    parallel: int = 1  # model calls a member may have under way at once (as with a batched model service)

    def names(self) -> list[str]:
        shape = [("decomposer", self.decomposers), ("scorer", self.scorers),
                 ("executor", self.executors), ("observer", self.observers)]
        return [f"{role}-{i}" for role, count in shape for i in range(count)]


@dataclass
class SimRun:
    config: SimConfig
    plan: FaultPlan
    history: History
    trace: list[str] = field(default_factory=list)


def _seed_trio_scheduler(seed: int) -> None:
    """Make trio's interleaving a function of the seed.

    trio shuffles each batch of runnable tasks with a module RNG, and breaks
    ties between equal deadlines by ``id()`` (a memory address). With its
    deterministic-scheduling switch (the one pytest-trio flips for Hypothesis)
    it sorts each batch by task creation order before shuffling, which removes
    the address; we then seed the shuffle. Private API: a test pins it."""
    run_module = trio._core._run  # type: ignore[attr-defined]
    run_module._ALLOW_DETERMINISTIC_SCHEDULING = True
    run_module._r.seed(f"swarm-sim/{seed}/scheduler")


class World:
    def __init__(self, config: SimConfig, plan: FaultPlan, scratch: Path) -> None:
        self.config = config
        self.plan = plan
        self.scratch = scratch
        self.cluster = f"sim-{config.seed}"
        self.trace: list[str] = []
        self.history = History(
            scenario="sim", seed=config.seed,
            shape={"decomposer": config.decomposers, "scorer": config.scorers,
                   "executor": config.executors, "observer": config.observers},
            quorum=config.quorum, convergence_bound_s=config.convergence_bound_s,
        )
        self.slots: dict[str, Slot] = {}
        self._names: dict[str, str] = {}  # peer id suffix -> member name
        self.authority = identity_for(config.seed, "authority", 0)
        self.admitted: set[str] = set()
        self.history.admitted = self.admitted
        self.nursery: trio.Nursery
        self.fabric: SimFabric
        self._hostiles: list[trio.CancelScope] = []  # the nemesis's hostile peers, stopped for the drain

    def now(self) -> float:
        return trio.current_time()

    def credentials(self, identity, role: str) -> Credentials:
        """The cluster's authority admits every member of the run (and the client)."""
        self.admitted.add(identity.peer_id)
        return Credentials(identity, issue(self.authority, self.cluster, identity.peer_id, role),
                           Gate(self.cluster, self.authority.peer_id))

    def say(self, who: str, line: str) -> None:
        if " from " in line:  # members name peers by id suffix; the trace names them
            head, _, peer = line.rpartition(" from ")
            line = f"{head} from {self._names.get(peer, peer)}"
        self.trace.append(f"{self.now():9.3f}s {who:<13} {line}")

    def fault(self, kind: str, detail: str = "") -> None:
        self.history.fault(self.now(), kind, detail)
        self.say("nemesis", f"{kind} {detail}".rstrip())

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self.fabric = SimFabric(random.Random(f"swarm-sim/{self.config.seed}/net"), nursery)
            for name in self.config.names():
                self.slots[name] = Slot(self, name)
                self._names[self.slots[name].identity.peer_id[-8:]] = name
                self.slots[name].record.late = name in self.plan.late
            for name, slot in self.slots.items():
                if name not in self.plan.late:
                    await slot.start()
            await self._submit_goal()
            nursery.start_soon(self._nemesis)
            await self._watch()
            nursery.cancel_scope.cancel()
        for slot in self.slots.values():
            if slot.state == "up":
                slot.record.events = slot.member.index.events()  # type: ignore[union-attr]
            slot.record.alive = slot.state == "up"
            if slot.member is not None:
                slot.record.digest = slot.member.tree.digest
                slot.record.complete = slot.member.tree.complete
                slot.record.model_calls = slot.model_calls + slot.member.stats.model_calls
                slot.record.refused = dict(slot.member.intake.refused)
                slot.record.held = slot.member.intake.held
                slot.record.sync_refused = slot.member.stats.sync_refused
                slot.record.sync_timeouts = slot.member.stats.sync_timeouts
                slot.record.mute = slot.member.mute
            self.history.members[slot.name] = slot.record

    async def _submit_goal(self) -> None:
        """A client signs the goal, gossips it, and leaves once three members say they hold it,
        asked as ``swarm submit`` asks (the summary a member serves: listed there, the goal is
        on its disk; ``swarm submit`` waits for two by default, and three keep two lost stores
        from losing it). Who said so, and when, is in the history: ``durability`` holds them to it."""
        client_dir = self.scratch / "client"
        identity = identity_for(self.config.seed, "client", 0)
        store = EventStore.open(client_dir)
        self._names[identity.peer_id[-8:]] = "client"
        network = self.fabric.endpoint(identity.peer_id)
        client = Member(self.credentials(identity, "client"), store, network, now_ms=lambda: EPOCH_MS + int(
            trio.current_time() * 1000), think_in_thread=False, store_in_thread=False, trace=lambda line: self.say("client", line))
        roster = tuple(sorted(s.identity.peer_id for s in self.slots.values() if s.role == "scorer"))
        goal_id: list[str] = []

        async def live(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                try:
                    async with trio.open_nursery() as inner:
                        network.attach(inner)
                        await inner.start(client.run)
                        self.fabric.bring_up(network)
                        event = await client.publish(GoalBody(
                            text=self.config.goal, scorers=roster, quorum=self.config.quorum,
                            max_depth=self.config.max_depth, claim_lease_ms=self.config.claim_lease_ms,
                            hold_limit_ms=self.config.hold_limit_ms, round_ms=self.config.round_ms))
                        goal_id.append(event.id)
                        self.history.goal = event.id
                        task_status.started()
                        while len(self.history.goal_held_by) < 3:
                            for slot in self.slots.values():
                                if slot.state == "up" and slot.name not in self.history.goal_held_by \
                                        and await self._holds(network, client, slot, event):
                                    self.history.goal_held_by[slot.name] = round(self.now(), 3)
                            await trio.sleep(0.5)
                        self.say("client", "goal held by three members; leaving")
                        self.fabric.take_down(identity.peer_id)
                        scope.cancel()
                finally:
                    store.close()

        await self.nursery.start(live)

    @staticmethod
    async def _holds(network: SimNetwork, client: Member, slot: Slot, goal: Event) -> bool:
        """Whether ``slot``'s member says it holds ``goal``: its served summary lists it."""
        with trio.move_on_after(5):  # a paused member answers nothing
            try:
                stream = await network.open_stream(slot.identity.peer_id)
                _role, theirs = await peek(stream, client.index, client.credentials)
                await stream.aclose()
            except (StreamClosed, SyncRefused, SyncProtocolError):  # down, cut off, starting
                return False
            return theirs.holds_through(goal)
        return False

    async def _nemesis(self) -> None:
        for step in self.plan.steps:
            await trio.sleep_until(step.at)
            await self._apply(step)
        self.history.last_fault_at = max(self.history.last_fault_at, self.plan.window_s)

    async def _late_starts(self) -> None:
        for name, at in sorted((kv for kv in self.plan.late.items() if math.isfinite(kv[1])), key=lambda kv: kv[1]):
            await trio.sleep_until(at)
            slot = self.slots[name]
            if slot.state == "pending":
                self.fault("start", f"{name} (late)")
                slot.record.started_at = self.now()
                await slot.start()

    async def _apply(self, step: Step) -> None:
        if step.action in ("weather", "clear"):
            assert step.weather is not None
            delay, loss, dup = step.weather
            self.fabric.weather = LinkWeather(delay, loss, dup)
            self.fault(step.action, f"delay {delay[0]}-{delay[1]}ms loss {loss:.0%} dup {dup:.0%}")
        elif step.action == "partition":
            if self.fabric.cut == "oneway":
                self.fault("heal", "(the one-way cut ends: a partition replaces it)")
            self.fabric.partition([[self.slots[n].identity.peer_id for n in g] for g in step.groups])
            self.fault("partition", " | ".join(",".join(g) for g in step.groups))
        elif step.action == "heal":
            self.fabric.heal()
            self.fault("heal")
        elif step.action in ("crash", "stop"):
            slot = self.slots[step.members[0]]
            if step.flag == "blackout" and slot.state in ("up", "paused", "down"):
                slot.power_lost = True  # a member down already loses its page cache too
            if slot.state in ("up", "paused"):
                self.fabric.resume(slot.identity.peer_id)
                slot.down("down" if step.action == "crash" else "stopped")
                self.fault(step.action, slot.name)
            elif slot.state == "pending" and step.action == "stop":
                slot.state = "stopped"
                self.fault("stop", f"{slot.name} (never started)")
        elif step.action == "restart":
            slot = self.slots[step.members[0]]
            if step.flag.startswith("eio") and slot.state == "down" and slot.stopped_by_disk:
                dropped = step.flag == "eio-dropped"
                self.fault("restart", f"{slot.name} (its disk works again"
                                      + ("; what no fsync covered is gone)" if dropped else ")"))
                await slot.start("unsynced" if dropped else "")
            elif slot.state == "down" and not step.flag.startswith("eio"):
                self.fault("restart", f"{slot.name} ({step.flag})" if step.flag else slot.name)
                await slot.start(step.flag)
        elif step.action == "oneway":
            senders, receivers = step.groups
            if self.fabric.cut == "partition":
                self.fault("heal", "(the partition ends: a one-way cut replaces it)")
            self.fabric.one_way([self.slots[n].identity.peer_id for n in senders],
                                [self.slots[n].identity.peer_id for n in receivers])
            self.fault("oneway", f"{','.join(senders)} -> {','.join(receivers)} lost")
        elif step.action in ("pause", "resume"):
            slot = self.slots[step.members[0]]
            if step.action == "pause" and slot.state == "up":
                self.fabric.pause(slot.identity.peer_id)
                slot.state = "paused"
                self.fault("pause", slot.name)
            elif step.action == "resume" and slot.state == "paused":
                self.fabric.resume(slot.identity.peer_id)
                slot.state = "up"
                self.fault("resume", slot.name)
        elif step.action == "clock":
            slot = self.slots[step.members[0]]
            if slot.clock_ms != step.value:
                slot.clock_ms = step.value
                self.fault("clock", f"{slot.name} {step.value:+d} ms")
        elif step.action == "hostile":
            from chaos.sim.hostile import Hostile

            behaviours = tuple(step.flag.split(","))
            self.history.hostile = behaviours
            self.fault("hostile", step.flag)
            hostile = Hostile(self.fabric, self.cluster, self.authority, self.config.seed, behaviours,
                              now_ms=lambda: EPOCH_MS + int(trio.current_time() * 1000), tree=self._some_tree,
                              say=lambda line: self.say("hostile", line), admitted=self.admitted)
            self.nursery.start_soon(self._hostile, hostile)
        elif step.action == "disk":
            slot = self.slots[step.members[0]]
            if slot.store is not None and slot.state in ("up", "paused"):
                slot.store.full = bool(step.value)  # type: ignore[attr-defined]
                self.fault("disk", f"{slot.name} {'full' if step.value else 'free'}")
        elif step.action == "eio":
            slot = self.slots[step.members[0]]
            if slot.store is not None and slot.state in ("up", "paused"):
                slot.store.failing = bool(step.value)  # type: ignore[attr-defined]
                slot.disk_failing_since = self.now() if step.value else slot.disk_failing_since
                self.fault("disk", f"{slot.name} {'failing' if step.value else 'working'}")

    async def _hostile(self, hostile) -> None:
        with trio.CancelScope() as scope:
            self._hostiles.append(scope)
            await hostile.run()

    def _some_tree(self):
        """The plan as an honest member that is up sees it (the hostile peer reads it to aim)."""
        for slot in self.slots.values():
            if slot.state == "up" and slot.member is not None:
                return slot.member.tree
        from agents.core.fold import fold

        return fold([])

    async def _watch(self) -> None:
        """Sample digests; end when every live member agrees on a complete plan after the
        faults and holds the same events with none held back, or when the settle bound has passed."""
        self.nursery.start_soon(self._late_starts)
        deadline = self.plan.window_s + self.config.settle_s
        while self.now() < deadline:
            await trio.sleep(0.5)
            up = self._sample()
            waiting_late = [s for s in self.slots.values() if s.state == "pending"]
            if any(s.member.tree.complete for s in up):  # type: ignore[union-attr]
                for slot in waiting_late:
                    if self.plan.late.get(slot.name) == float("inf"):
                        self.fault("start", f"{slot.name} (after completion)")
                        slot.record.started_at = self.now()
                        await slot.start()
            if self.now() < self.plan.window_s or any(s.state in ("pending", "down", "paused")
                                                      for s in self.slots.values()):
                continue
            if self._agreed(complete=True):
                self.history.converged_at = round(self.now(), 3)
                break
        else:
            await self._drain()
        self.history.ended_at = round(self.now(), 3)
        self.say("world", f"run ends; gossip copies delivered "
                 f"{self.fabric.delivered}, lost {self.fabric.lost}, duplicated {self.fabric.duplicated}")

    def _sample(self) -> list[Slot]:
        """Record each member that is up: its digest, and the moment it first sees the plan
        complete. Returns those members."""
        up = [s for s in self.slots.values() if s.state == "up"]
        for slot in up:
            tree = slot.member.tree  # type: ignore[union-attr]
            self.history.sample(self.now(), slot.name, tree.digest)
            if tree.complete and slot.record.completed_at is None:
                slot.record.completed_at = round(self.now(), 3)
                self.say(slot.name, f"sees the plan complete, digest {tree.digest[:12]}")
        return up

    def _agreed(self, complete: bool) -> bool:
        """Every member that is up (late starters included) shows one digest and holds the same
        events with none held back; with ``complete``, of a complete plan."""
        members = [s.member for s in self.slots.values() if s.state == "up" and s.member is not None]
        return (len({m.tree.digest for m in members}) == 1
                and len({frozenset(e.id for e in m.index.events()) for m in members}) == 1
                and not any(m.intake.held for m in members)
                and (not complete or all(m.tree.complete for m in members)))

    async def _drain(self) -> None:
        """The run reached its ceiling without converging (a stall): before the final read,
        every member holds still and the hostile peers stop, while gossip and sync go on for
        up to ``DRAIN_S``. The read then judges replication, not events that were in flight
        at the cut (seed 2521 ended 0.6 s after a vote that one member had not yet received).
        A copy that sync cannot repair in that time (a member skipped by sync) still differs."""
        self.say("world", f"ceiling reached without convergence; members hold still for up to {DRAIN_S:.0f}s")
        self.history.drained_from = round(self.now(), 3)
        for scope in self._hostiles:
            scope.cancel()
        for slot in self.slots.values():
            if slot.member is not None:
                slot.member.hold_still()
        ends = self.now() + DRAIN_S
        while self.now() < ends and not self._agreed(complete=False):
            await trio.sleep(0.5)
            self._sample()
        if self._agreed(complete=True):  # what was in flight completed the plan
            self.history.converged_at = round(self.now(), 3)


def run_seed(config: SimConfig, scratch_root: Path | None = None) -> SimRun:
    """Run one seed to its end and return the history and trace. Deterministic in ``config``."""
    names = config.names()
    plan = draw_plan(random.Random(f"swarm-sim/{config.seed}/faults"), names, config.faults, config.window_s,
                      config.model_latency_s)
    scratch = Path(tempfile.mkdtemp(prefix=f"swarm-sim-{config.seed}-", dir=scratch_root or _fast_tmp()))
    world = World(config, plan, scratch)
    for line in plan.describe():
        world.trace.append(f"{'plan':>10} {line}")
    try:
        _seed_trio_scheduler(config.seed)
        trio.run(world.run, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SimRun(config, plan, world.history, world.trace)


def _fast_tmp() -> str | None:
    """Stores live in RAM when the machine has /dev/shm: a run fsyncs often."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


__all__ = ["EPOCH_MS", "GOAL", "SimConfig", "SimRun", "identity_for", "run_seed"]
