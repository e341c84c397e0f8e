"""The sync side of a member: serving pulls and pulling, and the parameters of both.

A mixin of ``agents.member.Member`` (it shares the member's index, intake, stats and
log); it holds how a pull and a serve run and how long a conversation may, apart from
what the member does with events once they are in. *When* and *from whom* it pulls is
``agents.sync_schedule`` (its parameters are here, beside the deadlines they are
measured against).

* each pull runs on its own task, one at a time per peer, and is dropped after
  ``PULL_DEADLINE`` without a frame (``PULL_LIMIT`` in all);
* pulls running at once split what they fetch (``agents.pull_claims``), so a joiner
  catching up from several peers takes each event about once, and pulls ending together
  fold once (``_fold_after``: the last to end folds, or the sync loop within
  ``LATEST_WAKE``, ``sync_all`` before it returns, ``Member.close``, and
  ``_learned_own_feed`` before it reads the tree);
* at most ``MAX_SERVING`` streams are served at once.
"""

from __future__ import annotations

from concurrent.futures import Future

import trio

from agents.core.events import Event, EventRefused
from agents.decoding import Decoded, FramePipeline
from agents.net.base import FrameTooLarge, MeteredStream, PeerStream, StreamClosed
from agents.store import DiskFailed
from agents.syncproto import SyncProtocolError, SyncRefused, pull, serve_pull

SYNC_INTERVAL = 3.0
SYNC_FANOUT = 3  # peers pulled from per SYNC_INTERVAL, whatever the size of the cluster
QUIET_AFTER = 30.0  # seconds without a pull bringing anything new, after which the member pulls less often
QUIET_SYNC_INTERVAL = 4 * SYNC_INTERVAL
# while its store refuses writes (a full disk) a member pulls only at the quiet interval: what
# it pulls cannot be stored, and statuses saying its peers hold more (they always do, then)
# had it pull about five times a second in the lab's full-disk scenario, each pull for nothing
REFUSED_QUIET = QUIET_SYNC_INTERVAL
PULL_DEADLINE = 10.0  # a pull or serve that moves nothing this long is dropped (the dial counts)
PULL_LIMIT = 300.0  # a whole pull or serve, however much it moves: a drip-feeding peer is cut too
WEDGED_AFTER = PULL_DEADLINE + 2 * SYNC_INTERVAL  # a pull this long without progress ignored its cancellation
STORE_EVERY = 4096  # synced events stored per transaction (a commit was an fsync, ~15 ms here, and is one still for own events)
STORE_AFTER_S = 1.0  # and stored at least this often: other pulls leave what one holds to it
OTHERS_MOVING_S = 1.0  # a pull ending while another moved this recently leaves the fold to it
MAX_SERVING = 16  # sync streams served at once: each may hold one frame in reassembly
WAKE_JITTER = 0.5  # a sync wake comes after SYNC_INTERVAL times 1 +- this (uniform): see ``agents.sync_schedule``
LATEST_WAKE = SYNC_INTERVAL * (1 + WAKE_JITTER)  # the longest the sync loop sleeps between wakes


class MemberSync:
    """Sync for ``Member``: see the module's docstring. Its state (``_pulling``, ``_pull_done``,
    ``_sync_rounds``, ``_wedged``, ``_claims``, ``_fold_owed``, ``_ending``, ``goals_stored``,
    ``goals_synced``, ``_disk_failed``; the schedule's: ``agents.sync_schedule``) is set by
    ``Member.__init__``; what a pull stores goes in through ``agents.receiving``."""

    async def _serve(self, stream: PeerStream) -> None:
        if self._serving >= MAX_SERVING:  # what peers can make us buffer stays bounded
            self.stats.sync_violations += 1
            self._log.warning("sync refused: too many streams at once", peer=stream.peer[-8:], limit=MAX_SERVING)
            await stream.abort()  # a reset, not a close: what it still sends is dropped, not buffered
            return
        self._serving += 1
        started = trio.current_time()
        metered = MeteredStream(stream)
        try:
            # a puller that stalls holds nothing for long; one that keeps asking is served
            with trio.CancelScope(deadline=started + PULL_DEADLINE) as scope:
                def moved() -> None:
                    scope.deadline = min(started + PULL_LIMIT, trio.current_time() + PULL_DEADLINE)

                await serve_pull(metered, self.index, self.credentials, on_need=moved,
                                 before_offer=self._promised_to)
            if scope.cancelled_caught:
                self.stats.sync_timeouts += 1
                self._log.warning("sync serve timed out", peer=stream.peer[-8:], deadline_s=PULL_DEADLINE,
                                  running_s=round(trio.current_time() - started, 1))
                await stream.abort()
        except SyncRefused as exc:
            self.stats.sync_refused += 1
            self._log.warning("sync refused", peer=stream.peer[-8:], reason=str(exc)[:200])
            await stream.abort()
        except (FrameTooLarge, SyncProtocolError) as exc:
            self.stats.sync_violations += 1
            self._log.warning("sync peer broke the protocol", peer=stream.peer[-8:], reason=str(exc)[:200])
            await stream.abort()
        except StreamClosed as exc:
            self._log.debug("sync serve ended", peer=stream.peer[-8:], reason=str(exc)[:200])
        except DiskFailed as exc:  # no summary is sent, and the member stops (``_until_the_disk_fails``)
            self._log.error("sync serve ended: the goals it would list are not on the disk", error=str(exc)[:300])
            self._disk_failed.set()
            await stream.abort()
        finally:
            self._serving -= 1
            self.stats.sync_bytes_in += metered.received
            self.stats.sync_bytes_out += metered.sent

    async def _until_the_disk_fails(self) -> None:
        """A failing disk met in a served pull ends the member as one met in its own tasks does
        (the network runs the serve, and keeps a handler's error from ending anything)."""
        await self._disk_failed.wait()
        assert self.store.failed is not None, "a disk failure the store did not record"
        raise self.store.failed

    async def _promised_to(self, puller_role: str) -> None:
        """Before a summary is served: only a client reads it as a promise (it leaves once its
        goal is listed); a member's pull, which repairs what gossip lost, reads no promise
        there and never waits for the disk (an fsync of a disk fifty members share can take
        seconds)."""
        if puller_role == "client":
            await self.goals_on_disk()

    async def goals_on_disk(self) -> None:
        """Every goal this member holds on its disk, before it serves a client a summary that
        lists it: ``swarm submit`` leaves once the summaries it asks for list its goal, and a
        goal held in page caches only would be lost by one power cut of the members' machines
        (the simulation's ``blackout``). One fsync covers every goal stored since the last; it runs off the event
        loop (gossip's goals fsynced at their receipt held fifty members' loops up), and a goal
        stored meanwhile makes another. A failing disk raises ``DiskFailed``."""
        while self.goals_synced < self.goals_stored:
            covered = self.goals_stored
            if self.store_thread is None:  # the simulated world: no thread may run beside its clock
                self.store.sync()
            else:
                await trio.to_thread.run_sync(self.store.sync)
            self.goals_synced = max(self.goals_synced, covered)

    async def _pull_counted(self, peer: str) -> tuple[int, int]:
        """Pull what ``peer`` has and we lack: the new events stored, and how many it left to
        other pulls of ours that brought them (``agents.pull_claims``). One pull per peer at a
        time: a second waits for the running one to end, then pulls (two at once fetched and
        verified the same events twice)."""
        while (running := self._pull_done.get(peer)) is not None:
            await running.wait()
        return await self._pull_registered(peer, self._register_pull(peer))

    def _register_pull(self, peer: str) -> trio.Event:
        done = self._pull_done[peer] = trio.Event()
        self._pulling[peer] = trio.current_time()
        return done

    async def _pull_registered(self, peer: str, done: trio.Event) -> tuple[int, int]:
        try:
            return await self._pull(peer)
        finally:
            del self._pulling[peer]
            del self._pull_done[peer]
            self._ending.discard(peer)
            self._wedged.discard(peer)
            done.set()

    async def _pull(self, peer: str) -> tuple[int, int]:
        """One pull; returns the events it stored and, when it ran to its end, how many it
        left to other pulls that brought them (``agents.pull_claims``). Each events frame is
        checked as the next arrives (the workers check one frame while this thread screens
        the one before), stored ``STORE_EVERY`` events to a transaction, at the first frame
        ``STORE_AFTER_S`` after the last store or when it waits on others (what a pull holds,
        others leave to it) and at each new offer page
        (a commit per 500-event frame was 200 fsyncs
        in a 100k catch-up, when every commit was one), and the tree is folded once at the end, after the last commit
        (or by the last of the pulls ending together: ``_fold_after``):
        a 100k-event catch-up is about two hundred frames, and folding after each made it
        quadratic. The deadline counts from the last events frame
        (``syncproto.pull`` refuses one that neither answers nor leaves for later everything
        asked) or offer page, up to ``PULL_LIMIT`` in all.

        A batch stored at ``STORE_EVERY`` (or ``STORE_AFTER_S``) is committed on the member's
        store thread while this one takes the next frames, and indexed at the next store,
        once its commit returned (a store before the index is read, or at the end, waits for
        it): a 100k-event catch-up's commits were a sixth of this thread's time. Not in the
        simulated world (``store_in_thread=False``), which copies a member's files at a kill."""
        started = trio.current_time()
        scope = trio.CancelScope(deadline=started + PULL_DEADLINE)
        added = 0
        whole = ran_out = False
        pipeline = FramePipeline()
        # screened, not yet stored, by id (an event sent twice in one pull is stored and logged
        # once: ``Member._take_into``): a page's wants and the fold wait for them
        unstored: dict[str, Event] = {}
        stored_at = started
        writing: tuple[list[Event], Future[int]] | None = None  # a batch on the store thread

        def store(behind: bool = False) -> None:
            """What this pull screened, stored and indexed; ``behind``: the batch is committed
            on the store thread while this one goes on (to be indexed at the next store)."""
            nonlocal added, stored_at, writing
            stored_at = trio.current_time()
            if writing is not None:
                done, writing = writing, None
                added += self.written(done[0], done[1], "sync")
            batch = list(unstored.values())
            unstored.clear()
            if batch and behind and self.store_thread is not None:
                writing = (batch, self.store_behind(batch))
            elif batch:
                added += self._admit(batch, "sync", refold=False)
            claim.stored()
            if writing is not None:
                claim.hold(writing[0])  # still this pull's to store: other pulls leave it

        def screen(decoded: Decoded) -> None:
            claim.hold(self._screen_synced(decoded, unstored))

        def moved() -> None:
            claim.moved()
            now = self._pulling[peer] = trio.current_time()
            scope.deadline = min(started + PULL_LIMIT, now + PULL_DEADLINE)
            for round_scope in self._sync_rounds:
                round_scope.deadline = max(round_scope.deadline, now + PULL_DEADLINE + 2 * SYNC_INTERVAL)

        def frame(raws: list[bytes]) -> None:
            screen(pipeline.push(raws))
            if len(unstored) >= STORE_EVERY or trio.current_time() - stored_at >= STORE_AFTER_S:
                store(behind=True)
            moved()

        def settle() -> None:
            screen(pipeline.drain())
            store()

        def page() -> None:
            settle()  # the next page's wants are read from the index: everything received goes in first
            moved()

        try:
            with trio.move_on_at(scope.deadline) as dial:  # the dial counts: a peer that stalls costs one pull
                stream = await self.network.open_stream(peer)
        except StreamClosed as exc:
            self.stats.sync_open_failed += 1
            self._log.debug("sync open failed", peer=peer[-8:], reason=repr(exc)[:200])
            self._fold_after(peer, 0)  # a pull that ended before this one may have left it the fold
            return 0, 0
        if dial.cancelled_caught:
            self.stats.sync_open_failed += 1
            self._log.debug("sync open failed", peer=peer[-8:], reason="timed out")
            self._fold_after(peer, 0)
            return 0, 0
        stream = MeteredStream(stream)
        claim = self._claims.open(self.index, settle=settle)
        try:
            with scope:
                await pull(stream, self.index, self.credentials, known=lambda event_id: self.intake.knows(event_id),
                           on_events=frame, on_page=page, batches=claim)
            if scope.cancelled_caught:
                store()  # so that the count below is what this pull stored
                self.stats.sync_timeouts += 1
                self._log.warning("sync pull timed out", peer=peer[-8:], deadline_s=PULL_DEADLINE,
                                  running_s=round(trio.current_time() - started, 1), stored=added)
        except SyncRefused as exc:
            self.stats.sync_refused += 1
            self._log.warning("sync refused", peer=peer[-8:], reason=str(exc)[:200])
        except (FrameTooLarge, SyncProtocolError) as exc:
            self.stats.sync_violations += 1
            self._log.warning("sync peer broke the protocol", peer=peer[-8:], reason=str(exc)[:200])
        except StreamClosed as exc:
            self._log.info("sync failed", peer=peer[-8:], reason=str(exc)[:200])
        else:
            # only a whole pull shows all the peer holds of ours: not one cut, nor one that left
            # some of it to another pull (that pull may yet fail)
            ran_out = not scope.cancelled_caught
            whole = ran_out and not claim.left
        finally:
            # before the close, which can be cancelled from outside (a round cut short, a
            # one-shot ending): what earlier frames stored is folded even then
            self.stats.sync_bytes_in += stream.received
            self.stats.sync_bytes_out += stream.sent
            try:
                screen(pipeline.drain())
            finally:
                try:
                    store()  # what earlier frames screened, whatever became of the last
                finally:
                    claim.close()  # after the store: what others left to this pull is in the index
                    self.stats.sync_skipped += claim.left
            if self._fold_after(peer, added):
                moved()  # folding a million events takes a while: work, not a stalled pull
            await stream.aclose()
        if whole:
            self.stats.pulls_whole += 1
            self._learned_own_feed(peer)
        self._log.debug("pulled", peer=peer[-8:], added=added)
        if self.metrics is not None:
            self.metrics.pulled(added)
        if added:
            self._log.info("synced", peer=peer[-8:], events=added)
            if self._trace:
                self._trace(f"pulled {added} event(s) from {peer[-8:]}")
        return added, claim.left if ran_out else 0

    def _fold_after(self, peer: str, added: int) -> bool:
        """At the end of the pull from ``peer``, which stored ``added`` events: fold, unless
        another pull of this member moved under ``OTHERS_MOVING_S`` ago and will fold when it
        ends (pulls ending together fold once; the sync loop, ``sync_all`` and ``close`` fold
        what is still owed). True when it folded."""
        self._ending.add(peer)  # past its fold: a pull ending beside it must not leave the fold to it
        if not (added or self._fold_owed):
            return False
        now = trio.current_time()
        if any(other not in self._ending and now - moved < OTHERS_MOVING_S for other, moved in self._pulling.items()):
            self._fold_owed = True
            return False
        self._refold()
        return True

    def _screen_synced(self, frame: Decoded, unstored: dict[str, Event]) -> list[Event]:
        """One decoded frame of synced events through the intake, into ``unstored``
        (``Member._take_into``, as gossip is); returns the events it put there."""
        return self._take_into(unstored, (self.intake.refuse_bytes(raw, decoded) if isinstance(decoded, EventRefused)
                                          else self.intake.admit(decoded) for raw, decoded in frame), "sync")

    async def sync_all(self) -> int:
        """Pull from every connected peer at once, until each pull ends; a slow or stalled peer
        delays nobody else. For one-shot tools; a running member pulls from ``_sync_loop``.

        The pulls split what they fetch (``agents.pull_claims``). A pull that left events to
        another that held them is not whole (they may not be stored when it ends): once every
        pull of this member has ended (its own loops' too), those peers are pulled from
        again, one at a time, until none leaves anything to another.

        The round as a whole is bounded too: once no pull has moved for a while (a close that
        hangs on a blackholed connection) it is cancelled rather than stalling the caller."""
        counts: list[int] = []
        again: list[str] = []

        async def one(peer: str) -> None:
            added, skipped = await self._pull_counted(peer)
            counts.append(added)
            if skipped:
                again.append(peer)

        with trio.move_on_after(PULL_DEADLINE + 2 * SYNC_INTERVAL) as round_scope:
            self._sync_rounds.add(round_scope)
            try:
                async with trio.open_nursery() as nursery:
                    for peer in self.network.connected_peers():
                        nursery.start_soon(one, peer)
                while again:
                    for running in list(self._pull_done.values()):
                        await running.wait()
                    peers, again = again, []
                    for peer in peers:  # one at a time: at once, they would split it all over again
                        await one(peer)
            finally:
                self._sync_rounds.discard(round_scope)
        if self._fold_owed:  # the round's caller reads the tree next
            self._refold()
        if round_scope.cancelled_caught:
            self.stats.sync_timeouts += 1
            self._log.warning("sync round cut short: a pull outlived its deadline")
        return sum(counts)


__all__ = ["LATEST_WAKE", "MAX_SERVING", "PULL_DEADLINE", "PULL_LIMIT", "QUIET_AFTER", "QUIET_SYNC_INTERVAL",
           "REFUSED_QUIET", "SYNC_FANOUT", "SYNC_INTERVAL", "WAKE_JITTER", "WEDGED_AFTER", "MemberSync"]
