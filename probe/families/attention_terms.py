"""What the families hand the attention back-end beyond query, key, value and mask.

transformers passes them as keyword arguments of its attention interface; the kernel
(probe/capture/attention.py) asks here instead of naming a family, and each family module says what
its keyword means:

    softcap   Gemma 2: the scaled scores become softcap * tanh(s / softcap)      (gemma.py)
    sinks     gpt-oss: (H,) one more value-less logit per head in every softmax  (gpt_oss.py)
"""
from __future__ import annotations

from . import gemma, gpt_oss


def softmax_terms(attention_kwargs: dict) -> tuple:
    """(softcap: float or None, sinks: (H,) tensor or None) of one attention call."""
    return gemma.softcap(attention_kwargs), gpt_oss.sinks(attention_kwargs)
