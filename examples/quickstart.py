# %% [markdown]
# # probe quickstart: one checkpoint, every measurement
#
# `probe.analyze` runs a model over some text once and returns an `Analysis`: tidy pandas
# tables of the gate scores, the attention on the first token (F-Attn), the largest activations
# per layer (M-Act), the sparsity of the attention output and the loss, plus a `summary` dict.
#
# It analyses the elementwise-gated arm that `probe train` made and that ships in
# `examples/checkpoints` (a 1.1M-parameter Qwen3 in the paper's official checkpoint layout,
# trained on 3M tokens of Python's standard library; `examples/checkpoints/README.md` has the
# recipe). Set `CHECKPOINT` to a directory of your own (config.json + safetensors + tokenizer
# files) to analyse another model; the rest stays the same.
#
# (`quickstart.py` is the same example as a plain script; `python examples/_notebooks.py`
# regenerates the notebook from it.)

# %%
import os
import tempfile
from pathlib import Path

from IPython.display import display     # tables as HTML in a notebook, as text in a script

import probe
from probe import reports
from probe.data.corpus import sample_texts

# The arms shipped with probe (examples/checkpoints), found wherever this is opened from.
ARMS = probe.shipped_checkpoints()
CHECKPOINT = ARMS / "elementwise"
WORK = Path(os.environ.get("PROBE_EXAMPLES_DIR") or tempfile.mkdtemp(prefix="probe-quickstart-"))
print(CHECKPOINT, "->", WORK)

# %% [markdown]
# ## Analyse
# `texts=` takes a list of strings (here the docstrings of some standard-library modules, the
# sample `probe analyze` uses without `--data`); a path to a text file, a folder, JSONL or token
# ids works too (`probe.analyze(CHECKPOINT, "corpus.txt")`). The text is tokenised, joined and
# cut into sequences of `seq_len` tokens. The arms were trained with a BOS token at position 0,
# so `bos="prepend"` puts one there; what sits at position 0 matters for F-Attn and is recorded
# in `analysis.meta["position0"]`.

# %%
analysis = probe.analyze(CHECKPOINT, texts=sample_texts(), seq_len=128, max_sequences=16, bos="prepend",
                         progress=False)
print(analysis)
print(analysis.meta["position0"])
display(analysis.summary_frame())

# %% [markdown]
# ## Per layer
# One row per layer: F-Attn, mean gate, M-Act of the layer output and the sparsity at 0.01.

# %%
display(analysis.layer_frame())

# %% [markdown]
# ## Gate scores
# `gates` holds, per attention layer and head, statistics of the sigmoid gate scores over all
# tokens (`group="all"`), the first token, and the rest: mean, std, min, max and the shares
# below 0.01 / 0.1 / 0.5 and above 0.9 / 0.99. `gate_hist` holds a 50-bin histogram. The tables
# are tidy: select columns by key (`gates["head"]`; `.head` is a DataFrame method).

# %%
gates = analysis.gates
stats = gates[(gates["group"] == "all") & (gates["metric"] != "count")]       # count: scores per head
display(stats.pivot_table(index=["layer", "head"], columns="metric", values="value", sort=False))

# %%
display(analysis.plot_gate_histograms())

# %% [markdown]
# ## First-token attention (F-Attn)
# The attention probability on key 0, per layer and head, averaged over query positions
# t >= 1 (`f_attn`) and including t = 0 as the paper does (`f_attn_paper`). Uniform attention
# would give `summary["f_attn_uniform"]`; a sink is a head far above that.

# %%
ft = analysis.first_token
print("uniform reference:", round(analysis.summary["f_attn_uniform"], 4))
display(ft[ft["metric"] == "f_attn"].pivot_table(index="layer", columns="head", values="value"))

# %%
display(analysis.plot_first_token_heatmap())

# %% [markdown]
# ## Massive activations (M-Act)
# max |h| per layer at the four sites of the paper's Figure 6 (attention output, residual after
# attention, MLP output, layer output), the median |h| beside it, and the top-3 values with the
# sequence, position, dimension and token where they sit.

# %%
massive = analysis.massive
display(massive.pivot_table(index="layer", columns=["metric", "site"], values="value")["max_abs"])
display(analysis.massive_top.head(6))

# %%
display(analysis.plot_massive_activations())

# %% [markdown]
# ## Sparsity of the attention output
# The share of attention-output elements below a threshold, for the ungated output, a control
# that scales it by the layer's mean gate, and the output of the dynamic gate. Every share is a
# count; `meta["sparsity_exact"]` says which are exact (the control needs the layer's mean gate,
# known only after the pass: `exact_control=True` counts it exactly in a second pass).

# %%
sp = analysis.sparsity
display(sp[sp["threshold"].isin([1e-2, 1e-3])].pivot_table(index=["layer", "threshold"], columns="variant",
                                                           values="value"))
print(analysis.meta["sparsity_exact"])

# %%
display(analysis.plot_sparsity_by_layer())

# %% [markdown]
# ## Save and load
# A run directory holds every table as CSV, `meta.json` (provenance) and `summary.json`
# (docs/run-directory.md). `probe.Analysis.load` reads it back; `reports` reads it too.

# %%
run = analysis.save(WORK / "runs" / "quickstart", force=True)
again = probe.Analysis.load(run)
for key in ("mean_gate", "f_attn", "m_act", "loss"):
    assert again.summary[key] == analysis.summary[key], key
print(sorted(p.name for p in run.iterdir()))
display(reports.summary_table([again]))
