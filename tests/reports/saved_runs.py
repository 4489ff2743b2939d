"""Saved runs for the report tests: run directories written from a RunSpec (every table,
meta.json, summary.json), copies to edit, per-sequence values."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
import numpy as np
import pandas as pd
import shutil
import pytest


SITES = ("attn_out", "resid_mid", "mlp_out", "resid_post")


SWEEP = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)


GATE_METRICS = ("count", "mean", "std", "min", "max", "frac_lt_0.01", "frac_lt_0.1",
                "frac_lt_0.5", "frac_gt_0.9", "frac_gt_0.99")


# Tokens that must survive CSV, matplotlib and HTML: "$" (mathtext), "<b>" (markup), "NA" (read
# as NaN by pandas defaults), whitespace.
DISPLAY_TOKENS = ["<s>", "The", " cat", " costs", " $5", ".", "\n", "<b>", "NA", " sat"]


@dataclass(frozen=True)
class RunSpec:
    name: str
    num_layers: int
    num_heads: int
    linear_layers: tuple[int, ...]
    gate_layout: str  # "none" for the baseline
    sink: float  # typical F-Attn of a sink head
    massive: float  # typical max |h| of the layer output
    training: bool
    patterns: bool
    token_types: bool = False
    interventions: bool = False
    buckets: bool = False
    inference: bool = False

    @property
    def gated(self) -> bool:
        return self.gate_layout != "none"

    def layer_type(self, layer: int) -> str:
        return "linear_attention" if layer in self.linear_layers else "attention"

    @property
    def attention_layers(self) -> list[int]:
        return [l for l in range(self.num_layers) if l not in self.linear_layers]


def write_run(root: Path, spec: RunSpec, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    path = root / spec.name
    path.mkdir(parents=True)
    f_attn = _first_token(spec, rng)
    gates = _gates(spec, rng)
    tables = {
        "first_token": f_attn,
        "massive": _massive(spec, rng),
        "massive_top": _massive_top(spec, rng),
        "sparsity": _sparsity(spec, rng),
        "gates": gates,
    }
    if spec.gated:
        tables["gate_hist"] = _gate_hist(spec, rng)
    if spec.patterns:
        tables["attention_patterns"] = _patterns(spec, rng)
    if spec.training:
        tables["training"] = _training(spec, rng)
    if spec.token_types:
        tables["gates_by_token_type"] = _token_types(spec, rng)
    if spec.interventions:
        tables["interventions"] = _interventions(spec, rng)
    if spec.buckets:
        tables["first_token_buckets"] = _buckets(spec, rng)
    if spec.inference:
        tables["inference"] = _inference(spec)
    for name, frame in tables.items():
        frame.insert(0, "model", spec.name)
        frame.to_csv(path / f"{name}.csv", index=False)
    (path / "meta.json").write_text(json.dumps(_meta(spec), indent=1), encoding="utf-8")
    (path / "summary.json").write_text(json.dumps(_summary(spec, f_attn, gates), indent=1),
                                       encoding="utf-8")
    return path


def _first_token(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    for layer in range(spec.num_layers):
        for head in range(spec.num_heads):
            linear = layer in spec.linear_layers
            value = np.nan if linear else float(np.clip(rng.normal(spec.sink, 0.05), 0.01, 0.99))
            for metric, number in (("f_attn", value),
                                   ("f_attn_paper", np.nan if linear else value + 0.05),
                                   ("n_queries", 1016.0)):
                rows.append({"layer": layer, "head": head, "layer_type": spec.layer_type(layer),
                             "metric": metric, "value": number})
    return pd.DataFrame(rows)


def _gates(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    if not spec.gated:
        return pd.DataFrame(columns=["layer", "head", "group", "metric", "value"])
    for layer in spec.attention_layers:
        for head in range(spec.num_heads):
            for group, count in (("all", 4096), ("first", 8), ("rest", 4088)):
                mean = float(rng.uniform(0.1, 0.35))
                values = {"count": count, "mean": mean, "std": mean / 2, "min": 0.001,
                          "max": float(rng.uniform(0.8, 0.99)), "frac_lt_0.01": 0.05,
                          "frac_lt_0.1": 0.3, "frac_lt_0.5": 0.85, "frac_gt_0.9": 0.02,
                          "frac_gt_0.99": 0.001}
                rows += [{"layer": layer, "head": head, "group": group, "metric": m,
                          "value": values[m]} for m in GATE_METRICS]
    return pd.DataFrame(rows)


def _gate_hist(spec: RunSpec, rng) -> pd.DataFrame:
    edges = np.linspace(0, 1, 51)
    rows = []
    for layer in spec.attention_layers:
        for head in range(spec.num_heads):
            counts, _ = np.histogram(rng.beta(1.2, 5.0, size=4096), bins=edges)
            rows += [{"layer": layer, "head": head, "bin_lo": edges[i], "bin_hi": edges[i + 1],
                      "count": int(counts[i])} for i in range(50)]
    return pd.DataFrame(rows)


def _massive(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    for layer in range(spec.num_layers):
        for index, site in enumerate(SITES):
            peak = spec.massive * (0.2 + 0.8 * layer / spec.num_layers) * (0.3 + 0.25 * index)
            for metric, value in (("max_abs", peak * rng.uniform(0.8, 1.2)),
                                  ("median_abs", rng.uniform(0.2, 0.6)), ("count", 1.0e6)):
                rows.append({"layer": layer, "site": site, "metric": metric, "value": value})
    return pd.DataFrame(rows)


def _massive_top(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    for layer in range(spec.num_layers):
        for site in SITES:
            top = np.sort(rng.uniform(1, spec.massive, size=3))[::-1]
            for rank, value in enumerate(top, start=1):
                position = int(rng.integers(0, len(DISPLAY_TOKENS)))
                rows.append({"layer": layer, "site": site, "rank": rank,
                             "value": float(value) * (-1) ** rank, "abs_value": float(value),
                             "sequence": int(rng.integers(0, 8)), "position": position,
                             "dim": int(rng.integers(0, 64)), "token_id": position + 10,
                             "token": DISPLAY_TOKENS[position]})
    return pd.DataFrame(rows)


def _sparsity(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    variants = ("ungated", "mean_gate", "gated") if spec.gated else ("ungated", "gated")
    for layer in spec.attention_layers:
        base = rng.uniform(0.01, 0.05)
        for threshold in SWEEP:
            scale = (threshold / 1e-2) ** 0.5
            shares = {"ungated": base * scale, "mean_gate": 8 * base * scale,
                      "gated": 12 * base * scale}
            if not spec.gated:
                shares["gated"] = shares["ungated"]
            rows += [{"layer": layer, "variant": v, "threshold": threshold,
                      "value": min(shares[v], 1.0)} for v in variants]
    return pd.DataFrame(rows)


def _patterns(spec: RunSpec, rng) -> pd.DataFrame:
    size = len(DISPLAY_TOKENS)
    rows = []
    for layer in spec.attention_layers:
        for query in range(size):
            weights = rng.dirichlet(np.ones(query + 1))
            weights = (1 - spec.sink) * weights + spec.sink * (np.arange(query + 1) == 0)
            rows += [{"layer": layer, "query": query, "key": key, "value": float(weights[key])}
                     for key in range(query + 1)]
    return pd.DataFrame(rows)


def _training(spec: RunSpec, rng) -> pd.DataFrame:
    steps = np.arange(0, 201, 10)
    loss = 5.5 * np.exp(-steps / 120) + 1.5 + rng.normal(0, 0.03, size=len(steps))
    spike = np.isin(steps, (70, 150))
    loss[spike] += 0.6
    return pd.DataFrame({
        "step": steps, "tokens": steps * 4096, "lr": 1e-3,
        "train_loss": loss,
        "eval_loss": np.where(steps % 50 == 0, loss + 0.1, np.nan),
        "grad_norm": rng.uniform(0.5, 1.5, size=len(steps)) + spike * 5,
        "spike": spike,
    })


# Built-in types (one left out: types that never occur have no rows) and, for the hybrid, a
# user group.
TOKEN_TYPE_MEANS = {"first": 0.02, "whitespace": 0.15, "digits": 0.3, "punctuation": 0.1,
                    "word_start": 0.45, "word_piece": 0.35, "other": 0.25}


USER_GROUP = "dollar $"


INTERVENTION_DELTAS = {"mean_gate": 0.4, "gate_one": 0.9, "gate_zero": 2.5, "massive_zero": 0.05}


def _token_types(spec: RunSpec, rng) -> pd.DataFrame:
    types = dict(TOKEN_TYPE_MEANS)
    if spec.linear_layers:
        types[USER_GROUP] = 0.6
    rows = []
    for layer in spec.attention_layers:
        for head in range(spec.num_heads):
            for token_type, mean in types.items():
                tokens = 8 if token_type == "first" else 500
                values = {"tokens": tokens, "count": tokens * 16,
                          "mean": float(np.clip(mean + rng.normal(0, 0.02), 0.001, 0.999)),
                          "std": 0.1, "min": 0.0, "max": 1.0}
                rows += [{"layer": layer, "head": head, "token_type": token_type, "metric": m,
                          "value": v} for m, v in values.items()]
    return pd.DataFrame(rows)


def _interventions(spec: RunSpec, rng) -> pd.DataFrame:
    names = ["mean_gate", "gate_one", "gate_zero", "massive_zero"] if spec.gated \
        else ["massive_zero"]
    base = 2.1 if spec.gated else 2.2
    rows = [{"intervention": "none", "layer": -1, "loss": base, "delta_loss": 0.0,
             "setting": "", "zeroed": "", "note": ""}]
    for name in names:
        layers = spec.attention_layers if name != "massive_zero" else range(spec.num_layers)
        for layer in [*layers, -1]:
            delta = INTERVENTION_DELTAS[name] * (1.0 if layer == -1 else rng.uniform(0.05, 0.3))
            rows.append({"intervention": name, "layer": layer, "loss": base + delta,
                         "delta_loss": delta,
                         "setting": 0.2 if name == "mean_gate" else
                         (1.0 if name == "gate_one" else (0.0 if name == "gate_zero" else 100.0)),
                         "zeroed": 12 if name == "massive_zero" else "", "note": ""})
    return pd.DataFrame(rows)


BUCKETS = ((1, 1024), (1024, 4096), (4096, float("inf")))


def _buckets(spec: RunSpec, rng) -> pd.DataFrame:
    rows = []
    for layer in spec.attention_layers:
        for head in range(spec.num_heads):
            for index, (lo, hi) in enumerate(BUCKETS):
                rows.append({"layer": layer, "head": head, "bucket_lo": lo, "bucket_hi": hi,
                             "value": spec.sink * (0.8 ** index) * rng.uniform(0.9, 1.1),
                             "n_queries": 1000, "uniform": 0.007 / (4 ** index)})
    frame = pd.DataFrame(rows)
    frame["bucket_hi"] = frame["bucket_hi"].map(lambda v: "inf" if v == float("inf") else int(v))
    return frame


INFERENCE_LENGTHS = (16, 64, 128, 256, 512)


def _inference(spec: RunSpec) -> pd.DataFrame:
    rows = [{"metric": "eval_loss", "length": n, "value": 3.0 + 0.2 * (n > 128)}
            for n in INFERENCE_LENGTHS]
    rows += [{"metric": m, "length": 128, "value": v}
             for m, v in (("prefill_ms", 1.5), ("decode_ms_per_token", 0.8),
                          ("kv_cache_mb", 0.25), ("param_mb", 3.1), ("threads", 2.0))]
    return pd.DataFrame(rows)


def _meta(spec: RunSpec) -> dict:
    return {
        "model": spec.name,
        "checkpoint": f"/checkpoints/{spec.name}",
        "config_hash": "sha256:0123456789ab",
        "architecture": "Qwen3NextForCausalLM" if spec.linear_layers else "Qwen3ForCausalLM",
        "gate_layout": spec.gate_layout,
        "dtype": "float32", "device": "cpu",
        "data": "tests/data/docstrings.txt", "tokens": 8192, "sequences": 8, "seq_len": 1024,
        "bos_policy": "tokenizer adds none; probe prepends <s>",
        "position_0": "<s>",
        "thresholds": {"sink": 0.3, "sparsity": [1e-2, 1e-3]},
        "seed": 0,
        "versions": {"probe": "0.1.0", "torch": "2.13.0", "transformers": "5.24.0"},
        "command": ["probe", "analyze", f"/checkpoints/{spec.name}", "--data",
                    "tests/data/docstrings.txt", "--out", f"runs/{spec.name}"],
        "created": "2026-11-01T12:00:00Z",
        "display_tokens": DISPLAY_TOKENS,
    }


def _summary(spec: RunSpec, f_attn: pd.DataFrame, gates: pd.DataFrame) -> dict:
    heads = f_attn[f_attn["metric"] == "f_attn"]
    means = gates[(gates["metric"] == "mean") & (gates["group"] == "all")]
    layers = []
    for layer in range(spec.num_layers):
        layer_f = heads[heads["layer"] == layer]["value"]
        layer_g = means[means["layer"] == layer]["value"]
        layers.append({
            "layer": layer, "layer_type": spec.layer_type(layer),
            "f_attn": None if layer_f.isna().all() else float(layer_f.mean()),
            "mean_gate": float(layer_g.mean()) if len(layer_g) else None,
            "m_act": {site: 1.0 for site in SITES},
            "heads": [{"head": h, "f_attn": None, "mean_gate": None}
                      for h in range(spec.num_heads)],
        })
    return {
        "model": spec.name, "gated": spec.gated, "gate_layout": spec.gate_layout,
        "num_layers": spec.num_layers, "num_heads": spec.num_heads,
        "attention_layers": spec.attention_layers,
        "mean_gate": float(means["value"].mean()) if spec.gated else None,
        "f_attn": float(heads["value"].mean()), "f_attn_paper": float(heads["value"].mean()) + 0.05,
        "f_attn_uniform": 0.0068,
        "sink_rate": float((heads["value"] > 0.3).mean()),
        "m_act": spec.massive * 0.6, "loss": 2.1 if spec.gated else 2.2,
        "perplexity": 8.2 if spec.gated else 9.0, "tokens": 8192, "sequences": 8,
        "layers": layers,
    }


@pytest.fixture
def copy_runs(run_dirs, tmp_path):
    """copy_runs(*names) -> {name: path} of fresh copies to edit."""
    def make(*names: str) -> dict[str, Path]:
        return {name: Path(shutil.copytree(run_dirs[name], tmp_path / name)) for name in names}
    return make


S = 24

def write_per_sequence(run: Path, *, m_act: np.ndarray, f_attn: float, layers=range(4), heads=4, gated=False,
                       seed=0) -> None:
    """per_sequence.csv with per-sequence M-Act (S,) at the layer output of every layer and
    F-Attn sums of 100 queries per sequence around `f_attn`."""
    rng = np.random.default_rng(seed)
    model = json.loads((run / "summary.json").read_text())["model"]
    rows = []
    for s in range(S):
        for layer in layers:
            for h in range(heads):
                rows.append((s, layer, h, "f_attn_sum", "", np.nan, 100 * (f_attn + rng.normal(0, 0.01))))
                if gated:
                    rows += [(s, layer, h, "gate_sum", "", np.nan, 100 * 0.2), (s, layer, h, "gate_n", "", np.nan, 100),
                             (s, layer, h, "gate_low", "", 0.1, 40)]
            rows += [(s, layer, -1, "f_attn_n", "", np.nan, 100), (s, layer, -1, "f_attn_uniform", "", np.nan, 5.0)]
            for site in ("attn_out", "resid_mid", "mlp_out", "resid_post"):
                rows.append((s, layer, -1, "m_act", site, np.nan, m_act[s]))
        rows += [(s, -1, -1, "nll", "", np.nan, 300.0), (s, -1, -1, "nll_n", "", np.nan, 100)]
    frame = pd.DataFrame(rows, columns=["sequence", "layer", "head", "quantity", "key", "threshold", "value"])
    frame.insert(0, "model", model)
    frame.to_csv(run / "per_sequence.csv", index=False)
