"""What ``swarm agent``, ``submit`` and ``observe`` share: the network options, a member's
credentials, store, network and status board, and running them until a signal."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog
import trio

from agents.cli.errors import CommandError
from agents.clusterdir import AdmissionError, credentials
from agents.core.admission import Credentials
from agents.keyfile import KeyFileError, load_or_create
from agents.member import Member
from agents.metrics import parse_address
from agents.status import StatusBoard, publish_statuses, read_statuses
from agents.store import DiskFailed, EventStore, StoreError

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


def network_for(creds: Credentials, args: argparse.Namespace):
    from agents.net.p2p import Libp2pNetwork

    try:
        listen = _mdns_listen(args.listen or [DEFAULT_LISTEN], args.mdns)
        return Libp2pNetwork(creds.identity, creds.cluster, listen, args.bootstrap, mdns=args.mdns,
                             credentials=creds)
    except ValueError as exc:
        raise CommandError(f"bad multiaddr in --listen or --bootstrap: {exc}") from None


def open_member(data_dir: Path, role: str | None, args: argparse.Namespace) -> tuple[Credentials, EventStore]:
    """The member's credentials (its key and ticket: no ticket, no start) and its store."""
    try:
        identity = load_or_create(data_dir)  # a key made now would have had no ticket: never new here
        creds = credentials(data_dir, identity, role, getattr(args, "cluster", None))
        return creds, EventStore.open(data_dir)
    except (KeyFileError, StoreError, AdmissionError) as exc:
        raise CommandError(str(exc)) from None


def make_member(creds: Credentials, store: EventStore, network, data_dir: Path, **kwargs) -> tuple[Member, StatusBoard]:
    """The member on ``network``, and the board of what its peers say they are doing: every
    member screens the status topic, so a status it does not believe goes no further."""
    member = Member(creds, store, network, transitions_path=data_dir / "transitions.jsonl",
                     feed_head_path=data_dir / "feed.head", **kwargs)
    network.validator = member.screen
    board = StatusBoard(creds.gate, on_status=lambda status: member.peer_holds(status.peer, status.events))
    network.status_validator = board.screen
    return member, board


async def run_member(nursery: trio.Nursery, member: Member, network, board: StatusBoard) -> None:
    """Start the network, the member and its status channel (its own status out, others' in)."""
    await nursery.start(network.run)
    await nursery.start(member.run)
    nursery.start_soon(publish_statuses, member, network, board)
    nursery.start_soon(read_statuses, network)


def write_addrs(data_dir: Path, addresses: list[str]) -> None:
    """Say where the member listens, in its data directory (the lab and ``swarm plan`` wait
    for this file); a disk that cannot take it stops the member (``DiskFailed``) with a message."""
    from agents.cli.common import write_atomically

    try:
        write_atomically(data_dir / "addrs", "".join(a + "\n" for a in addresses).encode())
    except OSError as exc:
        raise DiskFailed(f"cannot write the member's listen addresses to {data_dir / 'addrs'}: {exc.strerror}; "
                         "the member stops: free space on the disk or check it, then start it again") from None


def run_member_loop(main: Callable[[], Awaitable[None]], store: EventStore) -> None:
    """``trio.run(main)`` for a command whose member runs on ``store``. A store that fails while
    the member runs (a disk that refuses an fsync, whose data may then be lost: the member
    stops rather than show what may not be on it) ends the command with the store's own
    message and the way out, as at start (``open_member``), not with a traceback; the store is
    closed, and what it committed is kept."""
    try:
        trio.run(main)
    except (StoreError, DiskFailed, BaseExceptionGroup) as exc:
        stopping = (StoreError, DiskFailed)
        failed = exc if isinstance(exc, stopping) else _first(exc, stopping)
        if failed is None:
            raise
        if isinstance(exc, BaseExceptionGroup) and (others := exc.split(stopping)[1]) is not None:
            log.error("the member also failed otherwise as it stopped", errors=repr(others)[:2000])
        with contextlib.suppress(StoreError):
            store.close()
        raise CommandError(str(failed)) from None


def _first(group: BaseExceptionGroup, kind: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first exception of ``kind`` in ``group``, however deep (trio nests a group per nursery)."""
    for exc in group.exceptions:
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup) and (found := _first(exc, kind)) is not None:
            return found
    return None


async def until_signal(cancel: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("stopping", signal=signal.Signals(signum).name)
            cancel.cancel()
            return


def host_port(text: str) -> str:
    try:
        parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
