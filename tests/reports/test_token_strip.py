"""The PDF's static strip of the per-token series (reports/viewer/strip.py) on a hybrid: which
series and layers it shows (`telling`), checked against the stored values computed here, and the
Tokens section's caption that names them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from probe.results.token_series import NONE, TokenSeries
from probe.reports.viewer.strip import KEY0_VARIES, plot_token_strip, shown_tokens, telling
from tests.reports.token_views import synthetic


def _most_varied(series, name: str, n: int) -> tuple[int, float]:
    """(layer, standard deviation) of the layer whose stored values of `name` vary most over the
    first n tokens after position 0, written out layer by layer; layers without values skipped."""
    after = series.arrays["positions"][:n] >= 1
    spreads = {layer: float(np.std(row[after][np.isfinite(row[after])]))
               for layer, row in enumerate(series.values(name)[:, :n]) if np.isfinite(row[after]).any()}
    layer = max(spreads, key=spreads.get)
    return layer, spreads[layer]


def _softmax_most_varied(series, name: str, n: int) -> int:
    spreads = {layer: float(np.std(row[np.isfinite(row)]))
               for layer, row in enumerate(series.values(name)[:, :n]) if np.isfinite(row).any()}
    return max(spreads, key=spreads.get)


TOP = {"unit": 254, "span": 4093, "share": 4094}   # the largest code of these kinds (probe/results/token_series.py)


def _titles(series, name: str) -> list[str]:
    """The block titles of the drawn strip."""
    figure = plot_token_strip(series, name)
    return [t.get_text() for t in figure.axes[0].texts if t.get_text().startswith(f"{name}: ")]


def _planted(series, name: str, layer: int, n: int, scale: float) -> None:
    """Stretch the stored codes of `name` (a head mean) at `layer` over the first n tokens about
    their mean, so that this layer varies most; the codes stay codes of the series' kind."""
    kind = series.header["series"][name]["kind"]
    codes = series.arrays[name]                                   # (layers, N)
    row = codes[layer, :n].astype(np.float64)
    assert (row != NONE[kind]).all()
    codes[layer, :n] = np.clip(np.rint(row.mean() + (row - row.mean()) * scale), 0, TOP[kind])


def test_a_hybrids_strip_shows_a_softmax_sink_the_gdn_key0_share_and_the_massive_activation():
    series = synthetic(400, 8, 3, seed=5, rows=2, gdn=4)         # layers 3 and 7 softmax, the rest GDN
    n = shown_tokens(series)
    assert n == 160
    types = series.header["layer_types"]
    _planted(series, "gdn_key0", 5, n, 4.0)                       # a GDN layer whose key-0 share varies most
    blocks = telling(series, n)
    assert [key for key, _, _ in blocks] == ["first_token", "gdn_key0", "max_abs"]
    (_, sink, sink_label), (_, layer, label), (_, massive, _) = blocks
    assert (layer, _most_varied(series, "gdn_key0", n)[0]) == (5, 5)
    assert label == "key-0 share of a Gated DeltaNet layer's output, layer 5 (mean over value heads)"
    assert types[sink] == "attention" and sink == _softmax_most_varied(series, "first_token", n)
    assert sink_label == f"attention on the first token, softmax layer {sink} (mean over heads)"
    assert massive == int(np.argmax(np.nan_to_num(series.values("max_abs")[:, :n], nan=-1).max(1)))


def test_beta_stands_in_when_the_key0_share_is_flat_or_absent():
    series = synthetic(400, 8, 3, seed=6, rows=2, gdn=4)
    n = shown_tokens(series)
    _planted(series, "gdn_beta", 6, n, 3.0)                       # the GDN layer whose beta varies most
    linear = [i for i, t in enumerate(series.header["layer_types"]) if t == "linear_attention"]
    key0 = series.arrays["gdn_key0"]                              # (layers, N) unit codes
    key0[linear] = 0                      # as the shipped trained hybrids': 0 after quantisation ...
    key0[linear, 0] = 254                 # ... but 1 at position 0 (by definition)
    expected, spread = _most_varied(series, "gdn_beta", n)
    assert expected == 6 and spread > 0.05 and _most_varied(series, "gdn_key0", n)[1] < KEY0_VARIES
    blocks = telling(series, n)
    assert [key for key, _, _ in blocks] == ["first_token", "gdn_beta", "max_abs"]
    assert blocks[1][1] == expected and series.header["layer_types"][expected] == "linear_attention"
    assert blocks[1][2] == f"write strength beta of a Gated DeltaNet layer, layer {expected} (mean over value heads)"
    # A run without --anatomy has no key-0 share: beta, at the same layer.
    for name in ("gdn_key0", "gdn_key0_heads"):
        del series.header["series"][name], series.arrays[name]
    assert telling(series, n)[1] == blocks[1]


def test_a_strip_without_gdn_series_is_as_before():
    gated = synthetic(300, 4, 3, seed=7)
    assert [key for key, _, _ in telling(gated, 160)] == ["first_token", "gate", "max_abs"]
    assert telling(gated, 160)[0][2] == f"attention on the first token, layer {telling(gated, 160)[0][1]} (mean over heads)"
    assert [key for key, _, _ in telling(synthetic(300, 4, 3, seed=7, gated=False), 160)] == \
        ["first_token", "max_abs", "loss"]


@pytest.mark.parametrize("kind", ["qwen3_5", "olmo_hybrid"])
def test_a_tiny_hybrids_strip_and_caption(kind, checkpoint, tmp_path):
    """A tiny hybrid analysed with --gdn --anatomy: the strip's GDN series sits on the GDN layer
    whose stored values vary most (computed here), it is drawn on its own range (OLMo-Hybrid's
    beta runs past 1) and the Tokens section's caption names what the strip shows."""
    import probe
    import torch
    from probe.reports import load_runs
    from probe.reports.sections.tokens import tokens

    ids = torch.randint(3, 200, (2, 40), generator=torch.Generator().manual_seed(7))
    run = probe.analyze(checkpoint(kind), ids, bos="none", batch_size=2, progress=False, resamples=0,
                        gdn=True, anatomy=True, token_series=80, name=kind).save(tmp_path / kind)
    series = probe.Analysis.load(run).token_series
    n = shown_tokens(series)
    assert n == 40
    blocks = telling(series, n)
    keys = [key for key, _, _ in blocks]
    assert len(blocks) == 3 and keys[0] == "first_token" and keys[2] == "max_abs"
    key0_layer, key0_spread = _most_varied(series, "gdn_key0", n)
    name = "gdn_key0" if key0_spread >= KEY0_VARIES else "gdn_beta"
    assert keys[1] == name
    assert blocks[1][1] == _most_varied(series, name, n)[0]
    assert series.header["layer_types"][blocks[1][1]] == "linear_attention"
    assert series.header["layer_types"][blocks[0][1]] != "linear_attention"
    assert _titles(series, kind)[1].startswith(f"{kind}: {blocks[1][2]} (0 to ")
    # Without the key-0 share (a run without --anatomy): beta, drawn up to its largest value
    # where that passes 1 (OLMo-Hybrid's negative eigenvalues double it).
    without = TokenSeries(json.loads(json.dumps(series.header)), dict(series.arrays))
    for drop in ("gdn_key0", "gdn_key0_heads"):
        del without.header["series"][drop], without.arrays[drop]
    beta = telling(without, n)[1]
    assert beta[:2] == ("gdn_beta", _most_varied(series, "gdn_beta", n)[0])
    top = float(np.nanmax(series.values("gdn_beta")[beta[1], :n]))
    assert (top > 1) == (kind == "olmo_hybrid")
    assert _titles(without, kind)[1] == f"{kind}: {beta[2]} (0 to {max(1.0, top):.3g})"
    caption = tokens(load_runs([run])).items[0].caption
    assert "softmax layer where it varies most" in caption
    # one run: the caption does not promise two side by side
    assert f"the viewer of every stored token ({kind} alone: no other run stored series" in caption
    assert "side by side" not in caption
    assert ("key-0 share of a Gated DeltaNet layer's output" if name == "gdn_key0"
            else "write strength beta at the Gated DeltaNet layer") in caption


def test_a_line_breaks_before_a_word_not_inside_it():
    """The PDF strip broke "3rd e" / "dition": a word (tokens from one that starts with a space
    to the next) that would cross the width moves whole to the next line; one longer than a line
    breaks where it must; no token runs past the width unless it begins its line."""
    from probe.reports.viewer.strip import CHAR, GAP, WIDTH, _layout

    fill = ["ab"] * (int(WIDTH // (2 * CHAR + GAP)) - 1)             # a line all but full
    texts = [*fill, " e", "dition", " used"]
    places, lines = _layout(texts)
    assert lines == 2 and [place[1] for place in places[-3:]] == [1, 1, 1] and places[-3][0] == 0.0
    assert places[-2][0] == pytest.approx(2 * CHAR + GAP)            # "dition" right after " e"
    after_newline = [*fill, "x↵", "ab", "cd"]                          # a newline ends a word too
    places, _ = _layout(after_newline)
    assert places[-3][1] == 0 and places[-2] == (0.0, 1) and places[-1][1] == 1
    long_word = ["a" * 40] * 6                                         # one word, wider than a line
    places, lines = _layout(long_word)
    assert lines > 1
    for text, (x, _) in zip(long_word, places):
        assert x == 0.0 or x + len(text) * CHAR <= WIDTH + 1e-9
