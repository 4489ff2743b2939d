# %% [markdown]
# # Gated versus baseline, side by side
#
# The paper's claims are comparisons: with the gate, less attention on the first token, smaller
# maximum activations, a sparser attention output. This example analyses several checkpoints on
# the **same tokens** and puts the numbers next to each other.
#
# It uses the three matched arms that `probe train` made and that ship in `examples/checkpoints`:
# a Qwen3 decoder in the layout of the paper's released checkpoints with no gate, a headwise
# and an elementwise output gate (the gate's parameters paid from the MLP width), each trained
# on 3M tokens of Python's standard library (`examples/checkpoints/README.md`). At this scale
# the baseline grows no first-token sink, so the sink claim is "not testable" here;
# docs/training.md says what such arms do and do not show. Put checkpoints of your own in
# `MODELS` to compare real models.

# %%
import os
import tempfile
from pathlib import Path

import pandas as pd
from IPython.display import display     # tables as HTML in a notebook, as text in a script

import probe
from probe import reports
from probe.data.corpus import sample_texts

# The arms shipped with probe (examples/checkpoints), found wherever this is opened from.
ARMS = probe.shipped_checkpoints()
MODELS = {"baseline": ARMS / "none", "headwise": ARMS / "headwise", "elementwise": ARMS / "elementwise"}
WORK = Path(os.environ.get("PROBE_EXAMPLES_DIR") or tempfile.mkdtemp(prefix="probe-compare-"))
print(MODELS)

# %% [markdown]
# ## Analyse every model on the same tokens
# Same text, same `seq_len`, same BOS policy: the token streams are identical when the models
# share a tokenizer (the arms do; `meta["tokens_sha256"]` below says so). `name=` is the model
# column in every table.

# %%
texts = sample_texts()
analyses = {name: probe.analyze(path, texts=texts, seq_len=128, max_sequences=16, bos="prepend", name=name,
                                progress=False)
            for name, path in MODELS.items()}
for name, a in analyses.items():
    print(f"{name:12s} {a.meta['gate_layout']:22s} tokens={a.meta['tokens']}  "
          f"sha256 {a.meta['tokens_sha256'][:12]}  position 0: {a.meta['position0']}")

# %% [markdown]
# ## The paper's Table 4 quantities
# mean gate score, M-Act (mean over layers of the per-layer maximum |h| of the layer output) and
# F-Attn (attention on the first token), with the uniform reference and the sink rate (share of
# layer x head cells above 0.3).

# %%
display(reports.summary_table(list(analyses.values())))

# %% [markdown]
# ## Do the paper's claims hold here?
# One row per claim and gated model: the paper's values, these runs' values, a verdict and
# the rule, whose thresholds are constants in `reports/claims/__init__.py`. With 95%
# intervals (the default) a verdict says on which side of the paper the interval lies:
# "direction consistent with the paper", "same direction, below the threshold", "within noise"
# (the interval holds both sides) or "opposite to the paper"; without them, "not consistent with
# the paper" where the rule fails; "not testable: why" or "not comparable: why" where no verdict
# can be given.

# %%
claims = reports.claims_table(*analyses.values())
with pd.option_context("display.max_colwidth", None):      # the whole text: pandas cuts at 50
    display(claims[["claim", "statement", "models", "these runs", "verdict"]])

# %% [markdown]
# ## Layer by layer
# `reports.plot_*` take one run or several (`Analysis` objects or run directories); `.figure` is
# the Figure a plot was drawn in (some return the Axes they drew on).

# %%
display(reports.plot_first_token_by_layer(list(analyses.values())).figure)

# %%
display(reports.plot_massive_by_layer(list(analyses.values())).figure)

# %%
display(reports.plot_gate_stats_by_layer(list(analyses.values())).figure)

# %% [markdown]
# ## Sparsity: ungated, uniform mean-gate scaling, dynamic gate
# The control multiplies the ungated attention output by the layer's mean gate. If the dynamic
# gate is sparser than the control, the sparsity comes from *which* heads and tokens it closes,
# not only from scaling everything down.

# %%
sparsity = pd.concat(a.sparsity for a in analyses.values())
at_1e2 = sparsity[sparsity["threshold"] == 1e-2]
display(at_1e2.pivot_table(index="model", columns="variant", values="value", aggfunc="mean").round(4))

# %%
display(reports.plot_sparsity_by_layer(list(analyses.values())).figure)

# %% [markdown]
# ## Save the runs and write a report
# Each analysis saves to its own run directory; `reports.build_report` reads them (or the
# analyses themselves) and writes one self-contained HTML file. `probe compare A B ... --out DIR`
# does all of this from the command line.

# %%
runs = [a.save(WORK / "runs" / "compare" / name, force=True) for name, a in analyses.items()]
written = reports.build_report(runs, WORK / "runs" / "compare-report", formats=("html",))
print(written["html"])
