"""The resume side of training: where the checkpoint of a run lies and its trainer state read
back (tensors and plain values only), the check that --resume keeps the recipe, and the
settings a run records in train_config.json."""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import torch

from ..core.errors import ProbeError
from .config import SPIKE_K, SPIKE_MIN_HISTORY, SPIKE_WINDOW, Shape, TrainConfig, siblings
from .prepare import python_version

CHECKPOINT = "checkpoint"
STATE_FILE = "trainer_state.pt"


def find_checkpoint(out: Path) -> Path | None:
    for folder in (out / CHECKPOINT, out / f".{CHECKPOINT}.old"):   # .old: crashed mid-rename
        if (folder / STATE_FILE).exists():
            return folder
    return None


def load_state(path: Path) -> dict:
    """trainer_state.pt as tensors and plain values only (weights_only=True): a file that needs
    more (a pickled object, which could run code while loading) is refused, never unpickled."""
    import pickle

    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise ProbeError(f"{path} holds more than tensors and plain values ({_first_line(err)[:120]}); "
                         "probe never unpickles objects from a checkpoint: resume only from one that "
                         "probe train wrote, or start again with --force") from None
    except Exception as err:              # truncated, garbage
        raise ProbeError(f"{path} is damaged ({_first_line(err)[:120]}); start again with --force") from None
    missing = [k for k in ("step", "recipe", "optimizer", "scheduler", "torch_rng")
               if not isinstance(state, dict) or k not in state]
    if missing:
        raise ProbeError(f"{path} is not a state probe train saved (it lacks {', '.join(missing)}); "
                         "start again with --force")
    return state


def _first_line(err: Exception) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__


def _last_eval(rows) -> float | None:
    evals = [r["eval_loss"] for r in rows if not math.isnan(r["eval_loss"])]
    return evals[-1] if evals else None


def _check_same_recipe(saved: dict, now: dict) -> None:
    # Checkpoints from before --no-qk-norm had QK-norm; from before --from, trained a new model.
    saved = {"qk_norm": True, "from_dir": None, "train_params": "all", **saved}
    # Where the folder lies does not change the result: a moved training folder resumes.
    saved, now = {k: v for k, v in saved.items() if k != "out"}, {k: v for k, v in now.items() if k != "out"}
    diff = {k: (saved.get(k), now.get(k)) for k in set(saved) | set(now) if saved.get(k) != now.get(k)}
    if diff:
        shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in sorted(diff.items()))
        raise ProbeError(f"--resume with different settings ({shown}); resume with the original ones")


def schedule_settings(cfg: TrainConfig, data) -> dict:
    """What every train_config.json records of the schedule: steps, tokens, evaluation, spikes."""
    return {
        "steps": cfg.steps, "warmup_steps": cfg.warmup_steps,
        "tokens_per_step": cfg.batch_size * cfg.seq_len,
        "epochs": round(cfg.steps * cfg.batch_size / len(data.train), 3),
        "eval_every": cfg.eval_interval, "save_every": cfg.save_interval,
        "spike_rule": f"train_loss > mean + {SPIKE_K:g} * std of the previous {SPIKE_WINDOW} steps "
                      f"(at least {SPIKE_MIN_HISTORY}); non-finite loss is always a spike",
    }


def environment_settings(data) -> dict:
    """What every train_config.json records of where it ran: the corpus, threads, versions."""
    import transformers

    return {
        "corpus": data.description,
        "threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": python_version()},
    }


def _settings(cfg: TrainConfig, shape: Shape, counts, data, n_params, command) -> dict:
    return {
        "command": command,
        "recipe": cfg.recipe(),
        **schedule_settings(cfg, data),
        "shape": asdict(shape),
        "qk_norm": cfg.qk_norm,
        "intermediate_size": {arm: counts_arm for arm, counts_arm in _intermediates(shape, cfg.arm).items()},
        "parameters": n_params, "parameters_by_arm": counts,
        **environment_settings(data),
    }


def _intermediates(shape: Shape, arm: str) -> dict:
    from .model import intermediate_size

    return {a: intermediate_size(a, shape) for a in siblings(arm)}

