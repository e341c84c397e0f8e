"""``swarm model``, ``agent`` and ``submit``: members on a real libp2p network (``swarm
observe`` and ``inspect`` are ``agents.cli.observe``; what they share, ``agents.cli.members``)."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import structlog
import trio

from agents import logs
from agents.cli.common import positive
from agents.cli.errors import CommandError, UsageError
from agents.cli.members import (
    add_network_options,
    host_port,
    make_member,
    network_for,
    open_member,
    run_member,
    run_member_loop,
    until_signal,
    write_addrs,
)
from agents.clusterdir import AdmissionError, read_members
from agents.core.events import Event, GoalBody
from agents.member import Member
from agents.metrics import MemberMetrics, parse_address
from agents.net.base import Network

log = structlog.get_logger("swarm.cli")
PEEK_DEADLINE = 5.0  # seconds swarm submit waits for one member's summary before asking the next
MAX_PARALLEL = 8  # the model service's default number of slots


def cmd_agent(args: argparse.Namespace) -> int:
    from agents import llm

    # "{hostname}" lets replicas of one compose service share a volume, a directory each
    data_dir = Path(args.data_dir.replace("{hostname}", socket.gethostname()))
    creds, store = open_member(data_dir, args.role, args)
    identity = creds.identity
    backend = None
    if creds.role != "observer":
        try:
            if (args.llm_parallel or 1) > 1 and args.llm == "llama":
                raise CommandError("--llm-parallel is for a server that batches calls (--llm openai, e.g. 'swarm "
                                   "model-service'); --llm llama's one model in this process answers one call at "
                                   "a time: leave --llm-parallel out")
            backend = llm.create(args.llm, seed=int(identity.public_key[:4].hex(), 16), latency=args.llm_latency,
                                 model=args.model, threads=args.llm_threads, timeout=args.llm_timeout,
                                 url=args.llm_url, parallel=args.llm_parallel or 1)
        except llm.LLMError as exc:
            raise CommandError(str(exc)) from None
    network = network_for(creds, args)
    members: list[Member] = []
    metrics = None
    if args.metrics:  # bound before the event loop: a busy port is a plain error here
        metrics = MemberMetrics(creds.role)
        host, port = parse_address(args.metrics)
        try:
            metrics.serve(host, port)
        except OSError as exc:
            store.close()
            raise CommandError(f"cannot serve metrics on {args.metrics}: {exc.strerror or exc}; pick another "
                               "--metrics HOST:PORT") from None
        log.info("metrics", url=f"http://{host}:{port}/metrics")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(until_signal, nursery.cancel_scope)
            member, board = make_member(creds, store, network, data_dir, backend=backend, strategy=args.strategy)
            member.metrics = metrics
            members.append(member)
            await run_member(nursery, member, network, board)
            write_addrs(data_dir, network.addresses())
            log.info("member running", role=creds.role, peer=identity.peer_id, cluster=creds.cluster,
                     data_dir=str(data_dir), events=len(member.index))

    run_member_loop(main, store)
    store.close()
    if members:
        members[0].close()
        log.info("member stats", **vars(members[0].stats), refused_by_rule=dict(members[0].intake.refused),
                 libp2p_noise=logs.noise_counts())
    if backend is not None:
        log.info("model usage", backend=backend.name, model=backend.model, calls=getattr(backend, "calls", 0),
                 tokens=getattr(backend, "tokens", 0), seconds=round(getattr(backend, "seconds", 0.0), 2),
                 vague_retries=getattr(backend, "vague_retries", 0), vague_answers=getattr(backend, "vague_answers", 0),
                 dropped=members[0].stats.model_calls_dropped if members else 0)
    return 0


async def _connected(network, timeout: float) -> bool:
    with trio.move_on_after(timeout):
        while not network.connected_peers():
            await trio.sleep(0.1)
        return True
    return False


def cmd_submit(args: argparse.Namespace) -> int:
    if not args.bootstrap and not args.mdns:
        raise CommandError("swarm submit needs a peer: give --bootstrap MULTIADDR (or allow mDNS)")
    data_dir = Path(args.data_dir)
    scorers = _roster(args)
    quorum = args.quorum or len(scorers) // 2 + 1
    try:
        body = GoalBody(text=args.goal, scorers=scorers, quorum=quorum, max_depth=args.max_depth,
                        claim_lease_ms=int(args.claim_lease * 1000),
                        hold_limit_ms=int((args.hold_limit or 4 * args.claim_lease) * 1000),
                        round_ms=int(args.round * 1000))
    except ValueError as exc:
        raise UsageError(f"not a valid goal: {str(exc).splitlines()[-1].strip()}") from None
    creds, store = open_member(data_dir, "client", args)
    network = network_for(creds, args)
    outcome: dict[str, str] = {}
    holders: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member, _board = make_member(creds, store, network, data_dir)
            await nursery.start(network.run)
            await nursery.start(member.run)
            with trio.move_on_after(args.timeout):
                if not await _connected(network, args.timeout):
                    nursery.cancel_scope.cancel()
                    return
                goal = await member.publish(body)
                outcome["goal"] = goal.id
                while len(holders) < args.holders:
                    for peer in network.connected_peers():
                        if peer not in holders and await _holds(network, peer, member, goal):
                            holders.append(peer)
                            if len(holders) >= args.holders:
                                break
                    else:
                        await trio.sleep(0.3)
            nursery.cancel_scope.cancel()

    run_member_loop(main, store)
    store.close()
    if "goal" not in outcome:
        raise CommandError(f"no peer reachable within {args.timeout:g} s; check --bootstrap (and that members run)")
    if len(holders) < args.holders:
        raise CommandError(f"goal {outcome['goal'][:16]} published, but {len(holders)} of the {args.holders} "
                           f"members --holders asks for confirmed holding it within {args.timeout:g} s"
                           + (f" (fewer members than that? give --holders {len(holders)})" if holders else ""))
    print(f"goal {outcome['goal']} submitted; held by {', '.join(holders)}")
    return 0


async def _holds(network: Network, peer: str, member: Member, goal: Event) -> bool:
    """Whether ``peer`` is a member that says it holds ``goal`` on its disk: the summary it
    serves a client lists it (another client holding it is no member that will serve it). A
    peer that stalls is given ``PEEK_DEADLINE`` seconds, then the next is asked."""
    from agents.syncproto import peek

    stream, answer = None, None
    with trio.move_on_after(PEEK_DEADLINE):
        try:
            stream = await network.open_stream(peer)
            answer = await peek(stream, member.index, member.credentials)
        except Exception as exc:  # the peer may be starting up; it is asked again
            log.debug("ack check failed", peer=peer, error=repr(exc)[:100])
    if stream is not None:  # a stalled or failed conversation is reset, not left to linger
        await (stream.aclose() if answer is not None else stream.abort())
    if answer is None:
        return False
    role, theirs = answer
    return role != "client" and theirs.holds_through(goal)


def _roster(args: argparse.Namespace) -> tuple[str, ...]:
    if args.scorers:
        return tuple(sorted({p.strip() for p in args.scorers.split(",") if p.strip()}))
    if args.roster:
        try:
            members = read_members(Path(args.roster))
        except AdmissionError as exc:
            raise UsageError(str(exc)) from None
        scorers = tuple(sorted({m["peer"] for m in members if m["role"] == "scorer"}))
        if not scorers:
            raise UsageError(f"{args.roster} lists no scorer; admit some with 'swarm admit CLUSTER_DIR --role scorer'")
        return scorers
    raise UsageError("a goal names the scorers who decide it: give --roster CLUSTER_DIR/members.json "
                     "or --scorers PEER,PEER,...")


def add_llm_options(parser: argparse.ArgumentParser, latency_default: float) -> None:
    from agents import llm

    parser.add_argument("--llm", default="llama", choices=llm.available(),
                        help="model backend: llama (local GGUF, the default), openai (an OpenAI-compatible "
                             "server, --llm-url) or scripted (deterministic stand-in)")
    parser.add_argument("--model", metavar="PATH", help="llama: a GGUF file (default: SWARM_MODEL, else the packaged Qwen 0.5B)")
    parser.add_argument("--llm-url", metavar="URL", help="openai: API base of an OpenAI-compatible server")
    parser.add_argument("--llm-threads", type=int, default=1,
                        help="llama: CPU threads per member (keep members x threads <= cores)")
    parser.add_argument("--llm-timeout", type=float, default=120.0, help="seconds a model call may take")
    parser.add_argument("--llm-parallel", type=int, metavar="N", choices=range(1, MAX_PARALLEL + 1),
                        help=f"openai, scripted: model calls a member runs at once, 1 to {MAX_PARALLEL} (default 1; an "
                             "executor then works on N leaves together). More than 1 pays only with a server that "
                             "batches calls, such as 'swarm model-service'; 'swarm plan' gives its own service's "
                             "members 2")
    parser.add_argument("--llm-latency", type=float, default=latency_default,
                        help="scripted: mean seconds per call")


def cmd_model(args: argparse.Namespace) -> int:
    from agents.llm.model_files import ModelFileError, resolve

    try:
        file = resolve(args.model)
    except ModelFileError as exc:
        raise CommandError(str(exc)) from None
    print(f"{file.name}\n  path   {file.path}\n  sha256 {file.sha256}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    from agents.llm.scripted import STRATEGIES

    model = sub.add_parser("model", help="find, join and verify the local model's weights; print where they are")
    model.add_argument("--model", metavar="PATH", help="a GGUF file instead of SWARM_MODEL or the packaged default")
    model.set_defaults(run=cmd_model)

    agent = sub.add_parser("agent", help="run one swarm member (a role) until stopped")
    agent.add_argument("--role", choices=["decomposer", "scorer", "executor", "observer"],
                       help="the role (default: the one its ticket admits; given, it must match)")
    agent.add_argument("--data-dir", required=True,
                       help="the member's identity key, admission ticket (ticket.json), event store and addrs "
                            "file ({hostname} is replaced by this machine's name)")
    add_llm_options(agent, latency_default=0.0)
    agent.add_argument("--strategy", default="activity", choices=STRATEGIES, help="decomposer: preferred split")
    agent.add_argument("--metrics", metavar="HOST:PORT", type=host_port,
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (events, refusals by rule, "
                            "sync, gossip latency, model calls)")
    add_network_options(agent)
    agent.set_defaults(run=cmd_agent)

    submit = sub.add_parser("submit", help="publish a goal and exit once members hold it on their disks")
    submit.add_argument("goal")
    roster = submit.add_mutually_exclusive_group()
    roster.add_argument("--roster", metavar="MEMBERS.json",
                        help="the scorers who decide this goal: every scorer in this members file "
                             "(CLUSTER_DIR/members.json, written by swarm admit)")
    roster.add_argument("--scorers", metavar="PEER,PEER,...", help="the scorers who decide this goal, by peer id")
    submit.add_argument("--quorum", type=int, help="approving scorers a split needs (default: a majority of "
                        "the roster; at least that)")
    submit.add_argument("--max-depth", type=int, default=3)
    submit.add_argument("--claim-lease", type=float, default=30.0, help="seconds a silent holder keeps a leaf")
    submit.add_argument("--hold-limit", type=float, help="seconds a holder may keep a leaf without a result "
                        "(default: four leases)")
    submit.add_argument("--round", type=float, default=30.0, help="seconds scorers wait in a round before the next")
    submit.add_argument("--timeout", type=float, default=30.0)
    submit.add_argument("--holders", type=positive, default=2,
                        help="members that must say they hold the goal on their disks before submit "
                             "exits (default 2: one lost disk loses no goal)")
    submit.add_argument("--data-dir", required=True, help="the client's identity, ticket and events")
    add_network_options(submit)
    submit.set_defaults(run=cmd_submit)
