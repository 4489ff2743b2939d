"""The claims' rules: each threshold a verdict uses (named constants, the only place they live)
and the text that quotes them in the reports (PAPER_VALUES: the paper's side; RULES: how a verdict
is decided). reports/claims/__init__.py applies them."""

from __future__ import annotations

from collections.abc import Callable

from probe.reports.claims import sink_need
from probe.reports.claims.paper import paper_sparsity, table4
from probe.reports.labels import HEADLINE_THRESHOLDS

# --- The rules' thresholds ----------------------------------------------------------------
# Claim 1. 0.3 lies below every variant the paper calls non-sparse (input-independent gate
# 0.335, NS-sigmoid 0.653) and well below 0.5, what a gate with no preference (logit 0) gives.
MEAN_GATE_MAX = 0.3
# gates.csv saves the share below 0.1 (frac_lt_0.1; LOW_GATE must be one of its saturation
# thresholds); a uniform spread of scores on [0, 1] would put 0.1 there, so "a large share"
# asks for 2.5 times that.
LOW_GATE = 0.1
LOW_GATE_SHARE_MIN = 0.25
# Claim 2. Figure 5's headline threshold; each step of the ordering must gain at least one
# percentage point, so that rounding-level differences do not decide a verdict.
SPARSITY_THRESHOLD = HEADLINE_THRESHOLDS[0]
SPARSITY_MIN_STEP = 0.01
# Claim 3. A baseline has a sink when its F-Attn is at least 3x what uniform causal attention
# gives on the same queries, mean_t 1/(t+1); only then can a gate remove one.
SINK_MIN_RATIO = 3.0
# Claims 3 and 4: "removes" is read as "at least this many times smaller than the baseline".
F_ATTN_MIN_REDUCTION = 2.0
M_ACT_MIN_REDUCTION = 2.0

# What "the same direction" means for each claim, without its threshold: claim 1, a mean
# gate below what a gate without preference gives (logit 0) and more scores below LOW_GATE than
# a uniform spread puts there; claims 2-4, every step of the ordering strictly the paper's way.
NO_PREFERENCE_GATE = 0.5


PAPER_VALUES: dict[int, Callable[[], str]] = {
    1: lambda: (f"mean gate {table4('mean gate', lambda v: f'{v:.3f}')} (Table 4); most "
                "scores near 0 (Figure 3)"),
    2: lambda: paper_sparsity(SPARSITY_THRESHOLD),
    3: lambda: f"F-Attn {table4('F-Attn', lambda v: f'{v:.3f}')} (Table 4)",
    4: lambda: f"M-Act {table4('M-Act', lambda v: f'{v:g}')} (Table 4)",
    5: lambda: sink_need.PAPER,
}

# Built when asked, so that they always quote the constants' current values.
RULES: dict[int, Callable[[], str]] = {
    1: lambda: (f"intervals: mean gate < {MEAN_GATE_MAX:g} and share of scores below {LOW_GATE:g} > "
                f"{LOW_GATE_SHARE_MIN:g}; opposite: mean gate > {NO_PREFERENCE_GATE:g} or that share < "
                f"{LOW_GATE:g} (a uniform spread's); below the threshold: mean gate < {NO_PREFERENCE_GATE:g} "
                f"and that share > {LOW_GATE:g}, short of the first rule. No interval: mean gate ≤ "
                f"{MEAN_GATE_MAX:g} and that share ≥ {LOW_GATE_SHARE_MIN:g}"),
    2: lambda: (f"τ = {SPARSITY_THRESHOLD:g}, mean over layers: ungated < control < dynamic gate; intervals of "
                "dynamic − ungated and, with the exact control (--exact-control), dynamic − control, both "
                f"above 0 (the one-pass control has none). No interval: each step ≥ {SPARSITY_MIN_STEP:g}"),
    3: lambda: (f"baseline F-Attn ≥ {SINK_MIN_RATIO:g}× uniform; interval of baseline − gated (F-Attn ÷ uniform) "
                f"above 0 and baseline ÷ gated ≥ {F_ATTN_MIN_REDUCTION:g} (a smaller drop: below "
                f"the threshold). No interval: gated ≤ 1/{F_ATTN_MIN_REDUCTION:g} of the baseline's"),
    4: lambda: (f"interval of baseline − gated M-Act above 0 and baseline ÷ gated ≥ {M_ACT_MIN_REDUCTION:g} "
                f"(a smaller drop: below the threshold). No interval: gated ≤ "
                f"1/{M_ACT_MIN_REDUCTION:g} of the baseline's"),
    5: sink_need.rule,
}
