"""The report's section on a hybrid's Gated DeltaNet (linear-attention) layers: their output gate
SiLU(z), write strength beta, decay, and the share of each output carried by key 0 (gdn_*.csv,
probe/metrics/gdn/, docs/gdn.md).

Found by reports.sections (SECTION, AFTER). Left out with one line where a hybrid was analysed
without --gdn (probe analyze --gdn on Qwen3-Next, Qwen3.5); absent where no model is a hybrid.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from probe.reports.plots.linear_attention import (FLOOR, NO_KEYS, gdn_models, has_keys, plot_gdn_heads,
                                                  plot_sink_by_layer)
from probe.reports.labels import LINEAR_ATTENTION
from probe.reports.runs import Runs
from probe.reports.sections.items import FigureItem, Section, TableItem, axes_level, needing
from probe.reports.text import plain

AFTER = "first-token"    # beside F-Attn: the same question asked of the other layer type
ID, TITLE = "linear-attention", "Linear-attention layers (Gated DeltaNet)"


def _mean(rows: pd.DataFrame, quantity: str, metric: str = "mean") -> float:
    found = rows[(rows["quantity"] == quantity) & (rows["group"] == "all") & (rows["metric"] == metric)]
    return float(found["value"].mean()) if len(found) else float("nan")


def per_layer(runs: Runs) -> pd.DataFrame:
    """Per model and GDN layer, head means over every token: SiLU(z), beta, exp(g), the
    half-life, the key-0 share, key 0's share of the final state (phi) and the reconstruction
    check's largest relative error."""
    out = []
    for model in gdn_models(runs):
        gates, keys, check = (runs.rows(name, model) for name in ("gdn_gates", "gdn_keys", "gdn_check"))
        for layer in sorted(int(v) for v in set(gates["layer"]) | set(keys["layer"])):
            g, k = gates[gates["layer"] == layer], keys[keys["layer"] == layer]
            c = check[(check["layer"] == layer) & (check["site"] != "state_share_sum")]
            key = {metric: float(k[k["metric"] == metric]["value"].mean()) if (k["metric"] == metric).any()
                   else float("nan") for metric in ("key0_share", "phi_first")}
            out.append({"model": plain(model), "layer": f"{layer}",
                        "SiLU(z)": f"{_mean(g, 'gate_silu'):.3f}", "β": f"{_mean(g, 'beta'):.3f}",
                        "exp(g)": f"{_mean(g, 'decay'):.3f}",
                        "half-life": f"{_mean(g, 'decay', 'half_life'):.3g}",
                        "key-0 share": _fmt(key["key0_share"], ".3g"), "φ key 0": _share(key["phi_first"]),
                        "check": (f"{c['max_rel_error'].max():.1e}" + ("" if c["passed"].all() else " FAIL"))
                        if len(c) else "–"})
    return pd.DataFrame(out).set_index("model") if out else pd.DataFrame()


def received(runs: Runs) -> pd.DataFrame:
    """Per model and GDN layer (--gdn --anatomy), from gdn_received*.csv and gdn_state_sinks.csv:
    the mean share of a query's output that key 0 and the keys after it carry (head means per
    key-position bucket), the three tokens whose keys carry the most, and the strongest secondary
    state sink."""
    out = []
    for model in gdn_models(runs):
        rec, tok, sinks = (runs.rows(n, model) for n in ("gdn_received", "gdn_received_by_token", "gdn_state_sinks"))
        for layer in sorted(int(v) for v in set(rec["layer"])):
            by_bucket = rec[rec["layer"] == layer].groupby(["key_lo", "key_hi"])["score"].mean()
            rest = by_bucket[by_bucket.index.get_level_values(0) >= 1]
            lo, hi = rest.idxmax() if len(rest) else (None, None)
            tops = tok[tok["layer"] == layer].sort_values("rank").head(3)
            best = sinks[sinks["layer"] == layer].sort_values("score", ascending=False).head(1)
            out.append({"model": plain(model), "layer": f"{layer}",
                        "key 0": _fmt(by_bucket.get((0, 1.0), float("nan")), ".3g"),
                        "keys 1-3": _fmt(rest[rest.index.get_level_values(0) < 4].mean()
                                         if len(rest) else float("nan"), ".3g"),
                        "strongest later bucket": f"keys {int(lo)}-{int(hi) - 1}: {rest.max():.3g}" if lo is not None else "–",
                        "top tokens": ", ".join(f"{plain(t)!r} {v:.3g}" for t, v in zip(tops["token"], tops["score"])) or "–",
                        "state sink": (f"position {int(best['position'].iloc[0])} ({plain(best['token'].iloc[0])!r}, "
                                       f"head {int(best['head'].iloc[0])}): {best['score'].iloc[0]:.3g}")
                        if len(best) else "none read by enough queries"})
    return pd.DataFrame(out).set_index("model") if out else pd.DataFrame()


def _headline(runs: Runs) -> list[str]:
    """One sentence per model: the pooled GDN numbers of summary.json, beside the softmax F-Attn."""
    lines = []
    for model in gdn_models(runs):
        gdn = runs.summary[model].get("gdn") or {}
        if not gdn:
            continue
        parts = [f"mean SiLU(z) {_fmt(gdn.get('mean_gate_silu'), '.3f')}", f"mean β {_fmt(gdn.get('mean_beta'), '.3f')}"]
        if gdn.get("key0_share") is not None:
            lo, hi = gdn.get("key0_share_lo"), gdn.get("key0_share_hi")
            interval = f" (95% interval [{lo:.3g}, {hi:.3g}])" if lo is not None and hi is not None else ""
            f_attn = runs.summary[model].get("f_attn")
            parts.insert(0, f"key-0 share {gdn['key0_share']:.3g}{interval} over its GDN layers (GDN sink rate "
                            f"{_fmt(gdn.get('sink_rate'), '.3g')} at ε = {gdn.get('sink_epsilon')})"
                            + (f", against F-Attn {f_attn:.3g} over its softmax layers"
                               if f_attn is not None and np.isfinite(f_attn) else ""))
            parts.append(f"largest reconstruction error {_fmt(gdn.get('max_rel_error'), '.1e')}"
                         + (f", layers past the tolerance: {', '.join(map(str, gdn['failed_layers']))}"
                            if gdn.get("failed_layers") else ""))
        lines.append(f"{plain(model)}: " + "; ".join(parts) + ".")
    return lines


# A state share below this is 0 for a reader: a state that forgets within a token leaves key 0
# shares such as 2.8e-238 or -4e-202 (float64 cancellation around 0), which read as noise.
SHARE_FLOOR = 1e-12


def _share(value) -> str:
    if value is None or not np.isfinite(value):
        return "n/a"
    return "0" if abs(value) < SHARE_FLOOR else format(value, ".3g")


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None or not np.isfinite(value) else format(value, spec)


def linear_attention(runs: Runs) -> Section | None:
    """The section; None where no model has linear-attention layers (nothing to leave out), left
    out in one line where a hybrid was analysed without --gdn."""
    if not any(runs.layers_of_type(model, LINEAR_ATTENTION) for model in runs.models):
        return None
    return _measured(runs)


@needing("gdn_gates", id=ID, title=TITLE)
def _measured(runs: Runs) -> Section:
    models, keys = gdn_models(runs), has_keys(runs)
    sink = FigureItem("gdn-sink-by-layer", "Where a hybrid keeps its sink",
                      axes_level(partial(plot_sink_by_layer, runs)),
                      "On one layer axis: the softmax layers' F-Attn (circles: attention "
                      "probability on the first token, head mean over queries t ≥ 1) and the GDN "
                      "layers' key-0 share (open squares: |c_{t,0}| / Σ_s |c_{t,s}|, head mean over "
                      "queries t ≥ 1), one colour per model. Log scale; a share below "
                      f"{FLOOR:g} is drawn at {FLOOR:g}. Dashed: the uniform reference mean_t 1/(t+1). "
                      "The two shares are not the same quantity: F-Attn weighs probabilities, the "
                      "key-0 share the size of each key's term in the output.")
    return Section(
        id=ID, title=TITLE,
        intro=("Three in four layers of Qwen3-Next and Qwen3.5 are Gated DeltaNet layers. Each has "
               "its own output gate, SiLU(z) after an RMSNorm (y = w ⊙ rmsnorm(o) ⊙ SiLU(z)), a "
               "write strength β and a decay exp(g). Their output splits exactly into one term per "
               "key (the write basis, docs/gdn.md), so the share of each output carried by key 0 is "
               "the GDN counterpart of F-Attn. Key s is the position after the causal conv1d, "
               "which mixes tokens s-3 to s. " + " ".join(_headline(runs))),
        items=[
            *([sink] if keys else []),
            FigureItem("gdn-heads", "GDN gates, write strength, decay and key-0 share per head",
                       partial(plot_gdn_heads, runs),
                       "Per GDN layer (rows) and value head (columns), over every analysed token: "
                       "the mean output gate SiLU(z) (a SiLU gate, not a sigmoid one: it is "
                       "unbounded above and can be negative), the mean write strength β = sigmoid(b), "
                       "the decay's half-life ln 0.5 / mean g in tokens" + (", and the key-0 share" if keys else "")
                       + "; one row "
                       "per model (" + ", ".join(plain(m) for m in models) + "), one colour scale per "
                       "column."),
            TableItem("gdn-per-layer", "GDN layers: gate, write strength, decay, key 0", per_layer(runs),
                      "Per GDN layer, head means: SiLU(z), β and exp(g) over every token; the half-life "
                      "in tokens; the key-0 share (queries t ≥ 1); φ key 0, key 0's share of the final "
                      "state (the shares φ_s sum to 1 over keys); check: the largest relative error of "
                      "the per-key terms' sum against the layer's own output (kernel, output gate, "
                      "out_proj; gdn_check.csv), FAIL past the tolerance.",
                      index_label="model"),
            *([TableItem("gdn-received", "GDN layers: where their output comes from", received(runs),
                         "Per GDN layer, with --anatomy: a key's score is the mean share of a query's output "
                         "it carries (|c_{t,s}| / Σ_s' |c_{t,s'}|) over the queries t ≥ 1 that read it, head "
                         "mean (gdn_received.csv); key 0's is the key-0 share. keys 1-3: the mean of buckets "
                         "[1, 2) and [2, 4); the strongest later bucket [2^j, 2^(j+1)); the three tokens "
                         "whose keys score highest, pooled over heads (gdn_received_by_token.csv, tokens "
                         "read by 16 (query, head) cells at least); the strongest secondary state sink: a "
                         "sequence's top key after key 0 among keys read by 128 queries at least "
                         "(gdn_state_sinks.csv). For reference, key s of a T-token sequence whose queries "
                         "spread their output evenly would score the mean of 1/(t+1) over t = s .. T-1.")] if keys and len(received(runs)) else []),
        ],
        notes=[] if keys else [NO_KEYS.replace("No run has", "The runs lack")],
    )


SECTION = linear_attention
