"""gpt-oss: learned attention sinks; no gate.

Each head has a learned logit s_h that joins every softmax as one more, value-less key:
transformers passes the sinks (H,) to the attention back-end as the `s_aux` keyword, and probe
folds them into the log-sum-exp (attention.add_sink), so F-Attn is the share key 0 keeps after
the sink took its part, as the model computes it. Layers alternate between sliding-window and
full attention (attention.layer_window), and the MLP is a mixture of experts.
"""
from __future__ import annotations

MODEL_TYPES = ("gpt_oss",)
NOTE = "gpt-oss: learned per-head attention sinks, folded into the attention's log-sum-exp"


def sinks(attention_kwargs: dict):
    """The per-head sink logits (H,) transformers hands the attention back-end; None without."""
    return attention_kwargs.get("s_aux")
