"""gpt-oss: learned attention sinks; no gate.

Each head has a learned logit s_h that joins every softmax as one more, value-less key:
transformers passes the sinks (H,) to the attention back-end as the `s_aux` keyword, and probe
folds them into the log-sum-exp (attention.add_sink), so F-Attn is the share key 0 keeps after
the sink took its part, as the model computes it. Layers alternate between sliding-window and
full attention (attention.layer_window), and the MLP is a mixture of experts.

gpt-oss is not in the registry: its layout shows no gate (unregistered.py), so it is analysed
as ungated, with a note saying why (or declare `gate="none"` / `--gate none`).
"""
from __future__ import annotations


def sinks(attention_kwargs: dict):
    """The per-head sink logits (H,) transformers hands the attention back-end; None without."""
    return attention_kwargs.get("s_aux")
