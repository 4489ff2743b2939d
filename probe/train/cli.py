"""`probe train`: arguments and the command, kept here so that probe/api/cli.py only wires it in."""
from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path

from ..core.errors import ProbeError
from ..core.options import seed_argument
from ..core.owned import FORCE_HELP
from .config import (ALL_ARMS, BPE_VOCAB, GROUPS, DEFAULT_COPY_LEN, DEFAULT_NOISE_FRAC, SYNTHETIC_VOCAB,
                     TrainConfig)

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def token_count(text: str) -> int:
    """'2000000', '2M', '500k', '1.5m' -> int."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a token count (e.g. 2000000, 2M, 500k)")
    return int(float(match.group(1)) * _SUFFIX[match.group(2).lower()])


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    p.add_argument("--arm", choices=ALL_ARMS + tuple(GROUPS),
                   help="Qwen3 with no gate, a headwise or an elementwise output gate, or all three "
                        "(into OUT/ARM); hybrid-none / hybrid-gated: Qwen3.5's 3 Gated DeltaNet : 1 "
                        "softmax layout, its softmax layers ungated or gated, or hybrids for both")
    p.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="continue training this checkpoint (a probe graft folder, a checkpoint "
                        "folder or a .gguf file) instead of a new --arm")
    p.add_argument("--train", dest="train_params", choices=("gates", "all"), default="all",
                   help="with --from: train only the grafted gates (the base frozen) or all weights")
    p.add_argument("--steps", type=int, help="training steps (instead of --tokens: tokens = steps * batch * seq-len)")
    p.add_argument("--out", required=True, help="output directory (a checkpoint probe analyze loads)")
    p.add_argument("--data", nargs="+", metavar="FILE",
                   help="text files, folders or JSONL; or synthetic:noise-copy / "
                        "synthetic:noise-copy-marked (noise rows and copy rows; -marked: the first "
                        "token says which); default: this Python's standard library sources")
    p.add_argument("--tokens", type=token_count, default=d.tokens,
                   help=f"training tokens, e.g. 2M (default {d.tokens:,}); steps = tokens / (batch * seq-len)")
    p.add_argument("--seed", type=seed_argument, default=d.seed,
                   help="initialisation and data order (synthetic data: the rows too)")
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default {d.lr:g})")
    p.add_argument("--warmup", type=float, default=d.warmup,
                   help="warmup: a fraction of the steps (< 1) or a number of steps (default 0.05)")
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio, metavar="R",
                   help=f"after warmup the learning rate decays along a cosine to R x --lr at the last "
                        f"step (default {d.min_lr_ratio:g}); 1: constant after warmup")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip, help="clip the gradient norm (default 1)")
    # The shape of a new --arm model: None when not given, so that --from (which trains a
    # model as it is) can refuse them instead of ignoring them (config_from_args).
    p.add_argument("--layers", type=int, help=f"decoder layers (default {d.layers})")
    p.add_argument("--width", type=int, help=f"hidden size (default {d.width})")
    p.add_argument("--heads", type=int, help="query heads (default width/32)")
    p.add_argument("--kv-heads", type=int, help="key/value heads (default heads/2)")
    p.add_argument("--mlp-ratio", type=float,
                   help="baseline MLP width / hidden size (default 4); gated arms pay their gate from it")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="tokens per training row, BOS included")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--bos", choices=("prepend", "none"), default=d.bos,
                   help="prepend: every row starts with the BOS token (default); none: rows start mid-text")
    p.add_argument("--qk-norm", action=argparse.BooleanOptionalAction,
                   help="RMSNorm on each head's query and key before RoPE, as in Qwen3 (default on); "
                        "--no-qk-norm leaves the attention logits unbounded, in every arm")
    p.add_argument("--vocab-size", type=int,
                   help=f"BPE vocabulary (default {BPE_VOCAB}); synthetic data: distinct content "
                        f"tokens (default {SYNTHETIC_VOCAB})")
    p.add_argument("--copy-len", type=int, metavar="L",
                   help=f"synthetic data: tokens in the segment a copy row repeats (default {DEFAULT_COPY_LEN})")
    p.add_argument("--noise-frac", type=float, metavar="F",
                   help=f"synthetic data: share of noise rows (default {DEFAULT_NOISE_FRAC:g})")
    p.add_argument("--eval-every", type=int, help="held-out evaluation interval in steps (default steps/20)")
    p.add_argument("--eval-rows", type=int, default=d.eval_rows, help="held-out rows per evaluation")
    p.add_argument("--save-every", type=int, help="checkpoint interval in steps (default steps/10)")
    p.add_argument("--threads", type=int, help="torch CPU threads (results are bit-identical only "
                                               "for the same thread count)")
    p.add_argument("--name", help="the model's name in training.csv (default: the output folder's name)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from its checkpoint")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.add_argument("--stop-after", type=int, metavar="STEPS",
                   help="stop after this many steps as if interrupted (resume later with --resume)")
    p.add_argument("--keep-checkpoint", action="store_true",
                   help="keep OUT/checkpoint (optimizer state) after the run finishes")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args) -> TrainConfig:
    if args.from_dir and args.arm:
        raise ProbeError("--arm builds a new model and --from continues one: pass one of them")
    if not args.from_dir and not args.arm:
        raise ProbeError("pass --arm none|headwise|elementwise|all|hybrid-none|hybrid-gated|hybrids (a new model) "
                         "or --from DIR (continued training)")
    if args.steps is not None and args.steps < 1:
        raise ProbeError(f"--steps must be at least 1 (got {args.steps})")
    if not 0 <= args.min_lr_ratio <= 1:
        raise ProbeError(f"--min-lr-ratio must be between 0 and 1 (got {args.min_lr_ratio:g}): the share of "
                         "--lr left at the end of the decay, 1 for a constant rate")
    shaping = {"--layers": args.layers, "--width": args.width, "--heads": args.heads, "--kv-heads": args.kv_heads,
               "--mlp-ratio": args.mlp_ratio, "--qk-norm / --no-qk-norm": args.qk_norm}
    synthetic = any(str(d).startswith("synthetic:") for d in args.data or ())
    if not synthetic:       # synthetic data: --vocab-size is its content tokens, checked against DIR's tokenizer
        shaping["--vocab-size"] = args.vocab_size
    given = [name for name, value in shaping.items() if value is not None]
    if args.from_dir and given:
        raise ProbeError(f"{', '.join(given)} {'shapes' if len(given) == 1 else 'shape'} a new --arm model; --from "
                         f"trains {args.from_dir} as it is (its own layers, width and vocabulary): leave "
                         f"{'it' if len(given) == 1 else 'them'} out")
    d = TrainConfig()
    tokens = args.steps * args.batch_size * args.seq_len if args.steps else args.tokens
    config = TrainConfig(
        arm=GROUPS[args.arm][0] if args.arm in GROUPS else (args.arm or "none"), out=args.out,
        from_dir=args.from_dir, train_params=args.train_params,
        data=tuple(args.data or ()), tokens=tokens, seed=args.seed, lr=args.lr,
        min_lr_ratio=args.min_lr_ratio, warmup=args.warmup, weight_decay=args.weight_decay, grad_clip=args.grad_clip,
        layers=d.layers if args.layers is None else args.layers, width=d.width if args.width is None else args.width,
        heads=args.heads, kv_heads=args.kv_heads,
        mlp_ratio=d.mlp_ratio if args.mlp_ratio is None else args.mlp_ratio, seq_len=args.seq_len,
        batch_size=args.batch_size, bos=args.bos, qk_norm=d.qk_norm if args.qk_norm is None else args.qk_norm,
        vocab_size=args.vocab_size, copy_len=args.copy_len, noise_frac=args.noise_frac,
        eval_every=args.eval_every, eval_rows=args.eval_rows,
        save_every=args.save_every, threads=args.threads, name=args.name, resume=args.resume,
        force=args.force, stop_after=args.stop_after, keep_checkpoint=args.keep_checkpoint,
        progress=not args.quiet)
    if config.from_dir is None:
        config.heads_of()           # a shape the model cannot take: refused before --out is made
    return config


def arm_configs(cfg: TrainConfig, arm: str) -> list[TrainConfig]:
    """One config per arm; `all` puts the arms in OUT/none, OUT/headwise, OUT/elementwise, and
    `hybrids` in OUT/hybrid-none, OUT/hybrid-gated."""
    if arm not in GROUPS:
        return [cfg]
    if cfg.name:
        raise ProbeError(f"--name applies to a single arm; --arm {arm} names the runs after the arms")
    return [replace(cfg, arm=a, out=str(Path(cfg.out) / a)) for a in GROUPS[arm]]


def run(args, command_line: str | None = None) -> int:
    from .loop import prepare_data, train

    configs = arm_configs(config_from_args(args), args.arm or "none")
    for cfg in configs:
        cfg.check()
    prepared = None
    results = []
    for cfg in configs:
        if cfg.resume and _state(Path(cfg.out)) == "empty":
            # --arm all interrupted before this arm began, or a run stopped before its first
            # checkpoint: nothing was trained yet, so it starts from step 0, replacing what that
            # run wrote as --force would (only a folder probe train wrote, holding no input).
            began = Path(cfg.out).is_dir() and any(Path(cfg.out).iterdir())
            if began:
                print(f"probe train: {cfg.out} was stopped before its first checkpoint; starting it from step 0")
            cfg = replace(cfg, resume=False, force=cfg.force or began)
        if not cfg.resume and prepared is None and not cfg.from_dir:   # --from: the model's tokenizer
            # --arm all: one tokenizer and one packed corpus for every arm (same data, same order);
            # an arm that starts after an interruption reuses the tokenizer its siblings saved.
            prepared = prepare_data(cfg, _sibling_tokenizer(configs) if args.arm in GROUPS else None)
        result = train(cfg, None if cfg.resume else prepared, command=command_line)
        results.append(result)
        status = "done" if result.finished else f"stopped at step {result.steps} (resume with --resume)"
        loss = f"{result.final_eval_loss:.4f}" if result.final_eval_loss is not None else "n/a"
        what = f"{cfg.train_params} of {cfg.from_dir}" if cfg.from_dir else cfg.arm
        pace = f" ({result.seconds_per_step:.2f} s a step)" if result.seconds_per_step else ""
        print(f"{what}: {status}; {result.parameters:,} trained parameters, held-out loss {loss}, "
              f"{result.seconds:.0f} s{pace} -> {result.out}/")
    if all(r.finished for r in results) and len(results) > 1:
        dirs = " ".join(str(r.out) for r in results)
        # Synthetic held-out rows are token ids that already hold their first token: one row
        # per sequence, nothing prepended.
        data = (f"{results[0].out}/heldout.npy --per-document --bos none"
                if configs[0].synthetic_task else f"{results[0].out}/heldout.txt")
        print(f"compare them: probe compare {dirs} --data {data} "
              f"--seq-len {configs[0].seq_len} --out {Path(configs[0].out).parent}/compare")
    return 0


def _state(out: Path) -> str:
    from .loop import find_checkpoint

    if find_checkpoint(out) is not None:
        return "checkpoint"
    if (out / "config.json").exists():
        return "finished"
    return "empty"


def _sibling_tokenizer(configs):
    """The tokenizer an earlier arm of the same --arm all run saved, if any."""
    from transformers import AutoTokenizer

    from ..load.loader import has_tokenizer_files
    from .loop import find_checkpoint

    for cfg in configs:
        out = Path(cfg.out)
        for folder in (out, find_checkpoint(out)):
            if folder is not None and folder.exists() and has_tokenizer_files(folder):
                return AutoTokenizer.from_pretrained(str(folder))
    return None
