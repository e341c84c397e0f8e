"""A swarm member: one role, its own store and tree, talking through a ``Network``.

Everything runs under one nursery (``Member.run``):

* **receive** (``agents.receiving``): gossip payloads go through the intake (verify,
  drift hold); new events are stored and indexed, and the tree is folded again;
* **sync** (``agents.syncing``; when and from whom: ``agents.sync_schedule``): pull
  from a new connection, from the next few peers of a rotation every ``SYNC_INTERVAL``
  on average (``QUIET_SYNC_INTERVAL`` once no pull has brought anything new for
  ``QUIET_AFTER``), and at once when the fold shows a gap in a feed; serve other
  members' pulls;
* **act** (``agents.acting``; every role but the observer and the client): ask the role's policy
  what to do given the tree and our hybrid clock, and carry the intents out: claims
  and renewals at once, model calls one at a time in a worker thread;
* **release**: admit held events whose time has come.

Our own events are signed, stored, folded and then gossiped; if the gossip is
lost, other members' periodic pulls fetch them.

What waits for the disk: an event this member signed (however it came: signed
here, or given back by a peer after a lost store) is committed durably before
anything else happens to it, since nobody else may hold it and signing its seq
again would fork the feed; and before the member shows a change of its tree (a
split accepted, a leaf done: decisions are final) every commit so far is made
durable. So is every goal it holds before it serves a summary to a client (``swarm
submit`` reads a goal listed there as held, and leaves): the fsync comes then, off the
event loop, not at the goal's receipt, and a member's pull waits for none. Other events
from other authors are committed without waiting for an fsync (a killed process
keeps them; a power cut may take the last few, which sync fetches again). An
fsync per delivered event stalled the event loop for it (one member's profile,
fifty members on one disk: a tenth of its samples in the commit).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import structlog
import trio

from agents.acting import HoldingStill, MemberActing
from agents.core.admission import Credentials
from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import AnyBody, Event
from agents.core.intake import Intake
from agents.core.livefold import LiveFold
from agents.core.sync import EventIndex
from agents.core.transitions import Transition, changes
from agents.core.tree import PlanTree
from agents.heap import Settler, settled
from agents.llm.base import Backend
from agents.metrics import MemberMetrics, Snapshot
from agents.net.base import Network
from agents.ownfeed import OwnFeed
from agents.pull_claims import PullClaims
from agents.receiving import MemberReceiving
from agents.roles import Intent, Me, calls_at_once
from agents.roles.compose import EventBody
from agents.showlog import ShowLog
from agents.store import DiskFailed, EventStore, StoreError
from agents.sync_schedule import SyncSchedule
from agents.syncing import MemberSync

log = structlog.get_logger("swarm.member")

GOSSIP_BATCH = 256  # gossiped events taken together at most: one transaction and one fold for them


def describe(event: Event) -> str:
    """A short human account of an event, for traces."""
    body = event.body
    what = f"{event.kind} {event.id[:8]}"
    if event.kind == "proposal":
        return f"{what} on node {body.node[:8]}: {body.strategy}, {len(body.subgoals)} subgoals"
    if event.kind == "vote":
        return f"{what} {'approving' if body.approve else 'rejecting'} proposal {body.proposal[:8]}"
    if event.kind in ("promise", "candidate", "ballot"):
        extra = ""
        if event.kind == "candidate":
            extra = f" names {body.value[:8]}"
        elif event.kind == "ballot":
            extra = f" {'for' if body.approve else 'against'} {body.candidate[:8]}"
        return f"{what} on node {body.node[:8]} round {body.round}{extra}"
    if event.kind in ("claim", "ack"):
        return f"{what} on leaf {body.leaf[:8]} epoch {body.epoch}"
    if event.kind in ("renew", "result", "failure"):
        return f"{what} for claim {body.claim[:8]} at {event.ts}"
    return what


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class MemberStats:
    received: int = 0
    refused: int = 0  # events refused, each counted once (by rule in ``Intake.refused``)
    sync_refused: int = 0  # sync conversations refused: the peer holds no valid ticket
    sync_timeouts: int = 0  # pulls abandoned at their deadline (a stalled or hostile peer)
    sync_violations: int = 0  # conversations a peer broke: an oversized frame, a malformed message
    sync_rounds: int = 0  # rounds of the sync loop: each pulls from the peers with no pull running
    sync_open_failed: int = 0  # pulls that could not open a stream to a peer we hold a connection to
    pulls_whole: int = 0  # pulls that ran to their end: all the peer offered was asked for
    sync_skipped: int = 0  # wanted events a pull left to other pulls (or gossip) that brought them meanwhile
    sync_bytes_in: int = 0  # frame bytes received in sync conversations, pulls and serves
    sync_bytes_out: int = 0  # frame bytes sent in them
    held: int = 0
    synced_in: int = 0
    published: int = 0
    reorganisations: int = 0
    folds: int = 0  # trees folded: at most one per batch of gossip taken together
    model_calls: int = 0
    model_calls_dropped: int = 0  # calls given up under way: the tree no longer wanted their answer
    store_errors: int = 0  # writes the store refused (a full disk): nothing was acknowledged


class Member(MemberReceiving, MemberSync, SyncSchedule, MemberActing):
    def __init__(
        self,
        credentials: Credentials,
        store: EventStore,
        network: Network,
        backend: Backend | None = None,
        strategy: str = "activity",
        now_ms=wall_ms,
        think_in_thread: bool = True,
        trace: Callable[[str], None] | None = None,
        on_transition: Callable[[Transition], None] | None = None,
        transitions_path: Path | None = None,
        feed_head_path: Path | None = None,
        new_key: bool = False,
        store_in_thread: bool = True,
    ) -> None:
        """``new_key``: the member's key was made at this start (nothing of its own can exist
        anywhere yet). ``think_in_thread=False`` runs model calls inline: the simulated world needs it,
        since a thread's real duration would let a mock clock jump; ``store_in_thread=False``
        commits a catch-up's batches on the event loop's thread, as every other write (the
        simulated world copies a member's files at a kill: no write may be under way on another
        thread then). ``trace`` receives a
        one-line account of each thing this member does (the simulator's trace).

        Every change of what this member shows (accepted split, claim holder, accepted
        result, the plan turning complete; ``agents.core.transitions``) goes to ``on_transition`` and is appended to
        ``transitions_path`` (JSON lines with the member's wall clock and HLC), starting
        with a ``start`` record and the first fold from the store, ended by a ``loaded`` record."""
        identity = credentials.identity
        role = credentials.role
        self._log = log.bind(role=role, peer=identity.peer_id[-8:])
        self.credentials = credentials
        self.role = role
        self.store = store
        self.network = network
        self.cluster = credentials.cluster
        self.backend = backend
        self.clock = HybridClock(now_ms)
        self.intake = Intake(self.clock, credentials.gate)
        self._serving = 0  # sync streams being served now (MAX_SERVING at once)
        # commits that stored a goal, and how many of them an fsync is known to cover
        self.goals_stored = self.goals_synced = 0
        self._disk_failed = trio.Event()  # in a served pull (``store.failed`` says how): the member stops
        self.metrics: MemberMetrics | None = None  # set by ``swarm agent --metrics``
        self.author = (Author(identity, role, self.clock, credentials.ticket.sig)  # type: ignore[arg-type]
                       if role != "observer" else None)
        self.me = Me(identity.peer_id, role, strategy,  # type: ignore[arg-type]
                     at_once=calls_at_once(role, int(getattr(backend, "parallel", 1) or 1)))
        # a catch-up's commits, while the event loop parses the next frames (``agents.syncing``)
        self.store_thread = ThreadPoolExecutor(1, thread_name_prefix="store") if store_in_thread else None
        self._heap = Settler()
        self.stats = MemberStats(refused=store.counters().get("refused", 0))
        # no collection walks the events and the tree it starts with as they are made; with
        # SETTLE_EVERY of them or more, the settle after the fold walks them once (``agents.heap``)
        with settled():
            self.index = EventIndex(store.events())
            # Restart safety: the clock starts after every event held (not only our own), and the
            # member signs nothing until its own feed is whole (``agents.ownfeed``).
            for event in self.index.events():
                self.clock.restore(event.ts)
            # the tree, kept folded as events come (``agents.core.livefold``): each batch refolds
            # only what it changes, not the whole set
            self.live = LiveFold(self.index.events())
            self.tree: PlanTree = self.live.tree()
            self._heap.held(len(self.index))
        self.own = OwnFeed(self.author, feed_head_path, new_key) if self.author is not None else None
        self._on_transition = on_transition
        self._show_log = ShowLog(transitions_path, self._stamp) if transitions_path else None
        self._show_put_off = False  # a fold's changes wait for room in the transition log
        self.now_ms = now_ms
        store.sync()  # what an earlier life committed may be in the page cache only: it is shown next
        # what its store alone shows, between the start and loaded records: every decision shown before
        if not self._show([Transition("start"), *changes(None, self.tree), Transition("loaded")]):
            if self._show_log is not None:
                self._show_log.close()
            raise DiskFailed(f"no room on the disk for {transitions_path} (the record of what this member shows): "
                             "free space on the disk, then start the member again")
        if self.own is not None and not self.own.start(store.events_by(identity.peer_id), self.tree) \
                and self.own.missing is not None:
            self._log.warning("store is behind this member's own feed; learning it from peers first",
                              stored_seq=self.own.author.seq, head_seq=self.own.missing[0])
        self.changed = trio.Event()
        self.sync_now = trio.Event()
        self._pulling: dict[str, float] = {}  # peer -> when its pull started or last moved (trio time)
        self._pull_done: dict[str, trio.Event] = {}  # peer -> set when its running pull ends
        self._claims = PullClaims()  # what running pulls asked for: one event is fetched once
        self._fold_owed = False  # a pull left the fold to another still moving, or a full disk put off its show
        self._ending: set[str] = set()  # peers whose pull is past its fold, closing its stream
        self._folded_index = 0  # events in the index at the last fold
        self._sync_rounds: set[trio.CancelScope] = set()  # sync_all rounds: a moving pull extends them
        self._wedged: set[str] = set()  # peers whose pull outlived every deadline
        self._pull_after = b""  # the rotation's key of the last peer pulled from
        self._ring_keys: dict[str, bytes] = {}  # peer -> its key in this member's rotation
        self._pull_wanted: set[str] = set()  # peers whose status says they hold more: pulled next
        self._asked_pull: dict[str, float] = {}  # peer -> trio time its status last asked for a pull
        self.repaired_at = float("-inf")  # trio time a pull last brought an event new to this member
        self.store_refused_at = float("-inf")  # trio time the store last refused a write (a full disk)
        self._thoughts: dict[Intent, tuple[str, str, int] | None] = {}  # model calls under way: what, since when
        self._drops: dict[Intent, tuple[trio.CancelScope, threading.Event]] = {}  # how to drop each of them
        self._model_down_until = 0.0  # trio time before which no model work starts (it was unreachable)
        self._model_failures = 0  # calls in a row that could not reach the model
        self._done: set[Intent] = set()
        self._unsent: dict[Intent, EventBody] = {}  # thought, then refused by the store (a full disk)
        self._last_renew: dict[str, int] = {}
        self._think_in_thread = think_in_thread
        self._trace = trace
        self.still = False  # see hold_still()
        # what it is thinking about now and since when (its wall ms): the status channel says so
        self.doing: tuple[str, str, int] | None = None

    def _stamp(self) -> dict[str, object]:
        return {"at_ms": self.now_ms(), "hlc": list(self.clock.last)}

    def _show(self, shown: list[Transition]) -> bool:
        """Show ``shown``: on record in the transition log first (``agents.showlog``: what the
        checkers judge every moment by), then to whoever watches. False, showing nothing, while
        the disk has no room for the record; a failing disk raises ``DiskFailed``."""
        if self._show_log is not None and not self._show_log.record(shown):
            if not self._show_put_off:
                self._log.warning("no room on the disk for the transition log: what the plan now shows waits",
                                  changes=len(shown), log=str(self._show_log.path))
            self._show_put_off = True
            return False
        if self._show_put_off:
            self._log.warning("transition log written again: showing what waited", changes=len(shown))
            self._show_put_off = False
        if self._on_transition is not None:
            for change in shown:
                self._on_transition(change)
        return True

    def close(self) -> None:
        """Release what the member holds outside trio (its transition log), once the tree
        shows everything stored (a fold a pull put off: ``MemberSync._pull``)."""
        if self._fold_owed:
            self._refold()
        if self.store_thread is not None:  # every pull waited for its writes: nothing is left
            self.store_thread.shutdown(wait=True)
        if self._show_log is not None:
            self._show_log.close()
            self._show_log = None

    def _refold(self) -> None:
        self.stats.folds += 1
        self._fold_owed = False
        self._folded_index = len(self.index)
        with settled():
            tree = self.live.tree()
        shown = list(changes(self.tree, tree))
        if shown:  # what it shows is final: on the disk first, or a power cut could take it back
            self.store.sync()
            if not self._show(shown):
                self._fold_owed = True  # folded again at the sync loop's next wake
                return
        for change in shown:
            if change.revokes:
                self.stats.reorganisations += 1
                self._log.warning("reorganisation", kind=change.kind, node=change.node[:10],
                                  before=str(change.before)[:10], after=str(change.after)[:10])
                if self._trace:
                    self._trace(f"reorganisation: {change.kind} of {change.node[:8]} "
                                f"{str(change.before)[:8]} -> {str(change.after)[:8]}")
        self.tree = tree
        if tree.pending:
            self.sync_now.set()
        self.changed.set()

    # --- events out -----------------------------------------------------------

    async def publish(self, body: AnyBody) -> Event:
        assert self.author is not None and self.own is not None, "an observer never publishes"
        await self.own.ready.wait()
        if self.still:  # it may have started holding still while this task waited
            raise HoldingStill("holding still: nothing more is signed")
        event = self.author.sign(body)
        try:
            self._admit([event], "self")
        except StoreError:  # (not ``DiskFailed``: stored or not, nobody can say; the member stops)
            self.author.unsign(event)  # never stored, never sent: the seq is free again
            raise
        if not self.own.signed(event, self.tree):
            self._log.error("own event is not in own feed (a hole before it); signing stops until it is filled",
                            seq=event.seq, event_id=event.id[:12])
        self.stats.published += 1
        self._log.info("published", kind=event.kind, event_id=event.id[:12], hlc=str(event.ts))
        if self._trace:
            self._trace(f"published {describe(event)}")
        try:
            await self.network.publish(event.to_wire())
        except Exception as exc:  # gossip is best-effort; sync carries the event anyway
            self._log.warning("gossip publish failed", error=repr(exc)[:200])
        return event

    # --- loops ----------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.network.serve(self._serve)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._receive_loop)
            nursery.start_soon(self._connection_loop, nursery)
            nursery.start_soon(self._sync_loop, nursery)
            nursery.start_soon(self._release_loop)
            nursery.start_soon(self._until_the_disk_fails)
            if self.role not in ("observer", "client"):
                nursery.start_soon(self._act_loop, nursery)
            if self.metrics is not None:
                nursery.start_soon(self._metrics_loop, self.metrics)
            task_status.started()

    async def _metrics_loop(self, metrics: MemberMetrics) -> None:
        """Copy what the exporter shows, from this task: its thread only reads the copy."""
        while True:
            tree = self.tree
            metrics.snapshot = Snapshot({**vars(self.stats), **self.network.counters()}, dict(self.intake.refused),
                                        self.intake.held,
                                        len(self.index), tree.pending, tree.complete)
            await trio.sleep(1.0)

    async def _receive_loop(self) -> None:
        gossip = self.network.gossip
        async for raw in gossip:
            raws = [raw]
            while len(raws) < GOSSIP_BATCH:  # whatever else is already here, taken together
                try:
                    raws.append(gossip.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):  # a closed channel ends the loop next turn
                    break
            self.receive_many(raws)

    def _learned_own_feed(self, peer: str) -> None:
        """After a completed pull: whatever a peer held of our own feed is ours now."""
        if self.own is None or self.author is None:
            return
        if not self.own.ready.is_set() and len(self.index) != self._folded_index:  # it reads the tree
            self._refold()  # a fold owed, or events another pull still running stored
        own = [e for e in self.index.events() if e.author == self.author.peer_id]
        if self.own.learned(own, self.tree, peer, len(self.network.connected_peers())) and own:
            self._log.warning("recovered own feed from a peer", seq=self.author.seq)

    async def _release_loop(self) -> None:
        while True:
            await trio.sleep(1.0)
            due = self.intake.release_due()
            if due:
                self._admit(due, "held")
