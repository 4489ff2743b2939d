"""Which of the paper's claims speak about a hybrid's linear-attention (Gated DeltaNet) layers, and
about a gate other than the paper's sigmoid (claim 1).

The paper's gate is a sigmoid on a softmax head's output; claims 1-3 are judged on those layers
only. A GDN layer has an output gate of its own (SiLU, unbounded, after an RMSNorm) and no softmax
over keys, so its counterparts are reported apart (the Linear-attention section, --gdn). Claim 4
is about the residual stream, which every layer writes: it covers the GDN layers too.
"""

from __future__ import annotations

from probe.reports.labels import LINEAR_ATTENTION
from probe.reports.runs import Runs
from probe.reports.text import plain


def linear_attention_scope(runs: Runs) -> list[str]:
    """One note for the claims table where a model has linear-attention layers, else none."""
    hybrids = [model for model in runs.models if runs.layers_of_type(model, LINEAR_ATTENTION)]
    if not hybrids:
        return []
    measured = set(runs.gdn_keys["model"]) | set(runs.gdn_gates["model"])
    where = ("their counterparts are in the section on linear-attention layers"
             if measured & set(hybrids) else
             "probe analyze --gdn measures their counterparts (SiLU gate, sparsity, key-0 share)")
    return [f"{', '.join(plain(m) for m in hybrids)} {'has' if len(hybrids) == 1 else 'have'} "
            "Gated DeltaNet layers. Claims 1-3 are judged on the softmax-attention layers only: a "
            "GDN layer's output gate is a SiLU after an RMSNorm, not the paper's sigmoid, and it has "
            f"no softmax over keys, so no F-Attn; {where}. Claim 4 (M-Act, the residual stream) "
            "covers every layer, the GDN layers included."]


# Gates other than the paper's sigmoid: their score range, which the rule's thresholds do not fit.
OTHER_GATES = {"2sigmoid": "2 * sigmoid, scores in (0, 2)", "softplus": "softplus, scores in (0, inf)"}


def other_gate(runs: Runs, model: str) -> str | None:
    """"2 * sigmoid, scores in (0, 2)" for a model whose gate (meta.json gate.activation) is not
    the paper's sigmoid; None for a sigmoid gate, or none."""
    return OTHER_GATES.get((runs.meta.get(model, {}).get("gate") or {}).get("activation"))


def not_sigmoid(runs: Runs, model: str) -> str | None:
    """Why claim 1's rule does not fit the model's gate (None for a sigmoid gate): its thresholds
    (mean < 0.3, a share below 0.1) are read on the paper's sigmoid scores in (0, 1)."""
    kind = other_gate(runs, model)
    if kind is None:
        return None
    return (f"{model}'s gate is {kind}; the rule's thresholds are for the paper's sigmoid gate, "
            "scores in (0, 1)")
