"""Every option of an analysis, once: its default, its check and its help text.

`AnalysisOptions` is a frozen dataclass; building one checks every field (in the order of the
fields), so a mistake in any option costs nothing and leaves nothing behind (no half-made run,
no `OUT.partial/` that blocks the corrected command). `probe.analyze(model, data, options,
**overrides)` builds one from its keyword arguments, the CLI builds its argparse options from
the fields (`add_cli_arguments`) and the options from the parsed arguments (`from_cli`),
meta.json records `meta_fields()` and the resume fingerprint `resume_fields()`.

Messages name the option as the user wrote it (errors.flag): `seq_len=` from Python,
`--seq-len` on the command line. This module imports neither torch nor transformers (the CLI
builds its parser from it, and `probe --help` must answer at once).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CLI_NAMES, ProbeError, flag
from .option_checks import (check_ablate, check_device_map, check_gate, check_interventions, check_name,
                            check_resume, check_rope_scaling, check_seconds, check_text_field,
                            check_token_groups, check_tokenizer)

BOS_POLICIES = ("auto", "prepend", "none")
ON_LONG = ("truncate", "slide", "error")
DTYPE_NAMES = ("float32", "bfloat16", "float16")     # probe.load.loader.DTYPES, without importing torch
# What a checkpoint path is loaded in and onto when dtype / device are not given. The options
# themselves stay None then: a model object keeps what it holds (AnalysisOptions.loading).
DTYPE = "float32"
DEVICE = "cpu"
# The sparsity sweep: 13 thresholds 10^(k/2), 1e-6 .. 1, each counted exactly (LogHistogram cuts).
THRESHOLDS = tuple(float(f"{10 ** (k / 2):.6g}") for k in range(-12, 1))
DISPLAY_LEN = 24


def check_int(name: str, value, minimum: int, *, optional: bool = False, why: str = "") -> None:
    """An integer >= minimum (None allowed when optional). bool is not an integer here."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ProbeError(f"{flag(name)} must be an integer of at least {minimum}{why} (got {value!r})")


# The seeds torch takes (torch.manual_seed, torch.Generator.manual_seed): beyond them it raises.
SEED_RANGE = (-2 ** 63, 2 ** 64 - 1)


def seed_argument(text: str) -> int:
    """argparse type of a --seed: an integer torch can take, else argparse's one-line error."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not SEED_RANGE[0] <= value <= SEED_RANGE[1]:
        raise argparse.ArgumentTypeError(f"{text} is out of range; a seed is an integer from "
                                         f"{SEED_RANGE[0]} to {SEED_RANGE[1]}")
    return value


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ProbeError(f"unknown {flag(name, value)}; use {', '.join(choices)}")


def check_thresholds(thresholds) -> tuple[float, ...]:
    """Sparsity thresholds: finite, positive numbers (a share below -1 or NaN means nothing)."""
    try:
        values = tuple(thresholds)
    except TypeError:
        raise ProbeError(f"{flag('thresholds')} must be a list of positive numbers (got {thresholds!r})") from None
    bad = [t for t in values if isinstance(t, bool) or not isinstance(t, numbers.Real)
           or not math.isfinite(t) or t <= 0]
    if bad or not values:
        raise ProbeError(f"{flag('thresholds')} must be finite numbers above 0 (the share of |O| below each); "
                         f"got {bad[0] if bad else 'none'}")
    return tuple(float(t) for t in values)


# -- checks of single fields: fn(name, value, options) -> the value to keep (or None: as given) --

def _int(minimum: int, *, optional: bool = False, why: str = ""):
    return lambda name, value, options: check_int(name, value, minimum, optional=optional, why=why)


def _seed(name, value, options):
    check_int(name, value, SEED_RANGE[0])
    if value > SEED_RANGE[1]:
        raise ProbeError(f"{flag(name)} must be an integer from {SEED_RANGE[0]} to {SEED_RANGE[1]}, the seeds "
                         f"torch takes (got {value})")


# Fewer resamples give no interval: a percentile interval at 95% needs resamples beyond each 2.5%
# tail (with 1 it is the one resample, of width 0, which may exclude the estimate). More would
# not fit: the resampling weights are (resamples, sequences) float64 (probe/intervals/bootstrap.py).
MIN_RESAMPLES = 100
MAX_RESAMPLES = 100_000


def _resamples(name, value, options):
    """0 (no intervals), or enough resamples for a 95% percentile interval and few enough to
    hold (probe/intervals/bootstrap.py); the sequences' share of the memory is checked once the
    data are read (probe.analyze)."""
    check_int(name, value, 0)
    if value and not MIN_RESAMPLES <= value <= MAX_RESAMPLES:
        raise ProbeError(f"{flag(name)} must be 0 (no intervals) or from {MIN_RESAMPLES} to {MAX_RESAMPLES:,} "
                         f"(got {value:,}): fewer leave no resample beyond the 95% interval's tails, more "
                         "do not fit in memory")


def _choice(choices, *, optional: bool = False):
    def check(name, value, options):
        if not (optional and value is None):
            check_choice(name, value, choices)
    return check


def seq_len_arg(text: str):
    """--seq-len N, or N,N,... (a context sweep, probe/api/sweep.py): an int or a tuple of ints."""
    parts = [p.strip() for p in str(text).split(",")]
    if "," in str(text) and not all(parts):     # 64,,128 or 512, : a typo, not a sweep of what is left
        raise ProbeError(f"{flag('seq_len', text)}: an empty length in the list; give lengths such as "
                         "512,2048,8192")
    parts = [p for p in parts if p]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ProbeError(f"{flag('seq_len', text)}: give a number of tokens, or a comma list such as "
                         "512,2048,8192") from None
    if not values:
        raise ProbeError(f"{flag('seq_len')} is empty; give a number of tokens")
    return values[0] if len(values) == 1 and "," not in str(text) else tuple(values)


def _thresholds(name, value, options):
    return check_thresholds(THRESHOLDS if value is None else value)


def _display_len(name, value, options):
    value = DISPLAY_LEN if value is None else value
    check_int(name, value, 0)
    return value


def option(default, help: str, *, check=None, cli: dict | None = None, meta: bool = False,
           resume: bool = False):
    """A field of AnalysisOptions. cli: argparse keywords (None: not a command-line option);
    meta: recorded in meta.json under its name; resume: part of the resume fingerprint."""
    return field(default=default, metadata={"help": help, "check": check, "cli": cli, "meta": meta,
                                            "resume": resume})


INT = {"type": int}
FLAG = {"action": "store_true"}


@dataclass(frozen=True)
class AnalysisOptions:
    """How to analyse: every option of `probe.analyze` and of `probe analyze` / `compare`.

    Fields are checked in this order when the object is built (also by dataclasses.replace)."""

    # -- how data becomes sequences (probe/data/sequences.py) --
    bos: str = option("auto", "what sits at position 0: the tokenizer's default, always BOS, or never",
                      check=_choice(BOS_POLICIES), cli={"choices": BOS_POLICIES})
    on_long: str | None = option(
        None, "documents longer than --max-length / --seq-len or the model's positions: truncate (with "
              "a warning), slide (windows), or refuse; default slide when --max-length or --stride is "
              "given, else truncate", check=_choice(ON_LONG, optional=True), cli={"choices": ON_LONG})
    seq_len: int = option(512, "tokens per sequence; a comma list (512,2048,8192) sweeps the context "
                               "length: one run per length on the same text (the longest cut into the "
                               "shorter)", check=_int(2), cli={"type": seq_len_arg, "metavar": "N[,N...]"},
                          meta=True, resume=True)
    max_length: int | None = option(
        None, "with --per-document: the longest sequence (default --seq-len); longer documents are "
              "covered by sliding windows of N tokens (see --stride). Without --per-document: the "
              "sequence length is min(--seq-len, N)", check=_int(2, optional=True), cli={**INT, "metavar": "N"})
    stride: int | None = option(
        None, "sliding windows start every S tokens (default: back to back); tokens an earlier window "
              "counted are context only, so each token counts once",
        check=_int(1, optional=True), cli={**INT, "metavar": "S"})
    past_positions: bool = option(
        False, "let a RoPE model run past its config's max_position_embeddings instead of lowering "
               "--seq-len to them (RoPE extrapolates; a --seq-len sweep turns this on); meta.json "
               "records it when on", cli=FLAG, resume=True)
    max_sequences: int | None = option(
        None, "analyse at most this many sequences",
        check=_int(1, optional=True, why=" (leave it out to use every sequence)"), cli=INT)
    per_document: bool = option(False, "one sequence per document, padded", cli=FLAG)
    batch_size: int = option(4, "sequences per forward pass", check=_int(1), cli=INT, resume=True)
    display_len: int = option(DISPLAY_LEN, "tokens of the display prompt of attention_patterns.csv",
                              check=_display_len)
    seed: int = option(0, "torch's seed before the pass", check=_seed, cli=INT, meta=True)
    text_field: str = option("text", "JSONL field that holds the text", check=check_text_field, cli={})
    # -- saving and resuming an interrupted pass (resume.py) --
    partial: str | Path | None = option(None, "folder for the pass's saved state (the CLI: OUT.partial/)")
    checkpoint_seconds: float = option(
        30.0, "save the pass's state for --resume at most this often (0: every batch)", check=check_seconds,
        cli={"type": float, "metavar": "SECONDS"})
    resume: bool = option(False, "continue an interrupted analysis from OUT.partial/ (same command otherwise)",
                          check=check_resume, cli=FLAG)
    # -- the model (probe/load/loader.py) --
    tokenizer: object = option(None, "directory with tokenizer files, if the checkpoint has none",
                               check=check_tokenizer, cli={})
    dtype: str | None = option(None, f"the model's dtype (default {DTYPE}; a model object: what it holds)",
                               check=_choice(DTYPE_NAMES, optional=True), cli={"choices": DTYPE_NAMES})
    device: str | None = option(None, f"cpu, cuda, cuda:1, ... (default {DEVICE}; a model object: where it is)",
                                cli={})
    device_map: str | None = option(None, "e.g. auto: shard a large model over GPUs with accelerate (one "
                                          "process; under torchrun use --device cuda)", check=check_device_map, cli={})
    gate: object = option(None, "declare a gate: MODULE:LAYOUT:GRANULARITY[:ACTIVATION], or none",
                          check=check_gate, cli={})
    rope_scaling: object = option(
        None, 'scale the rotary positions on load: TYPE:FACTOR (yarn:4, linear:2, dynamic:2) or a '
              'transformers rope_parameters JSON object ({"rope_type": "yarn", "factor": 4, ...}); the '
              "original length is the config's; meta.json records what was applied",
        check=check_rope_scaling, cli={"metavar": "SPEC"}, resume=True)
    # -- what is measured --
    interventions: object = option(
        None, "also measure the loss under gate / massive-activation interventions (all, or a comma list "
              "of mean_gate,gate_one,gate_zero,massive_zero): interventions.csv",
        check=check_interventions, cli={"nargs": "?", "const": "all", "metavar": "LIST"})
    ablate: object = option(
        None, "also measure the loss, by position and with paired intervals, under sink ablations: a SPEC "
              "such as 'windows=64,256 sinks=0,4 key0 value0 first=remove,bos,replace:TOKEN "
              "massive=zero,mean layers=all', or all (docs/sinks.md): ablations.csv, ablation_positions.csv",
        check=check_ablate, cli={"nargs": "?", "const": "all", "metavar": "SPEC"})
    token_groups: object = option(
        None, 'JSON file of extra token groups for gates_by_token_type.csv: {"name": ["token", 123, ...]}',
        check=check_token_groups, cli={})
    thresholds: tuple = option(THRESHOLDS, "the sparsity sweep (sparsity.csv)", check=_thresholds,
                               meta=True, resume=True)
    anatomy: bool = option(
        False, "sink anatomy: attention received by every key position, secondary sinks, value drains "
               "and, for gated models, the gate against sink attention (an extra Q.K^T pass per "
               "attention layer): received_by_position.csv, received_by_token.csv, secondary_sinks.csv, "
               "value_drains.csv, gate_sink.csv", cli=FLAG, resume=True)
    gdn: bool = option(
        False, "Gated DeltaNet layers (hybrids: Qwen3-Next, Qwen3.5): their SiLU output gate, write strength beta, "
               "decay and half-life, sparsity and head output size: gdn_gates.csv, gdn_gate_hist.csv, "
               "gdn_top_beta.csv, gdn_sparsity.csv, gdn_head_norms.csv; with --anatomy also the exact split "
               "of each output into per-key terms (key-0 share, state share, their check; a Q.K^T pass "
               "per layer): gdn_keys.csv, gdn_key0_buckets.csv, gdn_check.csv", cli=FLAG, resume=True)
    token_series: int = option(
        4096, "per-token series of the first N tokens of the data, per layer: attention on the first token "
              "(per head), the gate score, the largest |activation| and its dimension, the loss; with "
              "--anatomy the attention each key receives; with --gdn a hybrid's GDN layers' beta, decay and "
              "SiLU(z) (and with --anatomy their key-0 share) (tokens.json + tokens.npz, shown by probe view "
              "and the report's Tokens section); 0: none", check=_int(0), cli={**INT, "metavar": "N"})
    resamples: int = option(
        1000, "bootstrap resamples of the 95 percent intervals (*_lo / *_hi: sequences resampled, fixed seed); "
              "0: no intervals", check=_resamples, cli=INT, meta=True)
    loss_by_position: bool = option(
        False, "also the loss by target position in powers of two, summary.json loss_by_position (a "
               "--seq-len sweep turns this on)", cli=FLAG)
    exact_control: bool = option(
        False, "count the mean-gate sparsity control exactly in a second pass over the data (one pass "
               "counts it exactly only for bfloat16 outputs)", cli=FLAG)
    # -- how the run is named and shown --
    name: str | None = option(None, "the model's name in tables and reports (default: the folder name)",
                              check=check_name)
    progress: bool = option(True, "show a progress bar", cli={"action": "store_false", "help": "no progress bar"})
    command: str | None = option(None, "the command line, for meta.json (the CLI sets it)", meta=True)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            check = f.metadata["check"]
            if check is not None:
                kept = check(f.name, getattr(self, f.name), self)
                if kept is not None:
                    object.__setattr__(self, f.name, kept)

    @classmethod
    def of(cls, options: "AnalysisOptions | None" = None, **overrides) -> "AnalysisOptions":
        """`options` (default: every field's default) with `overrides`, checked: what
        probe.analyze(model, data, options, **overrides) analyses with."""
        if options is None:
            return cls(**overrides) if overrides.keys() <= NAMES else cls().replace(**overrides)
        if not isinstance(options, cls):
            raise TypeError(f"options= takes a probe.AnalysisOptions, not a {type(options).__name__} "
                            "(pass the options as keyword arguments instead)")
        return options.replace(**overrides)

    def replace(self, **changes) -> "AnalysisOptions":
        """A copy with `changes`, checked again; an unknown name is a TypeError naming it."""
        unknown = sorted(set(changes) - NAMES)
        if unknown:
            raise TypeError(f"unknown analysis option {unknown[0]}= (AnalysisOptions has "
                            f"{', '.join(sorted(NAMES))})")
        return dataclasses.replace(self, **changes) if changes else self

    def loading(self) -> tuple[str, str]:
        """(dtype, device) a checkpoint path is loaded in: the options', else DTYPE and DEVICE."""
        return self.dtype or DTYPE, self.device or DEVICE

    def meta_fields(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.metadata["meta"]}

    def resume_fields(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self) if f.metadata["resume"]}

    @classmethod
    def from_cli(cls, args, **fixed) -> "AnalysisOptions":
        """The options of a parsed command line (what add_cli_arguments added), with `fixed`."""
        given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
                 if f.metadata["cli"] is not None and hasattr(args, f.name)}
        return cls(**{**given, **fixed})


NAMES = frozenset(f.name for f in dataclasses.fields(AnalysisOptions))


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def cli_flag(name: str) -> str:
    return "--" + CLI_NAMES.get(name, name).replace("_", "-")


def add_cli_arguments(parser, *, leave_out=()) -> None:
    """One argparse option per command-line field of AnalysisOptions, help text and default from
    the field; the destination is the field's name (from_cli reads it back)."""
    for f in dataclasses.fields(AnalysisOptions):
        cli = f.metadata["cli"]
        if cli is None or f.name in leave_out:
            continue
        kwargs = {"help": f.metadata["help"], **cli}
        shown = f.default
        if shown is not None and not isinstance(shown, bool) and "(default" not in kwargs["help"]:
            kwargs["help"] += f" (default {shown:g})" if isinstance(shown, float) else f" (default {shown})"
        parser.add_argument(cli_flag(f.name), dest=f.name, default=f.default, **kwargs)
