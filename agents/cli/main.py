"""The ``swarm`` command: parse arguments, call the library, turn errors into messages and exit codes.

Exit codes: 0 success; 1 the work ran but did not succeed (e.g. a plan that
did not complete); 2 bad usage or bad input (the message names it and the way out).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from agents import logs
from agents.cli.common import always, majority_quorum, write_atomically, write_json
from agents.cli.common import positive as _positive
from agents.cli.common import seconds as _seconds
from agents.cli.errors import CommandError, UsageError
from agents.core.decode import decode_event
from agents.core.events import EventRefused
from agents.core.fold import fold
from agents.heap import settled
from agents.render import plan_json, plan_markdown, render_tree, summary


def cmd_simulate(args: argparse.Namespace) -> int:
    """The seeded simulation with no faults (``chaos.sim.plan``): one plan, deterministic for a seed."""
    from chaos.sim.plan import simulate_plan
    from chaos.sim.runner import quiet_logs
    from chaos.sim.world import SimConfig

    if args.llm != "scripted":
        raise UsageError(
            f"swarm simulate runs every role in one process on virtual time and supports only "
            f"--llm scripted (got {args.llm!r}); use 'swarm plan' for real models"
        )
    quorum = majority_quorum(args.quorum, args.scorers, "--quorum or --scorers")
    quiet_logs()
    config = SimConfig(seed=args.seed, decomposers=args.decomposers, scorers=args.scorers,
                       executors=args.executors, observers=1, quorum=quorum,
                       goal=args.goal, max_depth=args.max_depth, claim_lease_ms=int(args.claim_lease * 1000),
                       hold_limit_ms=int(args.claim_lease * 4000), model_latency_s=args.latency)
    result = simulate_plan(config)
    tree = result.tree
    if args.events:
        write_atomically(Path(args.events), b"".join(e.to_wire() + b"\n" for e in result.events))
    extra = {
        "reorganisations": result.revocations,
        "virtual_seconds": result.virtual_seconds,
        "model_calls": result.model_calls,
        "seed": args.seed,
    }
    if args.json:
        write_json(Path(args.json), plan_json(tree, extra=extra))
    if args.md:
        write_atomically(Path(args.md), plan_markdown(tree).encode())
    print(render_tree(tree))
    print(summary(tree, reorganisations=result.revocations))
    print(f"simulated {result.virtual_seconds:.1f} s of virtual time, {result.model_calls} model calls")
    return 0 if tree.complete else 1


PROGRESS_EVERY = 20_000


def cmd_replay(args: argparse.Namespace) -> int:
    import structlog

    log = structlog.get_logger("swarm.replay")
    events = []
    refused = 0
    for name in args.files:
        path = Path(name)
        try:
            lines = path.read_bytes().splitlines()
        except OSError as exc:
            raise UsageError(f"cannot read event file {name}: {exc.strerror}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                events.append(decode_event(line))
            except EventRefused as exc:
                refused += 1
                print(f"{name}:{number}: {exc}", file=sys.stderr)
            if number % PROGRESS_EVERY == 0:
                log.info("reading events", file=name, line=number, verified=len(events), refused=refused)
    log.info("folding", events=len(events))
    tree = fold(events)
    if args.json:
        write_json(Path(args.json), plan_json(tree, refused=refused))
    print(render_tree(tree))
    print(summary(tree, refused=refused))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarm",
        description="A leaderless swarm of LLM agents that plans a goal as a replicated tree.",
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines (default when stderr is not a terminal)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    simulate = sub.add_parser("simulate", help="run every role in one process, no network, deterministic for a seed")
    simulate.add_argument("goal", help='the goal to plan, e.g. "Plan a two-week trip to Japan"')
    simulate.add_argument("--llm", default="scripted", help="model backend (only 'scripted' here)")
    simulate.add_argument("--decomposers", type=_positive, default=3)
    simulate.add_argument("--scorers", type=_positive, default=3)
    simulate.add_argument("--executors", type=_positive, default=3)
    simulate.add_argument("--quorum", type=_positive, help="approving scorers a decision needs (default: a majority)")
    simulate.add_argument("--max-depth", type=_positive, default=3)
    simulate.add_argument("--claim-lease", type=_seconds, default=30.0, help="claim lease in seconds")
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--latency", type=_seconds, default=1.0, help="mean virtual seconds per model call")
    simulate.add_argument("--events", metavar="OUT.jsonl", help="write the signed event log here")
    simulate.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON here")
    simulate.add_argument("--md", metavar="PLAN.md", help="write the plan as Markdown here")
    simulate.set_defaults(run=cmd_simulate)

    replay = sub.add_parser("replay", help="fold event files (any order, duplicates allowed) and print the tree")
    replay.add_argument("files", nargs="+", metavar="FILE", help="JSON-lines event files")
    replay.add_argument("--json", metavar="PLAN.json", help="write the plan as JSON here")
    replay.set_defaults(run=cmd_replay, one_shot=always)

    from agents.cli import admin, lab, model_service, network, observe, plan

    admin.add_commands(sub)
    network.add_commands(sub)
    observe.add_commands(sub)
    plan.add_command(sub)
    model_service.add_command(sub)
    lab.add_commands(sub)
    lab.add_chaos_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(json_lines=True if args.log_json else None, level=args.log_level)
    try:
        return run_command(args)
    except UsageError as exc:
        print(f"swarm {args.command}: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"swarm {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command. One that builds its state once, reports it and exits (its
    parser's ``one_shot`` says so of these arguments: ``swarm inspect``, ``replay``, an
    ``observe`` that only catches up) runs with no automatic collection (``agents.heap``):
    what it makes is events, a tree and a report, none in a cycle."""
    one_shot = getattr(args, "one_shot", None)
    with settled() if one_shot is not None and one_shot(args) else contextlib.nullcontext():
        return int(args.run(args))


def run() -> NoReturn:
    """The ``swarm`` command: ``main`` on the process's arguments, then out without the
    interpreter's teardown. Teardown frees every object one at a time, and a command that
    folded a large plan holds millions (0.6 s of a 100k-event ``swarm observe``, whose
    caller waits for the exit). By the time ``main`` returns, each command has closed its
    store and written its files; the exit handlers run here (the logging handlers' flush,
    py-libp2p's log queue) and the output streams are flushed, and the kernel closes the rest
    (the verifier children's pipes, which ends them). An exception out of ``main`` leaves by
    the normal path, traceback and teardown included, and so does every command run under a
    profiler or a coverage tracer, which write their results at teardown."""
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    atexit._run_exitfuncs()  # what a normal exit runs first (CPython's, stable since 2.x)
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with that descriptor closed
            continue
        try:
            stream.flush()
        except BrokenPipeError:  # a reader that went away (``swarm ... | head``): nothing to say
            code = code or 1
        except (OSError, ValueError) as exc:  # a full disk under ``> FILE``: the output is cut short
            code = code or 1
            with contextlib.suppress(OSError):
                os.write(2, f"swarm: could not write all of the output: {exc}\n".encode())
    os._exit(code)


if __name__ == "__main__":
    run()
