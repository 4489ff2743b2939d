"""Synthetic per-token series (probe.results.token_series.TokenSeries) for the viewer's tests:
any size, every series, values shaped like a real model's, from a seed. Shaped on SmolLM2-135M's
series at 16k tokens (benchmarks/token_series_overhead.py's model, 8 rows of 2048 tokens of the
built-in text): per head a level plus noise as wide as its (6 bits of entropy per value in steps
of 0.01), the largest activation log-normal with massive ones on the rows' first tokens, its
dimension mostly one of a few, the received attention mostly near 0, a heavy-tailed loss; so a
page of them weighs a little more than a real one (4.86 MB at 16,384 tokens x 30 layers x 9
heads; SmolLM2's own: 4.52 MB). With `gdn` value heads, a hybrid's: every fourth layer softmax,
the others Gated DeltaNet layers with the GDN series (SiLU(z) from -0.28 up, beta in (0, 1),
decays mostly near 1, the key-0 share) and no first-token attention."""
from __future__ import annotations

import numpy as np

from probe.metrics.token_series import SERIES
from probe.results.token_series import TokenSeries

WORDS = [" the", " gate", " sink", ",", ".", " of", " attention", "\n", " a", " head", " token", " 1",
         " model", " and", " to", " is", "<b>", "</script><img src=x onerror=alert(1)>", " &amp;"]


def synthetic(tokens: int, layers: int = 4, heads: int = 3, *, seed: int = 0, texts: list[str] | None = None,
              spike: tuple[int, int, float] | None = None, gated: bool = True, rows: int = 1,
              gdn: int = 0, forget: tuple[int, int, int, float] | None = None) -> TokenSeries:
    """A TokenSeries of `tokens` tokens in `rows` equal rows; spike (layer, token, value): one
    massive activation planted there; texts: the vocabulary (default WORDS); gdn: the GDN layers'
    value heads (0: no GDN layer); forget (layer, head, token, decay): one strong decay planted
    there. The token ids depend on `tokens` and `texts` only: two seeds are two runs on the same
    tokens."""
    rng = np.random.default_rng(seed)
    vocab = list(texts or WORDS)
    ids = np.random.default_rng(tokens).integers(0, len(vocab), tokens)
    ids[: min(len(vocab), tokens)] = np.arange(min(len(vocab), tokens))     # every text once, at the start
    base = rng.uniform(0, 1, (layers, heads, 1)) ** 0.5
    p0 = np.clip(base + rng.normal(0, 0.06, (layers, heads, tokens)), 0, 1).astype(np.float32)
    p0[..., 0] = 1.0
    act = np.exp(rng.normal(1.5, 0.3, (layers, tokens))).astype(np.float32)
    act[1:, 0] = 400.0
    if spike is not None:
        act[spike[0], spike[1]] = spike[2]
    few = rng.integers(0, 576, (layers, 4))[np.arange(layers)[:, None], rng.integers(0, 2, (layers, tokens))]
    dims = np.where(rng.uniform(size=(layers, tokens)) < 0.995, few, rng.integers(0, 576, (layers, tokens)))
    dims = np.where(act > 100, 7, dims).astype(np.float32)
    loss = rng.gamma(1.5, 1.5, (1, tokens)).astype(np.float32)
    loss[0, 0] = np.nan
    series = {"first_token": p0.mean(1), "first_token_heads": p0, "max_abs": act, "max_abs_dim": dims,
              "loss": loss, "received": np.clip(rng.exponential(0.002, (layers, tokens)), 0, 1).astype(np.float32)}
    if gated:
        g = np.clip(rng.beta(0.6, 2.0, (layers, heads, tokens)), 0, 1).astype(np.float32)
        series.update(gate=g.mean(1), gate_heads=g)
    types = ["attention"] * layers
    if gdn:
        linear = [i for i in range(layers) if i % 4 != 3]
        types = ["linear_attention" if i in linear else "attention" for i in range(layers)]
        for name in ("first_token", "first_token_heads", "received", *(("gate", "gate_heads") if gated else ())):
            series[name][linear] = np.nan
        shape = (layers, gdn, tokens)
        silu = rng.normal(0.3, 0.4, shape)
        decay = np.exp(-np.exp(rng.normal(-4, 1.5, (layers, gdn, 1)) + rng.normal(0, 0.5, shape)))
        if forget is not None:
            decay[forget[0], forget[1], forget[2]] = forget[3]
        gdn_values = {"gdn_gate": silu * (1 / (1 + np.exp(-silu))), "gdn_beta": rng.beta(2, 2, shape),
                      "gdn_decay": decay, "gdn_key0": np.clip(rng.exponential(0.05, shape), 0, 1)}
        for name, v in gdn_values.items():
            v = v.astype(np.float32)
            v[[i for i in range(layers) if i not in linear]] = np.nan
            series.update({name + "_heads": v, name: v.mean(1)})
    per_row = tokens // rows
    cut = [(r, per_row) for r in range(rows - 1)] + [(rows - 1, tokens - per_row * (rows - 1))]
    positions = np.concatenate([np.arange(n) for _, n in cut])
    captured = {"series": series, "token_ids": ids + 1000, "positions": positions, "rows": cut,
                "texts": {i + 1000: text for i, text in enumerate(vocab)}, "layer_types": types,
                "heads": heads}
    return TokenSeries.from_capture(captured, SERIES)
