"""The recorded history of one run, which the checkers judge.

Both labs write the same shape: the simulated world (``chaos.sim``) and the
container lab (``chaos.lab``). A history holds what happened (faults, with
their times), what each member said its plan was over time (digest samples),
and what each member held at the end (its events) plus what every restart
found in its store. Times are seconds since the run started.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.core.events import Event
from agents.core.fold import fold
from agents.core.tree import PlanTree


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str  # partition, heal, crash, restart, stop, start, weather, skew, ...
    detail: str


@dataclass(frozen=True)
class Restart:
    """A member came back from its store: ``lost`` are the ids it had before and lacks now.
    ``fault`` names a fault that took the store on purpose ("wipe", "corrupt"), after which
    losing events is the point; ``error`` is what the store said when it refused to open."""

    at: float
    held_before: int
    lost: tuple[str, ...]
    fault: str = ""
    error: str = ""
    # the crash took the page cache (a power cut: the simulation's ``lostwrite`` and ``blackout``;
    # or the kernel dropped the pages a failed fsync could not write: its ``eio``), so commits no
    # fsync covered are gone; ``lost_by`` names the author of each event in ``lost``
    power_cut: bool = False
    lost_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiskFailure:
    """The member's disk began failing every fsync (``kind`` "failing") or refusing every write
    for want of space ("full") at ``at``. ``stopped_at``: when the member ended itself (None: it
    was still running when the lab stopped waiting, or when the full disk had room again);
    ``exit_code`` its process's status (None in the simulation, which has no processes);
    ``last_words`` the end of what it said as it stopped; ``traceback`` whether that held a
    Python traceback."""

    at: float
    stopped_at: float | None
    exit_code: int | None = None
    last_words: str = ""
    traceback: bool = False
    kind: str = "failing"
    refused: int | None = None  # "full": writes it logged as refused meanwhile (None: not counted)


@dataclass(frozen=True)
class Shown:
    """One change of what a member showed (``agents.core.transitions``), at run time ``at``.
    ``kind == "start"`` marks the member (re)starting; the changes after it are its first fold,
    up to ``kind == "loaded"``.
    ``kind == "complete"`` marks the plan it showed turning complete (``after``, its digest)."""

    at: float
    kind: str  # start, split, holder, result, complete
    node: str = ""
    before: str | None = None
    after: str | None = None


@dataclass
class MemberHistory:
    name: str
    role: str
    peer: str
    alive: bool = True  # up when the run ended
    late: bool = False  # started after the others (a late joiner)
    started_at: float = 0.0
    events: list[Event] = field(default_factory=list)  # what it held at the end (or when it died)
    # events it held once and lost with a store a fault destroyed (wipe, corrupt) or with a
    # power cut (others' events whose commit no fsync covered), never given back: they
    # existed, a decision it showed may rest on them, so the union judged by the safety
    # checkers counts them (seed 1961: a scorer's ballot, its only copy wiped)
    destroyed: list[Event] = field(default_factory=list)
    digest: str = ""
    complete: bool = False
    completed_at: float | None = None
    restarts: list[Restart] = field(default_factory=list)
    disk_failures: list[DiskFailure] = field(default_factory=list)
    shown: list[Shown] = field(default_factory=list)  # every change of what it showed, in order
    model_calls: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # events refused, by rule, each once
    held: int = 0  # events held back (ahead of its clock) at the end
    sync_refused: int = 0  # sync conversations refused (no valid ticket)
    sync_timeouts: int = 0  # pulls and serves dropped at their deadline
    mute: bool = False  # it could not sign at the end: own events lost that no peer returned
    _folded: tuple[int, PlanTree] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_folded": None}  # a cache: folded again where it is needed

    def tree(self) -> PlanTree:
        """The plan its events fold to (folded once; the checkers each ask for it)."""
        if self._folded is None or self._folded[0] != len(self.events):
            self._folded = (len(self.events), fold(self.events))
        return self._folded[1]


@dataclass
class History:
    scenario: str
    seed: int
    shape: dict[str, int]  # role -> members of that role
    quorum: int
    members: dict[str, MemberHistory] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    samples: list[tuple[float, str, str]] = field(default_factory=list)  # (at, member, digest) on change
    last_fault_at: float = 0.0  # when the last fault ended (the last heal or restart)
    converged_at: float | None = None  # first time all live members agreed on a complete plan
    ended_at: float = 0.0
    drained_from: float | None = None  # a stalled run's members held still from then until ended_at
    convergence_bound_s: float = 120.0
    hostile: tuple[str, ...] = ()  # what the hostile peer did, if one ran
    # how long after its store holds the plan a member may take to show it: the lab reads stores
    # from the host once a second, and a pull may leave a member's fold a sync interval behind
    # its store; the simulation samples what members show, so there it is exact
    show_within_s: float = 0.0
    admitted: set[str] | None = None  # every peer the cluster's authority admitted (hostile ones too)
    goal: str = ""  # the submitted goal's id: its client left once members said they held it
    # member -> when it told the goal's client it held the goal (its served summary listed it):
    # from then on it must hold it across every restart (``durability``)
    goal_held_by: dict[str, float] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, object]:
        """What crosses a process boundary (a failing seed's history, for its report): the
        record, not the checkers' caches kept on it (``_reference_*``: models, not picklable)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_reference")}

    def fault(self, at: float, kind: str, detail: str = "") -> None:
        self.faults.append(Fault(round(at, 3), kind, detail))

    def sample(self, at: float, member: str, digest: str) -> None:
        last = next((s for s in reversed(self.samples) if s[1] == member), None)
        if last is None or last[2] != digest:
            self.samples.append((round(at, 3), member, digest))

    def live(self) -> list[MemberHistory]:
        return [m for m in self.members.values() if m.alive]
