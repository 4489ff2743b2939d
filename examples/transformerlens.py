# %% [markdown]
# # probe on a TransformerLens bridge
#
# TransformerLens 4.x wraps a Hugging Face model in a `TransformerBridge` whose hook points
# (`blocks.L.attn.hook_pattern`, `hook_q_gate`, `hook_z`, `blocks.L.hook_resid_post`, ...) follow
# the TransformerLens naming. `probe.analyze` accepts such a bridge and measures the same things
# as on the Hugging Face model, through the bridge's own hooks: each hook folds its activation
# into probe's streaming statistics at once, so no activation cache is kept.
#
# This example uses the elementwise-gated arm that ships in `examples/checkpoints` (a Qwen3 in
# the paper's official checkpoint layout, trained by `probe train`): it builds a bridge from it,
# checks that both paths agree, analyses the model under a TransformerLens intervention, and
# shows why the official layout needs its `q_proj` rows reordered first.

# %%
from IPython.display import display     # tables as HTML in a notebook, as text in a script
from transformer_lens.model_bridge.sources import build_bridge_from_module

import probe
import probe.capture.bridge
from probe.data.corpus import sample_texts

# The arms shipped with probe (examples/checkpoints), found wherever this is opened from.
ARMS = probe.shipped_checkpoints()
CHECKPOINT = ARMS / "elementwise"
TEXTS = sample_texts()[:4]
OPTIONS = dict(texts=TEXTS, seq_len=128, max_sequences=8, bos="prepend", progress=False)

# %% [markdown]
# ## A bridge from the official layout
# The released checkpoints (and these arms) pack `q_proj` per KV head ([all queries of the
# group | their gates]); TransformerLens reads it per query head ([query | gate]), as in
# Qwen3-Next. Under grouped-query attention a bridge built on the rows as they are computes
# wrong logits without any error, so probe refuses it:

# %%
raw = probe.load(CHECKPOINT).model
naive = build_bridge_from_module(raw, "Qwen3NextForCausalLM", hf_config=raw.config)
try:
    probe.analyze(naive, **OPTIONS)
except probe.ProbeError as err:
    print("refused:", err)

# %% [markdown]
# `probe.capture.bridge.build_bridge(checkpoint)` reorders the rows per head first
# (`probe.load.reorder.reorder_official_q_proj`; the model's logits do not change) and then builds the
# bridge.

# %%
bridge = probe.capture.bridge.build_bridge(CHECKPOINT)
print(type(bridge).__name__, bridge.cfg.n_layers, "layers")
print(probe.capture.bridge.hook_names(bridge)[:8], "...")

# %% [markdown]
# ## Analyse through the bridge
# The same call as for a checkpoint directory. TransformerLens recomputes each softmax-attention
# layer as an explicit T x T pattern, so F-Attn comes from `hook_pattern[..., 0]` here (probe's
# Hugging Face path gets it from the attention kernel's log-sum-exp instead, without forming T x T).

# %%
tl = probe.analyze(bridge, name="bridge", **OPTIONS)
print(tl, "| backend:", tl.meta["backend"])
display(tl.layer_frame())

# %% [markdown]
# ## The Hugging Face path gives the same numbers

# %%
hf = probe.analyze(CHECKPOINT, name="hf", **OPTIONS)
diffs = {}
for table, keys in (("first_token", ["layer", "head", "metric"]), ("gates", ["layer", "head", "group", "metric"]),
                    ("massive", ["layer", "site", "metric"])):
    both = getattr(hf, table).merge(getattr(tl, table), on=keys, suffixes=("_hf", "_tl"))
    diffs[table] = float((both["value_hf"] - both["value_tl"]).abs().max())
print("largest |HF - bridge| per table:", diffs)
for key in ("mean_gate", "f_attn", "m_act", "loss"):
    print(f"{key:10s} HF {hf.summary[key]:.6f}   bridge {tl.summary[key]:.6f}")
assert diffs["first_token"] < 1e-5 and diffs["gates"] < 1e-5

# %% [markdown]
# ## Measure under an intervention
# Hooks you add to the bridge stay active while probe runs (`bridge.hooks(...)`, or
# `bridge.add_hook`). Here the last layer's gate is forced fully open (logits +30: sigmoid = 1),
# the ungated model's attention output: the gate scores become 1 and the gated output is no
# sparser than the ungated one.

# %%
last = tl.summary["attention_layers"][-1]


def open_gate(logits, hook):
    return logits.new_full(logits.shape, 30.0)


with bridge.hooks(fwd_hooks=[(f"blocks.{last}.attn.hook_q_gate", open_gate)]):
    opened = probe.analyze(bridge, name="gate open", **OPTIONS)
print("mean gate:", round(tl.summary["mean_gate"], 3), "->", round(opened.summary["mean_gate"], 3))
print("loss:", round(tl.summary["loss"], 4), "->", round(opened.summary["loss"], 4))
sp = opened.sparsity[(opened.sparsity["layer"] == last) & (opened.sparsity["threshold"] == 1e-2)]
display(sp.set_index("variant")["value"])
