"""One simulated member's life: started, crashed (its files kept as at the kill), restarted
from its store (maybe wiped, corrupted or missing what was never fsynced), paused, stopped.

``SimStore`` is the real SQLite store whose disk the nemesis can fill.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from agents.llm.scripted import STRATEGIES, ScriptedBackend
from agents.member import Member
from agents.store import DiskFailed, EventStore, StoreError
from agents.store.sqlite import DB_NAME
from chaos.history import DiskFailure, MemberHistory, Restart, Shown
from chaos.sim.identities import EPOCH_MS, identity_for
from chaos.sim.network import SimNetwork

if TYPE_CHECKING:
    from chaos.sim.world import World


class SimStore(EventStore):
    """The real SQLite store, whose disk the nemesis can fill (writes then fail), and which
    keeps what its disk holds for sure: its files as they were at the last fsync (``durable``),
    what a power cut leaves (``lostwrite``)."""

    full = False
    failing = False  # every fsync fails (``eio``): a commit that waits for one is written, then refused

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # what it found at open: the killed life's commits, all kept (a kill leaves the page
        # cache), and fsynced by the member before it shows them
        self.durable = self.image()

    def add_many(self, events, durable: bool = True) -> int:
        if self.full:
            events = list(events)
            if events:
                raise StoreError(f"cannot write to {self.path}: database or disk is full (simulated)")
        if self.failing and durable:  # as SQLite's own fsync failing: the commit may be in the log
            super().add_many(events, durable=False)
            raise self._failing(f"the disk under {self.path} failed an fsync (simulated); the member stops")
        return super().add_many(events, durable)

    def _fsync_log(self, commits: int | None = None) -> None:
        if self.failing:
            with self._lock:
                raise self._failing(f"cannot flush the log of {self.path} to its disk (simulated); the member stops")
        super()._fsync_log(commits)

    def _synced(self) -> None:
        super()._synced()
        self.durable = self.image()

    def image(self) -> dict[str, bytes]:
        """The store's files as they are now (``restore_image`` puts them back)."""
        return {path.name: path.read_bytes() for path in store_files(self.path.parent) if path.exists()}


def store_files(data_dir: Path) -> list[Path]:
    """A store's files: the database, its write-ahead log and the log's index."""
    return [data_dir / f"{DB_NAME}{suffix}" for suffix in ("", "-wal", "-shm")]


def restore_image(data_dir: Path, image: dict[str, bytes]) -> None:
    """The store's files exactly as ``SimStore.image`` took them (none that it did not hold)."""
    for path in store_files(data_dir):
        path.unlink(missing_ok=True)
    for name, data in image.items():
        (data_dir / name).write_bytes(data)


def _corrupt(path: Path, rng: random.Random) -> None:
    """Overwrite a page of a SQLite file with garbage, as a torn write or a bad sector would."""
    size = path.stat().st_size
    if size < 4096:
        return
    with open(path, "r+b") as handle:
        page = rng.randrange(0, size // 4096)
        handle.seek(page * 4096)
        handle.write(bytes(rng.getrandbits(8) for _ in range(4096)))


class Slot:
    """One member's life in the run: started, crashed, restarted, stopped."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.role = name.rsplit("-", 1)[0]
        index = int(name.rsplit("-", 1)[1])
        self.identity = identity_for(world.config.seed, self.role, index)
        self.strategy = STRATEGIES[index % len(STRATEGIES)]
        self.data_dir = world.scratch / name
        self.skew_ms = world.plan.skew_ms.get(name, 0)
        # Scorers of differing strictness, so splits are sometimes approved by only some of
        # them: without dissent a quorum rule cannot be told from a weaker one.
        strictness = random.Random(f"swarm-sim/{world.config.seed}/strict/{name}").choice([9, 11, 12, 13])
        self.backend = ScriptedBackend(seed=world.config.seed * 1000 + len(world.slots),
                                       latency=world.plan.latency_s[name], strictness=strictness,
                                       parallel=world.config.parallel)
        self.state = "pending"  # pending, up, down, stopped, paused
        self.model_calls = 0  # by the member's earlier lives (before restarts)
        self.clock_ms = 0  # the nemesis's extra offset (jumps, strobes) on top of its skew
        self.crash_image: dict[str, bytes] = {}  # the store's files as they were at the kill
        self.durable_image: dict[str, bytes] = {}  # and as they were at its last fsync
        # the events it held at the kill: a task of the killed member that was already runnable
        # may still store one before the cancellation reaches it (seed 2679), but that write is
        # not in the crash image, and it was never acknowledged by the process that died
        self.held_at_kill: frozenset[str] = frozenset()
        self.member: Member | None = None
        self.stopped_by_disk = False  # down because its disk failed (``eio``), not by the nemesis
        # the power failed while it was up or down (``blackout``): its next start, whatever restarts
        # it, finds only what an fsync covered
        self.power_lost = False
        self.disk_failing_since = 0.0  # when the nemesis last made its disk fail
        self._life: object | None = None  # the member's present life: what it shows is recorded
        self.scope: trio.CancelScope | None = None
        self.store: EventStore | None = None
        self.record = MemberHistory(name, self.role, self.identity.peer_id)

    def now_ms(self) -> int:
        return EPOCH_MS + int(trio.current_time() * 1000) + self.skew_ms + self.clock_ms

    def _damage(self, flag: str) -> None:
        """What a crash did to the store, applied before it is opened again (a power cut,
        "unsynced", is which image ``start`` puts back)."""
        files = store_files(self.data_dir)
        if flag == "wipe":
            restore_image(self.data_dir, {})
        elif flag == "corrupt":
            rng = random.Random(f"swarm-sim/{self.world.config.seed}/corrupt/{self.name}")
            for path in files[:2]:
                if path.exists():
                    _corrupt(path, rng)

    async def start(self, flag: str = "") -> None:
        self.stopped_by_disk = False
        held_before = self.held_at_kill
        power_cut = flag == "unsynced" or (self.power_lost and self.state == "down")
        self.power_lost = False
        if self.state == "down":
            # a killed process never closes its store (closing would checkpoint the log into
            # the database): the disk holds exactly what it held at the kill, or after a power
            # cut what its last fsync covered
            restore_image(self.data_dir, self.durable_image if power_cut else self.crash_image)
            if flag:
                self._damage(flag)
        error = ""
        try:
            self.store = SimStore.open(self.data_dir)
            self.store.events()  # a damaged event refuses to decode
        except StoreError as exc:
            # what the store tells an operator to do: move it aside, the swarm syncs it back
            error = str(exc).replace(str(self.data_dir.parent), "RUN")  # no scratch path in a trace
            for path in self.data_dir.glob(f"{DB_NAME}*"):
                path.rename(path.with_name(path.name + ".damaged"))
            self.store = SimStore.open(self.data_dir)
        if self.state == "down":
            after = {e.id for e in self.store.events()}
            lost = tuple(sorted(held_before - after))
            fault = flag if flag in ("wipe", "corrupt") else ""
            authors = {e.id: e.author for e in self.record.events}
            self.record.restarts.append(Restart(self.world.now(), len(held_before), lost, fault, error,
                                                power_cut=power_cut,
                                                lost_by=tuple(authors.get(i, "") for i in lost)))
            if fault or error or power_cut:  # destroyed on purpose, damaged past opening
                gone = set(lost)                      # and moved aside, or never on the disk
                self.record.destroyed.extend(e for e in self.record.events if e.id in gone)
        network = self.world.fabric.endpoint(self.identity.peer_id)
        life = self._life = object()
        self.member = Member(
            self.world.credentials(self.identity, self.role), self.store, network,
            backend=self.backend if self.role != "observer" else None, strategy=self.strategy,
            now_ms=self.now_ms, think_in_thread=False, store_in_thread=False,
            trace=lambda line: self.world.say(self.name, line),
            feed_head_path=self.data_dir / "feed.head", new_key=self.state == "pending",
            on_transition=lambda change, life=life: self._shown(life, change),
        )
        self.state = "up"
        await self.world.nursery.start(self._live, network)

    async def _live(self, network: SimNetwork, task_status=trio.TASK_STATUS_IGNORED) -> None:
        assert self.member is not None and self.store is not None
        store, life, started = self.store, self._life, False
        with trio.CancelScope() as scope:
            self.scope = scope
            try:
                async with trio.open_nursery() as nursery:
                    network.attach(nursery)
                    await nursery.start(self.member.run)
                    self.world.fabric.bring_up(network)
                    task_status.started()
                    started = True
            except* DiskFailed as failed:  # the member stopped itself; the nemesis restarts it once the disk works
                if life is self._life:  # not a life the nemesis ended already (a task that ran on)
                    self.world.fault("crash", f"{self.name} (it stopped: its disk failed an fsync)")
                    first: BaseException = failed  # holds only DiskFailed, in nested groups (a nursery each)
                    while isinstance(first, BaseExceptionGroup):
                        first = first.exceptions[0]
                    words = str(first).replace(str(self.data_dir.parent), "RUN")
                    self.record.disk_failures.append(
                        DiskFailure(self.disk_failing_since, self.world.now(), last_words=words))
                    self.world.fabric.resume(self.identity.peer_id)  # as the nemesis's crash: not left paused
                    self.down("down")
                    self.stopped_by_disk = True
                if not started:
                    task_status.started()
            finally:
                store.close()

    def _shown(self, life: object, change) -> None:
        # a killed member's task that was already runnable may still fold and show (seed 2679
        # stores one event so): what the killed life shows after its kill was never seen
        if life is self._life:
            self.record.shown.append(Shown(round(self.world.now(), 3), change.kind, change.node,
                                           change.before, change.after))

    def record_ids(self) -> list[str]:
        return [e.id for e in self.member.index.events()] if self.member is not None else []

    def down(self, state: str) -> None:
        """Crash (``down``, will restart from its store) or stop for good (``stopped``)."""
        assert self.member is not None and self.scope is not None and self.store is not None
        self._life = None
        self.crash_image = self.store.image()
        self.durable_image = self.store.durable
        self.record.events = self.member.index.events()
        self.held_at_kill = frozenset(e.id for e in self.record.events)
        self.model_calls += self.member.stats.model_calls
        self.world.fabric.take_down(self.identity.peer_id)
        self.scope.cancel()
        self.state = state
