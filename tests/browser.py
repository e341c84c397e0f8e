"""A real headless Chromium (Debian's ``chromium``, by path) driven over the DevTools protocol.

No browser download and no Playwright driver: Chromium is started with a DevTools port,
and one websocket per page (trio-websocket) sends commands and reads their answers.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from trio_websocket import open_websocket_url

from agents.cli.plan import end_processes

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Browser:
    """``with Browser() as browser``: a headless Chromium with its own profile, stopped after."""

    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="swarm-chromium-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> Browser:
        if not Path(CHROMIUM).exists():
            raise AssertionError("chromium is not installed: apt-get install chromium (make test does)")
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not active.exists() or not active.read_text().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(f"chromium did not open its DevTools port (exit {self.process.poll()})")
            time.sleep(0.1)
        self.port = int(active.read_text().split()[0])
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.process is not None:
            end_processes([self.process], grace=10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def new_page_url(self) -> str:
        """A fresh tab's DevTools websocket URL."""
        import urllib.request

        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())["webSocketDebuggerUrl"]


class Page:
    """One tab: ``async with Page(ws_url) as page``; ``call`` sends a DevTools command."""

    def __init__(self, ws_url: str) -> None:
        self.ws_url = ws_url
        self._ids = itertools.count(1)

    async def __aenter__(self) -> Page:
        self._context = open_websocket_url(self.ws_url, max_message_size=64 * 1024 * 1024)
        self._ws = await self._context.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._context.__aexit__(*exc)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._ws.send_message(json.dumps({"id": ident, "method": method, "params": params}))
        with trio.fail_after(30):
            while True:
                message = json.loads(await self._ws.get_message())
                if message.get("id") == ident:
                    if "error" in message:
                        raise AssertionError(f"{method}: {message['error']}")
                    return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def goto(self, url: str) -> None:
        await self.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1,
                        mobile=False)
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)
        with trio.fail_after(30):
            while await self.evaluate("document.readyState") != "complete":
                await trio.sleep(0.05)

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
