"""`Analysis`: the tidy tables of one run, its provenance, and the run directory on disk.

The format is documented in docs/run-directory.md; `reports` reads the same files.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .atomic import atomic_directory, write_text
from .errors import ProbeError
from .plotting import PlotMethods

TABLES = ("gates", "gate_hist", "first_token", "first_token_buckets", "massive", "massive_top",
          "sparsity", "attention_patterns", "training", "gates_by_token_type", "interventions")
HEADLINE_THRESHOLDS = (1e-2, 1e-3)
SINK_EPSILON = 0.3
MANIFEST_KEY = "tables"     # meta.json: {table: rows written}; reports/schema.py reads the same key


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


@dataclass
class Analysis(PlotMethods):
    meta: dict
    summary: dict
    gates: pd.DataFrame = field(default_factory=_empty)
    gate_hist: pd.DataFrame = field(default_factory=_empty)
    first_token: pd.DataFrame = field(default_factory=_empty)
    first_token_buckets: pd.DataFrame = field(default_factory=_empty)
    massive: pd.DataFrame = field(default_factory=_empty)
    massive_top: pd.DataFrame = field(default_factory=_empty)
    sparsity: pd.DataFrame = field(default_factory=_empty)
    attention_patterns: pd.DataFrame = field(default_factory=_empty)
    training: pd.DataFrame = field(default_factory=_empty)
    gates_by_token_type: pd.DataFrame = field(default_factory=_empty)
    interventions: pd.DataFrame = field(default_factory=_empty)

    @property
    def name(self) -> str:
        return self.summary.get("model", "model")

    # -- disk ------------------------------------------------------------------------------
    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write the run directory atomically; refuses an existing one unless force."""
        path = Path(path)
        with atomic_directory(path, force) as tmp:
            self.write_into(tmp)
        return path

    def write_into(self, folder: Path) -> None:
        written = {}
        for table in TABLES:
            frame = getattr(self, table)
            if len(frame):
                write_text(folder / f"{table}.csv", frame.to_csv(index=False))
                written[table] = len(frame)
        # The tables and their row counts, so that a reader finds a deleted or cut-short CSV.
        meta = {**self.meta, MANIFEST_KEY: written}
        write_text(folder / "meta.json", json.dumps(_jsonable(meta), indent=2, sort_keys=True) + "\n")
        write_text(folder / "summary.json", json.dumps(_jsonable(self.summary), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Analysis":
        """Read a run directory, checked against docs/run-directory.md: a missing, cut-short or
        damaged file is a ProbeError naming it."""
        from reports.runs import RunDirectoryError, read_run_dir

        path = Path(path)
        if not (path / "summary.json").exists() or not (path / "meta.json").exists():
            raise ProbeError(f"{path} is not a probe run directory (no summary.json / meta.json)")
        try:
            meta, summary, tables = read_run_dir(path)
        except RunDirectoryError as err:
            raise ProbeError(str(err)) from None
        frames = {t: _empty() if tables.get(t) is None else tables[t] for t in TABLES}
        return cls(meta, summary, **frames)

    # -- display ---------------------------------------------------------------------------
    def summary_frame(self) -> pd.DataFrame:
        s = self.summary
        keys = ("mean_gate", "f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate", "m_act",
                "loss", "perplexity", "tokens")
        return pd.DataFrame([{k: s.get(k) for k in keys}], index=[s.get("model")])

    def layer_frame(self) -> pd.DataFrame:
        """One row per layer: F-Attn, mean gate, M-Act of the layer output, sparsity at 1e-2."""
        rows = []
        for layer in self.summary.get("layers", []):
            sp = layer.get("sparsity", {})
            rows.append({"layer": layer["layer"], "type": layer["layer_type"],
                         "f_attn": layer.get("f_attn"), "mean_gate": layer.get("mean_gate"),
                         "m_act": layer["m_act"].get("resid_post"),
                         **{f"sparsity_{v}_1e-2": sp.get(v, {}).get("0.01")
                            for v in ("ungated", "mean_gate", "gated")}})
        return pd.DataFrame(rows).set_index("layer") if rows else _empty()

    def __repr__(self) -> str:
        s = self.summary
        return (f"Analysis({s.get('model')!r}, gate={s.get('gate_layout')}, tokens={s.get('tokens')}, "
                f"f_attn={_fmt(s.get('f_attn'))}, m_act={_fmt(s.get('m_act'))}, "
                f"mean_gate={_fmt(s.get('mean_gate'))})")

    def _repr_html_(self) -> str:
        return (f"<p><b>probe analysis of {self.name}</b> ({self.meta.get('architecture')}, "
                f"gate: {self.summary.get('gate_layout')}, {self.summary.get('tokens')} tokens)</p>"
                + self.summary_frame().to_html(float_format=lambda v: f"{v:.4g}")
                + self.layer_frame().to_html(float_format=lambda v: f"{v:.4g}"))


def _fmt(v) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def _jsonable(obj):
    """NaN and inf become null so that summary.json is strict JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        return _jsonable(obj.item())
    return obj


def _mean(values) -> float | None:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else None


def build_summary(a: Analysis, *, layer_types: list[str], gated: bool, gate_layout: str,
                  num_heads: int, f_attn_uniform: float | None, loss: float | None,
                  tokens: int, sequences: int) -> dict:
    """Model-level numbers (the paper's definitions; README "What a run directory holds") and per-layer / head detail."""
    ft = a.first_token
    attn = ft[ft.layer_type == "attention"] if len(ft) else ft
    head_f = attn[attn.metric == "f_attn"] if len(attn) else attn
    head_fp = attn[attn.metric == "f_attn_paper"] if len(attn) else attn
    g_all = a.gates[(a.gates.group == "all")] if len(a.gates) else a.gates
    g_mean = g_all[g_all.metric == "mean"] if len(g_all) else g_all
    g_count = g_all[g_all.metric == "count"] if len(g_all) else g_all
    mx = a.massive[a.massive.metric == "max_abs"] if len(a.massive) else \
        pd.DataFrame(columns=["layer", "site", "value"])    # no finite activation anywhere (NaN model)

    mean_gate = None
    if gated and len(g_mean):
        weights = g_count.set_index(["layer", "head"]).value
        values = g_mean.set_index(["layer", "head"]).value
        mean_gate = float((values * weights).sum() / weights.sum())

    layers = []
    for layer, layer_type in enumerate(layer_types):
        entry = {"layer": layer, "layer_type": layer_type, "f_attn": None, "mean_gate": None,
                 "m_act": {}, "sparsity": {}, "heads": []}
        for site, value in mx[mx.layer == layer].set_index("site").value.items():
            entry["m_act"][site] = value
        if layer_type == "attention":
            hf = head_f[head_f.layer == layer].set_index("head").value
            entry["f_attn"] = _mean(hf.tolist())
            hg = g_mean[g_mean.layer == layer].set_index("head").value if gated else pd.Series(dtype=float)
            entry["mean_gate"] = _mean(hg.tolist()) if gated else None
            entry["heads"] = [{"head": int(h), "f_attn": hf.get(h), "mean_gate": hg.get(h) if gated else None}
                              for h in range(num_heads)]
            sp = a.sparsity[a.sparsity.layer == layer] if len(a.sparsity) else a.sparsity
            for variant, rows in sp.groupby("variant"):
                entry["sparsity"][variant] = {f"{t:g}": float(rows[rows.threshold == t].value.iloc[0])
                                              for t in HEADLINE_THRESHOLDS if (rows.threshold == t).any()}
        layers.append(entry)

    attention_layers = [i for i, t in enumerate(layer_types) if t == "attention"]
    cells = head_f.value.tolist() if len(head_f) else []
    resid = [l["m_act"].get("resid_post") for l in layers]
    return {
        "model": a.meta.get("name"),
        "gated": gated,
        "gate_layout": gate_layout,
        "num_layers": len(layer_types),
        "num_heads": num_heads,
        "attention_layers": attention_layers,
        "mean_gate": mean_gate,
        "f_attn": _mean([layers[i]["f_attn"] for i in attention_layers]),
        "f_attn_paper": _mean([_mean(head_fp[head_fp.layer == i].value.tolist()) for i in attention_layers]),
        "f_attn_uniform": f_attn_uniform,
        "sink_rate": (sum(v > SINK_EPSILON for v in cells) / len(cells)) if cells else None,
        "sink_epsilon": SINK_EPSILON,
        "m_act": _mean(resid),
        "loss": loss,
        "perplexity": math.exp(loss) if loss is not None and math.isfinite(loss) and loss < 700 else None,
        "tokens": tokens,
        "sequences": sequences,
        "layers": layers,
    }
