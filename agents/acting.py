"""The acting side of a member: what its role's policy asks for, carried out.

A mixin of ``agents.member.Member`` (it shares the member's tree, clock, backend, stats
and log), as ``agents.syncing`` is for sync. Every role but the observer and the
client runs ``_act_loop``: ask the policy what to do given the tree and the hybrid clock, and carry
the intents out, claims and renewals at once, model calls up to ``Me.at_once`` at a time
(the backend's ``parallel``: one, unless a batched server answers them side by side), on
worker threads when ``think_in_thread``. A call whose intent the policy no longer asks for
(the node it would split or vote on was decided, the leaf's claim was lost) is dropped while
the model works on it (``_drop_moot``): a backend that streams gives up between two tokens and
a model service stops drawing them, so the batch's other calls go faster. A member whose store lost its own newest events
signs nothing until a peer gives them back (``mute``), and one told to ``hold_still``
signs nothing more.
"""

from __future__ import annotations

import threading
import time

import trio

from agents.core.events import FailureBody, ResultBody
from agents.core.tree import PlanTree
from agents.llm.base import Backend, CallDropped
from agents.roles import POLICIES, THINKING, Claim, Intent, Me, Renew
from agents.roles.compose import EventBody, compose, latency_key
from agents.store import StoreError

MUTE_WARNING_S = 30.0  # how often a member that cannot sign yet says why
ACT_INTERVAL = 0.25
RENEW_SPACING_FRACTION = 0.25  # at most one renewal per quarter lease
UNSENT_RETRY_S = 1.0  # an own event the store refused (a full disk) is tried again this long after a refusal
MODEL_RETRY_MAX_S = 30.0  # an unreachable model is tried again after 1, 2, 4, ... up to this many seconds


class HoldingStill(RuntimeError):
    """``publish`` after ``hold_still``: the member signs nothing more."""


class MemberActing:
    """Acting for ``Member``: see the module's docstring. Its state (``still``, ``_done``, ``_unsent``,
    ``_last_renew``, ``_thoughts``, ``_drops``, ``_model_down_until``, ``_model_failures``, ``doing``,
    ``_think_in_thread``) is set by ``Member.__init__``."""

    def hold_still(self) -> None:
        """Sign nothing more (no vote, claim, renewal or result; a model call under way is
        dropped), while events still come in and sync still serves and pulls: the drain before
        a final read, so the copies can be compared without new events in flight."""
        self.still = True
        self._drop_moot(())
        self.changed.set()

    @property
    def mute(self) -> bool:
        """True while it must not sign: its store lost own events no peer has given back yet."""
        return self.own is not None and not self.own.ready.is_set()

    async def _act_loop(self, nursery: trio.Nursery) -> None:
        policy = POLICIES[self.role]
        assert self.own is not None
        while not self.own.ready.is_set():
            with trio.move_on_after(MUTE_WARNING_S):
                await self.own.ready.wait()
            if self.own.missing is not None and not self.own.ready.is_set():
                self._log.warning(
                    "cannot sign yet: own events up to this seq are missing from the store and no peer has "
                    "returned them; signing now would fork this member's feed. If no peer ever holds them, "
                    "re-admit this member under a new key (swarm admit CLUSTER_DIR --role ROLE --data-dir NEW_DIR)",
                    head_seq=self.own.missing[0], stored_seq=self.own.author.seq)
        try:
            while True:
                self.changed = trio.Event()
                if not await self._act_once(policy, nursery):
                    with trio.move_on_after(ACT_INTERVAL):
                        await self.changed.wait()
        finally:
            self._drop_moot(())  # stopping: a call on a worker thread would otherwise run to its end

    async def _act_once(self, policy, nursery: trio.Nursery) -> bool:
        """Carry out what the policy says now: start model calls up to ``Me.at_once`` under way,
        publish at most one bookkeeping event. True when an event went out (decide again at once: the tree
        changed, and the tree, not a memory of ours, says what was done)."""
        if self.still:
            return False
        now = self.clock.peek().ms
        # with the model unreachable, a claim could only be handed back unanswered: wait for it
        model_down = trio.current_time() < self._model_down_until
        intents = policy(self.tree, self.me, now)
        self._drop_moot(intents)
        for intent in intents:
            if intent in self._unsent:  # thought already (no model needed); the store refused its event
                if trio.current_time() - self.store_refused_at < UNSENT_RETRY_S:
                    continue  # the disk was full a moment ago: not every act
                return await self._publish_unsent(intent)
            if intent in self._done or (model_down and isinstance(intent, (*THINKING, Claim))):
                continue
            if isinstance(intent, THINKING):
                if len(self._thoughts) < self.me.at_once:
                    self._thoughts[intent] = None
                    self._done.add(intent)
                    nursery.start_soon(self._think, intent)
                continue
            if isinstance(intent, Renew):
                lease = self.tree.goal_of(self.tree.nodes[self.tree.claims[intent.claim].leaf]).claim_lease_ms
                if now - self._last_renew.get(intent.claim, 0) < lease * RENEW_SPACING_FRACTION:
                    continue
                self._last_renew[intent.claim] = now
            try:
                await self.publish(compose(intent, self.tree, self.backend, self.me))  # type: ignore[arg-type]
            except (StoreError, HoldingStill):  # (a failing disk, ``DiskFailed``, ends the member)
                return False  # logged; the policy asks again next time (unless holding still)
            return True
        return False

    async def _publish_unsent(self, intent: Intent) -> bool:
        """Publish again what a thought composed and the store refused, without asking the model
        again: a full disk refuses every try until it has room, and a retry that thought anew
        called the model back to back all that while (tried at most every ``UNSENT_RETRY_S``,
        and while the model is unreachable too: nothing is asked of it). True when it went out."""
        body = self._unsent[intent]
        if isinstance(body, (ResultBody, FailureBody)) and self._claim_gone(body.leaf, body.claim):
            del self._unsent[intent]  # the claim lapsed meanwhile: a result (or handback) could never count
            self._log.info("result discarded: claim no longer ours", leaf=body.leaf[:10])
            return False
        try:
            await self.publish(body)
        except (StoreError, HoldingStill):  # the disk still full: tried again ``UNSENT_RETRY_S`` after
            return False
        del self._unsent[intent]
        self._done.add(intent)  # as after a thought published at once
        return True

    def _drop_moot(self, wanted) -> None:
        """Drop the model calls under way whose intents are not in ``wanted`` (the policy's list
        now): what they would sign can no longer count, and a call the member may still need
        is never in this state, since a policy asks for an intent until its event is in the tree.
        A dropped intent leaves ``_done`` once its call has ended (``_think``): if the policy ever
        asked for it again it would be thought anew."""
        still_wanted = set(wanted)
        for intent in [i for i in self._unsent if i not in still_wanted]:
            del self._unsent[intent]  # its event would no longer count
        for intent, (scope, drop) in list(self._drops.items()):
            if intent not in still_wanted and not drop.is_set():
                drop.set()  # seen by the backend on its worker thread, between two tokens
                scope.cancel()  # ends a simulated call's wait at once

    def _note_model_reach(self, problem: str | None) -> None:
        """Back off while the model cannot be reached at all (its service down or restarting), and
        say so once when it goes and once when it comes back."""
        if problem is None:
            if self._model_failures:
                self._log.warning("model reachable again", failed_calls=self._model_failures)
            self._model_failures = 0
            return
        self._model_failures += 1
        wait = min(MODEL_RETRY_MAX_S, 2.0 ** (self._model_failures - 1))
        self._model_down_until = trio.current_time() + wait
        if self._model_failures == 1:
            self._log.warning("model unreachable: no proposals, votes or claims until it answers again",
                              problem=problem, retry_in_s=wait)
        if self.metrics is not None:
            self.metrics.model_unreachable()

    def _claim_gone(self, leaf: str, claim: str) -> bool:
        node = self.tree.nodes.get(leaf)
        return node is not None and node.claim != claim

    async def _think(self, intent: Intent) -> None:
        assert self.backend is not None
        backend, tree = self.backend, self.tree
        scope, drop = trio.CancelScope(), threading.Event()
        self._drops[intent] = (scope, drop)
        try:
            kind, key = latency_key(intent)
            started = time.monotonic()
            self.stats.model_calls += 1
            with scope:
                delay = backend.latency_s(kind, key)
                if delay > 0:
                    await trio.sleep(delay)  # a simulated call's time: a dropped one ends here
                self._thoughts[intent] = (kind, key, self.now_ms())
                self._show_doing()
                self._log.info("thinking", kind=kind, about=key[:10])
                started = time.monotonic()
                try:
                    if self._think_in_thread:
                        body, unavailable, tokens = await trio.to_thread.run_sync(
                            _compose_here, intent, tree, backend, self.me, drop)
                    else:
                        body, unavailable, tokens = _compose_here(intent, tree, backend, self.me, drop)
                except CallDropped:
                    scope.cancel()
            # A drop while the worker thread ran is not a trio cancellation (the thread is never
            # abandoned, and its outcome comes back as usual): the event says it was dropped.
            if scope.cancelled_caught or drop.is_set():
                self._done.discard(intent)  # only now: while this call ran, it could not start again
                self.stats.model_calls_dropped += 1
                self._log.info("thought dropped: no longer wanted", kind=kind, about=key[:10],
                               seconds=round(time.monotonic() - started, 2))
                return
            seconds = time.monotonic() - started
            self._note_model_reach(unavailable)
            self._log.info("thought", kind=kind, about=key[:10], seconds=round(seconds, 2), tokens=tokens,
                           outcome="failed" if body is None else body.kind)
            if self.metrics is not None:
                self.metrics.thought(kind, seconds, tokens)
            if self.still:
                pass  # holding still: nothing more is signed
            elif body is None:
                self._done.discard(intent)  # the model failed; the policy will ask again
            elif isinstance(body, ResultBody) and self._claim_gone(body.leaf, body.claim):
                # our claim lost or lapsed while we worked: the result could never be accepted
                self._log.info("result discarded: claim no longer ours", leaf=body.leaf[:10])
                if self._trace:
                    self._trace(f"discarded its result for leaf {body.leaf[:8]}: claim no longer held")
            else:
                try:
                    await self.publish(body)
                except StoreError:  # not stored, not sent: sent again later as it is (``_publish_unsent``)
                    self._unsent[intent] = body
                    self._done.discard(intent)
                except HoldingStill:
                    pass
        finally:
            self._drops.pop(intent, None)
            self._thoughts.pop(intent, None)
            self._show_doing()
            self.changed.set()

    def _show_doing(self) -> None:
        """The status channel shows one thought: the oldest still under way, if any."""
        self.doing = min((t for t in self._thoughts.values() if t is not None), key=lambda t: t[2], default=None)


def _compose_here(intent: Intent, tree: PlanTree, backend: Backend, me: Me,
                  drop: threading.Event) -> tuple[EventBody | None, str | None, int]:
    """``compose`` on the calling thread, with what this call alone saw: whether the model could
    be reached (None: it was) and the tokens it drew (other calls may run beside it on other threads).
    ``CallDropped`` once ``drop`` is set, where the backend can give up under way."""
    tokens_here = getattr(backend, "tokens_here", None)
    before = tokens_here() if tokens_here is not None else int(getattr(backend, "tokens", 0) or 0)
    drop_when = getattr(backend, "drop_when", None)
    if drop_when is not None:
        drop_when(drop)
    try:
        body = compose(intent, tree, backend, me)
    finally:
        if drop_when is not None:
            drop_when(None)  # the worker thread is reused: the next call on it must not see this one's drop
    after = tokens_here() if tokens_here is not None else int(getattr(backend, "tokens", 0) or 0)
    return body, getattr(backend, "unavailable", None), after - before
