"""Events coming in to a member: through the intake, stored, indexed and folded.

A mixin of ``agents.member.Member`` (it shares the member's store, index, intake, stats
and log): gossip's payloads (``receive_many``, and ``screen``, gossip's validator) and a
pull's batches (``agents.syncing`` stores them through ``_admit``, or ``store_behind``
and ``written`` on the store thread) take the same way in: each intake answer counted
and logged (``_take``), what is admitted stored in one transaction, indexed, then folded
(``Member._refold``). An event the store cannot take is neither indexed nor
acknowledged: sync fetches it again once the store works.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from concurrent.futures import Future

import trio

from agents.core.events import Event
from agents.core.intake import Admission, Admitted, Held, Refused
from agents.store import DiskFailed, StoreError
from agents.syncing import REFUSED_QUIET


class MemberReceiving:
    """Events in, for ``Member``: see the module's docstring. Its state (``store``, ``index``,
    ``intake``, ``stats``, ``store_thread``, ``repaired_at``, ``store_refused_at``,
    ``goals_stored``) is set by ``Member.__init__``."""

    def _admit(self, events: list[Event], via: str, refold: bool = True) -> int:
        """Store, index and fold (``refold=False``: the caller folds once it has stored a
        batch of frames); an event the store cannot take is neither indexed nor
        acknowledged (sync fetches it again once the store works)."""
        try:
            added = self.store.add_many(events, durable=self._durable(events))
        except StoreError as exc:
            return self._not_stored(exc, events, via)
        return self._stored(events, added, via, refold)

    def _durable(self, events: list[Event]) -> bool:
        """Whether storing ``events`` waits for the disk: when this member signed any of them.
        A goal from a client waits for the first summary served to a client instead
        (``goals_on_disk``)."""
        return self.author is not None and any(event.author == self.me.peer_id for event in events)

    def store_behind(self, events: list[Event]) -> Future[int]:
        """Start storing ``events`` on the store thread; ``written`` takes the answer. Until
        then they are neither indexed nor acknowledged, as before any commit."""
        assert self.store_thread is not None, "this member stores on its event loop's thread"
        return self.store_thread.submit(self.store.add_many, events, self._durable(events))

    def written(self, events: list[Event], write: Future[int], via: str) -> int:
        """``store_behind``'s write, once done (waiting for it), indexed as ``_admit`` would,
        without the fold."""
        try:
            added = write.result()
        except StoreError as exc:
            return self._not_stored(exc, events, via)
        return self._stored(events, added, via, refold=False)

    def _not_stored(self, exc: StoreError, events: list[Event], via: str) -> int:
        self.stats.store_errors += 1
        first = True
        with contextlib.suppress(RuntimeError):  # called outside trio (a direct call): no pulls to quiet
            now = trio.current_time()
            first = now - self.store_refused_at >= REFUSED_QUIET  # the first of a run is an error, the rest noise
            self.store_refused_at = now
        (self._log.error if first else self._log.debug)("store refused events", via=via, events=len(events),
                                                        error=str(exc)[:300], refused_so_far=self.stats.store_errors)
        if via == "self":
            raise exc
        return 0

    def _stored(self, events: list[Event], added: int, via: str, refold: bool) -> int:
        if added:
            self.store_refused_at = float("-inf")  # the store takes writes again: pulls resume at once
            if via == "sync":  # gossip had not brought it: the rotation stays quick a while
                self.repaired_at = trio.current_time()
            self.index.add_all(events)
            self.live.add(events)
            if any(event.kind == "goal" for event in events):
                self.goals_stored += 1  # on the disk before a summary lists it: ``goals_on_disk``
            self._heap.held(added)
            if refold:
                self._refold()
        if via == "sync":
            self.stats.synced_in += added
        return added

    def screen(self, raw: bytes) -> bool:
        """The gossip topic's validator: refused bytes are counted (and logged) and not relayed."""
        refusal = self.intake.screen(raw)
        if refusal is not None:
            self._take(refusal, "gossip")
        return refusal is None

    def _take(self, answer, via: str) -> Event | None:
        """Count and log an intake answer; returns the event when it is admitted."""
        if isinstance(answer, Admitted):
            self.stats.received += 1
            if answer.event.id not in self.index:
                self._log.debug("admitted", event_id=answer.event.id, via=via)
                if self.metrics is not None and via == "gossip":
                    self.metrics.delivered(self.clock.physical_ms() - answer.event.hlc[0])
                return answer.event
        elif isinstance(answer, Held):
            self.stats.held += 1
            self._log.info("event held", reason=answer.reason[:300])
        elif isinstance(answer, Refused) and answer.first:
            self.stats.refused += 1
            # here inside py-libp2p's gossip validation, which an exception would break; a disk
            # that failed the count is refused by the store from now on, and the member stops at
            # its next write or fsync
            with contextlib.suppress(StoreError, DiskFailed):
                self.store.bump("refused")
                self.store.bump(f"refused:{answer.rule}")
            self._log.warning("event refused", via=via, rule=answer.rule, reason=answer.reason[:300])
        return None

    def receive(self, raw: bytes) -> None:
        """One gossiped payload: through the intake (counted), then stored and folded."""
        self.receive_many([raw])

    def receive_many(self, raws: list[bytes]) -> None:
        """Gossiped payloads that arrived together: each through the intake, in order, then
        stored in one transaction and folded once (a commit and a fold per event is what a
        member behind on its gossip can least afford: it falls further behind). What it shows
        is the tree after the batch: a state the events passed through inside one batch is
        never shown, as after a pull.

        The commit runs here, on the event loop, unlike a large pull's: in a trial that
        committed gossip on the store thread (each batch awaited from a trio worker thread),
        fifty members on two cores spent more CPU per delivered event (11-13 ms against 9-10)
        and were no faster (stop 42's note); a commit here takes about 0.3 ms."""
        events: dict[str, Event] = {}
        # the same bytes twice in one batch are offered once
        self._take_into(events, (self.intake.offer(raw) for raw in dict.fromkeys(raws)), "gossip")
        if events:
            self._admit(list(events.values()), "gossip")

    def _take_into(self, batch: dict[str, Event], answers: Iterable[Admission], via: str) -> list[Event]:
        """Intake answers in order, each counted and logged (``_take``); the events admitted go
        into ``batch`` (by id: events to store together, a gossip batch's or a pull's until it
        next stores). An event already in it (sent twice, or signed twice over: only its ticket
        holder can) is counted, not logged or measured as a delivery again: one at a time, the
        index would have known it (the propagation benchmark reads the "admitted" records).
        Returns the events it put into ``batch``."""
        taken: list[Event] = []
        for answer in answers:
            if isinstance(answer, Admitted) and answer.event.id in batch:
                self.stats.received += 1
                continue
            event = self._take(answer, via)
            if event is not None:
                batch[event.id] = event
                taken.append(event)
        return taken


__all__ = ["MemberReceiving"]
