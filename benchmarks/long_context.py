"""Long contexts: a full `probe.analyze` pass at T = 32768 against a plain forward pass.

Checks the two things issue 6 asks of long contexts, on the tiny GQA model of common.py:
  memory  the peak RSS a full analysis pass adds (gates, F-Attn, M-Act, sparsity, loss, tables)
          is under 1.5x what a plain SDPA forward pass adds at the same length;
  F-Attn  equals an independent computation within 1e-5: q and k recorded from the model, the
          softmax normaliser computed exactly over blocks of keys (online max / sum-exp, no
          T x T matrix and no kernel log-sum-exp), per layer and head, overall and per
          position bucket (first_token_buckets.csv).
Each of plain / probe / reference runs in its own process (ru_maxrss deltas, one thread, the
same tokens; a warm-up at T = 64 first so that one-off allocations are not counted).
Exit status 1 when a check fails.

--sliding-window W makes every layer of the model a sliding-window layer (Qwen3's
use_sliding_window, window W): the plain SDPA pass then gets transformers' (1, 1, T, T) mask,
probe attends band by band with no T x S tensor, and the reference softmax covers each query's
W keys only.

    python benchmarks/long_context.py [--lengths 32768] [--repeat 1] [--dtype float32] [--sliding-window W]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import MODEL_TEXT, build_model, child_args, run_child, timed, token_ids  # noqa: E402

MEMORY_RATIO = 1.5
F_ATTN_TOL = 1e-5
BUCKETS = (1, 1024, 4096, 16384, 65536)


def reference_p0(q, k, scale, window=None, qblock: int = 2048, kblock: int = 4096):
    """P[h, t, 0] from q (H, T, D) and k (H, T, D) by an exact blockwise softmax (float32).
    window: key j visible from query i iff 0 <= i - j < window (None: plain causal)."""
    import torch

    H, T, _ = q.shape
    s0 = (q @ k[:, :1].transpose(1, 2))[..., 0] * scale                    # (H, T)
    p0 = torch.empty(H, T, dtype=torch.float64)
    for qs in range(0, T, qblock):
        qe = min(qs + qblock, T)
        qb = q[:, qs:qe]
        m = torch.full((H, qe - qs), -math.inf)
        total = torch.zeros(H, qe - qs)
        rows = torch.arange(qs, qe)[:, None]
        first = 0 if window is None else max(0, qs - window + 1) // kblock * kblock
        for ks in range(first, qe, kblock):
            ke = min(ks + kblock, qe)
            s = (qb @ k[:, ks:ke].transpose(1, 2)) * scale                   # (H, b, kb)
            cols = torch.arange(ks, ke)[None, :]
            hidden = cols > rows if window is None else (cols > rows) | (cols <= rows - window)
            s = s.masked_fill(hidden, -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            # A row may see no key of this block (outside its window): keep exp() finite.
            shift = m_new.masked_fill(m_new == -math.inf, 0.0)
            total = total * torch.exp(m - shift) + torch.exp(s - shift[..., None]).sum(-1)
            m = m_new
        lse = m + torch.log(total)
        p0[:, qs:qe] = torch.exp(s0[:, qs:qe] - lse).double()
    if window is not None:
        p0[:, window:] = 0.0                                                # key 0 left the window
    return p0


def summarise_p0(p0) -> dict:
    """F-Attn per head over t >= 1, and per position bucket (as FirstTokenStats buckets them)."""
    T = p0.shape[1]
    out = {"f_attn": p0[:, 1:].mean(1).tolist(), "buckets": {}}
    for lo, hi in zip(BUCKETS, BUCKETS[1:] + (math.inf,)):
        if lo < T:
            out["buckets"][str(lo)] = p0[:, lo:int(min(hi, T))].mean(1).tolist()
    return out


def child(args: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    method, T, repeat = args["method"], args["T"], args["repeat"]
    window = args.get("window")
    overrides = {} if window is None else dict(use_sliding_window=True, sliding_window=window, max_window_layers=0)
    model = build_model(dtype=args["dtype"], **overrides)
    ids = torch.load(args["ids"])
    small = ids[:, :64]
    result = {"method": method, "T": T}

    if method == "plain":
        def run(x):
            with torch.inference_mode():
                model(input_ids=x, use_cache=False)
        run(small)
        result["seconds"], result["peak_mb"] = timed(lambda: run(ids), repeat)

    elif method == "probe":
        import probe
        from probe.load.loader import LoadedModel, describe

        loaded = LoadedModel(model, describe(model), None, None, None)
        small_file = Path(args["ids"]).with_suffix(".small.pt")
        torch.save(small, small_file)
        probe.analyze(loaded, str(small_file), seq_len=64, progress=False, batch_size=1)
        box = {}

        def run():
            box["a"] = probe.analyze(loaded, args["ids"], seq_len=T, progress=False, batch_size=1)
        result["seconds"], result["peak_mb"] = timed(run, repeat)
        a = box["a"]
        ft = a.first_token[a.first_token.metric == "f_attn"]
        result["layers"] = {str(layer): rows.sort_values("head").value.tolist() for layer, rows in ft.groupby("layer")}
        result["buckets"] = {f"{layer}:{int(lo)}": rows.sort_values("head").value.tolist()
                             for (layer, lo), rows in a.first_token_buckets.groupby(["layer", "bucket_lo"])}
        result["summary"] = {k: a.summary[k] for k in ("f_attn", "m_act", "loss", "tokens")}

    elif method == "reference":
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        kept = {}

        def record(module, query, key, value, attention_mask, **kw):
            kept[module.layer_idx] = (query[0].float().clone(), key[0].float().clone(),
                                      kw.get("scaling") or query.shape[-1] ** -0.5)
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)

        AttentionInterface.register("bench_record", record)
        AttentionMaskInterface.register("bench_record", sdpa_mask)
        model.set_attn_implementation("bench_record")
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)
        result["layers"], result["buckets"] = {}, {}
        for layer, (q, k, scale) in sorted(kept.items()):
            k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
            s = summarise_p0(reference_p0(q, k, scale, window))
            result["layers"][str(layer)] = s["f_attn"]
            for lo, values in s["buckets"].items():
                result["buckets"][f"{layer}:{lo}"] = values
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[32768])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--memory-gb", type=float, default=12, help="address-space cap per process")
    parser.add_argument("--sliding-window", type=int, default=None, metavar="W",
                        help="make every layer a sliding-window layer with window W")
    args = parser.parse_args()
    import torch

    model_text = MODEL_TEXT if args.sliding_window is None else \
        f"{MODEL_TEXT}, every layer sliding-window attention (window {args.sliding_window})"
    print(f"{model_text}; {args.dtype}; one thread; peak RSS added, best of {args.repeat}")
    print(f"{'T':>6} {'plain s':>8} {'probe s':>8} {'x':>5} {'plain MB':>9} {'probe MB':>9} {'x':>5} "
          f"{'F-Attn err':>10} {'rel err':>8} {'bucket err':>10}")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for T in args.lengths:
            ids_file = str(Path(tmp) / f"ids{T}.pt")
            torch.save(token_ids(T), ids_file)
            rows = {m: run_child(__file__, {"method": m, "T": T, "repeat": args.repeat, "ids": ids_file,
                                            "dtype": args.dtype, "window": args.sliding_window},
                                 args.timeout, args.memory_gb)
                    for m in ("plain", "probe", "reference")}
            failed = {m: r["error"] for m, r in rows.items() if "error" in r}
            if failed:
                print(f"{T:>6} did not finish: {failed}")
                ok = False
                continue
            plain, probe_, ref = rows["plain"], rows["probe"], rows["reference"]
            err = max(abs(a - b) for layer in ref["layers"]
                      for a, b in zip(ref["layers"][layer], probe_["layers"][layer]))
            rel = max(abs(a - b) / abs(a) for layer in ref["layers"]
                      for a, b in zip(ref["layers"][layer], probe_["layers"][layer]))
            bucket_err = max(abs(a - b) for key in ref["buckets"]
                             for a, b in zip(ref["buckets"][key], probe_["buckets"][key]))
            t_ratio = probe_["seconds"] / plain["seconds"]
            m_ratio = probe_["peak_mb"] / plain["peak_mb"]
            print(f"{T:>6} {plain['seconds']:>8.2f} {probe_['seconds']:>8.2f} {t_ratio:>5.2f} "
                  f"{plain['peak_mb']:>9.0f} {probe_['peak_mb']:>9.0f} {m_ratio:>5.2f} {err:>10.1e} {rel:>8.1e} "
                  f"{bucket_err:>10.1e}")
            print(json.dumps({"T": T, "plain": plain, "probe": {k: v for k, v in probe_.items()
                                                                 if k in ("seconds", "peak_mb", "summary")}}))
            if m_ratio >= MEMORY_RATIO or err > F_ATTN_TOL or bucket_err > F_ATTN_TOL:
                ok = False
    print("all checks passed" if ok else "a check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(child(spec)))
    else:
        sys.exit(main())
