"""Per-family knowledge: which model types probe supports, where their gates live, which class
loads them (registry.py), and what a family needs beyond that, one module each: official.py
(the paper's checkpoints: detect, class, reorder), qwen_next.py, gemma.py, gpt_oss.py; and
attention_terms.py, what they hand the attention back-end (which asks there, naming no family).
Native model code (official_qwen3.py, grafted_llama.py), GateSpec (gates.py), probe graft.

This init imports nothing: families.autoregister runs at `import probe`."""
