"""Helpers every ``swarm`` subcommand module shares: argument types and atomic file writes.

They live here, not in ``main``, so that ``main`` imports the subcommand modules and
none of them imports ``main`` back.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from agents.cli.errors import UsageError
from agents.durable import replace_durably


def always(_args: argparse.Namespace) -> bool:
    """A parser's ``one_shot`` for a command that is one whatever its arguments
    (``agents.cli.main.run_command``)."""
    return True


def majority_quorum(quorum: int | None, scorers: int, change: str) -> int:
    """The approving scorers a decision needs: ``quorum``, or a majority of ``scorers`` when it
    is None. Any two quorums must share a scorer, so anything but a majority is a usage error
    (``change`` says which options set them)."""
    if quorum is None:
        return scorers // 2 + 1
    if not scorers >= quorum > scorers / 2:
        raise UsageError(f"quorum {quorum} must be a majority of the {scorers} scorer(s) "
                         f"(from {scorers // 2 + 1} to {scorers}); change {change}")
    return quorum


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} must be at least 1")
    return number


def seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{number} seconds cannot be negative")
    return number


def write_atomically(path: Path, data: bytes) -> None:
    """Write a file so that a crash leaves either the old content or the new, never half
    (``agents.durable``)."""
    replace_durably(path, data)


def write_json(path: Path, record: dict[str, Any]) -> None:
    # orjson: a 100k-event plan's report took Python's indenting encoder two seconds
    write_atomically(path, orjson.dumps(record, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS
                                        | orjson.OPT_APPEND_NEWLINE))
