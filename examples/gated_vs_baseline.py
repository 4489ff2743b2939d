# %% [markdown]
# # Gated versus baseline, side by side
#
# The paper's claims are comparisons: with the gate, less attention on the first token, smaller
# maximum activations, a sparser attention output. This example analyses several checkpoints on
# the **same tokens** and puts the numbers next to each other.
#
# It builds three matched tiny arms in the layout of the paper's released checkpoints (a Qwen3
# decoder saved as `model_type` qwen3 with the `headwise_attn_output_gate` /
# `elementwise_attn_output_gate` flags; the gate's parameters are paid from the MLP width, as in
# `probe train`): no gate, headwise, elementwise. They are **random**, so any difference below is
# noise from different weights, not an effect of the gate. Put trained checkpoints in `MODELS`
# (for instance the arms `probe train --arm all` writes, or the released 1B checkpoints) to
# compare real models.

# %%
import probe
import reports
from _tiny import TEXT, build, display, show, workdir

WORK = workdir()
MODELS = None     # e.g. {"baseline": "ckpt/base", "gated": "ckpt/gated"}; None builds tiny random arms
if MODELS is None:
    MODELS = {arm: build(arm, WORK / "models" / f"arm-{arm}", seed=1) for arm in ("none", "headwise", "elementwise")}
print(MODELS)

# %% [markdown]
# ## Analyse every model on the same tokens
# Same text, same `seq_len`, same BOS policy: the token streams are identical when the models
# share a tokenizer (check `meta["tokens"]` and `meta["position0"]` below). `name=` is the model
# column in every table.

# %%
analyses = {name: probe.analyze(path, texts=[TEXT], seq_len=64, name=name, progress=False)
            for name, path in MODELS.items()}
for name, a in analyses.items():
    print(f"{name:12s} {a.meta['gate_layout']:22s} tokens={a.meta['tokens']}  position 0: {a.meta['position0']}")

# %% [markdown]
# ## The paper's Table 4 quantities
# mean gate score, M-Act (mean over layers of the per-layer maximum |h| of the layer output) and
# F-Attn (attention on the first token), with the uniform reference and the sink rate (share of
# layer x head cells above 0.3).

# %%
display(reports.summary_table(list(analyses.values())))

# %% [markdown]
# ## Do the paper's claims hold here?
# One row per claim and gated model: the paper's values, these runs' values, a verdict in
# direction only ("direction consistent with the paper", "not consistent", or "not testable:
# why") and the rule, whose thresholds are constants in `reports/claims.py`. With random arms
# expect "not testable" for the sink (a random baseline has none) and verdicts that mean nothing.

# %%
claims = reports.claims_table(*analyses.values())
display(claims[["claim", "models", "these runs", "verdict"]])

# %% [markdown]
# ## Layer by layer

# %%
show(reports.plot_first_token_by_layer(list(analyses.values())), "compare_first_token_by_layer")

# %%
show(reports.plot_massive_by_layer(list(analyses.values())), "compare_massive_by_layer")

# %%
show(reports.plot_gate_stats_by_layer(list(analyses.values())), "compare_gate_stats")

# %% [markdown]
# ## Sparsity: ungated, uniform mean-gate scaling, dynamic gate
# The control multiplies the ungated attention output by the layer's mean gate. If the dynamic
# gate is sparser than the control, the sparsity comes from *which* heads and tokens it closes,
# not only from scaling everything down.

# %%
import pandas as pd

sparsity = pd.concat(a.sparsity for a in analyses.values())
at_1e2 = sparsity[sparsity.threshold == 1e-2]
display(at_1e2.pivot_table(index="model", columns="variant", values="value", aggfunc="mean").round(4))

# %%
show(reports.plot_sparsity_by_layer(list(analyses.values())), "compare_sparsity")

# %% [markdown]
# ## Save the runs and write a report
# Each analysis saves to its own run directory; `reports.build_report` reads them (or the
# analyses themselves) and writes one self-contained HTML file. `probe compare A B ... --out DIR`
# does all of this from the command line.

# %%
runs = [a.save(WORK / "runs" / "compare" / name, force=True) for name, a in analyses.items()]
written = reports.build_report(runs, WORK / "runs" / "compare-report", formats=("html",))
print(written["html"])
