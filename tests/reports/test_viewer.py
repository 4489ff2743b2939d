"""The per-token viewer (reports/viewer/): a self-contained page whose numbers are the run's stored
values, in a real browser (headless Chromium, driven through tests/reports/headless_chromium.py):
the tooltip of a hovered token against TokenSeries.values, the largest value of a range kept when
zoomed out, no network request, token texts escaped; its size and opening time at 16,384 tokens x
30 layers with every series; `probe view`; `analysis.view()`, also as VS Code's notebook renderer
inserts an output."""
from __future__ import annotations

import re
import shutil
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
    # One colour scale for both runs: up to the largest value either holds.
    scale = browser.evaluate("probeViewer.scale()")
    assert scale["hi"] == pytest.approx(max(np.nanmax(a.values("max_abs")), np.nanmax(b.values("max_abs"))), rel=1e-12)
    # Search: every token whose text holds the string, whatever its case.
    texts = [printable(t).lower() for t in a.texts()]
    assert browser.evaluate("probeViewer.search(' GATE')") == sum(" gate" in t for t in texts) > 0
    browser.evaluate("probeViewer.search('')")
    pixel = browser.evaluate(f"(() => {{ const c = document.querySelectorAll('.ptv-heat')[0];"
                             f" return Array.from(c.getContext('2d').getImageData({spike}, {SPIKE[0]} * c.rowHeight + 2, 1, 1).data); }})()")
    assert pixel[:3] == [127, 0, 0]
    assert browser.log.errors == []
    assert browser.log.requests == [path.resolve().as_uri()]      # the page itself, nothing else


def test_dimension_key_and_a_colour_bar_that_wraps_whole(browser, tmp_path):
    """max_abs_dim colours each token by its dimension: the eight dimensions that hold the most
    (layer, token) cells of both runs get a colour each and a key, the rest one grey, the same at
    every zoom (a hue per dimension made unrelated ones look alike); in a window too narrow for
    the toolbar, a value series' bar keeps its two ends beside it."""
    from collections import Counter

    a, b = _pair()
    path = tmp_path / "dims.html"
    path.write_text(page([("gated", a), ("base", b)]), encoding="utf-8")
    _open(browser, path)
    browser.evaluate("probeViewer.select('max_abs_dim', 1, -1); probeViewer.setView(100, 600)")
    key = browser.evaluate("Array.from(document.querySelectorAll('.ptv-key-item[data-dim]')).map(e => +e.dataset.dim)")
    counts = Counter(int(v) for series in (a, b) for v in series.values("max_abs_dim").ravel() if v == v)
    expected = [dim for dim, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]]
    assert key == expected
    assert browser.evaluate("document.querySelector('.ptv-key').textContent").endswith(f"{len(counts) - 8} other dims")
    assert browser.evaluate("document.querySelector('.ptv-scale').hidden")
    # The colours: one per key entry, all different; a dimension outside the key is grey.
    colours = browser.evaluate("Array.from(document.querySelectorAll('.ptv-key-item .ptv-swatch')).map(e => "
                               "getComputedStyle(e).backgroundColor)")
    assert len(set(colours[:8])) == 8 and colours[8] == "rgb(205, 205, 205)"
    browser.evaluate("probeViewer.setView(0, 3000)")                  # another zoom: the same key
    assert browser.evaluate("Array.from(document.querySelectorAll('.ptv-key-item[data-dim]')).map(e => "
                            "+e.dataset.dim)") == expected
    browser.evaluate("probeViewer.select('max_abs', 1, -1)")
    assert browser.evaluate("document.querySelector('.ptv-key').hidden")
    browser.call("Emulation.setDeviceMetricsOverride", width=520, height=900, deviceScaleFactor=1, mobile=False)
    try:
        tops = browser.evaluate("['.ptv-scale > .ptv-tick', '.ptv-legend'].flatMap(q => Array.from("
                                "document.querySelectorAll(q)).map(e => Math.round(e.getBoundingClientRect().top "
                                "+ e.getBoundingClientRect().height / 2)))")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    assert len(tops) == 3 and max(tops) - min(tops) <= 2, tops          # "0", the bar and its top: one line
    assert browser.log.errors == []


def _hover(browser, t: int) -> list:
    """Hover token t of the first run's text: the tooltip's cells, [run, layer, head, text]."""
    box = browser.evaluate(f"(() => {{ const r = document.querySelector('.ptv-text [data-t=\"{t}\"]')"
                           ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=box[0], y=box[1])
    assert browser.evaluate("!document.querySelector('.ptv-tip').hidden")
    return browser.evaluate("Array.from(document.querySelectorAll('.ptv-tip td')).map(td => "
                            "[+td.dataset.run, +td.dataset.layer, td.dataset.head, td.textContent])")


# How closely the tooltip's text gives the stored value, by the series' kind (its format).
SHOWN = {"unit": dict(abs=0.5e-4), "cent": dict(abs=0.5e-2), "span": dict(rel=0.5e-4), "span8": dict(rel=0.5e-2),
         "decay": dict(rel=0.5e-5), "decay8": dict(rel=0.5e-3), "log": dict(rel=0.5e-4), "log8": dict(rel=0.5e-3),
         "share": dict(rel=0.5e-4), "share8": dict(rel=0.5e-3)}


def _check_tip(cells, runs, name: str, t: int) -> None:
    for run, layer, head, shown in cells:
        series = runs[run]
        key = name if head == "mean" else name + "_heads"
        values = series.values(key) if head == "mean" else series.values(key)[:, int(head)]
        assert float(shown) == pytest.approx(values[layer, t], **SHOWN[series.header["series"][key]["kind"]]), \
            (name, run, layer, head)


FORGET = (1, 2, 777, 1e-3)      # a GDN layer, value head, token and a strong decay planted there


def test_gdn_series_hover_layers_and_zoom(browser, tmp_path):
    a = synthetic(2000, 4, 3, seed=3, rows=2, gdn=4, forget=FORGET)
    path = tmp_path / "hybrid.html"
    path.write_text(page([("hybrid", a)]), encoding="utf-8")
    _open(browser, path)
    picker = browser.evaluate("Array.from(document.querySelectorAll('.ptv-bar select')[0].options).map(o => o.value)")
    assert {"gdn_gate", "gdn_beta", "gdn_decay", "gdn_key0"} <= set(picker)
    # Picking a GDN series on a softmax layer moves to the first GDN layer; softmax layers are off.
    browser.evaluate("probeViewer.select('first_token', 3, -1);"
                     "(() => { const s = document.querySelectorAll('.ptv-bar select')[0]; s.value = 'gdn_beta'; s.onchange(); })()")
    layers = browser.evaluate("Array.from(document.querySelectorAll('.ptv-bar select')[1].options)"
                              ".map(o => [o.textContent, o.disabled])")
    assert layers == [["layer 0 · GDN", False], ["layer 1 · GDN", False], ["layer 2 · GDN", False],
                      ["layer 3 · softmax", True]]
    assert browser.evaluate("document.querySelectorAll('.ptv-bar select')[1].value") == "0"
    browser.evaluate("probeViewer.setView(0, 300)")
    for name in ("gdn_beta", "gdn_decay", "gdn_gate", "gdn_key0"):
        browser.evaluate(f"probeViewer.select('{name}', 1, -1)")
        cells = _hover(browser, 40)
        assert len(cells) == 3 * (1 + 4), name        # the GDN layers x (mean + value heads)
        assert {layer for _, layer, _, _ in cells} == {0, 1, 2}
        _check_tip(cells, [a], name, 40)
    # Zoomed out, a decay's column keeps its smallest value (where it forgets most), darkest.
    browser.evaluate(f"probeViewer.select('gdn_decay', {FORGET[0]}, {FORGET[1]}); probeViewer.setView(0, 2000)")
    bins = browser.evaluate("probeViewer.bins[0]")
    column = next(i for i, c in enumerate(bins) if c["t0"] <= FORGET[2] < c["t1"])
    assert bins[column]["at"] == FORGET[2] and bins[column]["min"] == pytest.approx(FORGET[3], rel=1e-3)
    pixel = browser.evaluate(f"(() => {{ const c = document.querySelectorAll('.ptv-heat')[0];"
                             f" return Array.from(c.getContext('2d').getImageData({column}, {FORGET[0]} * c.rowHeight + 2, 1, 1).data); }})()")
    assert pixel[:3] == [127, 0, 0]
    assert browser.log.errors == []
    assert browser.log.requests == [path.resolve().as_uri()]


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
    b = synthetic(120, 2, 2, seed=9)
    b.arrays["token_ids"][:100] = a.arrays["token_ids"]
    page([("a", a), ("b", b)])                            # the same tokens where both have them
    b.arrays["token_ids"][37] += 1
    with pytest.raises(ProbeError, match="differ at token 37"):
        page([("a", a), ("b", b)])


def test_view_in_a_notebook_is_an_iframe_of_the_page():
    a = synthetic(50, 2, 2, seed=1)
    shown = View([("a", a)])._repr_html_()
    assert shown.startswith("<iframe") and "srcdoc=" in shown and "<script" not in shown
    assert fragment([("a", a)]) == shown
    # Outside a notebook it names its runs and how to see them, not <... View at 0x7f...>.
    assert repr(View([("a", a), ("b", synthetic(50, 2, 2, seed=2))])) == (
        "<probe token viewer: a vs b; shown inline in a notebook, .save(path) writes the page>")


@pytest.fixture(scope="module")
def tiny_runs(checkpoint, tmp_path_factory):
    """Two tiny runs on the same tokens, saved: a gated model and a baseline."""
    import probe
    import torch

    root = tmp_path_factory.mktemp("runs")
    ids = torch.randint(3, 200, (3, 32), generator=torch.Generator().manual_seed(0))
    out = {}
    for kind in ("official_headwise", "llama"):
        analysis = probe.analyze(checkpoint(kind), ids, bos="none", batch_size=2, progress=False,
                                 resamples=0, token_series=80, name=kind)
        out[kind] = analysis.save(root / kind)
    return out


def test_a_saved_run_keeps_its_series_and_probe_view_writes_the_page(tiny_runs, tmp_path, capsys):
    import probe
    from probe.api.cli import main

    run = probe.Analysis.load(tiny_runs["official_headwise"])
    assert run.token_series.tokens == 80 and run.token_series.header["rows"] == [[0, 32], [1, 32], [2, 16]]
    assert {"first_token", "first_token_heads", "gate", "gate_heads", "max_abs", "loss"} <= set(run.token_series.names)
    out = tmp_path / "view.html"
    assert main(["view", str(tiny_runs["official_headwise"]), str(tiny_runs["llama"]), "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert '"name":"official_headwise"' in text and '"name":"llama"' in text
    assert main(["view", str(tiny_runs["llama"]), "--out", str(out)]) == 2       # exists: --force
    assert "--force" in capsys.readouterr().err
    assert main(["view", str(tiny_runs["llama"]), "--out", str(out), "--force"]) == 0     # its own page
    assert '"name":"llama"' in out.read_text(encoding="utf-8")
    # --force never replaces a file probe view did not write: a run's own summary.json stays.
    copy = Path(shutil.copytree(tiny_runs["llama"], tmp_path / "llama"))
    before = (copy / "summary.json").read_bytes()
    capsys.readouterr()
    assert main(["view", str(copy), "--out", str(copy / "summary.json"), "--force"]) == 2
    assert "is not a page probe view wrote" in capsys.readouterr().err
    assert (copy / "summary.json").read_bytes() == before
    # A folder of runs (compare, sweep): the line names one of them to pass.
    folder = tmp_path / "folder"
    shutil.copytree(tiny_runs["llama"], folder / "llama")
    assert main(["view", str(folder), "--out", str(tmp_path / "f.html")]) == 2
    assert f"holds 1 run (a compare or sweep folder); pass one or two of them, such as {folder / 'llama'}" \
        in capsys.readouterr().err
    if Path("/proc/self").is_dir():       # writable to root by access(), refused by the kernel
        assert main(["view", str(copy), "--out", "/proc/probe-view.html"]) == 2
        err = capsys.readouterr().err         # root: "could not write", others: "cannot write"
        assert re.match(r"probe: error: (could not|cannot) write --out /proc/probe-view\.html", err)
        assert err.count("\n") == 1 and "Traceback" not in err
    shown = run.view()._repr_html_()
    assert shown.startswith("<iframe") and "official_headwise" in shown


@pytest.mark.parametrize("kind", ["qwen3_5"])
def test_a_hybrid_runs_gdn_values_on_hover_are_its_stored_ones(kind, checkpoint, browser, tmp_path):
    """A tiny Qwen3.5 hybrid analysed with --gdn --anatomy, saved, and `probe view`'s page of it:
    the tooltip of a hovered token gives the run's stored GDN values, every GDN layer and head."""
    import probe
    import torch

    ids = torch.randint(3, 200, (2, 24), generator=torch.Generator().manual_seed(4))
    run = probe.analyze(checkpoint(kind), ids, bos="none", batch_size=2, progress=False, resamples=0,
                        gdn=True, anatomy=True, token_series=48, name=kind).save(tmp_path / kind)
    series = probe.Analysis.load(run).token_series
    linear = [i for i, t in enumerate(series.header["layer_types"]) if t == "linear_attention"]
    path = tmp_path / "view.html"
    path.write_text(page([run]), encoding="utf-8")
    _open(browser, path)
    for name in ("gdn_key0", "gdn_decay", "gdn_gate", "gdn_beta"):
        browser.evaluate(f"probeViewer.select('{name}', {linear[0]}, -1); probeViewer.setView(0, 48)")
        cells = _hover(browser, 30)
        heads = series.header["series"][name + "_heads"]["shape"][1]
        assert len(cells) == len(linear) * (1 + heads) and {c[1] for c in cells} == set(linear), name
        _check_tip(cells, [series], name, 30)
    assert browser.log.errors == []
    from probe.reports import load_runs
    from probe.reports.sections.tokens import tokens

    assert "Gated DeltaNet layers (the gdn_ series)" in tokens(load_runs([run])).intro


def test_the_report_has_a_tokens_section(tiny_runs, tmp_path):
    from probe.reports import load_runs
    from probe.reports.html import render_html
    from probe.reports.sections import build_sections

    sections = build_sections(load_runs([tiny_runs["official_headwise"], tiny_runs["llama"]]))
    section = next(s for s in sections if s.id == "tokens")
    item = section.items[0]
    assert item.interactive is not None and item.interactive().startswith("<iframe")
    figure = item.draw()                                 # the PDF's static strip
    assert len(figure.axes[0].patches) > 3 * 30          # three series of the first tokens
    html = render_html([section], title="t", subtitle="s", generated_at="now")
    assert html.count("<iframe") == 1 and "srcdoc=" in html
    without = build_sections(load_runs([tiny_runs["llama"]]), None)
    assert any(s.id == "tokens" for s in without)


# How VS Code's built-in notebook renderer shows a text/html output (extensions/notebook-renderers,
# renderHTML and domEval): the HTML goes into a new div through innerHTML, the div into the
# output's container, and each <script> in it is re-created (text and type, src, nonce, noModule,
# async; no other attribute), appended to the container and removed at once. JupyterLab's
# trusted-output renderer does the same: innerHTML, then scripts re-created. Two outputs share
# the one document, as the cells of a notebook share VS Code's output webview.
NOTEBOOK_HOST = """<!DOCTYPE html><html><head><meta charset="utf-8"><link rel="icon" href="data:,"></head>
<body><div id="cell1" class="output"></div><div id="cell2" class="output"></div><script>
const outputs = %s;
function renderHTML(html, container) {
  const element = document.createElement('div');
  element.innerHTML = html;
  container.appendChild(element);
  for (const node of Array.from(element.getElementsByTagName('script'))) {
    const tag = document.createElement('script');
    tag.text = node.innerText;
    for (const key of ['type', 'src', 'nonce', 'noModule', 'async']) {
      const val = node[key] || node.getAttribute(key);
      if (val) tag.setAttribute(key, val);
    }
    element.appendChild(tag).parentNode.removeChild(tag);
  }
}
renderHTML(outputs[0], document.getElementById('cell1'));
renderHTML(outputs[1], document.getElementById('cell2'));
</script></body></html>"""


def test_view_shown_as_vs_code_inserts_a_notebook_output(browser, tmp_path):
    """analysis.view() of two runs, each shown as VS Code's notebook renderer inserts an output:
    both viewers draw, each in its own frame, and a hovered token's tooltip gives its run's stored
    values; no request leaves the page, no script error."""
    import json

    a, b = _pair()
    shown = [View([("gated", a)], height=500)._repr_html_(), View([("base", b)], height=500)._repr_html_()]
    path = tmp_path / "notebook.html"
    path.write_text(NOTEBOOK_HOST % json.dumps(shown).replace("</", "<\\/"), encoding="utf-8")
    browser.log.errors.clear()
    browser.log.requests.clear()
    browser.open(path)
    frames = "Array.from(document.querySelectorAll('iframe.probe-tokens')).map(f => f.contentWindow)"
    start = time.monotonic()
    while not browser.evaluate(f"(() => {{ const w = {frames}; return w.length == 2 && "
                               "w.every(x => x.probeViewer && x.probeViewer.ready); })()"):
        assert time.monotonic() - start < 30, browser.log.errors
        time.sleep(0.05)
    for index, series in enumerate((a, b)):
        frame = f"document.querySelectorAll('iframe.probe-tokens')[{index}]"
        browser.evaluate(f"{frame}.scrollIntoView(); {frame}.contentWindow.probeViewer.select('first_token', 1, -1);"
                         f" {frame}.contentWindow.probeViewer.setView(0, 300)")
        # The token's centre in the top page: the frame's offset plus the token's box inside it.
        x, y = browser.evaluate(f"(() => {{ const f = {frame}.getBoundingClientRect();"
                                f" const r = {frame}.contentDocument.querySelector('.ptv-text [data-t=\"40\"]')"
                                ".getBoundingClientRect(); return [f.x + 1 + r.x + r.width / 2,"
                                " f.y + 1 + r.y + r.height / 2]; })()")
        browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        cells = browser.evaluate(f"Array.from({frame}.contentDocument.querySelectorAll('.ptv-tip td')).map(td =>"
                                 " [+td.dataset.run, +td.dataset.layer, td.dataset.head, td.textContent])")
        assert browser.evaluate(f"!{frame}.contentDocument.querySelector('.ptv-tip').hidden"), index
        assert len(cells) == 4 * (1 + 3)                       # layers x (mean + heads), one run per frame
        _check_tip(cells, [series], "first_token", 40)
    assert browser.log.errors == []
    assert browser.log.requests == [path.resolve().as_uri()]


@pytest.mark.parametrize("layers", [4, 30])
def test_in_the_reports_frame_at_a_narrow_window_the_text_ends_inside_the_frame(layers, browser, tmp_path):
    """The report shows the viewer in a fixed-height iframe (fragment's default) the width of its
    column. At a 700 px window the bar wraps and the maps take more room; the text boxes fit the
    height that is left, so nothing of the page is cut at the frame's bottom edge behind a
    second scroll (a fixed 60vh box ran past it), and each still shows several lines; where the
    maps of 30 layers leave no room (a real model's), the frame grows instead."""
    a = synthetic(3000, layers, 3, seed=1, rows=3)
    b = synthetic(3000, layers, 3, seed=2, gated=False, rows=3)
    path = tmp_path / "in-report.html"
    # The report's column at a 700 px window: main's 32 px padding on either side.
    path.write_text('<!DOCTYPE html><html><body style="margin:0"><main style="padding:0 32px">'
                    + fragment([("gated", a), ("base", b)]) + "</main></body></html>", encoding="utf-8")
    browser.call("Emulation.setDeviceMetricsOverride", width=700, height=900, deviceScaleFactor=1, mobile=False)
    try:
        browser.log.errors.clear()
        browser.open(path)
        frame = "document.querySelector('iframe.probe-tokens')"
        start = time.monotonic()
        while not browser.evaluate(f"!!({frame}.contentWindow.probeViewer && {frame}.contentWindow.probeViewer.ready)"):
            assert time.monotonic() - start < 30, browser.log.errors
            time.sleep(0.05)
        inner, boxes, outer = browser.evaluate(
            f"(() => {{ const d = {frame}.contentDocument, e = d.documentElement;"
            " return [[e.scrollHeight, e.clientHeight, e.scrollWidth, e.clientWidth],"
            " Array.from(d.querySelectorAll('.ptv-text')).map(t => { const r = t.getBoundingClientRect();"
            f" return [r.top, r.bottom, r.right]; }}), {frame}.getBoundingClientRect().height]; }})()")
        # A frame that grew is settled: no resize of it feeds another (each redraws the viewer).
        browser.evaluate(f"{frame}.contentWindow.addEventListener('resize', () => window.resizes = (window.resizes || 0) + 1)")
        time.sleep(0.5)
        resizes = browser.evaluate("window.resizes || 0")
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    scroll_height, height, scroll_width, width = inner
    assert scroll_height <= height and scroll_width <= width, inner      # no scroll of the frame's page
    assert len(boxes) == 2
    for top, bottom, right in boxes:
        assert bottom <= height and right <= width, (boxes, inner)
        assert bottom - top >= 200, boxes                                   # several lines of text
    assert (outer > 760 + 2) == (layers == 30), outer                   # + its border
    assert resizes == 0
    assert browser.log.errors == []
