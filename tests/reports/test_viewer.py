"""The per-token viewer (reports/viewer/): a self-contained page whose numbers are the run's stored
values, in a real browser (headless Chromium, driven through tests/reports/headless_chromium.py):
the tooltip of a hovered token against TokenSeries.values, the largest value of a range kept when
zoomed out, no network request, token texts escaped; its size and opening time at 16,384 tokens x
30 layers with every series; `probe view`; `analysis.view()`."""
from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from probe.core.errors import printable
from probe.reports.viewer import View, fragment, page
from tests.reports.token_views import WORDS, synthetic
from tests.test_fuzz_outputs import ODD_STRINGS

MB = 1_000_000
SIZE_LIMIT = 5 * MB
OPEN_LIMIT = 3.0          # seconds from navigation to the viewer drawn
SPIKE = (2, 1234, 24688.0)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    pytest.importorskip("websocket", reason="websocket-client is not installed")
    from tests.reports.headless_chromium import HeadlessChromium, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with HeadlessChromium(binary, tmp_path_factory.mktemp("profile"), width=1280, height=900) as b:
        yield b


def _open(browser, path: Path) -> float:
    """Open `path` and wait until the viewer has drawn; the seconds it took."""
    start = time.monotonic()
    browser.log.errors.clear()
    browser.log.requests.clear()
    browser.open(path)
    while not browser.evaluate("!!(window.probeViewer && window.probeViewer.ready)"):
        assert time.monotonic() - start < 30, browser.log.errors
        time.sleep(0.02)
    return time.monotonic() - start


def _pair():
    """Two runs on the same tokens: one gated, one not, a spike planted in the first."""
    a = synthetic(3000, 4, 3, seed=1, spike=SPIKE, rows=3, texts=WORDS + ODD_STRINGS)
    b = synthetic(3000, 4, 3, seed=2, gated=False, rows=3, texts=WORDS + ODD_STRINGS)
    return a, b


def test_hover_zoom_and_no_request(browser, tmp_path):
    a, b = _pair()
    path = tmp_path / "two.html"
    path.write_text(page([("gated", a), ("base", b)]), encoding="utf-8")
    _open(browser, path)
    # Hover token 40 of the first run's text, with the per-head first-token series, layer 1.
    browser.evaluate("probeViewer.select('first_token', 1, -1); probeViewer.setView(0, 300)")
    box = browser.evaluate("(() => { const r = document.querySelector('.ptv-text [data-t=\"40\"]')"
                           ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
    cells = browser.evaluate("Array.from(document.querySelectorAll('.ptv-tip td')).map(td => "
                             "[+td.dataset.run, +td.dataset.layer, td.dataset.head, td.textContent])")
    assert browser.evaluate("!document.querySelector('.ptv-tip').hidden")
    assert len(cells) == 4 * (1 + 3) * 2          # layers x (mean + heads) x runs
    for run, layer, head, shown in cells:
        series = (a, b)[run]
        values = series.values("first_token") if head == "mean" else series.values("first_token_heads")[:, int(head)]
        assert float(shown) == pytest.approx(values[layer, 40], abs=0.5e-4 if head == "mean" else 0.5e-2), (run, layer, head)
    tip_token = browser.evaluate("document.querySelector('.ptv-tip-token').textContent")
    assert tip_token == printable(a.texts()[40])
    # Zoomed out over every token, each pixel column of max_abs at the spike's layer keeps its
    # bin's largest stored value: the spike's column shows it, in the scale's darkest colour.
    browser.evaluate(f"probeViewer.select('max_abs', {SPIKE[0]}, -1); probeViewer.setView(0, 3000)")
    bins = browser.evaluate("probeViewer.bins[0]")
    assert len(bins) < 3000 / 2                           # binned: several tokens per column
    stored = a.values("max_abs")[SPIKE[0]]
    for column in bins:
        assert column["max"] == pytest.approx(np.nanmax(stored[column["t0"]:column["t1"]]), rel=1e-12)
    spike = next(i for i, c in enumerate(bins) if c["t0"] <= SPIKE[1] < c["t1"])
    assert bins[spike]["at"] == SPIKE[1] and bins[spike]["max"] == pytest.approx(SPIKE[2], rel=2e-4)
    pixel = browser.evaluate(f"(() => {{ const c = document.querySelectorAll('.ptv-heat')[0];"
                             f" return Array.from(c.getContext('2d').getImageData({spike}, {SPIKE[0]} * c.rowHeight + 2, 1, 1).data); }})()")
    assert pixel[:3] == [127, 0, 0]
    assert browser.log.errors == []
    assert browser.log.requests == [path.resolve().as_uri()]      # the page itself, nothing else


def test_token_texts_are_escaped(browser, tmp_path):
    a, _ = _pair()
    path = tmp_path / "odd.html"
    text = page([("x\u202e<b>evil</b>\x1b", a)])
    path.write_text(text, encoding="utf-8")
    # Nothing of a token's text is markup or a raw control / bidi character anywhere in the file.
    assert "<img" not in text and "<b>evil" not in text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", text)
    _open(browser, path)
    browser.evaluate("probeViewer.setView(0, 200)")
    shown = browser.evaluate("Array.from(document.querySelectorAll('.ptv-text [data-t]')).slice(0, 200)"
                             ".map(s => s.textContent)")
    assert shown == [printable(t) for t in a.texts()[:200]]
    assert browser.evaluate("document.querySelectorAll('img, b').length") == 0
    assert browser.evaluate("document.querySelector('.ptv-name').textContent").startswith("x\\u202e<b>evil</b>\\x1b")
    assert browser.log.errors == []


def test_16k_tokens_by_30_layers_is_small_and_opens_fast(browser, tmp_path):
    # SmolLM2's shape (30 layers, 9 heads, no gate) with every series it has, anatomy included.
    series = synthetic(16384, 30, 9, seed=4, gated=False, rows=8)
    path = tmp_path / "big.html"
    path.write_text(page([("smol", series)]), encoding="utf-8")
    size = path.stat().st_size
    half = len(page([("smol", synthetic(8192, 30, 9, seed=4, gated=False, rows=4))]).encode())
    assert size <= SIZE_LIMIT, f"{size / MB:.2f} MB"
    assert 1.8 < size / half < 2.2                         # grows linearly with the tokens
    seconds = _open(browser, path)
    assert seconds < OPEN_LIMIT, f"{seconds:.2f} s"
    assert browser.log.errors == []


def test_side_by_side_needs_the_same_tokens():
    from probe.core.errors import ProbeError

    a = synthetic(100, 2, 2, seed=1)
    b = synthetic(100, 2, 2, seed=9)
    with pytest.raises(ProbeError, match="differ at token"):
        page([("a", a), ("b", b)])


def test_view_in_a_notebook_is_an_iframe_of_the_page():
    a = synthetic(50, 2, 2, seed=1)
    shown = View([("a", a)])._repr_html_()
    assert shown.startswith("<iframe") and "srcdoc=" in shown and "<script" not in shown
    assert fragment([("a", a)]) == shown
