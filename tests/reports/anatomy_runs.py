"""Synthetic run directories with the sink-anatomy tables of `probe analyze --anatomy`, with the
columns of docs/run-directory.md and seeded, realistic numbers:

- a first-token sink in every layer but layer 0 (score 0.5-0.9 at key 0 in the baseline, weaker
  in the gated run), ordinary keys near the uniform mean of 1/(t+1);
- a secondary sink in a middle layer (a newline token at varying positions, key 7 raised in
  the position table);
- value norms of the sink keys below the median (ratio 0.1-0.4), one head without a sink key
  (NaN);
- gated runs: the mean gate falls with the attention a query puts on the sink.

The runs are written on top of conftest.write_run (every other table as the report fixture),
and the gated and baseline run share meta.json's tokens_sha256.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from tests.reports.saved_runs import RunSpec, write_run

# The contract's tables and columns, in order (docs/run-directory.md).
ANATOMY_COLUMNS = {
    "received_by_position": ["layer", "head", "key_lo", "key_hi", "cells", "queries", "score",
                             "pooled", "sink_rate"],
    "received_by_token": ["layer", "rank", "token_id", "token", "cells", "score", "sink_share"],
    "secondary_sinks": ["layer", "head", "sequence", "position", "token_id", "token", "score"],
    "value_drains": ["layer", "head", "sink_keys", "queries", "value_norm_ratio", "norm_share",
                     "projection_share"],
    "gate_sink": ["layer", "head", "attention_lo", "attention_hi", "queries", "attention", "gate",
                  "gate_std"],
}
EPSILON = 0.3
MIN_QUERIES = 16
SEQ_LEN, SEQUENCES = 1024, 8
BOS_ID, BOS = 1, "<s>"
SECONDARY_LAYER_SHARE = 0.5    # the secondary sink sits in the middle layer
NEWLINE_ID = 13
# Token id -> text: "$" and "<b>" must survive matplotlib and HTML; "NA" must stay a string.
TOKENS = {BOS_ID: BOS, NEWLINE_ID: "\n", 29: ".", 278: " the", 8: " $5", 9: "<b>", 10: "NA",
          11: ",", 12: " and"}
TOKENS_SHA256 = "sha256:" + "ab" * 32

ANATOMY_SPECS = (
    RunSpec("sink_base", 6, 4, (), "none", 0.55, 900.0, training=False, patterns=False),
    RunSpec("sink_gated", 6, 4, (), "official_headwise", 0.08, 90.0, training=False,
            patterns=False),
)
DEEP_ANATOMY_SPECS = (
    RunSpec("sink_deep", 30, 9, (), "none", 0.55, 900.0, training=False, patterns=False),
    RunSpec("sink_deep_gated", 30, 9, (), "official_headwise", 0.08, 90.0, training=False,
            patterns=False),
)


def buckets(seq_len: int = SEQ_LEN) -> list[tuple[int, float]]:
    """(key_lo, key_hi) as probe writes them: 0..15 exact, then [16, 32), ... up to seq_len."""
    edges = [*range(16), *(2 ** k for k in range(4, 21))]
    pairs = [(lo, hi) for lo, hi in zip(edges, edges[1:] + [math.inf]) if lo < seq_len]
    return pairs


def write_anatomy_run(root: Path, spec: RunSpec, seed: int) -> Path:
    path = write_run(root, spec, seed)
    rng = np.random.default_rng(100 + seed)
    sink = 0.75 if not spec.gated else 0.12
    tables = {
        "received_by_position": _by_position(spec, rng, sink),
        "received_by_token": _by_token(spec, rng, sink),
        "secondary_sinks": _secondary(spec, rng),
        "value_drains": _drains(spec, rng),
    }
    if spec.gated:
        tables["gate_sink"] = _gate_sink(spec, rng)
    for name, frame in tables.items():
        frame.insert(0, "model", spec.name)
        assert list(frame.columns) == ["model", *ANATOMY_COLUMNS[name]]
        frame.to_csv(path / f"{name}.csv", index=False)
    _update_json(path / "meta.json", {"anatomy": True, "anatomy_min_queries": MIN_QUERIES,
                                      "tokens_sha256": TOKENS_SHA256, "bos_token_id": BOS_ID,
                                      "position0": f"BOS token {BOS!r} (id {BOS_ID}) in every "
                                                   "sequence"})
    by_token = tables["received_by_token"]
    top = by_token[by_token["layer"] == -1].head(5)
    _update_json(path / "summary.json", {"anatomy": {
        "epsilon": EPSILON, "secondary_sinks": len(tables["secondary_sinks"]),
        "top_sink_tokens": [{"token": t, "token_id": int(i), "score": float(s)}
                            for t, i, s in zip(top["token"], top["token_id"], top["score"])]}})
    return path


def _update_json(path: Path, values: dict) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(values)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def _secondary_layer(spec: RunSpec) -> int:
    return int(spec.num_layers * SECONDARY_LAYER_SHARE)


def _uniform_score(lo: int, hi: float) -> float:
    """Mean over the bucket's keys k of mean_{t >= k} 1/(t+1): what uniform attention gives."""
    keys = range(lo, int(min(hi, SEQ_LEN)))
    return float(np.mean([np.mean(1 / np.arange(k + 1, SEQ_LEN + 1)) for k in keys]))


def _by_position(spec: RunSpec, rng, sink: float) -> pd.DataFrame:
    rows = []
    for layer in range(spec.num_layers):
        for lo, hi in buckets():
            keys = int(min(hi, SEQ_LEN)) - lo
            cells = SEQUENCES * keys
            queries = SEQUENCES * sum(SEQ_LEN - k for k in range(lo, lo + keys))
            heads = []
            for head in range(spec.num_heads):
                if lo == 0:
                    score = sink * rng.uniform(0.7, 1.2) if layer > 0 else rng.uniform(0.02, 0.06)
                else:
                    score = _uniform_score(lo, hi) * (1 - sink / 2) * rng.uniform(0.6, 1.4)
                    if lo == 7 and layer == _secondary_layer(spec):
                        score = rng.uniform(0.1, 0.2)
                score = min(score, 0.99)
                share = float(score > EPSILON) if keys == 1 else 0.0
                heads.append((head, score, score * rng.uniform(0.9, 1.1), share))
            pooled = tuple(float(np.mean([h[i] for h in heads])) for i in (1, 2, 3))
            for head, score, prob, share in [*heads, (-1, *pooled)]:
                rows.append({"layer": layer, "head": head, "key_lo": lo, "key_hi": hi,
                             "cells": cells, "queries": queries, "score": score,
                             "pooled": prob, "sink_rate": share})
    frame = pd.DataFrame(rows)
    frame["key_hi"] = frame["key_hi"].map(lambda v: "inf" if v == math.inf else int(v))
    return frame


def _by_token(spec: RunSpec, rng, sink: float) -> pd.DataFrame:
    """Each layer's top 6 of the 9 tokens, then layer -1: every token's mean over the layers
    (a token has the same cells in every layer, as in probe)."""
    rows = []
    cells = {token_id: SEQUENCES if token_id == BOS_ID else int(rng.integers(40, 400))
             for token_id in TOKENS}
    pooled = {token_id: [0.0, 0.0] for token_id in TOKENS}
    for layer in range(spec.num_layers):
        scores = {token_id: float(rng.uniform(0.004, 0.03)) for token_id in TOKENS}
        scores[BOS_ID] = sink * rng.uniform(0.8, 1.1) if layer > 0 else 0.04
        if layer == _secondary_layer(spec):
            scores[NEWLINE_ID] = 0.35
        if spec.gated:             # a weak sink: "." receives more than the first token
            scores[29] = float(rng.uniform(0.15, 0.2))
        shares = {t: float(v > EPSILON) * rng.uniform(0.6, 1) for t, v in scores.items()}
        for token_id in TOKENS:
            pooled[token_id][0] += scores[token_id] / spec.num_layers
            pooled[token_id][1] += shares[token_id] / spec.num_layers
        # Each layer lists its top tokens only (probe keeps the top 20; here 6 of 9).
        listed = sorted(scores, key=lambda t: (-scores[t], t))[:6]
        for rank, token_id in enumerate(listed, start=1):
            rows.append({"layer": layer, "rank": rank, "token_id": token_id,
                         "token": TOKENS[token_id], "cells": cells[token_id],
                         "score": scores[token_id], "sink_share": shares[token_id]})
    for rank, token_id in enumerate(sorted(pooled, key=lambda t: (-pooled[t][0], t)), start=1):
        rows.append({"layer": -1, "rank": rank, "token_id": token_id, "token": TOKENS[token_id],
                     "cells": cells[token_id] * spec.num_layers, "score": pooled[token_id][0],
                     "sink_share": pooled[token_id][1]})
    return pd.DataFrame(rows)


def _secondary(spec: RunSpec, rng) -> pd.DataFrame:
    layer = _secondary_layer(spec)
    count = 14 if not spec.gated else 3
    rows = []
    for _ in range(count):
        rows.append({"layer": layer if rng.uniform() < 0.8 else layer + 1,
                     "head": int(rng.integers(0, spec.num_heads)),
                     "sequence": int(rng.integers(0, SEQUENCES)),
                     "position": int(rng.integers(1, 600)), "token_id": NEWLINE_ID,
                     "token": TOKENS[NEWLINE_ID], "score": float(rng.uniform(EPSILON, 0.7))})
    rows[0].update(token_id=9, token="<b>")
    return pd.DataFrame(rows).sort_values("score", ascending=False, kind="stable")


def _drains(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    for layer in range(spec.num_layers):
        for head in range(spec.num_heads):
            none = layer == 0 and head == 0    # a head without a sink key
            ratio = rng.uniform(0.6, 1.2) if layer == 0 else rng.uniform(0.08, 0.4)
            rows.append({"layer": layer, "head": head, "sink_keys": 0 if none else SEQUENCES,
                         "queries": SEQUENCES * (SEQ_LEN - 1),
                         "value_norm_ratio": np.nan if none else ratio,
                         "norm_share": rng.uniform(0.02, 0.2),
                         "projection_share": rng.uniform(0.01, 0.15) if layer else 0.3})
    return pd.DataFrame(rows)


def _gate_sink(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    for layer in range(spec.num_layers):
        for head in range(spec.num_heads):
            for b in range(10):
                lo = b / 10
                if b >= 7 and head % 2:  # some heads never put that much on the sink
                    continue
                queries = int(4000 * 0.5 ** b) + 1
                attention = lo + rng.uniform(0.02, 0.08)
                gate = max(0.02, 0.45 - 0.4 * attention * (layer + 1) / spec.num_layers
                           + rng.normal(0, 0.02))
                rows.append({"layer": layer, "head": head, "attention_lo": lo,
                             "attention_hi": (b + 1) / 10, "queries": queries,
                             "attention": attention, "gate": gate, "gate_std": 0.1})
    return pd.DataFrame(rows)

