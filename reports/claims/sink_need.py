"""Claim 5, an implication of the paper rather than one of its measurements: a gated model, which
has no attention sink to lose, does not need its first token's keys. Judged on runs with sink
ablations (ablations.csv, probe analyze --ablate key0): the loss with key 0 masked for every
query t >= 1, against the same model unablated on the same tokens, with its paired interval.

Rows only where some run has ablations.csv: the four measured claims are unchanged without them.
"""
from __future__ import annotations

import math

STATEMENT = "A gated model's loss does not depend on its first token's keys"
PAPER = "implied: no sink to lose (the gate removes it, claim 3); not measured in the paper"
# "Does not depend": the whole interval within ±NEGLIGIBLE nats (1% perplexity either way).
NEGLIGIBLE = 0.01
KIND = "key0_mask"


def rule() -> str:
    return (f"key 0 masked for every query (--ablate key0), all layers: paired 95% interval of Δ loss inside "
            f"±{NEGLIGIBLE:g} nats: consistent; above +{NEGLIGIBLE:g}: opposite; else within noise")


def rows(runs, verdicts: dict, pairs=None) -> list[tuple]:
    """(models, these runs, verdict, numbers) per gated model that ran the key-0 ablation, its
    matched baselines' numbers beside it; verdicts: the claims' verdict words (consistent,
    opposite, within noise, not testable); pairs: the declared pairs (--pair), as the claims'."""
    frame = runs.table("ablations")
    if frame.empty:
        return []
    mine = frame[(frame["kind"] == KIND) & (frame["layer"] == -1)]
    found = {r.model: r for r in mine.itertuples()}
    from .pairs import split_pairs

    matched = split_pairs(runs, pairs)[0]
    out = []
    for model in runs.gated_models:
        # Beside it, its own baseline(s) only: a matched pair (the same tokens; pairs.py).
        bases = [b for b, g in matched if g == model and b in found]
        context = "; ".join(f"{b} (its baseline, no gate): {_text(found[b])}" for b in bases)
        r = found.get(model)
        if any(_negligible(found[b]) for b in bases):
            # "too" only where the gated model's own interval is inside the band as well
            both = r is not None and _negligible(r)
            context += (f"; the baseline's is inside ±{NEGLIGIBLE:g} too: key 0's keys are not what sets "
                        "the gated model apart here" if both else
                        f"; the baseline's is inside ±{NEGLIGIBLE:g}: without key 0 the ungated model loses "
                        "next to nothing as well")
        if r is None:
            out.append((model, f"{model}: no key-0 ablation", f"{verdicts['untestable']}: run probe analyze "
                        "--ablate key0", {}))
            continue
        lo, hi = r.delta_lo, r.delta_hi
        if not (math.isfinite(lo) and math.isfinite(hi)):
            verdict = f"{verdicts['untestable']}: no interval (--resamples 0 or one sequence)"
        elif _negligible(r):
            verdict = verdicts["consistent"]
        elif lo > NEGLIGIBLE:
            verdict = verdicts["opposite"]
        else:
            verdict = verdicts["noise"]
        measured = f"{model}: {_text(r)}" + (f"; {context}" if context else "")
        out.append((model, measured, verdict, {"delta_loss": r.delta_loss, "delta_lo": lo, "delta_hi": hi}))
    return out


def _negligible(r) -> bool:
    """The paired interval lies inside ±NEGLIGIBLE."""
    return bool(math.isfinite(r.delta_lo) and -NEGLIGIBLE < r.delta_lo and r.delta_hi < NEGLIGIBLE)


def _text(r) -> str:
    interval = f" [{r.delta_lo:+.4f}, {r.delta_hi:+.4f}]" if math.isfinite(r.delta_lo) else ""
    return f"Δ loss {r.delta_loss:+.4f}{interval}, F-Attn {r.base_f_attn:.3f} → {r.f_attn:.3f}"
