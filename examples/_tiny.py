"""Tiny random checkpoints for the examples, built from configs and saved like real ones.

No downloads: every example builds the models it analyses here, in seconds, and saves them
with `save_pretrained` (plus a small tokenizer), so probe loads them exactly as it loads a
checkpoint of yours. Their weights are random: the numbers show what probe measures, not what a
gate does to a trained model (for that, see `probe train` / `make demo`).

    build("qwen3_next", path)     gated, Qwen3-Next layout: 3 Gated DeltaNet layers + 1 attention layer
    build("none" | "headwise" | "elementwise", path)
                                  matched arms in the paper's official checkpoint layout
                                  (probe.train.model), 4 softmax-attention layers each
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

TEXT = """\
Attention lets every token read from the tokens before it. A softmax must put its weight
somewhere, so a head with nothing useful to read often parks its attention on the first token
of the sequence: an attention sink. Large language models also grow a few massive activations,
values hundreds of times larger than the rest of the residual stream, on those same tokens.
The gated attention paper adds a sigmoid gate after scaled dot-product attention. Each head's
output is multiplied by a score between zero and one that depends on the query token, so a
head can close instead of dumping its weight on the first token. The authors report that the
gate makes the attention output sparse, removes the sink and the massive activations, and
lowers the loss. Qwen3-Next and Qwen3.5 ship this gate in every full-attention layer.
probe measures the gate scores, the attention on the first token, the largest activations of
each layer and the sparsity of the attention output, with and without the gate, so that such
claims can be checked on a model of your own.
"""
VOCAB = 256
SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=2048)
INIT_STD = 0.2   # at the usual 0.02 a random 64-wide model attends almost uniformly


def workdir() -> Path:
    """Where the examples write models, runs and figures: $PROBE_EXAMPLES_DIR or a temp folder."""
    path = Path(os.environ.get("PROBE_EXAMPLES_DIR") or Path(tempfile.gettempdir()) / "probe-examples")
    path.mkdir(parents=True, exist_ok=True)
    return path


def tokenizer():
    """A byte-level BPE of 256 tokens trained on TEXT; no BOS token, like Qwen's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # Every printable ASCII character (as byte-level symbols), so any ASCII text encodes.
    ascii_text = "".join(map(chr, range(32, 127))) + "\n"
    alphabet = sorted({c for piece, _ in tok.pre_tokenizer.pre_tokenize_str(ascii_text) for c in piece})
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=alphabet)
    tok.train_from_iterator([TEXT] * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def build(kind: str, path, seed: int = 0) -> Path:
    """Write a tiny random checkpoint of `kind` into `path` (reused if already there)."""
    path = Path(path)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside and renamed into place: a notebook running at the same time never sees half.
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    _write(kind, tmp, seed)
    try:
        tmp.rename(path)
    except OSError:                               # another process got there first
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _write(kind: str, path: Path, seed: int) -> None:
    torch.manual_seed(seed)
    ids = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=0, pad_token_id=0)
    if kind == "qwen3_next":
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

        config = Qwen3NextConfig(**SHAPE, **ids, num_experts=0, initializer_range=INIT_STD,
                                 linear_num_key_heads=2, linear_num_value_heads=4,
                                 linear_key_head_dim=16, linear_value_head_dim=16)
        model = Qwen3NextForCausalLM(config)
    elif kind in ("none", "headwise", "elementwise"):
        from probe.train.model import Shape, build_model, model_config

        shape = Shape(vocab_size=VOCAB, width=SHAPE["hidden_size"], layers=SHAPE["num_hidden_layers"],
                      heads=SHAPE["num_attention_heads"], kv_heads=SHAPE["num_key_value_heads"],
                      head_dim=SHAPE["head_dim"], intermediate=SHAPE["intermediate_size"], init_std=INIT_STD)
        model = build_model(model_config(kind, shape, bos_token_id=0, eos_token_id=0, pad_token_id=0), seed)
    else:
        raise ValueError(f"unknown kind {kind!r}: qwen3_next, none, headwise or elementwise")
    model.eval().save_pretrained(path)
    tokenizer().save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    if kind != "qwen3_next":                  # as in the released configs (save_pretrained writes the class)
        config["architectures"] = ["Qwen3ForCausalLM"]
        (path / "config.json").write_text(json.dumps(config, indent=2))


def _notebook_shell():
    """The IPython shell when running inside a Jupyter kernel, else None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def display(obj) -> None:
    """Rich display in a notebook (tables as HTML); a plain print in a script."""
    if _notebook_shell() is not None:
        from IPython.display import display as ipython_display

        ipython_display(obj)
    else:
        print(obj.to_string() if hasattr(obj, "to_string") else obj)


def show(figure, name: str):
    """Display a figure inline in a notebook; in a script, save it as WORK/figures/NAME.png."""
    figure = getattr(figure, "figure", figure)            # an Axes (or SubFigure) -> its figure
    shell = _notebook_shell()
    if shell is not None:
        from IPython.core.pylabtools import select_figure_formats
        from IPython.display import display as ipython_display

        select_figure_formats(shell, {"png"})             # figures made without pyplot
        ipython_display(figure)
        return None
    out = workdir() / "figures" / f"{name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80)
    print(f"figure: {out}")
    return out
