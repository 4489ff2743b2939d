"""Model kinds and sample text shared by the tests (import this, never conftest)."""

GATED = ("qwen3_next", "qwen3_5", "official_headwise", "official_elementwise")
BASELINES = ("qwen3", "qwen2", "llama", "mistral", "gpt2")

TEXT = ("The gate decides how much of each head's output passes to the next layer. "
        "Attention sinks put most of the probability on the first token; a gate can close "
        "instead. 0123456789 !?;: (brackets) [and] {braces}. ") * 6
