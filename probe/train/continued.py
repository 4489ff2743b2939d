"""Continued training of a pretrained checkpoint (`probe train --from DIR --train gates|all`).

The model comes from DIR (a `probe graft` folder, any checkpoint folder probe loads, or a GGUF
file, dequantised to float32) instead of being built from a shape; the data are tokenised with
its own tokenizer. Everything else is the loop of loop.py: the same schedule, log, checkpoints,
--resume and determinism.

--train gates: only the grafted gate projections (`self_attn.gate_proj`) have requires_grad, so
autograd computes no weight gradient for the frozen base at all (it still back-propagates
through the base's activations to reach earlier layers' gates), and AdamW never sees the base:
its weights stay bit for bit what they were (frozen_digest() before and after, recorded in
train_config.json).
"""
from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import torch

from ..core.errors import ProbeError

TRAINABLE = ("gates", "all")
GATE_PARAMETER = ".self_attn.gate_proj."


def is_gate_parameter(name: str) -> bool:
    return GATE_PARAMETER in f".{name}"


def load_source(cfg):
    """(model, tokenizer) from cfg.from_dir, float32, ready to train (SDPA, train mode)."""
    from ..load.loader import load

    loaded = load(cfg.from_dir, dtype="float32")
    if loaded.tokenizer is None:
        raise ProbeError(f"--from {cfg.from_dir} has no tokenizer; continued training tokenises the "
                         "data with the model's own tokenizer")
    model = trainable_copy(loaded.model)
    model.config._attn_implementation = "sdpa"
    model.set_attn_implementation("sdpa")
    freeze(model, cfg.train_params)
    model.train()
    return model, loaded.tokenizer


def check_positions(model, seq_len: int, from_dir) -> None:
    """A training row longer than the model's positions would train positions it never had."""
    from ..families.registry import text_config

    config = text_config(model.config)
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if isinstance(positions, int) and 0 < positions < seq_len:
        raise ProbeError(f"--seq-len {seq_len} is longer than the {positions} positions of --from {from_dir}; "
                         f"train with --seq-len {positions} or less")


@torch.no_grad()
def weights_digest(model) -> str:
    """SHA-256 of every parameter's name and bytes, in name order: the weights a --from run
    starts from, recorded in its checkpoint and compared on --resume (check_same_source)."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
        h.update(name.encode())
        h.update(p.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def check_same_source(saved, now: str, from_dir) -> None:
    """--resume of a --from run continues only from the weights it started from: a checkpoint
    whose record differs (DIR's weights changed) or holds none is refused in one line."""
    if saved == now:
        return
    if not isinstance(saved, str):
        raise ProbeError(f"the checkpoint does not record which weights of --from {from_dir} it started from "
                         "(written by an older probe); start again with --force")
    raise ProbeError(f"the weights of --from {from_dir} changed since this run started from them; resuming "
                     "would train one model on two bases: put the original weights back, or start again "
                     "with --force")


def trainable_copy(model):
    """A GGUF-loaded model cannot be saved (transformers refuses 'quantized with gguf' models):
    rebuild it from its config without quantization_config and copy the dequantised weights."""
    if getattr(model.config, "quantization_config", None) is None and getattr(model, "hf_quantizer", None) is None:
        return model
    config = copy.deepcopy(model.config)
    del config.quantization_config
    plain = type(model)(config).to(torch.float32)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise ProbeError(f"cannot copy the weights of {type(model).__name__} for training "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    return plain


def freeze(model, train_params: str) -> None:
    if train_params not in TRAINABLE:
        raise ProbeError(f"unknown --train {train_params!r}; use gates or all")
    if train_params == "all":
        model.requires_grad_(True)
        return
    gates = 0
    for name, p in model.named_parameters():
        p.requires_grad_(is_gate_parameter(name))
        gates += p.numel() if p.requires_grad else 0
    if not gates:
        raise ProbeError("--train gates needs a model with grafted gates (self_attn.gate_proj); this one "
                         "has none: graft one with probe graft, or train all weights with --train all")


def parameter_counts(model) -> dict:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return {"trainable": trainable, "frozen": total - trainable, "total": total}


@torch.no_grad()
def frozen_digest(model) -> str | None:
    """SHA-256 of every frozen parameter's bytes, in name order; None when nothing is frozen."""
    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    if not frozen:
        return None
    h = hashlib.sha256()
    for name, p in sorted(frozen, key=lambda item: item[0]):
        h.update(name.encode())
        h.update(p.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def settings(cfg, model, data, counts: dict, command, digest: str | None) -> dict:
    """train_config.json of a continued run (the tiny-arm settings' shape fields do not apply)."""
    from .state import environment_settings, schedule_settings

    config = model.config
    return {
        "command": command,
        "recipe": cfg.recipe(),
        "from": str(Path(cfg.from_dir)), "model_type": config.model_type,
        "graft": getattr(config, "graft", None), "train": cfg.train_params,
        **schedule_settings(cfg, data),
        "parameters": counts["trainable"], "parameter_counts": counts,
        "frozen_digest_start": digest,
        **environment_settings(data),
    }
