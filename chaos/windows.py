"""When each fault was in force, and each member's state over a run, from its fault log.

The nemesis logs instants ("partition a,b | c", "heal", "pause x", "resume x"); a
person wants windows: the cut from 4.0 s to 9.5 s, scorer-1 paused from 6 s to 8 s.
This module turns one into the other, for the simulation's log and the lab's alike
(their words differ a little: crash/kill, resume/unpause). Pure: the HTML report and
the live page's "faults in force" both read it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from chaos.history import History

# a fault that lasts until a later one ends it: start kind -> kinds that end it
_ENDS = {"partition": ("heal", "partition"), "oneway": ("heal", "oneway"), "weather": ("clear", "weather"),
         "loss": ("loss",), "hostile": (), "toxic": ("untoxic",), "bandwidth": ("bandwidth",), "disk": ("disk",)}
_PER_MEMBER = ("loss", "toxic", "bandwidth", "disk")  # windows of one member: ended by that member's own
_DEFAULT_WEATHER = "delay 1-30ms loss 0% dup 0%"  # the simulation's normal links: no fault
_LASTS = re.compile(r"for (\d+(?:\.\d+)?)s")  # "a never-admitted peer attacks for 20s"
_DISK_OK = (["free"], ["working"])  # "disk NAME free" (full no more), "disk NAME working ..." (fails no more)
_DOWN = {"crash": "down", "kill": "down", "stop": "stopped", "pause": "paused", "wipe": "down"}
_UP = ("restart", "start", "resume", "unpause")


@dataclass(frozen=True)
class Window:
    start: float
    end: float  # the run's end when nothing ended it
    kind: str
    label: str
    members: tuple[str, ...] = ()  # the minority side of a cut, the lossy member, ...

    def covers(self, at: float) -> bool:
        return self.start <= at < self.end


def _member_of(detail: str) -> str:
    return detail.split(" ", 1)[0].rstrip(",")


def _minority(detail: str) -> tuple[str, ...]:
    """Members outside the largest group of a partition ("a,b | c,d,e" -> a, b)."""
    groups = [tuple(g.strip().split(",")) for g in detail.split("|") if g.strip()]
    if not groups:
        return ()
    largest = max(groups, key=len)
    return tuple(sorted(m for g in groups if g is not largest for m in g))


def fault_windows(history: History, until: float | None = None) -> list[Window]:
    """Network-wide faults (cuts, one-way links, bad weather, loss, a hostile peer) as windows;
    one nothing ended lasts until ``until`` (default: the run's end)."""
    end = history.ended_at if until is None else until
    windows: list[Window] = []
    open_: dict[tuple[str, str, str], tuple[float, str, tuple[str, ...]]] = {}
    for fault in history.faults:
        for key in [k for k in open_ if fault.kind in _ENDS.get(k[0], ())
                    and (k[0] not in _PER_MEMBER or k[1] == _member_of(fault.detail))]:
            start, label, members = open_.pop(key)
            windows.append(Window(start, fault.at, key[0], label, members))
        if (fault.detail.endswith((" 0%", " unlimited")) or fault.detail == _DEFAULT_WEATHER
                or fault.kind not in _ENDS or (fault.kind == "disk" and fault.detail.split(" ")[1:2] in _DISK_OK)):
            continue  # an end, or the normal state: nothing opens
        lasts = _LASTS.search(fault.detail) if fault.kind == "hostile" else None
        if lasts:
            windows.append(Window(fault.at, min(end, fault.at + float(lasts.group(1))), "hostile", fault.detail))
            continue
        who = _member_of(fault.detail) if fault.kind in _PER_MEMBER else ""
        members = _minority(fault.detail) if fault.kind == "partition" else (who,) if who else ()
        label = f"{fault.kind} {fault.detail}".strip()
        # toxics add up (a member can have several); a new loss, cut or weather ends the last one
        key = (fault.kind, who, label if fault.kind == "toxic" else "")
        open_.setdefault(key, (fault.at, label, members))
    windows += [Window(start, end, key[0], label, members) for key, (start, label, members) in open_.items()]
    return sorted(windows, key=lambda w: (w.start, w.kind))


def member_states(history: History, until: float | None = None) -> dict[str, list[tuple[float, float, str]]]:
    """Each member's (start, end, state) segments: pending, up, down, stopped, paused; the
    last lasts until ``until`` (default: the run's end)."""
    end = history.ended_at if until is None else until
    states: dict[str, list[tuple[float, float, str]]] = {}
    current: dict[str, tuple[float, str]] = {
        name: (0.0, "pending" if m.late else "up") for name, m in history.members.items()}
    for fault in history.faults:
        name = _member_of(fault.detail)
        if name not in current:
            continue
        state = _DOWN.get(fault.kind) or ("up" if fault.kind in _UP else None)
        if state is None or state == current[name][1]:
            continue
        since, before = current[name]
        states.setdefault(name, []).append((since, fault.at, before))
        current[name] = (fault.at, state)
    for name, (since, state) in current.items():
        states.setdefault(name, []).append((since, max(end, since), state))
    return states


def in_force(history: History, at: float) -> list[str]:
    """What a person should be told is wrong right now: open fault windows and members not up."""
    labels = [w.label for w in fault_windows(history, until=math.inf) if w.covers(at)]
    for name, segments in sorted(member_states(history, until=math.inf).items()):
        for start, end, state in segments:
            if start <= at < end and state in ("down", "stopped", "paused"):
                labels.append(f"{name} {state}")
    return labels
