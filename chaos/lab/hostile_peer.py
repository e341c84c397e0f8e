"""A hostile peer for the container lab: real libp2p, on the lab's network, never admitted.

Run in its own container (``python -m chaos.lab.hostile_peer --bootstrap ADDR ...``) by
the ``hostile`` step of a scenario. For ``--seconds`` it:

* gossips events by sybil keys whose tickets a rogue authority signed (proposals
  for the root, votes, claims), garbage bytes, oversized payloads and re-signed
  events on the cluster's topic: members must refuse and count them, never store
  or relay them;
* opens ``/swarm/sync/4.0.0`` streams to members and sends a length prefix of
  2^32-1, then garbage frames, then a summary with a forged ticket: members
  must drop each without reading gigabytes or waiting;
* opens many streams to each member at once, each announcing a frame just under
  the opening step's limit, sending all of it but a byte, and stalling: members
  must serve only so many at once and drop them at their deadline, so what they
  buffer for it stays bounded;
* accepts every pull members open to it and never answers: members must drop
  it at their deadline and keep syncing with everyone else.

It prints one JSON line of what it sent when it stops.
"""

from __future__ import annotations

import argparse
import json
import os
import random

import trio
from libp2p.peer.id import ID

from agents.core.admission import issue
from agents.core.author import Author
from agents.core.clock import HybridClock
from agents.core.events import MAX_EVENT_BYTES, ClaimBody, GoalBody, ProposalBody, Subgoal, VoteBody
from agents.core.identity import Identity
from agents.member import wall_ms
from agents.net.p2p import SYNC_PROTOCOL, Libp2pNetwork


def _sybil(name: str, role: str, cluster: str, rogue: Identity) -> Author:
    identity = Identity(os.urandom(32))
    return Author(identity, role, HybridClock(wall_ms), issue(rogue, cluster, identity.peer_id, role).sig)  # type: ignore[arg-type]


HOARD_STREAMS = 32  # per member: twice what a member serves at once
HOARD_FRAME = 1024 * 1024 - 64  # just under the summary frame limit


async def _hoard(network: Libp2pNetwork, peer: str, sent: dict[str, int]) -> None:
    """Streams that announce an almost full frame, send all but its last byte, and stall."""
    async def one() -> None:
        try:
            stream = await network.host.new_stream(ID.from_base58(peer), [SYNC_PROTOCOL])
            await stream.write(HOARD_FRAME.to_bytes(4, "big") + b"x" * (HOARD_FRAME - 1))
            sent["hoard"] += 1
            await trio.sleep_forever()
        except Exception as exc:  # the member closed it: what it should do
            sent["hoard_dropped"] += 1
            sent.setdefault("hoard_error", repr(exc)[:200])  # type: ignore[arg-type]

    async with trio.open_nursery() as nursery:
        for _ in range(HOARD_STREAMS):
            nursery.start_soon(one)


async def _attack(network: Libp2pNetwork, cluster: str, seconds: float, sent: dict[str, int]) -> None:
    rogue = Identity(os.urandom(32))
    rng = random.Random(0)
    client = _sybil("client", "client", cluster, rogue)
    scorers = [_sybil(f"s{i}", "scorer", cluster, rogue) for i in range(3)]
    roster = tuple(sorted(s.peer_id for s in scorers))
    goal = client.sign(GoalBody(text="Go to Japan", scorers=roster, quorum=2, max_depth=1, claim_lease_ms=1000,
                                hold_limit_ms=1000, round_ms=1000))
    deadline = trio.current_time() + seconds
    while trio.current_time() < deadline:
        dec = _sybil("d", "decomposer", cluster, rogue)
        split = dec.sign(ProposalBody(node=goal.id, strategy="sybil", subgoals=(
            Subgoal(title="Go to Japan", executable=True), Subgoal(title="Do things in Japan", executable=True))))
        payloads = [goal.to_wire(), split.to_wire(),
                    scorers[0].sign(VoteBody(proposal=split.id, clarity=5, non_overlap=5, coverage=5,
                                             approve=True)).to_wire(),
                    _sybil("e", "executor", cluster, rogue).sign(ClaimBody(leaf=goal.id, epoch=1)).to_wire(),
                    rng.randbytes(100), b"x" * (MAX_EVENT_BYTES + 1)]
        for payload in payloads:
            await network.publish(payload)
            sent["gossip"] += 1
        for peer in network.connected_peers():
            with trio.move_on_after(5):
                try:
                    stream = await network.host.new_stream(ID.from_base58(peer), [SYNC_PROTOCOL])
                    await stream.write((2**32 - 1).to_bytes(4, "big") + b"{")  # an absurd frame, then nothing
                    await stream.close()
                    stream = await network.host.new_stream(ID.from_base58(peer), [SYNC_PROTOCOL])
                    for frame in (b"not json", json.dumps({"type": "summary", "cluster": cluster,
                                                           "ticket": {"peer": peer, "role": "observer",
                                                                      "sig": "A" * 86 + "=="},
                                                           "authors": {}}).encode()):
                        await stream.write(len(frame).to_bytes(4, "big") + frame)
                    await stream.close()
                    sent["sync"] += 2
                except Exception:  # a member that hangs up on us is doing its job
                    sent["sync_dropped"] += 1
        await trio.sleep(1.0)


async def _never_answer(stream) -> None:
    await trio.sleep_forever()


async def main_async(args: argparse.Namespace) -> dict[str, int]:
    sent = {"gossip": 0, "sync": 0, "sync_dropped": 0, "hoard": 0, "hoard_dropped": 0}
    network = Libp2pNetwork(Identity(os.urandom(32)), args.cluster, [args.listen], args.bootstrap, mdns=False)
    network.serve(_never_answer)
    async with trio.open_nursery() as nursery:
        await nursery.start(network.run)
        with trio.move_on_after(args.seconds + 30):
            with trio.move_on_after(10):  # every member it was told of, or whoever answered by then
                while len(network.connected_peers()) < max(1, len(args.bootstrap)):
                    await trio.sleep(0.2)
            while not network.connected_peers():
                await trio.sleep(0.2)
            async with trio.open_nursery() as attack:
                for peer in network.connected_peers():
                    attack.start_soon(_hoard, network, peer, sent)
                await _attack(network, args.cluster, args.seconds, sent)
                attack.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description="a hostile peer for the container lab (never admitted)")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--listen", default="/ip4/0.0.0.0/tcp/4001")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    print(json.dumps(trio.run(main_async, args)), flush=True)


if __name__ == "__main__":
    main()
