"""The hostile member: a peer on the same network that lies, drawn from the seed.

It joins the simulated fabric like any member and runs one or more behaviours:

* ``sybil``: fresh keys with tickets from a rogue authority gossip proposals, votes,
  ballots and claims, and open sync conversations: every one must be refused (ticket);
* ``forker``: an admitted decomposer and an admitted executor sign two branches at one
  seq (two drafts; two results for one claim): kept as evidence, nothing honest erased;
* ``limits``: an admitted executor stamps an event at the largest clock counter, a few
  seconds ahead: receivers' clocks move on without ever overflowing;
* ``garbage``: random bytes, oversized payloads, old-version and re-signed events on the
  gossip topic: refused by rule and counted;
* ``sync-garbage``: sync conversations that open with garbage frames, or with a summary and
  then silence: the member's serving side refuses or times out, nothing else waits;
* ``stall``: it accepts every pull and never answers: members drop it at their deadline
  and go on syncing with everyone else;
* ``flood``: an admitted decomposer drafts nodes a hundred times (three per node count)
  and stamps a hundred events a year ahead (refused for now, remembered, never held);
* ``hog``: an admitted executor claims every leaf and renews forever without answering:
  the hold limit takes the leaves back.

Hostile peers are admitted as what their behaviour needs (never as scorers: the roster
tolerates ``2q - n - 1`` equivocating scorers, none with the default quorum). They are not
members of the run's history: the checkers judge the honest members and what they refused.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import trio

from agents.core.admission import Credentials, Gate, issue
from agents.core.author import Author
from agents.core.clock import MAX_COUNTER, HybridClock, Timestamp
from agents.core.events import (
    MAX_EVENT_BYTES,
    BallotBody,
    ClaimBody,
    Event,
    ProposalBody,
    RenewBody,
    ResultBody,
    Subgoal,
    VoteBody,
    sign_event,
)
from agents.core.identity import Identity
from agents.core.tree import PlanTree
from agents.net.base import StreamClosed
from agents.syncproto import pull
from agents.syncwire import SyncProtocolError, encode_message
from chaos.sim.network import SimFabric

BEHAVIOURS = ("sybil", "forker", "limits", "garbage", "sync-garbage", "stall", "flood", "hog")
YEAR_MS = 365 * 24 * 3600 * 1000
FLOOD = 120  # drafts, and events a year ahead: enough to show the caps, few enough for the CPU


def draw_behaviours(rng: random.Random) -> tuple[str, ...]:
    return tuple(sorted(rng.sample(BEHAVIOURS, k=rng.randint(2, 4))))


class Hostile:
    """The attacker. ``tree`` reads the plan as some honest member sees it (it targets real nodes)."""

    def __init__(self, fabric: SimFabric, cluster: str, authority: Identity, seed: int,
                 behaviours: tuple[str, ...], now_ms: Callable[[], int], tree: Callable[[], PlanTree],
                 say: Callable[[str], None], admitted: set[str]) -> None:
        self.admitted = admitted
        self.fabric = fabric
        self.cluster = cluster
        self.authority = authority
        self.behaviours = behaviours
        self.now_ms = now_ms
        self.tree = tree
        self.say = say
        self.rng = random.Random(f"swarm-sim/{seed}/hostile")
        self.seed = seed
        self.sent = 0

    def _identity(self, name: str) -> Identity:
        import hashlib

        return Identity(hashlib.sha256(f"swarm-sim/{self.seed}/hostile/{name}".encode()).digest())

    def _author(self, name: str, role: str, authority: Identity | None = None) -> Author:
        identity = self._identity(name)
        if authority is None:
            self.admitted.add(identity.peer_id)  # the cluster's authority admitted this one
        ticket = issue(authority or self.authority, self.cluster, identity.peer_id, role)
        return Author(identity, role, HybridClock(self.now_ms), ticket.sig)  # type: ignore[arg-type]

    async def _gossip(self, sender: str, data: bytes) -> None:
        self.fabric.gossip(sender, data)
        self.sent += 1
        await trio.sleep(0.01)

    def _targets(self) -> tuple[list[str], list[str], list[str]]:
        """Open nodes, leaves not done, and proposals: what a plausible attack aims at."""
        tree = self.tree()
        nodes = [n.id for n in tree.nodes.values() if not n.leaf] or [g.id for g in tree.goals] or ["ab" * 32]
        leaves = [n.id for n in tree.nodes.values() if n.leaf and n.status != "done"]
        return nodes, leaves, list(tree.proposals) or ["ab" * 32]

    async def run(self) -> None:
        endpoint = self.fabric.endpoint(self._identity("network").peer_id)
        try:
            async with trio.open_nursery() as nursery:
                endpoint.attach(nursery)
                if "stall" in self.behaviours:
                    endpoint.serve(self._never_answer)
                self.fabric.bring_up(endpoint)
                for behaviour in self.behaviours:
                    self.say(f"hostile {behaviour}")
                    await getattr(self, "_" + behaviour.replace("-", "_"))(endpoint.peer_id)
                if "stall" in self.behaviours:
                    await trio.sleep_forever()  # stays up, accepting pulls it never answers
                nursery.cancel_scope.cancel()
        finally:
            self.fabric.take_down(endpoint.peer_id)  # its streams can no longer be served

    async def _never_answer(self, stream) -> None:
        await trio.sleep_forever()

    async def _sybil(self, sender: str) -> None:
        rogue = self._identity("rogue authority")
        nodes, leaves, proposals = self._targets()
        for i in range(5):
            dec = self._author(f"sybil-d{i}", "decomposer", rogue)
            sco = self._author(f"sybil-s{i}", "scorer", rogue)
            exe = self._author(f"sybil-e{i}", "executor", rogue)
            split = ProposalBody(node=nodes[0], strategy="sybil", subgoals=(
                Subgoal(title="Go to Japan", executable=True), Subgoal(title="Do things in Japan", executable=True)))
            await self._gossip(sender, dec.sign(split).to_wire())
            await self._gossip(sender, sco.sign(VoteBody(proposal=proposals[0], clarity=5, non_overlap=5,
                                                         coverage=5, approve=True)).to_wire())
            await self._gossip(sender, sco.sign(BallotBody(node=nodes[0], round=1, candidate=proposals[0],
                                                           approve=True)).to_wire())
            if leaves:
                await self._gossip(sender, exe.sign(ClaimBody(leaf=leaves[0], epoch=1)).to_wire())
        # a sync conversation with a ticket from the rogue authority
        rogue_creds = Credentials(self._identity("sybil-d0"),
                                  issue(rogue, self.cluster, self._identity("sybil-d0").peer_id, "decomposer"),
                                  Gate(self.cluster, rogue.peer_id))
        from agents.core.sync import EventIndex

        for peer in self.fabric.peers_of(sender)[:3]:
            try:
                stream = await self.fabric.open_stream(sender, peer)
                with trio.move_on_after(5):
                    await pull(stream, EventIndex(), rogue_creds)
            except (StreamClosed, SyncProtocolError):
                pass

    async def _forker(self, sender: str) -> None:
        nodes, leaves, _ = self._targets()
        dec = self._author("forker-d", "decomposer")
        first = dec.sign(ProposalBody(node=nodes[0], strategy="fork-a", subgoals=(
            Subgoal(title="Forked one", executable=True), Subgoal(title="Forked two", executable=True))))
        dec.unsign(first)
        second = dec.sign(ProposalBody(node=nodes[0], strategy="fork-b", subgoals=(
            Subgoal(title="Other one", executable=True), Subgoal(title="Other two", executable=True))))
        for event in (first, second):
            await self._gossip(sender, event.to_wire())
        if leaves:
            exe = self._author("forker-e", "executor")
            claim = exe.sign(ClaimBody(leaf=leaves[-1], epoch=1))
            await self._gossip(sender, claim.to_wire())
            one = exe.sign(ResultBody(leaf=leaves[-1], claim=claim.id, output="fork one"))
            exe.unsign(one)
            two = exe.sign(ResultBody(leaf=leaves[-1], claim=claim.id, output="fork two"))
            for event in (one, two):
                await self._gossip(sender, event.to_wire())

    async def _limits(self, sender: str) -> None:
        _, leaves, _ = self._targets()
        exe = self._author("limits-e", "executor")
        exe.clock.restore(Timestamp(self.now_ms() + 5000, MAX_COUNTER - 1))
        event = exe.sign(ClaimBody(leaf=leaves[0] if leaves else "cd" * 32, epoch=1000))
        await self._gossip(sender, event.to_wire())

    async def _garbage(self, sender: str) -> None:
        dec = self._author("garbage-d", "decomposer")
        nodes, _, _ = self._targets()
        valid = dec.sign(ProposalBody(node=nodes[0], strategy="g", subgoals=(
            Subgoal(title="x", executable=True), Subgoal(title="y", executable=True))))
        tampered = json.loads(valid.to_wire())
        tampered["body"]["strategy"] = "tampered"
        old = dict(json.loads(valid.to_wire()), v=1)
        mallory = Identity(b"m" * 32)
        resigned = sign_event(mallory, "decomposer", 1, None, valid.ts, valid.body,
                              issue(self._identity("rogue authority"), self.cluster, mallory.peer_id, "decomposer").sig)
        for payload in (self.rng.randbytes(200), b"{", b"x" * (MAX_EVENT_BYTES + 1), json.dumps(tampered).encode(),
                        json.dumps(old).encode(), resigned.to_wire()):
            await self._gossip(sender, payload)

    async def _sync_garbage(self, sender: str) -> None:
        for peer in self.fabric.peers_of(sender)[:3]:
            for frames in ([self.rng.randbytes(64)], [b"[1, 2, 3]"],
                           [encode_message({"type": "summary", "cluster": self.cluster, "authors": {"x": "y"}})],
                           [encode_message({"type": "summary", "cluster": self.cluster,
                                     "ticket": {"peer": sender, "role": "observer", "sig": "A" * 86 + "=="},
                                     "authors": {}})]):
                try:
                    stream = await self.fabric.open_stream(sender, peer)
                    for frame in frames:
                        await stream.send(frame)
                    with trio.move_on_after(1):
                        await stream.receive()
                    await stream.aclose()
                except StreamClosed:
                    pass

    async def _stall(self, sender: str) -> None:
        """Nothing to send: it serves pulls with ``_never_answer`` for the rest of the run."""

    async def _flood(self, sender: str) -> None:
        nodes, _, _ = self._targets()
        dec = self._author("flood-d", "decomposer")
        for i in range(FLOOD):
            split = ProposalBody(node=nodes[i % len(nodes)], strategy="flood", subgoals=(
                Subgoal(title=f"Flood {i} a", executable=True), Subgoal(title=f"Flood {i} b", executable=True)))
            await self._gossip(sender, dec.sign(split).to_wire())
        ahead = self._author("flood-future", "decomposer")
        ahead.clock.restore(Timestamp(self.now_ms() + YEAR_MS, 0))
        for i in range(FLOOD):
            split = ProposalBody(node=nodes[0], strategy="future", subgoals=(
                Subgoal(title=f"Later {i} a", executable=True), Subgoal(title=f"Later {i} b", executable=True)))
            await self._gossip(sender, ahead.sign(split).to_wire())

    async def _hog(self, sender: str) -> None:
        exe = self._author("hog-e", "executor")
        claimed: dict[str, Event] = {}
        for _ in range(60):  # about a minute of hogging, then it leaves
            tree = self.tree()
            for leaf in (n for n in tree.leaves() if n.status != "done"):
                mine = claimed.get(leaf.id)
                if mine is None or (leaf.claim != mine.id and leaf.epoch >= mine.body.epoch):  # type: ignore[union-attr]
                    epoch = max((c.epoch for c in tree.claims_on(leaf.id)), default=0) + 1
                    claimed[leaf.id] = exe.sign(ClaimBody(leaf=leaf.id, epoch=epoch))
                    await self._gossip(sender, claimed[leaf.id].to_wire())
                else:
                    await self._gossip(sender, exe.sign(RenewBody(claim=mine.id)).to_wire())
            await trio.sleep(1.0)
