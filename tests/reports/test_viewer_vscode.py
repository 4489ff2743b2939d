"""`analysis.view()` in VS Code itself: a notebook whose two cells hold the viewer's saved
text/html outputs, opened in VS Code's own notebook editor (code-server, the VS Code workbench
served to a browser, with VS Code's built-in ipynb and notebook-renderer extensions), driven by
headless Chromium: both viewers draw inside VS Code's output webview, a token hovered with a real
mouse event shows its run's stored values, and the viewer's frames make no request and throw no
error.

Opt-in: skipped unless code-server is installed (`code-server` on PATH, or PROBE_CODE_SERVER
naming its binary or its out/node/entry.js, run with the `node` on PATH or PROBE_NODE). CI has
neither; docs/usage.md says how it was run here.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from probe.reports.viewer import View
from tests.reports.test_viewer import _check_tip, _pair

SETTINGS = {
    "security.workspace.trust.enabled": False,          # untrusted notebooks render no HTML output
    "workbench.editorAssociations": {"*.ipynb": "jupyter-notebook"},   # the notebook editor, not JSON
    "workbench.startupEditor": "none", "telemetry.telemetryLevel": "off", "update.mode": "none",
    "extensions.ignoreRecommendations": True, "chat.disableAIFeatures": True,
}
# VS Code's webviews live on another origin: with site isolation they are other renderer
# processes, out of reach of this page's DevTools session; without it every frame is one of its
# execution contexts (what the frames may do to each other is unchanged).
ONE_PROCESS = ("--disable-site-isolation-trials", "--disable-features=IsolateOrigins,site-per-process")
FRAMES = "Array.from(document.querySelectorAll('iframe.probe-tokens'))"


def _code_server_command() -> list[str] | None:
    named = os.environ.get("PROBE_CODE_SERVER") or shutil.which("code-server")
    if not named:
        return None
    if named.endswith(".js"):
        node = os.environ.get("PROBE_NODE") or shutil.which("node")
        return [node, named] if node else None
    return [named]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vscode(tmp_path_factory):
    """(url of a code-server over a folder with the notebook, the two runs shown in it)."""
    command = _code_server_command()
    if command is None:
        pytest.skip("code-server is not installed (npm install code-server, then PROBE_CODE_SERVER="
                    "node_modules/code-server/out/node/entry.js); see docs/usage.md")
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed")
    root = tmp_path_factory.mktemp("vscode")
    (root / "data" / "User").mkdir(parents=True)
    (root / "data" / "User" / "settings.json").write_text(json.dumps(SETTINGS))
    runs = _pair()
    notebook = nbformat.v4.new_notebook()
    for name, series in zip(("gated", "base"), runs):
        # What Jupyter saves for a cell ending in analysis.view(): its _repr_html_ as text/html.
        shown = View([(name, series)], height=500)
        notebook.cells.append(nbformat.v4.new_code_cell(f"{name}.view()", outputs=[nbformat.v4.new_output(
            "display_data", data={"text/html": shown._repr_html_(), "text/plain": "<View>"})]))
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (root / "work").mkdir()
    nbformat.write(notebook, root / "work" / "view.ipynb")
    port = _free_port()
    server = subprocess.Popen([*command, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
                               "--user-data-dir", str(root / "data"), "--extensions-dir", str(root / "ext"),
                               "--disable-telemetry", "--disable-update-check", str(root / "work")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"code-server did not start ({' '.join(command)})")
                time.sleep(0.2)
        payload = json.dumps([["openFile", f"vscode-remote://{(root / 'work' / 'view.ipynb').as_posix()}"]])
        yield (f"http://127.0.0.1:{port}/?folder={urllib.parse.quote(str(root / 'work'))}"
               f"&payload={urllib.parse.quote(payload)}"), runs
    finally:
        server.terminate()
        server.wait(10)


class Contexts:
    """Every frame's JavaScript context of the page, as DevTools announces them."""

    def __init__(self, browser):
        self.browser, self.by_id, self.events = browser, {}, []

    def pump(self, seconds: float) -> None:
        import websocket

        self.browser.socket.settimeout(seconds)
        try:
            self.browser._receive()
        except websocket.WebSocketTimeoutException:        # a quiet moment: nothing announced
            pass
        finally:
            self.browser.socket.settimeout(self.browser.timeout)
        for event in self.browser._events:
            self.events.append(event)
            if event["method"] == "Runtime.executionContextCreated":
                context = event["context"]
                self.by_id[context["id"]] = context
        self.browser._events.clear()

    def evaluate(self, context: int, expression: str):
        result = self.browser.call("Runtime.evaluate", expression=expression, contextId=context,
                                   returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("text"))
        return result["result"].get("value")

    def find(self, expression: str, timeout: float):
        """The context where `expression` is truthy, waiting for it to appear."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.5)
            for context in list(self.by_id):
                try:
                    if self.evaluate(context, expression):
                        return context
                except RuntimeError:                         # a frame gone
                    self.by_id.pop(context, None)
        return None


def test_view_in_vs_code_notebook_editor(vscode, tmp_path):
    from tests.reports.headless_chromium import HeadlessChromium, find_chromium

    pytest.importorskip("websocket", reason="websocket-client is not installed")
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    url, runs = vscode
    with HeadlessChromium(binary, tmp_path / "profile", width=1400, height=2400, timeout=60,
                          extra_args=ONE_PROCESS) as browser:
        for domain in ("Runtime", "Log", "Network", "Page", "DOM"):
            browser.call(f"{domain}.enable")
        browser.call("Page.navigate", url=url)
        contexts = Contexts(browser)
        # VS Code's output frame: it holds both cells' viewers once they have drawn.
        output = contexts.find(f"(() => {{ const f = {FRAMES}; return f.length == 2 && f.every(x => "
                               "x.contentWindow.probeViewer && x.contentWindow.probeViewer.ready); })()", 90)
        (tmp_path / "vscode.png").write_bytes(base64.b64decode(browser.call("Page.captureScreenshot")["data"]))
        assert output is not None, "the viewers did not draw in VS Code's notebook output webview"
        frame_id = contexts.by_id[output]["auxData"]["frameId"]
        owner = browser.call("DOM.getFrameOwner", frameId=frame_id)["backendNodeId"]
        # Which frame shows which run: VS Code inserts outputs as they render, not in cell order.
        names = contexts.evaluate(output, f"{FRAMES}.map(f => f.contentDocument.querySelector('.ptv-name').textContent)")
        assert sorted(names) == ["base (3000 tokens)", "gated (3000 tokens)"]
        for name, series in zip(("gated", "base"), runs):
            frame = f"{FRAMES}[{names.index(f'{name} (3000 tokens)')}]"
            contexts.evaluate(output, f"{frame}.contentWindow.probeViewer.select("
                              f"'first_token', 1, -1); {frame}.contentWindow.probeViewer.setView(0, 300)")
            contexts.pump(0.3)
            # The token's centre in the top page: VS Code's output frame (its content box, from
            # DevTools), then the viewer's frame inside it, then the token inside that.
            box = browser.call("DOM.getBoxModel", backendNodeId=owner)["model"]["content"]
            x, y = contexts.evaluate(output, f"(() => {{ const f = {frame}.getBoundingClientRect();"
                                     f" const r = {frame}.contentDocument.querySelector('.ptv-text [data-t=\"40\"]')"
                                     ".getBoundingClientRect(); return [f.x + 1 + r.x + r.width / 2,"
                                     " f.y + 1 + r.y + r.height / 2]; })()")
            tip = f"{frame}.contentDocument.querySelector('.ptv-tip')"
            browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=5, y=5)      # off the viewers
            contexts.pump(0.3)
            assert contexts.evaluate(output, f"{tip}.hidden"), name
            browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0] + x, y=box[1] + y)
            contexts.pump(0.3)
            assert contexts.evaluate(output, f"!{tip}.hidden && {tip}.textContent.includes('token 40 ')"), name
            cells = contexts.evaluate(output, f"Array.from({frame}.contentDocument.querySelectorAll('.ptv-tip td'))"
                                      ".map(td => [+td.dataset.run, +td.dataset.layer, td.dataset.head, td.textContent])")
            assert len(cells) == 4 * (1 + 3)                   # layers x (mean + heads), one run per frame
            _check_tip(cells, [series], "first_token", 40)
            shot = browser.call("Page.captureScreenshot", clip={"x": 0, "y": 0, "width": 1400, "height": 1300, "scale": 1})
            (tmp_path / f"vscode-hover-{name}.png").write_bytes(base64.b64decode(shot["data"]))
        # The viewers' own frames: no request, no script error (VS Code's own 404s are not theirs).
        viewer_frames = {browser.call("DOM.describeNode", objectId=browser.call(
            "Runtime.evaluate", expression=f"{FRAMES}[{i}]", contextId=output)["result"]["objectId"])["node"]["frameId"]
            for i in range(2)}
        viewer_contexts = {c for c, ctx in contexts.by_id.items() if ctx["auxData"].get("frameId") in viewer_frames}
        assert len(viewer_contexts) >= 2
        requests = [e["request"]["url"] for e in contexts.events
                    if e["method"] == "Network.requestWillBeSent" and e.get("frameId") in viewer_frames]
        errors = [e for e in contexts.events if e["method"] == "Runtime.exceptionThrown"
                  and e["exceptionDetails"].get("executionContextId") in viewer_contexts]
        assert requests == [] and errors == []
