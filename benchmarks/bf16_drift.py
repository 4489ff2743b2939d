"""How far bfloat16 moves probe's statistics from the float32 run of the same weights, and how
far the model itself moves (the tolerances of README "bfloat16 models" and tests/test_scale.py).

    python benchmarks/bf16_drift.py            # every tiny test kind and the shipped arms

For each model and sequence length (32, 128, 512 tokens): probe.analyze in float32 and in bfloat16 on the same tokens, then the largest
difference per statistic (F-Attn and mean gate per (layer, head), absolute; M-Act and median
|h| per (layer, site), relative; sparsity shares, absolute; loss, relative). "own F-Attn" is the
model's own drift, without probe: P[t, 0] per head from transformers' eager attention
(output_attentions) averaged over queries t >= 1, bfloat16 against float32.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402

import probe  # noqa: E402
import tiny  # noqa: E402
from samples import TEXT  # noqa: E402

ARMS = ROOT / "examples" / "checkpoints"


def values(a, frame, **where):
    df = getattr(a, frame)
    if df.empty:                                    # a baseline has no gate table
        return torch.zeros(0, dtype=torch.float64)
    for k, v in where.items():
        df = df[df[k] == v]
    return torch.tensor(df.value.tolist(), dtype=torch.float64)


def worst(x, y, rel=False) -> float:
    d = (x - y).abs() / (y.abs() if rel else 1)
    return float(d.nan_to_num(0.0).max()) if d.numel() else 0.0


def own_f_attn(path: Path, ids: torch.Tensor) -> float:
    """The model's own bfloat16 drift of per-head F-Attn, from eager attention probabilities."""
    per_dtype = {}
    for dtype in ("float32", "bfloat16"):
        loaded = probe.load(path, dtype=dtype)
        model = loaded.model
        model.set_attn_implementation("eager")
        with torch.inference_mode():
            maps = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
        per_dtype[dtype] = torch.stack([m[0, :, 1:, 0].double().mean(-1) for m in maps if m is not None])
    return worst(per_dtype["bfloat16"], per_dtype["float32"])


LENGTHS = (32, 128, 512)


def measure(name: str, path: Path, texts: list[str], seq_len: int) -> dict:
    runs = {dt: probe.analyze(str(path), texts=texts, seq_len=seq_len, dtype=dt, progress=False)
            for dt in ("float32", "bfloat16")}
    f, b = runs["float32"], runs["bfloat16"]
    loaded = probe.load(path)
    ids = loaded.tokenizer(" ".join(texts), return_tensors="pt")["input_ids"][:, :seq_len]
    return {
        "model": name, "T": seq_len,
        "f_attn": worst(values(b, "first_token", metric="f_attn"), values(f, "first_token", metric="f_attn")),
        "own f_attn": own_f_attn(path, ids),
        "mean_gate": worst(values(b, "gates", group="all", metric="mean"), values(f, "gates", group="all", metric="mean")),
        "m_act_rel": worst(values(b, "massive", metric="max_abs"), values(f, "massive", metric="max_abs"), True),
        "median_rel": worst(values(b, "massive", metric="median_abs"), values(f, "massive", metric="median_abs"), True),
        "sparsity": worst(values(b, "sparsity"), values(f, "sparsity")),
        "loss_rel": abs(b.summary["loss"] - f.summary["loss"]) / abs(f.summary["loss"]),
    }


def main() -> None:
    import pandas as pd

    torch.set_num_threads(1)
    from probe.data.corpus import sample_texts

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = [(kind, tiny.make_checkpoint(kind, Path(tmp) / kind), [TEXT * 4]) for kind in tiny.KINDS]
        models += [(f"arm {arm}", ARMS / arm, sample_texts()[:16]) for arm in ("none", "headwise", "elementwise")]
        for name, path, texts in models:
            rows += [measure(name, path, texts, T) for T in LENGTHS]
    frame = pd.DataFrame(rows).set_index(["model", "T"])
    with pd.option_context("display.float_format", lambda v: f"{v:.2g}", "display.width", 140):
        print(frame.to_string())
        print("\nworst", frame.max().to_dict())


if __name__ == "__main__":
    main()
