"""The training loop: AdamW steps with gradient clipping, a per-step log, held-out evaluation,
loss-spike flags and resumable checkpoints.

Reproducibility: the model is initialised from `torch.manual_seed(seed)`; the order of the
training rows is a fixed function of (seed, epoch) (a fresh permutation per epoch, no iterator
state); the checkpoint holds the weights, AdamW's moments, the scheduler and torch's RNG state.
On the same machine with the same thread count, a run that is interrupted and resumed with
`--resume` ends with bit-identical weights to one that ran straight through (tested).

The pieces it runs: prepare.py (data and tokenizer), schedule.py (lr, optimizer, row order),
log.py (training.csv, the spike rule, the held-out loss), state.py (finding and reading a
checkpoint back for --resume, the recipe check, the settings train_config.json records).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.atomic import check_writable, describe_os_error, shared_mode, write_text, write_torch
from ..core.errors import ProbeError
from ..load.loader import quiet_transformers
from ..core.owned import check_out_name, check_replaceable, mark
from .config import TrainConfig, siblings
from . import continued
from .log import heldout_loss, is_spike, read_log, write_log
from .model import build_model, check_matched, count_parameters, model_config
from .prepare import Prepared, prepare_data
from .schedule import batch_indices, make_optimizer
from .state import (CHECKPOINT, STATE_FILE, _check_same_recipe, _first_line, _last_eval, _settings,
                    find_checkpoint, load_state)


# ------------------------------------------------------------------------------- checkpoints

def save_model(model, tokenizer, folder: Path) -> None:
    with quiet_transformers():              # save_pretrained's per-shard bar, at every checkpoint
        model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    for weights in Path(folder).glob("*.safetensors"):     # safetensors writes them 0600
        shared_mode(weights, folder=False)
    _fix_architectures(folder)
    # A tokenizer loaded back from a checkpoint (on --resume) saves where it was loaded from;
    # drop that, so a resumed run writes the same files as a straight one.
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    if [config.pop(key) for key in ("is_local", "local_files_only") if key in config]:
        write_text(path, json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _fix_architectures(folder: Path) -> None:
    """save_pretrained writes the class name; the released configs say Qwen3ForCausalLM (and a
    causal LM saved from a released Qwen3.5 says Qwen3_5ForCausalLM, gated or not)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    released = {"qwen3": "Qwen3ForCausalLM", "qwen3_5_text": "Qwen3_5ForCausalLM"}.get(config.get("model_type"))
    if released is None:                            # continued training of another family
        return
    config["architectures"] = [released]
    write_text(path, json.dumps(config, indent=2, sort_keys=True) + "\n")


def save_checkpoint(out: Path, model, tokenizer, opt, sched, step: int, rows, cfg: TrainConfig,
                    sessions: list[dict] = (), from_digest: str | None = None) -> None:
    """Write out/checkpoint/ as one unit: a temporary folder, then renames."""
    tmp, final, old = out / f".{CHECKPOINT}.tmp", out / CHECKPOINT, out / f".{CHECKPOINT}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, tokenizer, tmp)
    write_torch(tmp / STATE_FILE, {"step": step, "recipe": cfg.recipe(), "optimizer": opt.state_dict(),
                                   "scheduler": sched.state_dict(), "torch_rng": torch.get_rng_state(),
                                   "sessions": list(sessions),
                                   # --from: the SHA-256 of the weights it started from (continued.py)
                                   **({"from_digest": from_digest} if from_digest else {})})
    write_log(rows, tmp / "training.csv")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)



# ------------------------------------------------------------------------------- the run

@dataclass
class TrainResult:
    out: Path
    steps: int
    finished: bool
    final_eval_loss: float | None
    parameters: int
    seconds: float
    log: list[dict] = field(default_factory=list)
    seconds_per_step: float | None = None   # this session's training time per step (evaluation included)


class _WriteFailed(Exception):
    """Writing into --out failed (a full disk, a read-only folder): train() says so in one line."""


@contextmanager
def _writing():
    """Turn what a failed write raises (OSError; safetensors' error; torch's RuntimeError from its
    zip writer) into _WriteFailed, so that train() can clean up and explain."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError, RuntimeError) as err:
        raise _WriteFailed(err) from None


def check_out(cfg: TrainConfig) -> Path:
    """The checks on --out that write nothing: a folder of its own, writable, and apart from the
    --from checkpoint whichever flag is given (training writes its model into --out: it would
    replace, or with --force delete, the weights it trains from)."""
    from ..core.owned import check_inputs_apart

    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ProbeError(f"--out {out} is a file")
    check_out_name(out)
    if cfg.from_dir:
        check_inputs_apart(out, {"checkpoint": cfg.from_dir})
    check_writable(out)
    return out


def prepare_out(cfg: TrainConfig) -> Path:
    out = check_out(cfg)
    if cfg.resume:
        return out
    if out.exists() and any(out.iterdir()):
        if not cfg.force:
            raise ProbeError(f"{out} already exists and is not empty; pass --resume to continue an "
                             "interrupted run or --force to start again")
        check_replaceable(out, {"data": list(cfg.data)})      # only a train folder, never the data
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    mark(out, "train")
    return out


def train(cfg: TrainConfig, prepared: Prepared | None = None, command: str | None = None,
          on_checkpoint=None) -> TrainResult:
    """Train one arm into cfg.out; returns when done or when stop_after is reached.

    on_checkpoint(step, model): called after every checkpoint and at the end (e.g. to measure
    the model at each saved step); its time is not counted as training time.

    When writing into --out fails, a fresh run removes what it wrote (nothing is left that a
    rerun would trip over); a run with a checkpoint keeps that checkpoint for --resume."""
    out = Path(cfg.out)
    try:
        return _train(cfg, prepared, command, on_checkpoint)
    except _WriteFailed as failed:
        err = failed.args[0]
        reason = describe_os_error(err) if isinstance(err, OSError) else _first_line(err)
        shutil.rmtree(out / f".{CHECKPOINT}.tmp", ignore_errors=True)
        kept = find_checkpoint(out) if out.is_dir() else None
        if kept is None and not cfg.resume:
            shutil.rmtree(out, ignore_errors=True)
            then = "nothing was kept: free space or choose another --out, then run it again"
        elif kept is not None:
            then = "the last checkpoint is kept: free space, then continue with --resume"
        else:
            then = "free space, then run it again"
        raise ProbeError(f"could not write {out} ({reason}); {then}") from None



def _train(cfg: TrainConfig, prepared: Prepared | None, command: str | None, on_checkpoint=None) -> TrainResult:
    cfg.check()
    check_out(cfg)
    source_model, from_digest = None, None
    if cfg.from_dir:
        # Loaded and checked before --out is touched: a refused --from leaves nothing behind.
        torch.manual_seed(cfg.seed)
        source_model = continued.load_source(cfg)
        continued.check_positions(source_model[0], cfg.seq_len, cfg.from_dir)
        from_digest = continued.weights_digest(source_model[0])
    with _writing():
        out = prepare_out(cfg)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    ckpt = find_checkpoint(out) if cfg.resume else None
    if cfg.resume and ckpt is None:
        if (out / "training.csv").exists() and (out / "config.json").exists():
            print(f"probe train: {out} has already finished; nothing to resume")
            rows = read_log(out / "training.csv")
            done = json.loads((out / "train_config.json").read_text())
            return TrainResult(out, rows[-1]["step"] if rows else 0, True, _last_eval(rows),
                               done.get("parameters", 0), 0.0, rows)
        raise ProbeError(f"{out} holds no checkpoint to resume; start without --resume")
    state = None
    if ckpt is not None:
        state = load_state(ckpt / STATE_FILE)
        _check_same_recipe(state["recipe"], cfg.recipe())
        if cfg.from_dir:
            continued.check_same_source(state.get("from_digest"), from_digest, cfg.from_dir)
        from transformers import AutoTokenizer

        if prepared is None:                # a caller that resumes several times passes its data
            prepared = prepare_data(cfg, AutoTokenizer.from_pretrained(str(ckpt)))
    source = None
    if cfg.from_dir:
        model, source_tokenizer = source_model
        if prepared is None:
            prepared = prepare_data(cfg, source_tokenizer)
    elif prepared is None:
        prepared = prepare_data(cfg)
    tokenizer, data = prepared.tokenizer, prepared.corpus

    if cfg.from_dir:
        counts = continued.parameter_counts(model)
        n_params = counts["trainable"]
    else:
        shape = cfg.shape(len(tokenizer))
        counts = check_matched(shape, siblings(cfg.arm))
        config = model_config(cfg.arm, shape, bos_token_id=tokenizer.bos_token_id,
                              eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        model = build_model(config, cfg.seed)
        config._attn_implementation = "sdpa"
        model.set_attn_implementation("sdpa")
        model.train()
        n_params = count_parameters(model)
        if n_params != counts[cfg.arm]:
            raise AssertionError(f"built {n_params} parameters, expected {counts[cfg.arm]}")
    opt, sched = make_optimizer(model, cfg)

    start_step, rows, sessions = 0, [], []
    if state is not None:
        from safetensors.torch import load_file

        weights = load_file(str(ckpt / "model.safetensors"))
        missing, unexpected = model.load_state_dict(weights, strict=False)
        if unexpected or [k for k in missing if k != "lm_head.weight"]:
            raise ProbeError(f"the checkpoint in {ckpt} does not fit this model "
                             f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        start_step = state["step"]
        rows = read_log(ckpt / "training.csv")[:start_step]
        sessions = state.get("sessions", [])

    name = cfg.name or out.name
    if cfg.from_dir:
        source = continued.frozen_digest(model)
        settings = continued.settings(cfg, model, data, counts, command, source)
    else:
        settings = _settings(cfg, shape, counts, data, n_params, command)
    with _writing():
        write_text(out / "train_config.json", json.dumps(settings, indent=2) + "\n")
        if start_step == 0:
            data.write_heldout(out)

    total = cfg.steps
    stop = min(total, cfg.stop_after) if cfg.stop_after else total
    eval_rows = data.heldout[: cfg.eval_rows]
    history = [r["train_loss"] for r in rows]
    tokens_per_step = cfg.batch_size * cfg.seq_len
    from ..core.progress import bar as progress_bar

    bar = progress_bar(total=total, initial=start_step, desc=f"train {name}", unit="step",
                       disable=not cfg.progress, dynamic_ncols=True)
    t0 = time.time()
    paused = [0.0]                          # seconds spent in on_checkpoint, not training

    def session(to_step: int) -> list[dict]:
        """Every command that trained this model so far, with the steps it ran (provenance)."""
        return sessions + [{"command": command, "from_step": start_step, "to_step": to_step,
                            "seconds": round(time.time() - t0 - paused[0], 1),
                            "threads": torch.get_num_threads()}]

    def checkpoint_done(step: int) -> None:
        if on_checkpoint is not None:
            t, rng = time.time(), torch.get_rng_state()   # a measurement may seed torch: keep the run's
            model.eval()
            on_checkpoint(step, model)
            model.train()
            torch.set_rng_state(rng)
            paused[0] += time.time() - t

    last_eval = rows[-1]["eval_loss"] if rows else math.nan
    try:
        for step in range(start_step, stop):
            ids = data.train[batch_indices(step, len(data.train), cfg.batch_size, cfg.seed)]
            lr = opt.param_groups[0]["lr"]
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
            opt.step()
            sched.step()
            done = step + 1
            train_loss = loss.item()
            eval_loss = math.nan
            evaluated = done % cfg.eval_interval == 0 or done == total
            if evaluated:
                eval_loss = last_eval = heldout_loss(model, eval_rows, cfg.batch_size)
            rows.append({"model": name, "step": done, "tokens": done * tokens_per_step, "lr": lr,
                         "train_loss": train_loss, "eval_loss": eval_loss, "grad_norm": grad_norm,
                         "spike": is_spike(train_loss, history)})
            history.append(train_loss)
            check_not_diverged(cfg, out, model, done, train_loss, eval_loss if evaluated else None,
                               weights=done == stop or done % cfg.save_interval == 0)
            bar.update(1)
            bar.set_postfix(loss=f"{train_loss:.3f}", eval=f"{last_eval:.3f}", refresh=False)
            # The last step of a stopped session is saved once, after the loop.
            if done % cfg.save_interval == 0 and done < stop:
                with _writing():
                    save_checkpoint(out, model, tokenizer, opt, sched, done, rows, cfg, session(done),
                                    from_digest)
                checkpoint_done(done)
    finally:
        bar.close()
    seconds = time.time() - t0 - paused[0]
    per_step = seconds / (stop - start_step) if stop > start_step else None
    if source is not None and continued.frozen_digest(model) != source:
        raise AssertionError("a frozen parameter changed during --train gates")

    if stop < total:
        with _writing():
            save_checkpoint(out, model, tokenizer, opt, sched, stop, rows, cfg, session(stop), from_digest)
            write_log(rows, out / "training.csv")
        checkpoint_done(stop)
        return TrainResult(out, stop, False, _last_eval(rows), n_params, seconds, rows, per_step)

    with _writing():
        save_model(model, tokenizer, out)
        write_log(rows, out / "training.csv")
    settings["result"] = {"steps": total, "tokens": total * tokens_per_step,
                          "final_eval_loss": _last_eval(rows), "final_train_loss": rows[-1]["train_loss"],
                          "spikes": sum(r["spike"] for r in rows),
                          "seconds": round(sum(s["seconds"] for s in session(total)), 1)}
    if source is not None:
        settings["result"]["frozen_digest_end"] = continued.frozen_digest(model)
    settings["sessions"] = session(total)
    with _writing():
        write_text(out / "train_config.json", json.dumps(settings, indent=2) + "\n")
    if not cfg.keep_checkpoint:
        shutil.rmtree(out / CHECKPOINT, ignore_errors=True)
        shutil.rmtree(out / f".{CHECKPOINT}.old", ignore_errors=True)
    checkpoint_done(total)
    return TrainResult(out, total, True, _last_eval(rows), n_params, seconds, rows, per_step)


def check_not_diverged(cfg: TrainConfig, out: Path, model, step: int, train_loss: float,
                       eval_loss: float | None, *, weights: bool) -> None:
    """A non-finite loss or weight means the run diverged (e.g. --lr too high): stop with one
    line instead of saving a NaN model and saying "done". A fresh run leaves nothing in --out,
    so the corrected command starts cleanly; a resumed run keeps its last good checkpoint."""
    bad = None
    if not math.isfinite(train_loss):
        bad = f"the train loss is {train_loss}"
    elif eval_loss is not None and not math.isfinite(eval_loss):
        bad = f"the held-out loss is {eval_loss}"
    elif weights and not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
        bad = "the weights hold NaN or Inf"
    if bad is None:
        return
    if not cfg.resume:
        shutil.rmtree(out, ignore_errors=True)
    kept = "its last checkpoint is kept" if cfg.resume else "nothing was kept"
    raise ProbeError(f"training diverged at step {step} ({bad}); {kept}: lower --lr "
                     f"(now {cfg.lr:g}) and start again")
