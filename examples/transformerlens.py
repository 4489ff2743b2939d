# %% [markdown]
# # probe on a TransformerLens bridge
#
# TransformerLens 4.x wraps a Hugging Face model in a `TransformerBridge` whose hook points
# (`blocks.L.attn.hook_pattern`, `hook_q_gate`, `hook_z`, `blocks.L.hook_resid_post`, ...) follow
# the TransformerLens naming. `probe.analyze` accepts such a bridge and measures the same things
# as on the Hugging Face model, through the bridge's own hooks: each hook folds its activation
# into probe's streaming statistics at once, so no activation cache is kept.
#
# This example builds a tiny random Qwen3-Next checkpoint (Qwen3-Next and Qwen3.5 put the gate
# logits in `q_proj`; TransformerLens exposes them as `hook_q_gate`), boots a bridge from it
# offline, checks that both paths agree, analyses the model under a TransformerLens intervention,
# and shows what happens with the paper's official checkpoint layout.

# %%
import warnings

import probe
import probe.bridge
from _tiny import TEXT, build, display, workdir
from transformer_lens.model_bridge import TransformerBridge

warnings.filterwarnings("ignore", category=UserWarning)
WORK = workdir()
CHECKPOINT = build("qwen3_next", WORK / "models" / "tiny-qwen3-next")

# Offline: boot_transformers reads a local directory (it holds tokenizer files).
bridge = TransformerBridge.boot_transformers(str(CHECKPOINT), device="cpu")
print(type(bridge).__name__, bridge.cfg.architecture, bridge.cfg.n_layers, "layers")

# %% [markdown]
# ## Analyse through the bridge
# The same call as for a checkpoint directory. TransformerLens recomputes each softmax-attention
# layer as an explicit T x T pattern, so F-Attn comes from `hook_pattern[..., 0]` here (probe's
# Hugging Face path gets it from the attention kernel's log-sum-exp instead, without forming T x T).

# %%
print(probe.bridge.hook_names(bridge))
tl = probe.analyze(bridge, texts=[TEXT], seq_len=64, name="bridge", progress=False)
print(tl, "| backend:", tl.meta["backend"])
display(tl.layer_frame())

# %% [markdown]
# ## The Hugging Face path gives the same numbers

# %%
hf = probe.analyze(CHECKPOINT, texts=[TEXT], seq_len=64, name="hf", progress=False)
diffs = {}
for table, keys in (("first_token", ["layer", "head", "metric"]), ("gates", ["layer", "head", "group", "metric"]),
                    ("massive", ["layer", "site", "metric"])):
    both = getattr(hf, table).merge(getattr(tl, table), on=keys, suffixes=("_hf", "_tl"))
    diffs[table] = float((both.value_hf - both.value_tl).abs().max())
print("largest |HF - bridge| per table:", diffs)
assert diffs["first_token"] < 1e-5 and diffs["gates"] < 1e-5

# %% [markdown]
# ## Measure under an intervention
# Hooks you add to the bridge stay active while probe runs (`bridge.hooks(...)`, or
# `bridge.add_hook`). Here the last layer's gate is forced fully open (logits +30: sigmoid = 1),
# the ungated model's attention output: the gate scores become 1 and the gated output is no
# sparser than the ungated one.

# %%
last = max(probe.bridge.bridge_layout(bridge)[0].attention_layers)


def open_gate(logits, hook):
    return logits.new_full(logits.shape, 30.0)


with bridge.hooks(fwd_hooks=[(f"blocks.{last}.attn.hook_q_gate", open_gate)]):
    opened = probe.analyze(bridge, texts=[TEXT], seq_len=64, name="gate open", progress=False)
print("mean gate:", round(tl.summary["mean_gate"], 3), "->", round(opened.summary["mean_gate"], 3))
print("loss:", round(tl.summary["loss"], 4), "->", round(opened.summary["loss"], 4))
sp = opened.sparsity[(opened.sparsity.layer == last) & (opened.sparsity.threshold == 1e-2)]
display(sp.set_index("variant").value)

# %% [markdown]
# ## The paper's official checkpoints
# The released checkpoints pack `q_proj` per KV head ([all queries of the group | their gates]);
# TransformerLens reads it per query head ([query | gate]), as in Qwen3-Next. Under grouped-query
# attention it then computes wrong logits without any error, so probe refuses such a bridge.
# `probe.bridge.reorder_official_q_proj(model)` rewrites the rows into the per-head order first
# (the model's logits do not change), and `probe.bridge.build_bridge(checkpoint)` does all of it.

# %%
from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

OFFICIAL = build("headwise", WORK / "models" / "arm-headwise")
raw = probe.load(OFFICIAL).model
naive = build_bridge_from_module(raw, "Qwen3NextForCausalLM", hf_config=raw.config)
try:
    probe.analyze(naive, texts=[TEXT], seq_len=64)
except probe.ProbeError as err:
    print("refused:", err)

# %%
official = probe.bridge.build_bridge(OFFICIAL)          # reorders q_proj, then bridges
a_tl = probe.analyze(official, texts=[TEXT], seq_len=64, name="official (bridge)", progress=False)
a_hf = probe.analyze(OFFICIAL, texts=[TEXT], seq_len=64, name="official (HF)", progress=False)
for key in ("mean_gate", "f_attn", "m_act", "loss"):
    print(f"{key:10s} HF {a_hf.summary[key]:.6f}   bridge {a_tl.summary[key]:.6f}")
