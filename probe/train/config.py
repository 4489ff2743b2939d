"""Settings of one training run (kept free of torch/transformers imports: the CLI reads them)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..core.errors import ProbeError

ARMS = ("none", "headwise", "elementwise")            # Qwen3 (model.py); `--arm all`
HYBRID_ARMS = ("hybrid-none", "hybrid-gated")         # Qwen3.5, 3 GDN : 1 softmax (hybrid.py); `--arm hybrids`
ALL_ARMS = ARMS + HYBRID_ARMS
GROUPS = {"all": ARMS, "hybrids": HYBRID_ARMS}
DEFAULT_HELDOUT_PERMILLE = 50
# Synthetic data (`--data synthetic:TASK`, see synthetic.py): the tasks and their defaults.
SYNTHETIC_PREFIX = "synthetic:"
SYNTHETIC_TASKS = ("noise-copy", "noise-copy-marked")
SYNTHETIC_VOCAB = 256                   # distinct content tokens (the BPE default is 1024)
BPE_VOCAB = 1024
DEFAULT_COPY_LEN = 16
DEFAULT_NOISE_FRAC = 0.5
# Loss spike: train loss above the mean of the previous SPIKE_WINDOW steps by SPIKE_K std
# (needs SPIKE_MIN_HISTORY steps of history). See loop.py.
SPIKE_WINDOW = 50
SPIKE_K = 4.0
SPIKE_MIN_HISTORY = 10
# Settings that may change between an interrupted run and its resumption.
RESUMABLE = {"resume", "stop_after", "progress", "threads", "force", "keep_checkpoint"}


def siblings(arm: str) -> tuple[str, ...]:
    """The arms an arm is matched against (parameters within 1%, one architecture); the first
    is their baseline."""
    return HYBRID_ARMS if arm in HYBRID_ARMS else ARMS


# The model's sizes (model.py builds it), worked out from the settings by TrainConfig.shape.
@dataclass(frozen=True)
class Shape:
    vocab_size: int
    width: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 512          # the baseline's MLP width; gated arms get less
    max_positions: int = 2048
    rope_theta: float = 10_000.0
    init_std: float = 0.02
    qk_norm: bool = True             # False: no q_norm/k_norm (config use_qk_norm false)


@dataclass
class TrainConfig:
    arm: str = "none"
    out: str = "runs/train"
    data: tuple[str, ...] = ()          # empty: the standard library's sources
    tokens: int = 3_000_000             # about 7 minutes per arm on one CPU thread (default shape)
    seed: int = 0
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: float = 0.05                # fraction of the steps (< 1) or a number of steps (>= 1)
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    layers: int = 4
    width: int = 128
    heads: int | None = None            # default width // 32 (head_dim 32)
    kv_heads: int | None = None         # default heads // 2 (GQA, as in the released models)
    mlp_ratio: float = 4.0
    seq_len: int = 128
    batch_size: int = 16
    bos: str = "prepend"
    qk_norm: bool = True                # RMSNorm on each head's query and key (Qwen3's QK-norm)
    vocab_size: int | None = None       # BPE vocabulary (1024) or synthetic content tokens (256)
    copy_len: int | None = None         # synthetic data only: tokens in a copy row's segment
    noise_frac: float | None = None     # synthetic data only: share of noise rows
    heldout_permille: int = DEFAULT_HELDOUT_PERMILLE
    eval_every: int | None = None       # default: 20 evaluations per run
    eval_rows: int = 64
    save_every: int | None = None       # default: 10 checkpoints per run
    name: str | None = None             # the model column of training.csv (default: out's name)
    threads: int | None = None
    resume: bool = False
    force: bool = False
    stop_after: int | None = None       # stop after this many steps in total, as if interrupted
    keep_checkpoint: bool = False
    progress: bool = True
    from_dir: str | None = None         # continued training of this checkpoint (continued.py)
    train_params: str = "all"           # gates (only self_attn.gate_proj) or all; with from_dir

    def __post_init__(self):
        # The defaults depend on the data route; they are filled in here so that the recipe
        # always records concrete values. Text runs keep copy_len/noise_frac None, so the
        # recipes of checkpoints trained before the synthetic route existed still match.
        if self.vocab_size is None:
            self.vocab_size = SYNTHETIC_VOCAB if self.synthetic_task else BPE_VOCAB
        if self.synthetic_task:
            if self.copy_len is None:
                self.copy_len = DEFAULT_COPY_LEN
            if self.noise_frac is None:
                self.noise_frac = DEFAULT_NOISE_FRAC

    @property
    def synthetic_task(self) -> str | None:
        """`noise-copy` for --data synthetic:noise-copy, ...; None for text data."""
        named = [d for d in self.data if str(d).startswith(SYNTHETIC_PREFIX)]
        return str(named[0])[len(SYNTHETIC_PREFIX):] if named else None

    # -- derived --------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return max(1, math.ceil(self.tokens / (self.batch_size * self.seq_len)))

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup) if self.warmup >= 1 else max(1, round(self.warmup * self.steps))

    @property
    def eval_interval(self) -> int:
        return self.eval_every or max(1, self.steps // 20)

    @property
    def save_interval(self) -> int:
        return self.save_every or max(1, self.steps // 10)

    def heads_of(self) -> tuple[int, int]:
        """(heads, kv heads) of a new model, checked against the width (no vocabulary needed: the
        CLI asks before it makes --out)."""
        heads = self.heads or max(1, self.width // 32)
        kv = self.kv_heads or max(1, heads // 2)
        if self.width % heads:
            raise ProbeError(f"--width {self.width} is not a multiple of the {heads} heads")
        if (self.width // heads) % 2:
            # Rotary embeddings rotate pairs of dimensions: transformers refuses an odd head size
            # deep inside the model's config validation.
            raise ProbeError(f"--width {self.width} over {heads} heads gives heads of {self.width // heads} "
                             "dimensions; rotary positions need an even head size: pick a width that is "
                             f"a multiple of {2 * heads}")
        return heads, kv

    def shape(self, vocab_size: int) -> Shape:
        heads, kv = self.heads_of()
        return Shape(vocab_size=vocab_size, width=self.width, layers=self.layers, heads=heads,
                     kv_heads=kv, head_dim=self.width // heads,
                     intermediate=int(round(self.mlp_ratio * self.width)),
                     max_positions=max(2048, 8 * self.seq_len), qk_norm=self.qk_norm)

    def recipe(self) -> dict:
        """The settings that determine the result (compared on --resume)."""
        recipe = {k: v for k, v in asdict(self).items() if k not in RESUMABLE}
        recipe["data"] = [str(d) for d in self.data]
        return recipe

    def check(self) -> None:
        if self.train_params not in ("gates", "all"):
            raise ProbeError(f"unknown --train {self.train_params!r}; use gates or all")
        if self.train_params == "gates" and not self.from_dir:
            raise ProbeError("--train gates continues a grafted checkpoint: pass --from DIR (probe graft makes one)")
        if self.arm not in ALL_ARMS:
            raise ProbeError(f"unknown arm {self.arm!r}; use one of {', '.join(ALL_ARMS)}, all or hybrids")
        if self.bos not in ("prepend", "none"):
            raise ProbeError(f"unknown --bos {self.bos!r}; use prepend or none")
        # --tokens last: with --steps it is derived from them (steps x batch x seq-len), so a zero
        # --seq-len would be reported as a --tokens the user never passed.
        for name in ("seq_len", "batch_size", "layers", "width", "tokens"):
            if getattr(self, name) < 1:
                raise ProbeError(f"--{name.replace('_', '-')} must be positive")
        if self.seq_len < 4:
            raise ProbeError("--seq-len must be at least 4")
        # The row order's generator is seeded with seed * 1_000_003 + epoch (schedule.py), which
        # torch takes only within 64 bits: keep the product there, with room for the epochs.
        limit = 2 ** 63 // 1_000_003 - 1_000_000
        if not -limit <= self.seed <= limit:
            raise ProbeError(f"--seed must be between {-limit} and {limit} for probe train (got {self.seed})")
        if not 0 < self.lr < math.inf:
            raise ProbeError(f"--lr must be a finite number above 0 (got {self.lr:g})")
        if not 0 < self.grad_clip <= math.inf:
            # 0 would scale every gradient to nothing: the model would never change.
            raise ProbeError(f"--grad-clip must be above 0 (got {self.grad_clip:g}); pass inf for no clipping")
        if not 0 <= self.warmup < math.inf:
            raise ProbeError(f"--warmup must be 0 or more (a fraction of the steps below 1, or steps); "
                             f"got {self.warmup:g}")
        if not 0 <= self.weight_decay < math.inf:
            raise ProbeError(f"--weight-decay must be 0 or more (got {self.weight_decay:g})")
        if not 0 < self.mlp_ratio < math.inf:
            raise ProbeError(f"--mlp-ratio must be above 0 (got {self.mlp_ratio:g})")
        # `0` must not quietly mean "the default": these are refused, not replaced.
        for name in ("heads", "kv_heads", "eval_every", "eval_rows", "save_every", "threads", "stop_after"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ProbeError(f"--{name.replace('_', '-')} must be at least 1 (got {value})")
        self._check_synthetic()

    def _check_synthetic(self) -> None:
        task = self.synthetic_task
        if task is None:
            if self.copy_len is not None or self.noise_frac is not None:
                raise ProbeError("--copy-len and --noise-frac apply to --data synthetic:TASK only")
            return
        if len(self.data) != 1:
            raise ProbeError(f"--data {SYNTHETIC_PREFIX}{task} cannot be mixed with other data")
        if task not in SYNTHETIC_TASKS:
            raise ProbeError(f"unknown synthetic task {task!r}; use "
                             + " or ".join(SYNTHETIC_PREFIX + t for t in SYNTHETIC_TASKS))
        if self.vocab_size < 2:
            raise ProbeError("--vocab-size (content tokens of synthetic data) must be at least 2")
        if not 0.0 <= self.noise_frac <= 1.0:
            raise ProbeError("--noise-frac must be between 0 and 1")
        body = self.seq_len - 1 if self.bos == "prepend" else self.seq_len
        if not 1 <= self.copy_len < body:
            # A segment as long as the row never repeats: every copy row would be a noise row. The
            # default may be what fails (a short --seq-len): say so, not only the flag's name.
            default = " (the default)" if self.copy_len == DEFAULT_COPY_LEN else ""
            raise ProbeError(f"--copy-len {self.copy_len}{default} leaves nothing to copy in rows of {body} "
                             f"tokens (--seq-len {self.seq_len}); pass --copy-len 1 to {body - 1}, or a longer "
                             "--seq-len")
        if task.endswith("-marked") and self.bos != "prepend":
            raise ProbeError(f"{SYNTHETIC_PREFIX}{task} puts the row-type marker at position 0; "
                             "it needs --bos prepend (the default)")
