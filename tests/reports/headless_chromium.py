"""A minimal DevTools-protocol client for headless Chromium, for the report's browser test.

It opens one page, records console errors, uncaught exceptions, log errors and every network
request, evaluates JavaScript and takes a full-page screenshot. Only `websocket-client` is
needed besides Debian's `chromium` package; nothing is downloaded.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

BINARIES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    return next((path for name in BINARIES if (path := shutil.which(name))), None)


@dataclass
class PageLog:
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class HeadlessChromium:
    """`with HeadlessChromium(binary, profile_dir) as browser: browser.open(path)`."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 900,
                 timeout: float = 30.0, extra_args: tuple[str, ...] = ()):
        self.timeout = timeout
        self.log = PageLog()
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []
        profile.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--hide-scrollbars", f"--window-size={width},{height}",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", *extra_args, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = self._wait_for_port(profile / "DevToolsActivePort")
            self.socket = websocket.create_connection(self._page_socket(port),
                                                      timeout=timeout, suppress_origin=True)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "HeadlessChromium":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        socket = getattr(self, "socket", None)
        if socket is not None:
            socket.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    # -- protocol -------------------------------------------------------------------------
    def _wait_for_port(self, path: Path) -> int:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if path.is_file() and path.read_text().strip():
                return int(path.read_text().split()[0])
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def _page_socket(self, port: int) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        return next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = self._receive()
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def _receive(self) -> dict[str, Any]:
        message = json.loads(self.socket.recv())
        if "method" in message:
            self._record(message["method"], message.get("params", {}))
        return message

    def _record(self, method: str, params: dict[str, Any]) -> None:
        self._events.append({"method": method, **params})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(arg.get("value", arg.get("description", ""))) for arg in params["args"]]
            self.log.errors.append("console: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.log.errors.append("exception: " + details.get("text", "")
                                   + " " + str(details.get("exception", {}).get("description")))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.log.errors.append("log: " + params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            self.log.requests.append(params["request"]["url"])

    def _wait_for_event(self, method: str) -> None:
        if any(event["method"] == method for event in self._events):
            return
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._receive().get("method") == method:
                return
        raise TimeoutError(f"no {method} within {self.timeout} s")

    # -- what a test uses -----------------------------------------------------------------
    def open(self, path: Path) -> None:
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.call(f"{domain}.enable")
        self._events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self._wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("text"))
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """The whole page, not only the window, as PNG."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        result = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                           clip={"x": 0, "y": 0, "width": size["width"],
                                 "height": size["height"], "scale": 1})
        path.write_bytes(base64.b64decode(result["data"]))
        return path
