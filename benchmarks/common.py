"""Shared pieces of the benchmarks: the tiny model, one child process per measurement, peak RSS.

Every measurement runs in its own process, niced, under a wall-clock
timeout and an address-space cap (RLIMIT_AS), so that a peer that would need 34 GB for one T x T
tensor fails alone with "out of memory" instead of taking a shared machine down.
"""
from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

VOCAB = 1024
MODEL = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=2, head_dim=32,
             max_position_embeddings=65536)
MODEL_TEXT = "tiny Qwen3: hidden 256, 4 layers, 8 query heads, 2 KV heads (GQA), head_dim 32, vocab 1024"


def build_model(attn: str = "sdpa", dtype: str = "float32", **overrides):
    """The tiny model, seeded; `overrides` change MODEL's entries (overhead.py: no GQA)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(**{**MODEL, **overrides}, attn_implementation=attn)
    model = Qwen3ForCausalLM(config).eval()
    return model.to(getattr(torch, dtype))


def token_ids(T: int, seed: int = 0):
    import torch

    return torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(seed))


def status_mb(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM) in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def timed(fn, repeat: int) -> tuple[float, float]:
    """(best CPU seconds, peak RSS added in MB over the resident size before the calls): clocks()."""
    c = clocks(fn, repeat)
    return c["seconds"], c["peak_mb"]


def clocks(fn, repeat: int) -> dict:
    """Best CPU seconds ("seconds"), the wall seconds of that same call ("wall_seconds") and the
    peak RSS added in MB over the resident size before the calls ("peak_mb").

    CPU time of the process (its one thread): on a shared machine a niced process waits for
    the CPU, which inflates wall time at random; the wall time is kept beside it to show how much.
    The kernel's high-water mark is reset first (/proc/self/clear_refs), so an earlier, higher
    peak (loading or dequantising the model, a warm-up) cannot hide the calls' own."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    base = status_mb("VmRSS")
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        fn()
        best = min(best, (time.process_time() - cpu, time.perf_counter() - wall))
    return {"seconds": best[0], "wall_seconds": best[1], "peak_mb": status_mb("VmHWM") - base}


# glibc raises its mmap threshold as large blocks are freed, after which freed tensors stay in
# the heap and where a peak lands depends on the heap's history (the same pass read 400 or
# 650 MB). With the threshold fixed, every large tensor is mapped and unmapped, so the peak
# resident size is the peak of live memory: what memory children run under.
STEADY_HEAP = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}


def run_child(script: str, args: dict, timeout: float, memory_gb: float | None, *, steady_heap: bool = False) -> dict:
    """Run `script --child JSON` in a niced process with an address-space cap (None: none, for
    CUDA, which maps far more address space than it uses); its last stdout line is a JSON
    object. Failures come back as {"error": why}. steady_heap: run under STEADY_HEAP, for a
    child that measures peak memory."""
    cap = None if memory_gb is None else int(memory_gb * 2 ** 30)

    def limits():
        os.nice(10)
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    cmd = [sys.executable, script, "--child", json.dumps(args)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **(STEADY_HEAP if steady_heap else {}))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=limits, env=env)
    except subprocess.TimeoutExpired:
        return {**args, "error": f"did not finish in {timeout:.0f} s"}
    if out.returncode != 0:
        err = out.stderr.strip()
        if out.returncode in (-9, 137) or "can't allocate memory" in err or "MemoryError" in err \
                or "std::bad_alloc" in err:
            return {**args, "error": f"out of memory (cap {memory_gb:g} GB)"}
        return {**args, "error": (err.splitlines() or [f"exit {out.returncode}"])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_args() -> dict | None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return json.loads(sys.argv[2])
    return None
