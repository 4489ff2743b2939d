"""The CUDA paths CI cannot run, as one short script for a session that has a GPU.

    python benchmarks/gpu_check.py                 # on a GPU machine; exit 1 when a check fails
    python benchmarks/gpu_check.py --device cpu    # dry run of the same plumbing, CPU against CPU

Checks, on the tiny checkpoints the tests build (tests/tiny.py), each against the CPU float32 run
of the same weights and tokens:
  kernel     tests/capture/test_attention.py's real-kernel tests (float32 and bfloat16, GQA, padding mask)
  float32    probe.analyze on the device (a windowed Mistral included: banded attention): F-Attn, mean gate and sparsity within 1e-5, M-Act and
             loss within 1e-4 relative (the memory-efficient kernel sums in another order)
  bfloat16   within tests/test_scale.py's stated bfloat16 tolerances of float32
  device_map probe.load(device_map="auto") (accelerate) gives the --device numbers
  long       T = 32768 on one sequence: peak device memory of the analysis over a plain forward
             (torch.cuda.max_memory_allocated) under 1.5x; F-Attn at T = 8192 equals eager
             softmax attention (output_attentions) within 1e-5
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import tiny  # noqa: E402
from samples import TEXT  # noqa: E402

import probe  # noqa: E402

# kind -> config overrides; the windowed Mistral runs the banded sliding-window path (T > W).
KINDS = {"official_elementwise": {}, "qwen3_next": {}, "qwen3": {}, "mistral": {"sliding_window": 16}}
BF16_TOL = {"f_attn": 5e-3, "mean_gate": 2e-3, "m_act": 5e-2, "loss": 1e-2}   # as tests/test_scale.py
results: list[tuple[str, bool, str]] = []


def record(name: str, ok: bool, detail: str) -> None:
    results.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name:<34} {detail}", flush=True)


def values(a, frame: str, **where) -> torch.Tensor:
    df = getattr(a, frame)
    if df.empty:                                   # e.g. no gates table for an ungated model
        return torch.zeros(0, dtype=torch.float64)
    for k, v in where.items():
        df = df[df[k] == v]
    return torch.tensor(df.value.tolist(), dtype=torch.float64)


def worst(x: torch.Tensor, y: torch.Tensor, rel: bool = False) -> float:
    """Largest difference; a value that is NaN on one side only (a metric that does not apply,
    such as F-Attn of a linear-attention layer, must be NaN on both) counts as infinite."""
    if x.numel() == 0:
        return 0.0
    both = x.isnan() & y.isnan()
    d = (x - y).abs() / (y.abs().clamp_min(1e-30) if rel else 1)
    return float(d.masked_fill(both, 0).nan_to_num(nan=float("inf")).max())


def compare(name: str, got, want, tol: dict) -> None:
    diffs = {"f_attn": worst(values(got, "first_token", metric="f_attn"), values(want, "first_token", metric="f_attn")),
             "mean_gate": worst(values(got, "gates", group="all", metric="mean"),
                                values(want, "gates", group="all", metric="mean")),
             "m_act": worst(values(got, "massive", metric="max_abs"), values(want, "massive", metric="max_abs"), True),
             "loss": abs(got.summary["loss"] / want.summary["loss"] - 1)}
    if "sparsity" in tol:
        diffs["sparsity"] = worst(values(got, "sparsity"), values(want, "sparsity"))
    ok = all(diffs[k] <= tol[k] for k in diffs) and got.summary["tokens"] == want.summary["tokens"]
    record(name, ok, " ".join(f"{k} {v:.1e}" for k, v in diffs.items()))


def run(path, **kw):
    return probe.analyze(str(path), texts=[TEXT * 3], seq_len=128, progress=False, **kw)


def check_kernel(device: str) -> None:
    if device == "cpu":
        return
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-k", "real_cuda",
                           str(ROOT / "tests" / "test_attention.py")], capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-200:]
    record("kernel (pytest -k real_cuda)", proc.returncode == 0 and "passed" in tail, tail)


def check_models(device: str, root: Path) -> None:
    fp32_tol = {"f_attn": 1e-5, "mean_gate": 1e-5, "sparsity": 1e-5, "m_act": 1e-4, "loss": 1e-4}
    for kind, overrides in KINDS.items():
        path = tiny.make_checkpoint(kind, root / kind, **overrides)
        cpu = run(path)
        compare(f"{kind} float32 {device}", run(path, device=device), cpu, fp32_tol)
        compare(f"{kind} bfloat16 {device}", run(path, device=device, dtype="bfloat16"), cpu, BF16_TOL)
        mapped = probe.load(path, device_map="auto" if device != "cpu" else None)
        if device != "cpu":
            where = {str(p.device) for p in mapped.model.parameters()}
            record(f"{kind} device_map placed", all(w.startswith("cuda") for w in where), ", ".join(sorted(where)))
        compare(f"{kind} device_map auto", probe.analyze(mapped, texts=[TEXT * 3], seq_len=128, progress=False),
                cpu, fp32_tol)


def check_long(device: str, root: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import build_model, token_ids
    from probe.load.loader import LoadedModel, describe

    model = build_model().to(device)
    loaded = LoadedModel(model, describe(model), None, None, None)

    # F-Attn at 8192 against eager softmax attention on the device.
    ids = token_ids(8192).to(device)
    torch.save(ids.cpu(), root / "ids8k.pt")
    a = probe.analyze(loaded, str(root / "ids8k.pt"), seq_len=8192, batch_size=1, progress=False, device=device)
    with torch.no_grad():
        model.set_attn_implementation("eager")
        maps = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
        model.set_attn_implementation("sdpa")
    want = torch.cat([m[0, :, 1:, 0].double().mean(-1).cpu() for m in maps])           # (L * H,)
    del maps
    got = torch.tensor(a.first_token[a.first_token.metric == "f_attn"].sort_values(["layer", "head"]).value.tolist(),
                       dtype=torch.float64)
    record("F-Attn T=8192 vs eager", worst(got, want) <= 1e-5, f"max diff {worst(got, want):.1e}")

    if device == "cpu":
        return
    # Peak device memory at 32768: plain SDPA forward vs a whole analysis pass.
    ids = token_ids(32768)
    torch.save(ids, root / "ids32k.pt")
    peaks = {}
    for method in ("plain", "probe"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if method == "plain":
            with torch.inference_mode():
                model(input_ids=ids.to(device), use_cache=False)
        else:
            probe.analyze(loaded, str(root / "ids32k.pt"), seq_len=32768, batch_size=1, progress=False, device=device)
        peaks[method] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    ratio = peaks["probe"] / peaks["plain"]
    record("memory T=32768 (< 1.5x plain)", ratio < 1.5,
           f"probe {peaks['probe']:.0f} MB / plain {peaks['plain']:.0f} MB = {ratio:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.device != "cpu" and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu for a dry run of the plumbing")
        return 2
    print(f"torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device != "cpu" else ""))
    with tempfile.TemporaryDirectory() as tmp:
        check_kernel(args.device)
        check_models(args.device, Path(tmp))
        check_long(args.device, Path(tmp))
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)} of {len(results)} checks passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
