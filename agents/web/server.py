"""``swarm observe --web HOST:PORT``: the live page of an observer, over trio.

Hypercorn (its trio worker) serves a small Starlette app:

* ``/``: the page (``page.html``: one file, no build step, no CDN);
* ``/state``: the view as JSON: the plan (``plan_json``: splits and their voters, claims,
  results), the members heard on the status channel (``agents.status``: role, doing what
  for how long, alive or unreachable), events per second, refused and held counts, and the
  faults in force;
* ``/stream``: the same view as server-sent events, one message whenever it changes, so
  the page updates by itself; a browser reconnects on its own after a restart;
* ``PUT /faults``: a nemesis says which faults are in force (a JSON list of strings, with
  the observer's token from ``DATA_DIR/web.token`` as a bearer token); the page shows
  them. Nothing on the page is ever folded into the plan.

One task builds the view every ``TICK_S`` and sends it only when it changed (a busy
member's "for how long" moves once a second); every open page waits on that one task,
so ten pages cost what one does.

With several observers given one ``--web`` address, the first to bind it serves the page;
each later one finds an observer of its cluster answering there (``serving_observer``),
stands by, and serves the page from the moment the port is free again (``take_over``).
A port held by anything else is an error, not a reason to wait.
"""

from __future__ import annotations

import hmac
import json
import socket
import urllib.request
from collections import deque
from collections.abc import Callable
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
MAX_FAULTS_BODY = 16 * 1024
MEMBER_ROLES = ("decomposer", "scorer", "executor", "observer")  # a client submits and leaves


class Observatory:
    """The view of one observer, rebuilt when the plan, the status board or the faults change."""

    def __init__(self, member: Member, board: StatusBoard, token: str, clock=trio.current_time) -> None:
        """``token``: what ``PUT /faults`` must carry (``Authorization: Bearer TOKEN``)."""
        self.member = member
        self.board = board
        self.token = token
        self.faults: list[str] = []
        self.version = 0
        self.body = b"{}"
        self.changed = trio.Event()
        self._clock = clock
        self._counts: deque[tuple[float, int]] = deque()
        # the plan's part of the view, rebuilt only when the member folds a new tree or
        # refuses more: the page ticks four times a second, the plan moves far less often
        self._plan_tree: object = None
        self._plan_counts: tuple[int, tuple[tuple[str, int], ...]] | None = None
        self._plan: dict[str, Any] = {}

    def view(self) -> dict[str, Any]:
        member = self.member
        now = self._clock()
        self._counts.append((now, member.tree.events))
        while self._counts and now - self._counts[0][0] > RATE_WINDOW_S:
            self._counts.popleft()
        first_at, first_count = self._counts[0]
        rate = (member.tree.events - first_count) / (now - first_at) if now > first_at else 0.0
        counts = (member.stats.refused, tuple(sorted(member.intake.refused.items())))
        if member.tree is not self._plan_tree or counts != self._plan_counts:  # a refold makes a new tree
            self._plan_tree, self._plan_counts = member.tree, counts
            self._plan = plan_json(member.tree, refused=member.stats.refused, by_rule=member.intake.refused)
        return self._plan | {
            "observer": member.credentials.identity.peer_id,
            "cluster": member.credentials.cluster,
            "heard": self.board.members(self._expected()),
            "status_refused": dict(sorted(self.board.refused.items())),
            "events_per_s": round(rate, 1),
            "held": member.intake.held,
            "connected": len(member.network.connected_peers()),
            "faults": list(self.faults),
            "reorganisations": member.stats.reorganisations,
        }

    def _expected(self) -> dict[str, str]:
        """Members the plan names (authors of its events, the goals' scorers): listed even
        when never heard on the status channel (down since before this observer started)."""
        tree = self.member.tree
        expected = {peer: role for peer, (role, _models) in tree.members.items() if role in MEMBER_ROLES}
        for goal in tree.goals:
            expected.update({peer: "scorer" for peer in goal.scorers})
        return expected

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
        given = request.headers.get("authorization", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
            return JSONResponse({"error": "send the observer's token (DATA_DIR/web.token) as "
                                          "'Authorization: Bearer TOKEN'"}, status_code=401)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FAULTS_BODY:
                return JSONResponse({"error": f"the body is over {MAX_FAULTS_BODY} bytes"}, status_code=413)
        try:
            self.faults = read_faults(body)
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


STANDBY_S = 2.0  # how often an observer standing by tries the page's port
PROBE_TIMEOUT_S = 3.0
MAX_PROBE_BYTES = 64 * 1024 * 1024


def listen(host: str, port: int) -> socket.socket:
    """Bind the page's socket before the event loop starts: a busy port is a plain OSError
    the CLI turns into a clear message (inside trio it would come wrapped in a group)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serving_observer(host: str, port: int, cluster: str) -> str | None:
    """The peer id of the observer of ``cluster`` whose page answers at ``host:port``; None when
    nothing answers there, or something that is not such a page."""
    probe = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    url = f"http://[{probe}]:{port}/state" if ":" in probe else f"http://{probe}:{port}/state"
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as answer:
            state = json.loads(answer.read(MAX_PROBE_BYTES))
    except (OSError, ValueError):
        return None
    if isinstance(state, dict) and state.get("cluster") == cluster and isinstance(state.get("observer"), str):
        return state["observer"]
    return None


async def take_over(observatory: Observatory, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Stand by while another observer serves the page on ``host:port``; once the port is free
    (that observer stopped), serve it from here and ``announce`` the URL."""
    while True:
        try:
            sock = listen(host, port)
        except OSError:
            await trio.sleep(STANDBY_S)
            continue
        async with trio.open_nursery() as nursery:
            announce(await nursery.start(serve, observatory, sock))
        return


async def serve(observatory: Observatory, sock: socket.socket, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the page on ``sock`` (from ``listen``) until cancelled; ``task_status.started``
    with the URL."""
    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(observatory.run)
        await nursery.start(lambda task_status: hypercorn_serve(
            observatory.app(), config, shutdown_trigger=trio.sleep_forever, task_status=task_status))
        host, port = sock.getsockname()[:2]
        url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        log.info("page", url=url)
        task_status.started(url)
