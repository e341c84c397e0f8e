"""Logging through structlog: readable on a terminal, JSON lines otherwise (or with --log-json).

Logs go to stderr, so stdout stays for what the user asked for (a tree, JSON).
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, json_lines: bool | None = None, level: str = "info") -> None:
    if json_lines is None:
        json_lines = not sys.stderr.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
