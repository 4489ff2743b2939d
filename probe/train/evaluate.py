"""What a trained arm costs and how it does off its training length.

`inference_table(model_dir, heldout_stream, ...)` returns the tidy rows of `inference.csv`
(columns `model, metric, length, value`), which `examples/demo.py` writes into each run
directory next to the `probe compare` tables:

  eval_loss            held-out next-token loss of rows of `length` tokens (BOS first when the
                       model was trained with one); lengths below, at and beyond the training
                       length (beyond it RoPE extrapolates)
  prefill_ms           one forward pass over a prompt of `length` tokens, batch 1, best of
                       `repeats` (the minimum: on a shared machine the other rounds measure the
                       neighbours, not the model)
  decode_ms_per_token  greedy decoding with the KV cache after that prompt, per token, best of
                       `repeats`
  kv_cache_mb          the KV cache after prefill plus decoding, measured from the cache tensors
  param_mb             parameter memory
  peak_mem_mb          peak accelerator memory of prefill + decode (CUDA only; not measurable
                       per call on CPU, so absent there)
"""
from __future__ import annotations

import inspect
import math
import time

import torch

from .corpus import pack


@torch.no_grad()
def length_losses(model, stream: torch.Tensor, lengths, bos_id: int | None,
                  budget_tokens: int = 8192, batch_size: int = 8) -> dict[int, float]:
    """Held-out loss per row length, each over about `budget_tokens` tokens of the same stream."""
    model.eval()
    result = {}
    for length in lengths:
        rows = pack(stream, length, bos_id)
        rows = rows[: max(1, budget_tokens // length)]
        if len(rows) == 0:
            continue
        total, count = 0.0, 0
        for start in range(0, len(rows), batch_size):
            ids = rows[start:start + batch_size]
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            n = ids.numel() - ids.shape[0]
            total, count = total + float(loss) * n, count + n
        result[length] = total / count
    return result


@torch.no_grad()
def latency(model, prompt_len: int, new_tokens: int = 32, repeats: int = 5,
            vocab: int | None = None) -> dict[str, float]:
    """Prefill and per-token decode time (ms, best of `repeats`) and memory, batch 1.

    Timed on one CPU thread: at this size several threads spend more time synchronising than
    computing, and on a shared machine their barriers stalled some runs 50x (seen here).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _latency(model, prompt_len, new_tokens, repeats, vocab)
    finally:
        torch.set_num_threads(threads)


def _latency(model, prompt_len, new_tokens, repeats, vocab) -> dict[str, float]:
    from transformers import DynamicCache

    model.eval()
    dev = next(model.parameters()).device
    vocab = vocab or model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (1, prompt_len), generator=gen).to(dev)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    prefill, decode, cache = [], [], None
    # transformers renamed the forward's past_key_values to cache (and warns on the old name).
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    for rep in range(repeats + 1):                      # the first round warms up
        cache = DynamicCache(config=model.config)
        sync()
        t = time.perf_counter()
        out = model(input_ids=prompt, use_cache=True, **{cache_arg: cache})
        sync()
        t_prefill = time.perf_counter() - t
        token = out.logits[:, -1:].argmax(-1)
        t = time.perf_counter()
        for _ in range(new_tokens):
            out = model(input_ids=token, use_cache=True, **{cache_arg: cache})
            token = out.logits[:, -1:].argmax(-1)
        sync()
        t_decode = (time.perf_counter() - t) / new_tokens
        if rep:
            prefill.append(t_prefill)
            decode.append(t_decode)
    result = {"prefill_ms": 1e3 * min(prefill),
              "decode_ms_per_token": 1e3 * min(decode),
              "kv_cache_mb": _cache_bytes(cache) / 2**20,
              "param_mb": sum(p.numel() * p.element_size()
                              for p in {id(p): p for p in model.parameters()}.values()) / 2**20}
    if cuda:
        result["peak_mem_mb"] = torch.cuda.max_memory_allocated(dev) / 2**20
    return result


def _cache_bytes(cache) -> int:
    """What the cache holds: keys and values of softmax layers, and a linear-attention (GDN)
    layer's fixed-size conv and recurrent states (dicts of tensors in transformers' cache)."""
    total = 0
    for layer in getattr(cache, "layers", []):
        tensors = [getattr(layer, name, None) for name in ("keys", "values")]
        for name in ("conv_states", "recurrent_states"):
            states = getattr(layer, name, None)
            tensors += list(states.values()) if isinstance(states, dict) else [states]
        total += sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return total


def inference_table(model_dir, heldout_stream: torch.Tensor, *, name: str, train_len: int,
                    bos_id: int | None, lengths=None, latency_len: int | None = None,
                    new_tokens: int = 32, repeats: int = 5) -> list[dict]:
    """The rows of inference.csv for one trained checkpoint directory."""
    from ..load.loader import load

    loaded = load(model_dir)
    model = loaded.model
    lengths = lengths or sorted({16, 64, train_len, 2 * train_len, 4 * train_len})
    rows = [{"model": name, "metric": "eval_loss", "length": n, "value": v}
            for n, v in length_losses(model, heldout_stream, lengths, bos_id).items()]
    prompt = latency_len or train_len
    for metric, value in latency(model, prompt, new_tokens, repeats).items():
        rows.append({"model": name, "metric": metric, "length": prompt, "value": value})
    rows.append({"model": name, "metric": "threads", "length": prompt,
                 "value": 1.0})                      # latency() times on one thread
    return [r for r in rows if r["value"] is not None and not (isinstance(r["value"], float)
                                                              and math.isnan(r["value"]))]
