"""Sink anatomy of the two real models (probe.load.real_models), checked against eager attention.

For SmolLM2-135M and Gemma 3 270M (dequantised to float32) on Python documentation text
(probe.data.corpus.sample_texts, the tokenizer's own special tokens: Gemma's <bos> at position 0,
none for SmolLM2) at T tokens, one sequence:
  1. received attention per (layer, head, key) from the `probe` back-end's lse
     (probe.metrics.anatomy.received.received_attention) against the column means of the model's own eager
     attention (output_attentions=True): the largest difference over every layer;
  2. what the anatomy metric (probe/metrics/anatomy/, probe analyze --anatomy) reduces: sink rate by key position (Gu et al., epsilon 0.3,
     pooled over layers and heads), the tokens that receive the most, the top secondary sinks,
     and per layer the value drains of each head's top key.

    python benchmarks/anatomy_real.py [--models smollm2 gemma3] [--length 1024]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(name: str, T: int) -> None:
    import torch

    import probe
    from probe.load import real_models
    from probe.data.corpus import sample_texts
    from probe.core.events import ATTENTION
    from probe.metrics.anatomy.reduce import MIN_QUERIES
    from probe.metrics.anatomy.received import received_attention, top_keys

    torch.set_num_threads(1)
    lm = probe.load(real_models.fetch(name))
    model, tok = lm.model, lm.tokenizer
    ids = tok("\n\n".join(sample_texts()), add_special_tokens=True).input_ids[:T]
    ids = torch.tensor([ids])
    vocab = model.config.get_text_config().vocab_size
    scores, top = {}, {}

    def keep(layer, query, b, *, key, lse, mask, scale, softcap=None, **_):
        # What the anatomy metric reads, per key: kept here to check against eager attention.
        r = received_attention(query, key, lse, mask, scale, softcap=softcap)
        scores[layer] = r.score()
        top[layer] = top_keys(r, 1, min_queries=MIN_QUERIES)

    # probe's own pass with sink anatomy on (probe analyze --anatomy), one sequence.
    cap = probe.Capture(model, lm.layout, anatomy=True, vocab_size=vocab)
    cap.on(ATTENTION, keep)
    with torch.inference_mode(), cap, cap.batch(ids):
        model(input_ids=ids, use_cache=False)
    stats = cap.metrics["anatomy"].stats
    for layer, st in stats.items():
        st.top_key = top[layer]
    model.set_attn_implementation("eager")
    with torch.no_grad():
        eager = model(input_ids=ids, use_cache=False, output_attentions=True).attentions
    layers = sorted(scores)
    worst = 0.0
    cfg = model.config.get_text_config()
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    window = getattr(cfg, "sliding_window", None)
    for i, layer in enumerate(layers):
        a = eager[i].double()                                               # (1, H, T, T)
        count = (a.shape[2] - torch.arange(a.shape[3])).double()           # causal: queries t >= k
        if types[layer] == "sliding_attention" and window and window < T:
            k = torch.arange(T)
            count = ((k + window).clamp_max(T) - k).double()
        want = a.sum(2) / count
        worst = max(worst, float((scores[layer] - want).abs().max()))
    print(f"\n{name}: {len(layers)} attention layers, T = {T}, position 0 = {tok.convert_ids_to_tokens(int(ids[0, 0]))!r}")
    print(f"  received attention vs eager column means: largest difference {worst:.2e}")
    cells = sum(st.pos_cells[:16] for st in stats.values())                # (16,) per layer and head
    sinks = sum(st.pos_sinks[:16].sum(1) for st in stats.values())
    heads = stats[layers[0]].heads
    rate = (sinks.double() / (cells.double() * heads)).tolist()
    print("  sink rate by key position 0-15 (share of (layer, head) cells above 0.3): "
          + " ".join(f"{r:.2f}" for r in rate))
    tokens = {}
    for st in stats.values():
        for row in st.token_rows(k=None):
            t = tokens.setdefault(row["token"], [0.0, 0])
            t[0] += row["score"] * row["cells"]
            t[1] += row["cells"]
    best = sorted(tokens.items(), key=lambda kv: -kv[1][0] / kv[1][1])[:8]
    print("  tokens receiving most (mean score over layers, heads, occurrences):")
    for t, (s, n) in best:
        print(f"    {tok.convert_ids_to_tokens(t)!r:>14}  score {s / n:.3f}  over {n // len(layers)} occurrences")
    top = sorted((c for st in stats.values() for c in st.secondary_sinks()), key=lambda c: -c["score"])[:8]
    print("  top secondary sinks (position >= 1):")
    for c in top:
        print(f"    layer {c['layer']:>2} head {c['head']} position {c['position']:>4} "
              f"{tok.convert_ids_to_tokens(c['token'])!r:>14} score {c['score']:.3f}")
    print("  value drains of each head's top key, by layer (mean over heads): top-key positions | "
          "||v|| / median ||v|| | norm share | projection share")
    for layer in layers:
        rows = stats[layer].drain_rows()
        keys = sorted(set(stats[layer].top_key[0, :, 0].tolist()))
        mean = lambda f: sum(r[f] for r in rows) / len(rows)  # noqa: E731
        print(f"    layer {layer:>2}: keys {keys}  {mean('value_norm_ratio'):.2f}  {mean('norm_share'):.3f}  "
              f"{mean('projection_share'):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=["smollm2", "gemma3"], choices=["smollm2", "gemma3"])
    parser.add_argument("--length", type=int, default=1024)
    args = parser.parse_args()
    for name in args.models:
        run(name, args.length)
    return 0


if __name__ == "__main__":
    sys.exit(main())
