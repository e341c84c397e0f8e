"""Logging through structlog: readable on a terminal, JSON lines otherwise (or with --log-json).

Logs go to stderr, so stdout stays for what the user asked for (a tree, JSON).

py-libp2p logs through the standard library, multi-line and unformatted; its
records are rendered by the same renderer as ours (one JSON object per record in
containers), at WARNING and above. A few of its messages are known to repeat
without telling an operator anything new (a stream that could not be opened to a
peer that just left, a handshake cut short): the first of each kind is shown,
the rest are only counted (``noise_counts``), and members report the counts in
their closing stats. GRAFT flood warnings are counted the same way: they were a real
fault (peers re-grafting inside the backoff window, mended in ``gossip_router.py``;
none are logged now), and stay visible in the counts should one come back.

A GRAFT refused because we back off from its sender ("graft-in-backoff") was, in each
case traced, not a fault of either end: fifty members started on loopback on two cores,
every GRAFT, PRUNE and refusal logged on both ends (stop 42's note), and each refusal was
a GRAFT that left its sender before our PRUNE reached it, crossing it in flight and read
3.6 s late at the median (up to 14 s) while fifty processes started; 611 in a run's first
20 s, a few a minute after. The spec's answer is what py-libp2p does: refuse, PRUNE again,
back off (go-libp2p logs it at debug). One source was not in that trace: py-libp2p's
grafts for IP diversity ignore backoffs (``gossip_router.py``), which only members on
distinct addresses (the container lab) can meet; there the count is the place to look.
py-libp2p's refusal of a *direct* peer's GRAFT (a configuration error) stays shown.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter

import structlog

# first line of a py-libp2p message -> the kind it is counted under
NOISE: dict[str, str | None] = {
    "Failed to open stream to peer": "stream-open-failed",
    "MultiselectClient handshake": "handshake-cut",
    "Failed to open TCP stream": "dial-failed",
    "Error in handle_incoming": "connection-reset",
    "GRAFT flood detected": "graft-flood",
    "GRAFT: ignoring request from": "graft-in-backoff",  # a GRAFT that crossed our PRUNE (above)
    "GRAFT: ignoring request from direct peer": None,  # never noise: always shown
    # once per message past py-libp2p's 100 kept for a subscribed peer we cannot write to (no
    # stream of ours: ``gossip_pubsub.py``; or a stream but its subscription unknown:
    # ``half_open.py``): fifty members on two cores logged 23k-218k of them in a plan
    "pending message queue for peer": "gossip-queue-full",
}


class _NoiseFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("libp2p") and record.levelno < logging.WARNING:
            return False  # some of its modules set their own loggers to INFO (auto_connector)
        first = record.getMessage().split("\n", 1)[0]
        # the longest prefix decides (one message's prefix may begin another's); none: shown
        kind = NOISE.get(max((prefix for prefix in NOISE if first.startswith(prefix)), key=len, default=""))
        if kind is None:
            return True
        self.counts[kind] += 1
        if self.counts[kind] > 1:
            return False
        record.msg, record.args = f"{first.rstrip(':')} (repeats are counted as {kind!r}, not shown)", None
        return True


_noise = _NoiseFilter()


def adopt_libp2p() -> None:
    """Let py-libp2p's records reach our handler. Importing libp2p detaches its logger
    (no handlers, no propagation: Python's last-resort handler then prints them raw),
    so this runs after that import too (``agents.net.p2p`` calls it)."""
    libp2p = logging.getLogger("libp2p")
    libp2p.handlers.clear()
    libp2p.setLevel(logging.WARNING)
    libp2p.propagate = True


def noise_counts() -> dict[str, int]:
    """How many py-libp2p messages of each known kind were seen since ``configure`` (the first shown)."""
    return dict(_noise.counts)


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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=[structlog.stdlib.add_logger_name, structlog.processors.add_log_level,
                           structlog.processors.TimeStamper(fmt="iso", utc=True)],
    ))
    global _noise
    _noise = _NoiseFilter()
    handler.addFilter(_noise)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    adopt_libp2p()
