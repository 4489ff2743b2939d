"""Will a pass fit in memory? Predicted from the config, checked before the model is loaded.

A forward pass at T tokens needs the weights, the logits (B x T x vocabulary: at T = 32768 and
SmolLM2's 49,152 tokens that alone is 6.4 GB in float32) and a few layers' activations at a
time. probe forms no T x T matrix (the attention kernel works in blocks), so the rest grows
linearly with T. A length the machine cannot hold is refused in one line that says what it
would need, instead of the kernel killing the process part way.

The constants are set from measured peaks (docs/long-context.md): the whole process's peak RSS
of context sweeps of the tiny trained arms, SmolLM2-135M and Gemma 3 270M (GGUF files, whose
dequantisation holds the weights twice while loading) lies below the prediction in each case.

How much is available: MemAvailable of /proc/meminfo, the cgroup's limit when it is lower, and
the environment variable PROBE_MEMORY_GB when set (a cap on a machine shared with others).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import ProbeError, flag

GiB = 1 << 30
ENV = "PROBE_MEMORY_GB"
# Bytes of float32 activations alive at once per token, in units of (hidden, MLP width, query
# heads x head dim): the residual stream and its norms, the MLP's three branches, q / k / v and
# the attention output, and the copies the hooks reduce (calibrated, see the module docstring).
HIDDEN_COPIES, MLP_COPIES, HEAD_COPIES = 14, 5, 8
RUNTIME = 0.8 * GiB                     # torch, transformers and the interpreter themselves


def parameter_count(config, cls=None) -> int:
    """Parameters of the model `config` builds, counted on the meta device (no memory used)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config) if cls is None else cls(config)
        return sum(p.numel() for p in model.parameters())
    except Exception:                   # an unusual class: the usual decoder's count
        c = _text(config)
        hidden, layers = c.hidden_size, c.num_hidden_layers
        inter = getattr(c, "intermediate_size", 4 * hidden)
        return layers * (4 * hidden * hidden + 3 * hidden * inter) + 2 * c.vocab_size * hidden


def _text(config):
    return getattr(config, "text_config", None) or config


def predict(config, *, batch: int, length: int, dtype_bytes: int = 4, params: int | None = None,
            logits_rows: int | None = None, weight_copies: int = 1) -> dict[str, int]:
    """Bytes a pass of `batch` x `length` tokens needs, by part. params None: weights not
    counted (they are loaded already); logits_rows: positions whose logits exist at once
    (None: all of them); weight_copies: 2 for a GGUF file, whose dequantisation holds the
    weights twice while loading."""
    c = _text(config)
    hidden = c.hidden_size
    inter = getattr(c, "intermediate_size", None) or 4 * hidden
    heads = c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    vocab = getattr(c, "vocab_size", None) or 0
    tokens = batch * length
    rows = tokens if logits_rows is None else min(tokens, logits_rows)
    parts = {
        "weights": (params or 0) * dtype_bytes * weight_copies,
        # Logits in the model's dtype, plus the float32 blocks the loss reads them in.
        "logits": rows * vocab * dtype_bytes,
        "activations": tokens * 4 * (HIDDEN_COPIES * hidden + MLP_COPIES * inter + HEAD_COPIES * heads * head_dim),
        "runtime": int(RUNTIME) if params else 0,
    }
    parts["total"] = sum(parts.values())
    return parts


def available() -> tuple[int, str]:
    """(bytes this process may still use, where that number comes from)."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "available memory"))
    except OSError:
        pass
    for limit, used in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),):
        try:
            top = Path(limit).read_text().strip()
            if top != "max":
                found.append((int(top) - int(Path(used).read_text()), "the cgroup's memory limit"))
        except (OSError, ValueError):
            pass
    cap = os.environ.get(ENV)
    if cap:
        try:
            found.append((int(float(cap) * GiB) - _rss(), f"{ENV}={cap}"))
        except ValueError:
            raise ProbeError(f"{ENV}={cap!r} is not a number of GiB; set it to e.g. 8") from None
    if not found:
        return (1 << 62), "no limit known"
    return min(found)


def _rss() -> int:
    """This process's resident memory now (the cap counts what it already holds)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def check(config, *, batch: int, length: int, dtype_bytes: int, params: int | None,
          logits_rows: int | None = None, weight_copies: int = 1, when: str = "") -> dict[str, int]:
    """ProbeError when the predicted need exceeds what is available; else the prediction."""
    need = predict(config, batch=batch, length=length, dtype_bytes=dtype_bytes, params=params,
                   logits_rows=logits_rows, weight_copies=weight_copies)
    free, where = available()
    if need["total"] > free:
        detail = ", ".join(f"{k} {gib(v)}" for k, v in need.items() if k != "total" and v >= 0.05 * GiB)
        lower = (f"lower {flag('seq_len')}" + (f" or {flag('batch_size')}" if batch > 1 else ""))
        rows = "one sequence" if batch == 1 else f"{batch} sequences"
        raise ProbeError(f"{rows} of {length:,} tokens per pass would need about {gib(need['total'])} "
                         f"({detail}) but {gib(max(free, 0))} is free ({where}){when}; {lower}, "
                         f"or free memory")
    return need
