"""The lab's recorder: what a member's data directory holds, read from the host while the
member runs (its store, its refusal counts, its transition log), and every member's plan
sampled once a second into the history (Jepsen's recorded history; ``chaos.lab.run`` plays
the scenario and hands the history to the checkers)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from agents.core.events import Event
from agents.core.fold import fold
from agents.core.tree import PlanTree
from agents.store import EventStore
from agents.store.sqlite import DB_NAME
from chaos.history import History, Shown
from chaos.lab.cluster import LabCluster

log = structlog.get_logger("chaos.recorder")

SAMPLE_S = 1.0


def read_events(data_dir: Path) -> list[Event]:
    """A member's stored events, read from the host (the member may be writing: WAL allows it)."""
    if not (data_dir / DB_NAME).exists():
        return []
    with EventStore.open(data_dir) as store:
        return store.events()


def read_refused(data_dir: Path) -> dict[str, int]:
    """A member's refusals by rule, from the local counters beside its events."""
    if not (data_dir / DB_NAME).exists():
        return {}
    with EventStore.open(data_dir) as store:
        return {k.split(":", 1)[1]: v for k, v in store.counters().items() if k.startswith("refused:")}


def read_shown(data_dir: Path, t0_wall_ms: float) -> list[Shown]:
    """A member's transition log (``DATA_DIR/transitions.jsonl``), in run time. Its clock may be
    skewed (faketime): times are the member's own, the order is what counts."""
    path = data_dir / "transitions.jsonl"
    if not path.exists():
        return []
    shown = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by SIGKILL
        shown.append(Shown(round((record["at_ms"] - t0_wall_ms) / 1000, 3), record["kind"], record.get("node", ""),
                           record.get("before"), record.get("after")))
    return shown


def shows_complete(data_dir: Path) -> bool:
    """Whether a member's transition log says it shows the plan complete (since it last started)."""
    complete = False
    for shown in read_shown(data_dir, 0.0):
        if shown.kind in ("start", "complete"):
            complete = shown.after is not None
    return complete


class Recorder:
    """Samples every member's digest once a second, in a thread, into the history."""

    def __init__(self, cluster: LabCluster, history: History, clock: Callable[[], float]) -> None:
        self.cluster, self.history, self.clock = cluster, history, clock
        self.trees: dict[str, PlanTree] = {}  # each member's latest sampled plan
        self.counts: dict[str, int] = {}  # and how many events its store held then
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="recorder", daemon=True)
        self.first_complete: float | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def sample(self) -> None:
        now = self.clock()
        for name, member in list(self.cluster.members.items()):
            if member.started_at is None:
                continue
            try:
                events = read_events(member.data_dir)
                tree = fold(events)
            except Exception as exc:  # a store mid-creation; the next sample reads it
                log.debug("sample failed", member=name, error=str(exc)[:200])
                continue
            self.trees[name] = tree
            self.counts[name] = len(events)
            self.history.sample(now, name, tree.digest)
            record = self.history.members[name]
            if tree.complete and record.completed_at is None:
                record.completed_at = round(now, 3)
                self.first_complete = self.first_complete or now

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()
