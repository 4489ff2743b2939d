"""How many queries a key needs before its received-attention score is stable, on the real models.

A key k's importance score (Gu et al., ICLR 2025) is the mean of P[t, k] over the queries t >= k
that see it. Near the end of a sequence a key has few queries, and those are its nearest
neighbours, which attend to recent keys: the score reads high (recency, not a sink). Here, on
one long sequence of Python documentation text (probe.data.corpus.sample_texts; Gemma's <bos> first,
none for SmolLM2) with the model's own eager attention (float32, dequantised GGUF):

  full(k)  = mean of P[t, k] over the REF queries t = k .. k + REF - 1 (keys with that many)
  n(k)     = the same over the first n queries only: the score key k would get with n queries,
             as the last keys of a shorter sequence do

and, per n, over every (layer, head, key >= 1) cell: the median of n(k) / full(k), and how many
cells are above epsilon = 0.3 (a secondary sink in Gu et al.'s sense) with n queries against
how many of those are above it with REF queries (precision: the share that are real).

    python benchmarks/anatomy_min_queries.py [--models smollm2 gemma3] [--length 1024] [--ref 512]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EPSILON = 0.3


def measure(name: str, T: int, ref: int) -> list[dict]:
    import torch

    import probe
    from probe.load import real_models
    from probe.data.corpus import sample_texts

    torch.set_num_threads(max(1, torch.get_num_threads()))
    lm = probe.load(real_models.fetch(name))
    model, tok = lm.model, lm.tokenizer
    ids = torch.tensor([tok("\n\n".join(sample_texts()), add_special_tokens=True).input_ids[:T]])
    model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = model(input_ids=ids, use_cache=False, output_attentions=True).attentions
    keys = torch.arange(1, T - ref + 1)                                  # keys with >= ref queries
    rows = {n: {"ratio": [], "flagged": 0, "real": 0} for n in COUNTS}
    true_sinks = 0
    for p in attentions:
        if p is None:
            continue
        p = p[0].double()                                                # (H, T, T)
        # Running sums down the query axis: c[:, t, k] = sum of P[t', k] for t' <= t.
        c = p.cumsum(1)                                                  # (H, T, T)
        before = c[:, keys - 1, keys]                                    # (H, K): t < k
        full = (c[:, keys + ref - 1, keys] - before) / ref               # (H, K)
        true_sinks += int((full > EPSILON).sum())
        for n in COUNTS:
            score = (c[:, keys + n - 1, keys] - before) / n
            rows[n]["ratio"].append((score / full).flatten())
            flagged = score > EPSILON
            rows[n]["flagged"] += int(flagged.sum())
            rows[n]["real"] += int((flagged & (full > EPSILON)).sum())
    out = []
    for n in COUNTS:
        r = rows[n]
        ratio = torch.cat(r["ratio"])
        out.append({"model": name, "queries": n, "median_ratio": float(ratio.median()),
                    "p90_ratio": float(ratio.quantile(0.9)), "flagged": r["flagged"], "real": r["real"],
                    "precision": r["real"] / r["flagged"] if r["flagged"] else float("nan"),
                    "true_sinks": true_sinks})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--ref", type=int, default=512)
    args = parser.parse_args()
    print(f"T = {args.length}, reference: {args.ref} queries per key, epsilon {EPSILON}")
    print(f"{'model':<9}{'queries':>8}{'median n/ref':>14}{'p90 n/ref':>11}{'above eps':>11}"
          f"{'of them real':>14}{'precision':>11}")
    for name in args.models:
        for row in measure(name, args.length, args.ref):
            print(f"{row['model']:<9}{row['queries']:>8}{row['median_ratio']:>14.2f}{row['p90_ratio']:>11.2f}"
                  f"{row['flagged']:>11}{row['real']:>14}{row['precision']:>11.2f}")
        print(f"{name}: {row['true_sinks']} cells above epsilon with {args.ref} queries")


if __name__ == "__main__":
    main()
