"""``swarm observe --web HOST:PORT``: the live page of an observer, over trio.

Hypercorn (its trio worker) serves a small Starlette app:

* ``/``: the page (``page.html``: one file, no build step, no CDN);
* ``/state``: the view as JSON: the plan (``plan_json``: splits and their voters, claims,
  results), the members heard on the status channel (``agents.status``: role, doing what
  for how long, alive or unreachable), events per second, refused and held counts, and the
  faults in force;
* ``/stream``: the same view as server-sent events, one message whenever it changes, so
  the page updates by itself; a browser reconnects on its own after a restart;
* ``PUT /faults``: the lab's nemesis says which faults are in force (a JSON list of
  strings); the page shows them. Nothing on the page is ever folded into the plan.

One task builds the view at most ``TICK_S`` apart and only when something changed; every
open page waits on it, so ten pages cost what one does.
"""

from __future__ import annotations

import json
from collections import deque
from importlib import resources
from typing import TYPE_CHECKING, Any

import structlog
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agents.render import plan_json

if TYPE_CHECKING:
    from agents.member import Member
    from agents.status import StatusBoard

log = structlog.get_logger("web")
TICK_S = 0.25
KEEPALIVE_S = 15.0
RATE_WINDOW_S = 5.0
MAX_FAULTS = 64


class Observatory:
    """The view of one observer, rebuilt when the plan, the status board or the faults change."""

    def __init__(self, member: Member, board: StatusBoard, clock=trio.current_time) -> None:
        self.member = member
        self.board = board
        self.faults: list[str] = []
        self.version = 0
        self.body = b"{}"
        self.changed = trio.Event()
        self._clock = clock
        self._counts: deque[tuple[float, int]] = deque()

    def view(self) -> dict[str, Any]:
        member = self.member
        now = self._clock()
        self._counts.append((now, member.tree.events))
        while self._counts and now - self._counts[0][0] > RATE_WINDOW_S:
            self._counts.popleft()
        first_at, first_count = self._counts[0]
        rate = (member.tree.events - first_count) / (now - first_at) if now > first_at else 0.0
        return plan_json(member.tree, refused=member.stats.refused, by_rule=member.intake.refused, extra={
            "observer": member.credentials.identity.peer_id,
            "heard": self.board.members(),
            "status_refused": dict(sorted(self.board.refused.items())),
            "events_per_s": round(rate, 1),
            "held": member.intake.held,
            "connected": len(member.network.connected_peers()),
            "faults": list(self.faults),
            "reorganisations": member.stats.reorganisations,
        })

    def refresh(self) -> bool:
        body = json.dumps(self.view(), sort_keys=True).encode()
        if body == self.body:
            return False
        self.body, self.version = body, self.version + 1
        self.changed.set()
        self.changed = trio.Event()
        return True

    async def run(self) -> None:
        while True:
            self.refresh()
            await trio.sleep(TICK_S)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/", self._page),
            Route("/state", self._state),
            Route("/stream", self._stream),
            Route("/faults", self._faults, methods=["PUT"]),
        ])

    async def _page(self, _request: Request) -> Response:
        return HTMLResponse(resources.files("agents.web").joinpath("page.html").read_text(encoding="utf-8"))

    async def _state(self, _request: Request) -> Response:
        return Response(self.body, media_type="application/json", headers={"Cache-Control": "no-store"})

    async def _stream(self, request: Request) -> Response:
        async def messages():
            sent = -1
            while not await request.is_disconnected():
                if self.version != sent:
                    sent = self.version
                    yield b"data: " + self.body + b"\n\n"
                    continue
                with trio.move_on_after(KEEPALIVE_S) as idle:
                    await self.changed.wait()
                if idle.cancelled_caught:
                    yield b": keepalive\n\n"

        return StreamingResponse(messages(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def _faults(self, request: Request) -> Response:
        try:
            self.faults = read_faults(await request.body())
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        self.refresh()
        return JSONResponse({"faults": self.faults})


def read_faults(body: bytes) -> list[str]:
    """The nemesis's list of faults in force; ValueError says what a good body looks like."""
    try:
        faults = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"the body is not JSON ({exc}): send a JSON list of strings") from None
    if (not isinstance(faults, list) or len(faults) > MAX_FAULTS
            or not all(isinstance(f, str) and len(f) <= 200 for f in faults)):
        raise ValueError(f"send a JSON list of at most {MAX_FAULTS} strings, each the description "
                         "of a fault in force (at most 200 characters)")
    return faults


async def serve(observatory: Observatory, host: str, port: int,
                *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the page until cancelled; ``task_status.started`` with the bound URL."""
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(observatory.run)
        binds = await nursery.start(lambda task_status: hypercorn_serve(
            observatory.app(), config, shutdown_trigger=trio.sleep_forever, task_status=task_status))
        url = binds[0] if binds else f"http://{host}:{port}"
        log.info("page", url=url)
        task_status.started(url)
