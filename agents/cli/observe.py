"""``swarm observe`` and ``inspect``: the plan as a silent member rebuilds it from its peers,
and as a stopped member's store holds it."""

from __future__ import annotations

import argparse
import math
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

import trio

from agents.cli.common import always
from agents.cli.errors import CommandError
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
from agents.core.fold import fold
from agents.member import Member
from agents.metrics import parse_address
from agents.narrate import Narrator
from agents.render import plan_json, plan_markdown, render_tree, summary
from agents.store import EventStore, StoreError
from agents.web.server import Observatory, serving_observer, take_over
from agents.web.server import listen as listen_page
from agents.web.server import serve as serve_page


def cmd_observe(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    web = parse_address(args.web) if args.web else None
    creds, store = open_member(data_dir, "observer", args)
    network = network_for(creds, args)
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
            nursery.start_soon(until_signal, nursery.cancel_scope)
            member, board = make_member(creds, store, network, data_dir)
            state["member"] = member
            await run_member(nursery, member, network, board)
            write_addrs(data_dir, network.addresses())
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

    run_member_loop(main, store)
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
        print("swarm observe: no pull from a peer ran to its end whole (refused, broken off, timed out or cut: "
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



def catches_up_only(args: argparse.Namespace) -> bool:
    """Whether this ``swarm observe`` catches up, prints and exits (``run_command``'s one-shot)."""
    return not (args.follow or args.until_complete or args.web)


def add_commands(sub: argparse._SubParsersAction) -> None:
    observe = sub.add_parser("observe", help="join silently, rebuild the plan, print it")
    observe.add_argument("--follow", action="store_true", help="print a progress line as the plan grows")
    observe.add_argument("--until-complete", action="store_true", help="exit 0 once the plan is complete")
    observe.add_argument("--timeout", type=float, default=60.0)
    observe.add_argument("--json", metavar="FILE")
    observe.add_argument("--md", metavar="FILE")
    observe.add_argument("--web", metavar="HOST:PORT", type=host_port, help="serve the live page here (and keep observing until "
                         "stopped, or until complete with --until-complete)")
    observe.add_argument("--data-dir", required=True, help="the observer's identity, ticket and what it learns")
    add_network_options(observe)
    observe.set_defaults(run=cmd_observe, one_shot=catches_up_only)

    inspect = sub.add_parser("inspect", help="print a member's tree and digest from its store, offline")
    inspect.add_argument("data_dir", metavar="DATA_DIR")
    inspect.add_argument("--json", metavar="FILE")
    inspect.set_defaults(run=cmd_inspect, one_shot=always)
