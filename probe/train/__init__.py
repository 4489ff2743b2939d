"""`probe train`: a small controlled pretraining experiment with three matched arms (and a
matched pair of Qwen3.5-layout hybrids, hybrid.py).

    probe train --arm all --tokens 2M --out runs/demo   # no gate, headwise, elementwise
    probe train --arm hybrids --out runs/demo           # hybrid-none, hybrid-gated (3 GDN : 1 softmax)
    probe compare runs/demo/none runs/demo/headwise runs/demo/elementwise \\
        --data runs/demo/none/heldout.txt --seq-len 128 --out runs/demo/compare

`--data synthetic:noise-copy-marked` (or `synthetic:noise-copy`) trains on noise rows and copy
rows instead of text (synthetic.py); the held-out rows are written as token ids (heldout.npy).

Each arm is a Qwen3-layout decoder saved like the paper's official checkpoints (model_type
qwen3 plus the gate flag), so `probe analyze` reads it like any released checkpoint.
See docs/training.md.
"""
from .config import ARMS, TrainConfig

__all__ = ["ARMS", "Shape", "TrainConfig", "TrainResult", "build_model", "check_matched",
           "count_parameters", "model_config", "prepare_data", "train"]

_LAZY = {"TrainResult": "loop", "prepare_data": "loop", "train": "loop", "Shape": "model",
         "build_model": "model", "check_matched": "model", "count_parameters": "model",
         "model_config": "model"}


def __getattr__(name):
    # The model and loop modules import transformers; `probe --help` should not wait for it.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
