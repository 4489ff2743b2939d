"""The report's Tokens section: the per-token series of the first tokens (tokens.json +
tokens.npz, probe/metrics/token_series/) where a run has them.

Found by reports.sections (SECTION, AFTER). One figure: in the PDF the static strip (the first
tokens of one sequence, shaded by the two or three most telling series, reports/viewer/strip.py);
in the HTML report the interactive viewer in its place (reports/viewer/: the same stored values,
every layer and head, search, pan and zoom), the first two runs with series side by side when they
share their tokens. Without series in any run the report is as it was (no section, no line).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from probe.reports.sections.items import FigureItem, Section
from probe.reports.runs import Runs
from probe.reports.text import plain

AFTER = "massive-activations"
ID, TITLE = "tokens", "Tokens"


def _shown(runs: Runs) -> list[str]:
    """The runs the viewer shows: the first with series, and the next on the same tokens."""
    models = [m for m in runs.models if m in runs.token_series]
    if not models:
        return []
    first = runs.token_series[models[0]]
    for other in models[1:]:
        series = runs.token_series[other]
        n = min(first.tokens, series.tokens)
        if np.array_equal(first.arrays["token_ids"][:n], series.arrays["token_ids"][:n]):
            return [models[0], other]
    return models[:1]


def _draw(runs: Runs, model: str):
    from probe.reports.viewer.strip import plot_token_strip

    return plot_token_strip(runs.token_series[model], model)


def _strip_caption(series) -> str:
    """What the strip's series show (reports/viewer/strip.py, telling), in its order: 'a, b and c'."""
    from probe.reports.viewer.strip import KEY0_VARIES, shown_tokens, telling

    keys = [key for key, _, _ in telling(series, shown_tokens(series))]
    softmax = " softmax" if any(key.startswith("gdn_") for key in keys) else ""     # a hybrid's strip
    about = {
        "first_token": f"the first-token attention at the{softmax} layer where it varies most across these tokens",
        "gate": f"the gate score at the{softmax} layer where it varies most",
        "gdn_key0": ("the key-0 share of a Gated DeltaNet layer's output (the GDN analogue of the first-token "
                     "attention) at the GDN layer where it varies most after position 0"),
        "gdn_beta": "the write strength beta at the Gated DeltaNet layer where it varies most after position 0",
        "max_abs": "the largest |activation| at the layer that holds the largest one",
        "loss": "the loss",
    }
    parts = [about[key] for key in keys]
    if "gdn_beta" in keys and "gdn_key0" in series.names:
        parts[keys.index("gdn_beta")] += (" (the key-0 share, stored too, barely varies across these tokens: a standard "
                                          f"deviation below {KEY0_VARIES:g} at every GDN layer)")
    return (", ".join(parts[:-1]) + " and " + parts[-1]) if len(parts) > 1 else (parts[0] if parts else "none")


def _viewer(runs: Runs, models: list[str]) -> str:
    from probe.reports.viewer import fragment

    return fragment([(m, runs.token_series[m]) for m in models])


def tokens(runs: Runs) -> Section | None:
    models = _shown(runs)
    if not models:         # runs written before the series, or with --token-series 0: as before
        return None
    first = runs.token_series[models[0]]
    gdn = any(n.startswith("gdn_") for m in models for n in runs.token_series[m].names)
    return Section(
        id=ID, title=TITLE,
        intro=("The measurements of the sections above, token by token, for the first "
               f"{first.tokens:,} tokens of {plain(models[0])}: where the attention sinks, where the gate "
               "closes, which tokens carry the massive activations"
               + (" and, on the Gated DeltaNet layers (the gdn_ series), how hard each token is written "
                  "(beta), how much the state decays, the output gate SiLU(z) and the key-0 share" if gdn else "")
               + ". In the HTML report: pick a series, "
               "a layer and a head; hover a token for every layer's (and head's) value; search a "
               "token; scroll on the map to zoom, drag to pan (each pixel column shows the largest "
               "value of its tokens). probe view RUN --out tokens.html writes the same page alone."),
        items=[FigureItem(
            "token-strip", "The first tokens, shaded", partial(_draw, runs, models[0]),
            "In the HTML report, the viewer of every stored token ("
            + ("the first two runs on the same tokens side by side, on one colour scale" if len(models) > 1 else
               f"{plain(models[0])} alone: no other run stored series of the same tokens")
            + "); in the PDF, the first tokens of the first sequence of "
            + plain(models[0]) + ", each shaded by the stored value of a series at one layer: "
            + _strip_caption(first) + ". ↵ is a newline; control and bidi characters are shown as escapes."
            + (f" In the HTML report the viewer shows {plain(models[1])} beside it." if len(models) > 1 else ""),
            shrinkable=False, interactive=partial(_viewer, runs, models))],
    )


SECTION = tokens
