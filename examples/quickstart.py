# %% [markdown]
# # probe quickstart: one checkpoint, every measurement
#
# `probe.analyze` runs a model over some text once and returns an `Analysis`: tidy pandas
# tables of the gate scores, the attention on the first token (F-Attn), the largest activations
# per layer (M-Act), the sparsity of the attention output and the loss, plus a `summary` dict.
#
# This example builds a tiny random Qwen3-Next checkpoint (3 Gated DeltaNet layers and one
# gated softmax-attention layer) so that it runs anywhere in seconds, with no download. Set
# `CHECKPOINT` to a directory of your own (config.json + safetensors + tokenizer files) to
# analyse a real model; the rest of the notebook stays the same. Random weights mean the
# numbers below illustrate the tables, not the paper's findings.
#
# (`quickstart.py` is the same example as a plain script; `python examples/_notebooks.py`
# regenerates the notebook from it.)

# %%
import probe
import reports
from _tiny import TEXT, build, display, show, workdir

CHECKPOINT = None          # e.g. "checkpoints/my-gated-model"; None builds a tiny random one
WORK = workdir()           # models, runs and figures go here ($PROBE_EXAMPLES_DIR or a temp folder)
if CHECKPOINT is None:
    CHECKPOINT = build("qwen3_next", WORK / "models" / "tiny-qwen3-next")
print(CHECKPOINT)

# %% [markdown]
# ## Analyse
# `texts=` takes a list of strings; a path to a text file, a folder, JSONL or token ids works
# too (`probe.analyze(CHECKPOINT, "corpus.txt")`). The text is tokenised, joined and cut into
# sequences of `seq_len` tokens. What sits at position 0 matters for F-Attn: it is recorded in
# `analysis.meta["position0"]`.

# %%
analysis = probe.analyze(CHECKPOINT, texts=[TEXT], seq_len=64, batch_size=4)
print(analysis)
print(analysis.meta["position0"])
display(analysis.summary_frame())

# %% [markdown]
# ## Per layer
# One row per layer. Gated DeltaNet (linear-attention) layers have no softmax, so they have no
# F-Attn and no gate in this model: they show as NaN, not as zeros.

# %%
display(analysis.layer_frame())

# %% [markdown]
# ## Gate scores
# `gates` holds, per attention layer and head, statistics of the sigmoid gate scores over all
# tokens (`group="all"`), the first token, and the rest: mean, std, min, max and the shares
# below 0.01 / 0.1 / 0.5 and above 0.9 / 0.99. `gate_hist` holds a 50-bin histogram.

# %%
gates = analysis.gates
display(gates[gates.group == "all"].pivot_table(index=["layer", "head"], columns="metric", values="value"))

# %%
show(reports.plot_gate_histograms(analysis), "quickstart_gate_histograms")

# %% [markdown]
# ## First-token attention (F-Attn)
# The attention probability on key 0, per layer and head, averaged over query positions
# t >= 1 (`f_attn`) and including t = 0 as the paper does (`f_attn_paper`). Uniform attention
# would give `summary["f_attn_uniform"]`; a sink is a head far above that.

# %%
ft = analysis.first_token
print("uniform reference:", round(analysis.summary["f_attn_uniform"], 4))
display(ft[ft.layer_type == "attention"].pivot_table(index=["layer", "head"], columns="metric", values="value"))

# %%
show(reports.plot_first_token_heatmap(analysis), "quickstart_first_token")

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
show(reports.plot_massive_activations(analysis), "quickstart_massive")

# %% [markdown]
# ## Sparsity of the attention output
# The share of attention-output elements below a threshold, for the ungated output, a control
# that scales it by the layer's mean gate, and the output of the dynamic gate.

# %%
sp = analysis.sparsity
display(sp[sp.threshold.isin([1e-2, 1e-3])].pivot_table(index=["layer", "threshold"], columns="variant", values="value"))

# %%
show(reports.plot_sparsity_by_layer(analysis), "quickstart_sparsity")

# %% [markdown]
# ## Save and load
# A run directory holds every table as CSV, `meta.json` (provenance) and `summary.json`
# (docs/run-directory.md). `probe.Analysis.load` reads it back; `reports` reads it too.

# %%
run = analysis.save(WORK / "runs" / "quickstart", force=True)
again = probe.Analysis.load(run)
for key in ("mean_gate", "f_attn", "m_act", "loss"):
    assert again.summary[key] == analysis.summary[key], key
assert again.first_token.equals(analysis.first_token)
print(sorted(p.name for p in run.iterdir()))
display(again)
