"""``report.html``: one run as a picture, beside ``report.json``.

A timeline with one lane per member (up, down, stopped, paused, not yet started; a thin
band under it coloured by the digest it showed, so convergence is the bands turning one
colour), the network faults shaded across every lane (a partition's minority darker on
its own lanes), a mark at each moment a member showed a split (triangle) or a result
(circle) accepted; below it, how long each decision took to reach every member that
showed it, on the same time axis and shading; then the checkers' verdicts, each time
they cite linked to a line on the timeline. Plain SVG and CSS: no script, no CDN.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Iterable

from chaos.checkers.verdict import Verdict
from chaos.history import History
from chaos.windows import fault_windows, member_states

WIDTH, LEFT, RIGHT, LANE, BAND = 1100, 150, 20, 26, 5
STATE_COLOURS = {"up": "#dafbe1", "down": "#d0d7de", "stopped": "#8c959f", "paused": "#fff1c5", "pending": "#ffffff"}
FAULT_COLOURS = {"partition": "#cf222e", "oneway": "#bc4c00", "weather": "#0969da", "loss": "#0969da",
                 "hostile": "#8250df"}
_TIME = re.compile(r"t=(\d+(?:\.\d+)?)s")


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _colour(digest: str) -> str:
    hue = int(hashlib.sha256(digest.encode()).hexdigest()[:4], 16) % 360
    return f"hsl({hue},65%,55%)"


class _Axis:
    def __init__(self, end: float) -> None:
        self.end = max(end, 1.0)

    def x(self, at: float) -> float:
        return round(LEFT + (WIDTH - LEFT - RIGHT) * max(0.0, min(at, self.end)) / self.end, 1)

    def ticks(self, top: float, bottom: float) -> list[str]:
        step = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1e9) if self.end / s <= 12)
        out, at = [], 0.0
        while at <= self.end:
            x = self.x(at)
            out.append(f'<line class="tick" x1="{x}" x2="{x}" y1="{top}" y2="{bottom}"/>'
                       f'<text class="tick" x="{x}" y="{bottom + 12}">{at:g}s</text>')
            at += step
        return out


def _timeline(history: History, axis: _Axis, cited: Iterable[float]) -> str:
    names = list(history.members)
    height = 20 + len(names) * LANE
    parts = [f'<svg id="timeline" width="{WIDTH}" height="{height + 30}" role="img" '
             'aria-label="one lane per member over the run">']
    parts += axis.ticks(10, height)
    lane_y = {name: 14 + i * LANE for i, name in enumerate(names)}
    for name, segments in member_states(history).items():
        y = lane_y.get(name)
        if y is None:
            continue
        parts.append(f'<text class="lane" x="{LEFT - 8}" y="{y + 13}">{_esc(name)}</text>')
        for start, end, state in segments:
            parts.append(f'<rect class="state {state}" data-member="{_esc(name)}" data-state="{state}" '
                         f'x="{axis.x(start)}" y="{y}" width="{max(axis.x(end) - axis.x(start), 0.5)}" '
                         f'height="{LANE - 10}" fill="{STATE_COLOURS[state]}"><title>{_esc(name)} {state} '
                         f'{start:.1f}-{end:.1f}s</title></rect>')
    for window in fault_windows(history):
        colour = FAULT_COLOURS.get(window.kind, "#57606a")
        x, w = axis.x(window.start), max(axis.x(window.end) - axis.x(window.start), 1.0)
        parts.append(f'<rect class="fault" data-kind="{window.kind}" data-start="{window.start}" '
                     f'data-end="{window.end}" x="{x}" y="8" width="{w}" height="{height - 6}" fill="{colour}" '
                     f'fill-opacity="0.10" stroke="{colour}" stroke-opacity="0.5"><title>{_esc(window.label)} '
                     f'({window.start:.1f}-{window.end:.1f}s)</title></rect>')
        for member in window.members:
            if member in lane_y:
                parts.append(f'<rect class="cut" data-member="{_esc(member)}" x="{x}" y="{lane_y[member]}" '
                             f'width="{w}" height="{LANE - 10}" fill="{colour}" fill-opacity="0.25"/>')
    by_member: dict[str, list[tuple[float, str]]] = {}
    for at, name, digest in history.samples:
        by_member.setdefault(name, []).append((at, digest))
    for name, samples in by_member.items():
        y = lane_y.get(name)
        if y is None:
            continue
        for (at, digest), (until, _next) in zip(samples, [*samples[1:], (history.ended_at, "")], strict=True):
            parts.append(f'<rect class="digest" x="{axis.x(at)}" y="{y + LANE - 9}" '
                         f'width="{max(axis.x(until) - axis.x(at), 0.5)}" height="{BAND}" fill="{_colour(digest)}">'
                         f'<title>{_esc(name)} digest {digest[:12]} from {at:.1f}s</title></rect>')
    for name, member in history.members.items():
        y = lane_y[name]
        for shown in member.shown:
            if shown.kind not in ("split", "result") or shown.after is None:
                continue
            x = axis.x(shown.at)
            shape = (f'<path d="M{x - 4},{y + 12} L{x},{y + 3} L{x + 4},{y + 12} Z"' if shown.kind == "split"
                     else f'<circle cx="{x}" cy="{y + 8}" r="3.5"')
            parts.append(f'{shape} class="accept" data-kind="{shown.kind}" data-member="{_esc(name)}" '
                         f'data-at="{shown.at}" data-node="{_esc(shown.node)}"><title>{_esc(name)} shows the '
                         f'{shown.kind} of {_esc(shown.node[:8])} accepted at {shown.at:.1f}s</title>'
                         f'{"</path>" if shown.kind == "split" else "</circle>"}')
    for label, at in (("converged", history.converged_at), ("drain", history.drained_from)):
        if at is not None:
            x = axis.x(at)
            parts.append(f'<line class="moment" x1="{x}" x2="{x}" y1="8" y2="{height}"/>'
                         f'<text class="moment" x="{x - 3}" y="{height - 2}">{label}</text>')
    for at in sorted(set(cited)):
        x = axis.x(at)
        parts.append(f'<line class="cited" id="t-{at:g}" x1="{x}" x2="{x}" y1="8" y2="{height}"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def _propagation(history: History, axis: _Axis) -> str:
    """Each decision: when the first member showed it, and how long until the last one did."""
    first: dict[tuple[str, str, str], list[float]] = {}
    for member in history.members.values():
        for shown in member.shown:
            if shown.kind in ("split", "result") and shown.after is not None:
                first.setdefault((shown.kind, shown.node, shown.after), []).append(shown.at)
    spreads = [(min(ats), max(ats) - min(ats), kind) for (kind, _n, _a), ats in first.items()]
    top = max((s for _, s, _ in spreads), default=1.0) or 1.0
    height = 120
    parts = [f'<svg id="propagation" width="{WIDTH}" height="{height + 30}" role="img" '
             'aria-label="how long each decision took to reach every member">']
    parts += axis.ticks(10, height)
    for window in fault_windows(history):
        colour = FAULT_COLOURS.get(window.kind, "#57606a")
        parts.append(f'<rect x="{axis.x(window.start)}" y="8" width="{max(axis.x(window.end) - axis.x(window.start), 1)}" '
                     f'height="{height - 8}" fill="{colour}" fill-opacity="0.10"/>')
    parts.append(f'<text class="lane" x="{LEFT - 8}" y="16">{top:.1f}s</text>'
                 f'<text class="lane" x="{LEFT - 8}" y="{height}">0s</text>')
    for at, spread, kind in spreads:
        y = round(height - (height - 16) * spread / top, 1)
        parts.append(f'<circle class="spread {kind}" cx="{axis.x(at)}" cy="{y}" r="3"><title>{kind} first shown at '
                     f'{at:.1f}s, by every member that showed it {spread:.2f}s later</title></circle>')
    parts.append("</svg>")
    return "\n".join(parts)


def _linked(evidence: str) -> str:
    return _TIME.sub(lambda m: f'<a href="#t-{float(m.group(1)):g}">t={m.group(1)}s</a>', _esc(evidence))


def render(history: History, verdicts: list[Verdict], title: str) -> str:
    cited = [float(m.group(1)) for v in verdicts for m in _TIME.finditer(v.evidence)]
    axis = _Axis(history.ended_at)
    rows = "\n".join(f'<tr class="{v.status}"><td>{v.status.upper()}</td><td>{_esc(v.invariant)}</td>'
                     f'<td>{_linked(v.evidence)}</td></tr>' for v in verdicts)
    faults = "\n".join(f"<li>{f.at:.1f}s {_esc(f.kind)} {_esc(f.detail)}</li>" for f in history.faults)
    failed = sum(1 for v in verdicts if v.status == "fail")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<style>
 body {{ font: 14px/1.45 system-ui, sans-serif; margin: 20px; color: #1f2328; }}
 svg {{ display: block; margin: 8px 0 20px; }} text.lane {{ text-anchor: end; font-size: 12px; }}
 text.tick {{ font-size: 10px; fill: #656d76; text-anchor: middle; }} line.tick {{ stroke: #eaeef2; }}
 .accept {{ fill: #1a7f37; stroke: #fff; stroke-width: .8; }} circle.spread.split {{ fill: #1a7f37; }}
 circle.spread.result {{ fill: #0969da; }} line.moment {{ stroke: #1f2328; stroke-dasharray: 4 3; }}
 text.moment {{ font-size: 10px; text-anchor: end; }} line.cited {{ stroke: #cf222e; stroke-width: 2; opacity: 0; }}
 line.cited:target {{ opacity: 1; }} table {{ border-collapse: collapse; }}
 td {{ padding: 3px 8px; border-bottom: 1px solid #d0d7de; vertical-align: top; }}
 tr.fail td:first-child {{ color: #cf222e; font-weight: bold; }} tr.pass td:first-child {{ color: #1a7f37; }}
 tr.stall td:first-child {{ color: #9a6700; }} .key span {{ display: inline-block; margin-right: 14px; }}
 .swatch {{ display: inline-block; width: 12px; height: 10px; border: 1px solid #8c959f; margin-right: 4px; }}
</style></head><body>
<h1>{_esc(title)}</h1>
<p>{len(history.members)} members, quorum {history.quorum}; ran {history.ended_at:.1f}s;
 {"converged at " + format(history.converged_at, ".1f") + "s" if history.converged_at is not None else "never converged"};
 {failed} violation(s) in {len(verdicts)} verdicts.</p>
<p class="key"><span><i class="swatch" style="background:{STATE_COLOURS['up']}"></i>up</span>
 <span><i class="swatch" style="background:{STATE_COLOURS['paused']}"></i>paused</span>
 <span><i class="swatch" style="background:{STATE_COLOURS['down']}"></i>down</span>
 <span><i class="swatch" style="background:{STATE_COLOURS['stopped']}"></i>stopped</span>
 <span><i class="swatch" style="background:{FAULT_COLOURS['partition']};opacity:.3"></i>partition (minority darker)</span>
 <span>&#9650; split accepted, &#9679; result accepted (as each member showed it)</span>
 <span>thin band: the digest shown (one colour = agreement)</span></p>
<h2>Timeline</h2>
{_timeline(history, axis, cited)}
<h2>Propagation: how long each decision took to reach every member that showed it</h2>
{_propagation(history, axis)}
<h2>Verdicts</h2>
<table>{rows}</table>
<h2>Faults</h2>
<ul>{faults or "<li>none</li>"}</ul>
</body></html>
"""
