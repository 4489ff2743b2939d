"""Reference numbers from the paper (arXiv 2505.06708), quoted in captions for orientation."""

from __future__ import annotations

PAPER = "Qiu et al. 2025, “Gated Attention for Large Language Models”, arXiv 2505.06708"

# Table 4: 15B MoE models trained on 400B tokens.
TABLE4 = (
    # variant, mean gate, M-Act, F-Attn
    ("baseline (no gate)", None, 1053, 0.467),
    ("elementwise gate (G1)", 0.116, 94, 0.048),
    ("headwise gate (G1)", 0.172, 98, 0.073),
)

# Figure 5: share of attention-output elements below a threshold.
FIGURE5 = {
    1e-2: {"ungated": 0.03, "mean_gate": 0.33, "gated": 0.44},
    1e-3: {"ungated": 0.003, "mean_gate": 0.080, "gated": 0.126},
}


def table4_caption() -> str:
    parts = []
    for variant, mean_gate, m_act, f_attn in TABLE4:
        gate = "" if mean_gate is None else f"mean gate {mean_gate:.3f}, "
        parts.append(f"{variant}: {gate}M-Act {m_act}, F-Attn {f_attn:.3f}")
    return (f"Paper reference ({PAPER}, Table 4; 15B MoE, 400B training tokens): "
            + "; ".join(parts) + ". Small or briefly trained models are not expected to reach "
            "these values; compare the direction of the differences.")


def figure5_caption() -> str:
    parts = [f"τ = {threshold:g}: ungated {v['ungated']:g}, mean-gate control "
             f"{v['mean_gate']:g}, dynamic gate {v['gated']:g}"
             for threshold, v in FIGURE5.items()]
    return "Paper reference (Figure 5): " + "; ".join(parts) + "."
