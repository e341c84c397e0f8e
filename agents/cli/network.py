"""``swarm agent``, ``submit``, ``observe`` and ``inspect``: members on a real libp2p network."""

from __future__ import annotations

import argparse
import math
import os
import secrets
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

import structlog
import trio

from agents import logs
from agents.cli.errors import CommandError, UsageError
from agents.clusterdir import AdmissionError, credentials, read_members
from agents.core.admission import Credentials
from agents.core.events import GoalBody
from agents.core.fold import fold
from agents.keyfile import KeyFileError, load_or_create
from agents.member import Member
from agents.metrics import MemberMetrics, parse_address
from agents.narrate import Narrator
from agents.render import plan_json, plan_markdown, render_tree, summary
from agents.status import StatusBoard, publish_statuses, read_statuses
from agents.store import EventStore, StoreError
from agents.web.server import Observatory, serving_observer, take_over
from agents.web.server import listen as listen_page
from agents.web.server import serve as serve_page

log = structlog.get_logger("swarm.cli")
DEFAULT_LISTEN = "/ip4/0.0.0.0/tcp/0"


def add_network_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", action="append", metavar="MULTIADDR",
                        help=f"address to listen on (repeatable; default {DEFAULT_LISTEN})")
    parser.add_argument("--bootstrap", action="append", default=os.environ.get("SWARM_BOOTSTRAP", "").split(),
                        metavar="MULTIADDR",
                        help="a peer to dial, /ip4/.../tcp/.../p2p/<peer id> or /dns4/NAME/tcp/...; one is "
                             "enough, the rest are learned from peers (repeatable; default: the "
                             "space-separated SWARM_BOOTSTRAP)")
    parser.add_argument("--cluster", help="cluster name (default: the one the member's ticket names; "
                        "given, it must match)")
    parser.add_argument("--no-mdns", dest="mdns", action="store_false", help="do not discover peers by mDNS")


def _mdns_listen(listen: list[str], mdns: bool) -> list[str]:
    """mDNS announces the addresses we listen on, and 0.0.0.0 is no address a peer can dial.
    With mDNS on, a wildcard becomes the address this machine's name resolves to (in a
    container: its address on the lab network), unless that is a loopback address."""
    if not mdns or not any("/ip4/0.0.0.0/" in a for a in listen):
        return listen
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        return listen
    if ip.startswith("127."):
        return listen
    log.info("listening on the host address so mDNS announces a dialable one", ip=ip)
    return [a.replace("/ip4/0.0.0.0/", f"/ip4/{ip}/") for a in listen]


def _network(creds: Credentials, args: argparse.Namespace):
    from agents.net.p2p import Libp2pNetwork

    try:
        listen = _mdns_listen(args.listen or [DEFAULT_LISTEN], args.mdns)
        return Libp2pNetwork(creds.identity, creds.cluster, listen, args.bootstrap, mdns=args.mdns,
                             credentials=creds)
    except ValueError as exc:
        raise CommandError(f"bad multiaddr in --listen or --bootstrap: {exc}") from None


def _open(data_dir: Path, role: str | None, args: argparse.Namespace) -> tuple[Credentials, EventStore]:
    """The member's credentials (its key and ticket: no ticket, no start) and its store."""
    try:
        identity = load_or_create(data_dir)  # a key made now would have had no ticket: never new here
        creds = credentials(data_dir, identity, role, getattr(args, "cluster", None))
        return creds, EventStore.open(data_dir)
    except (KeyFileError, StoreError, AdmissionError) as exc:
        raise CommandError(str(exc)) from None


def _member(creds: Credentials, store: EventStore, network, data_dir: Path, **kwargs) -> tuple[Member, StatusBoard]:
    """The member on ``network``, and the board of what its peers say they are doing: every
    member screens the status topic, so a status it does not believe goes no further."""
    member = Member(creds, store, network, transitions_path=data_dir / "transitions.jsonl",
                     feed_head_path=data_dir / "feed.head", **kwargs)
    network.validator = member.screen
    board = StatusBoard(creds.gate, on_status=lambda status: member.peer_holds(status.peer, status.events))
    network.status_validator = board.screen
    return member, board


async def _run_member(nursery: trio.Nursery, member: Member, network, board: StatusBoard) -> None:
    """Start the network, the member and its status channel (its own status out, others' in)."""
    await nursery.start(network.run)
    await nursery.start(member.run)
    nursery.start_soon(publish_statuses, member, network, board)
    nursery.start_soon(read_statuses, network)


def _write_addrs(data_dir: Path, addresses: list[str]) -> None:
    from agents.cli.common import write_atomically

    write_atomically(data_dir / "addrs", "".join(a + "\n" for a in addresses).encode())


async def _until_signal(cancel: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("stopping", signal=signal.Signals(signum).name)
            cancel.cancel()
            return


def cmd_agent(args: argparse.Namespace) -> int:
    from agents import llm

    # "{hostname}" lets replicas of one compose service share a volume, a directory each
    data_dir = Path(args.data_dir.replace("{hostname}", socket.gethostname()))
    creds, store = _open(data_dir, args.role, args)
    identity = creds.identity
    backend = None
    if creds.role != "observer":
        try:
            backend = llm.create(args.llm, seed=int(identity.public_key[:4].hex(), 16), latency=args.llm_latency,
                                 model=args.model, threads=args.llm_threads, timeout=args.llm_timeout,
                                 url=args.llm_url)
        except llm.LLMError as exc:
            raise CommandError(str(exc)) from None
    network = _network(creds, args)
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
            nursery.start_soon(_until_signal, nursery.cancel_scope)
            member, board = _member(creds, store, network, data_dir, backend=backend, strategy=args.strategy)
            member.metrics = metrics
            members.append(member)
            await _run_member(nursery, member, network, board)
            _write_addrs(data_dir, network.addresses())
            log.info("member running", role=creds.role, peer=identity.peer_id, cluster=creds.cluster,
                     data_dir=str(data_dir), events=len(member.index))

    trio.run(main)
    store.close()
    if members:
        members[0].close()
        log.info("member stats", **vars(members[0].stats), refused_by_rule=dict(members[0].intake.refused),
                 libp2p_noise=logs.noise_counts())
    if backend is not None:
        log.info("model usage", backend=backend.name, model=backend.model, calls=getattr(backend, "calls", 0),
                 tokens=getattr(backend, "tokens", 0), seconds=round(getattr(backend, "seconds", 0.0), 2),
                 vague_retries=getattr(backend, "vague_retries", 0), vague_answers=getattr(backend, "vague_answers", 0))
    return 0


async def _connected(network, timeout: float) -> bool:
    with trio.move_on_after(timeout):
        while not network.connected_peers():
            await trio.sleep(0.1)
        return True
    return False


def cmd_submit(args: argparse.Namespace) -> int:
    from agents.syncproto import peek

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
    creds, store = _open(data_dir, "client", args)
    network = _network(creds, args)
    outcome: dict[str, str] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            member, _board = _member(creds, store, network, data_dir)
            await nursery.start(network.run)
            await nursery.start(member.run)
            with trio.move_on_after(args.timeout):
                if not await _connected(network, args.timeout):
                    nursery.cancel_scope.cancel()
                    return
                goal = await member.publish(body)
                outcome["goal"] = goal.id
                while "acked" not in outcome:
                    for peer in network.connected_peers():
                        try:
                            stream = await network.open_stream(peer)
                            theirs = await peek(stream, member.index, creds)
                            await stream.aclose()
                        except Exception as exc:  # the peer may be starting up; try again
                            log.debug("ack check failed", peer=peer, error=repr(exc)[:100])
                            continue
                        mine = theirs.authors.get(creds.identity.peer_id)
                        if mine is not None and mine.prefix_id == goal.id:
                            outcome["acked"] = peer
                            break
                    await trio.sleep(0.3)
            nursery.cancel_scope.cancel()

    trio.run(main)
    store.close()
    if "goal" not in outcome:
        raise CommandError(f"no peer reachable within {args.timeout:g} s; check --bootstrap (and that members run)")
    if "acked" not in outcome:
        raise CommandError(f"goal {outcome['goal'][:16]} published, but no member confirmed holding it "
                           f"within {args.timeout:g} s")
    print(f"goal {outcome['goal']} submitted; held by {outcome['acked']}")
    return 0


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


def cmd_observe(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    web = parse_address(args.web) if args.web else None
    creds, store = _open(data_dir, "observer", args)
    network = _network(creds, args)
    page_socket, token, standby = None, "", False
    if web is not None:
        try:
            page_socket = listen_page(*web)
        except OSError as exc:
            serving = serving_observer(*web, creds.cluster)
            if serving is None:
                store.close()
                raise CommandError(f"cannot serve the page on {args.web}: {exc.strerror or exc}; pick another "
                                   "--web HOST:PORT") from None
            standby = True
            print(f"swarm observe: observer {serving[-8:]} already serves the page on {args.web}; "
                  "standing by to serve it if that observer stops", flush=True)
        token = secrets.token_urlsafe(24)  # for PUT /faults: whoever can read the data directory
        token_path = data_dir / "web.token"
        token_path.unlink(missing_ok=True)
        handle = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(handle, token.encode())
        os.close(handle)
    state: dict[str, object] = {"timed_out": False}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_signal, nursery.cancel_scope)
            member, board = _member(creds, store, network, data_dir)
            state["member"] = member
            await _run_member(nursery, member, network, board)
            _write_addrs(data_dir, network.addresses())
            if page_socket is not None:
                url = await nursery.start(serve_page, Observatory(member, board, token), page_socket)
                print(f"swarm observe: the live page is at {url}/", flush=True)
            elif standby and web is not None:
                nursery.start_soon(take_over, Observatory(member, board, token), *web, lambda url: print(
                    f"swarm observe: the page's observer stopped; the live page is at {url}/ from here", flush=True))
            forever = web is not None and not args.until_complete  # the page stays up until stopped
            with trio.move_on_after(math.inf if forever else args.timeout) as deadline:
                while not network.connected_peers():
                    await trio.sleep(0.1)
                if args.follow or args.until_complete or web is not None:
                    last: tuple[int, ...] = ()
                    narrator = Narrator()

                    def tell() -> None:
                        nonlocal last
                        for said in narrator.lines(member.tree, network.connected_peers(), board.members()):
                            print(f"  {said}", flush=True)
                        if _moved(member.tree) != last:  # not for every event: for progress
                            last = _moved(member.tree)
                            print(_progress(member), flush=True)

                    while not (args.until_complete and member.tree.complete):
                        tell()
                        member.changed = trio.Event()
                        with trio.move_on_after(1.0):
                            await member.changed.wait()
                    tell()  # what completed the plan
                else:
                    while await member.sync_all() > 0:  # one-shot: sync until quiet
                        pass
            state["timed_out"] = deadline.cancelled_caught
            nursery.cancel_scope.cancel()

    trio.run(main)
    member = state["member"]
    assert isinstance(member, Member)
    member.close()
    tree = member.tree
    _emit(tree, args, refused=member.stats.refused, reorganisations=member.stats.reorganisations,
          by_rule=member.intake.refused, sync={"events_in": member.stats.synced_in,
                                               "bytes_in": member.stats.sync_bytes_in,
                                               "bytes_out": member.stats.sync_bytes_out})
    store.close()
    if args.until_complete and not tree.complete:
        print(f"swarm observe: the plan is not complete after {args.timeout:g} s", file=sys.stderr)
        return 1
    if not args.follow and not args.until_complete and state["timed_out"]:
        print(f"swarm observe: no peer answered within {args.timeout:g} s", file=sys.stderr)
        return 1
    if not (args.follow or args.until_complete or web is not None) and not member.stats.pulls_whole:
        # connected, but every pull was refused, broken off or cut: the tree above may be partial
        print("swarm observe: no pull from a peer ran to its end (refused, broken off or timed out: "
              "the log says which); the tree shown may be partial", file=sys.stderr)
        return 1
    return 0


def _moved(tree) -> tuple[int, ...]:
    """What a progress line reports besides the event count: proposals, accepted, leaves done,
    leaves, complete. A line is printed when this changes."""
    leaves = tree.leaves()
    return (len(tree.proposals), sum(1 for p in tree.proposals.values() if p.status == "accepted"),
            sum(1 for leaf in leaves if leaf.status == "done"), len(leaves), int(tree.complete))


def _progress(member: Member) -> str:
    tree = member.tree
    proposals, accepted, done, leaves, complete = _moved(tree)
    return (f"[{len(member.network.connected_peers())} peers] {tree.events} events, "
            f"{proposals} proposals ({accepted} accepted), {done}/{leaves} leaves done"
            + (" - complete" if complete else ""))


def _emit(tree, args: argparse.Namespace, refused: int, reorganisations: int | None = None,
          by_rule: Mapping[str, int] | None = None, sync: Mapping[str, int] | None = None) -> None:
    from agents.cli.common import write_atomically
    from agents.cli.common import write_json as _write_json

    if getattr(args, "json", None):
        extra: dict | None = {"reorganisations": reorganisations} if reorganisations is not None else None
        if sync is not None:
            extra = {**(extra or {}), "sync": dict(sync)}
        _write_json(Path(args.json), plan_json(tree, refused=refused, extra=extra, by_rule=by_rule))
    if getattr(args, "md", None):
        write_atomically(Path(args.md), plan_markdown(tree).encode())
    print(render_tree(tree))
    print(summary(tree, refused=refused, reorganisations=reorganisations, by_rule=by_rule))


def _address(text: str) -> str:
    try:
        parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def cmd_inspect(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if not (data_dir / "events.sqlite3").exists():
        raise CommandError(f"{data_dir} holds no event store (events.sqlite3); is it a member's --data-dir?")
    try:
        with EventStore.open(data_dir) as store:
            tree = fold(store.events())
            counters = store.counters()
    except StoreError as exc:
        raise CommandError(str(exc)) from None
    by_rule = {name.split(":", 1)[1]: n for name, n in counters.items() if name.startswith("refused:")}
    _emit(tree, args, refused=counters.get("refused", 0), by_rule=by_rule)
    return 0


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
    agent.add_argument("--metrics", metavar="HOST:PORT", type=_address,
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (events, refusals by rule, "
                            "sync, gossip latency, model calls)")
    add_network_options(agent)
    agent.set_defaults(run=cmd_agent)

    submit = sub.add_parser("submit", help="publish a goal and exit once a member holds it")
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
    submit.add_argument("--data-dir", required=True, help="the client's identity, ticket and events")
    add_network_options(submit)
    submit.set_defaults(run=cmd_submit)

    observe = sub.add_parser("observe", help="join silently, rebuild the plan, print it")
    observe.add_argument("--follow", action="store_true", help="print a progress line as the plan grows")
    observe.add_argument("--until-complete", action="store_true", help="exit 0 once the plan is complete")
    observe.add_argument("--timeout", type=float, default=60.0)
    observe.add_argument("--json", metavar="FILE")
    observe.add_argument("--md", metavar="FILE")
    observe.add_argument("--web", metavar="HOST:PORT", type=_address, help="serve the live page here (and keep observing until "
                         "stopped, or until complete with --until-complete)")
    observe.add_argument("--data-dir", required=True, help="the observer's identity, ticket and what it learns")
    add_network_options(observe)
    observe.set_defaults(run=cmd_observe)

    inspect = sub.add_parser("inspect", help="print a member's tree and digest from its store, offline")
    inspect.add_argument("data_dir", metavar="DATA_DIR")
    inspect.add_argument("--json", metavar="FILE")
    inspect.set_defaults(run=cmd_inspect)
