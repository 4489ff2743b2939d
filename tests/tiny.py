"""Tiny random Hugging Face checkpoints, saved to disk like a user's checkpoint.

No machine here reaches a model hub, so the test-suite builds every model it needs from a
config: `make_checkpoint(kind, path)` writes `config.json` + `model.safetensors` (and, unless
`tokenizer=False`, the files of a tiny trained tokenizer) into `path`, and the test then loads
that directory exactly as a user's checkpoint would be loaded.

Every kind has the same shape where the family allows it: vocab 256, hidden 64, 4 layers,
4 query heads, 2 KV heads (GQA group 2; GPT-2 has no GQA), head_dim 16, MLP width 128,
2048 positions. `qwen3_next` and `qwen3_5` are hybrids: layers 0-2 are Gated DeltaNet, layer 3
is (gated) full attention.

The official kinds reproduce the checkpoint format of the paper's repository
(github.com/qiuzh20/gated_attention, `modeling_qwen3.py`): `model_type` "qwen3" with
`headwise_attn_output_gate` / `elementwise_attn_output_gate` flags and a `q_proj` that also
emits the gate logits, grouped per KV head. Stock transformers cannot load them (q_proj shape
mismatch); `official_reference_forward` is an independent pure-torch implementation of that
model, for testing probe's native loader against.

Random init: weights are drawn with std `initializer_range` = 0.2 (HF default 0.02), because at
0.02 a 64-wide model has near-uniform attention, gate scores pinned at 0.5 and logits near 0;
QK-normed models also get ~2x query-norm weights for the same reason. In the gated kinds one
hidden dimension is reserved as a constant "bias dimension" that only the gate rows read, with
weights calibrated so that each gated layer's mean gate logit on random tokens is `gate_shift`
(-2) plus per-head offsets: mean gate ~0.2 (the paper's trained models: 0.12-0.26), heads
between ~0.05 and ~0.5, gates varying with the input. See `_reserve_bias_dim`. Everything is
deterministic given `seed`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from pathlib import Path

import torch

KINDS = (
    "qwen3_next",
    "qwen3_5",
    "official_headwise",
    "official_elementwise",
    "qwen3",
    "qwen2",
    "llama",
    "mistral",
    "gpt2",
)
# Not in KINDS, but available:
# - "official_baseline": the official repository's gate-free baseline, an official-style
#   (transformers 4.x) config with both gate flags false; stock Qwen3 loads it.
# - "qwen3_5_vl": the format real Qwen3.5 checkpoints are released in,
#   Qwen3_5ForConditionalGeneration (model_type "qwen3_5", text layers at
#   model.language_model.layers, plus a 1-block vision tower); its language model is exactly
#   the "qwen3_5" kind's model for the same seed and overrides.
# - "olmo2" (post-norm), "gemma3" (sandwich norms, sliding window 16): where the residual after
#   attention sits differs by family; "granite": a decoder outside probe's registry.
# - "olmo_hybrid": OLMo-Hybrid, three Gated DeltaNet layers (every projection apart, a g_proj
#   output gate, beta up to 2) then one ungated, post-norm softmax layer.
EXTRA_KINDS = ("official_baseline", "qwen3_5_vl", "olmo2", "gemma3", "granite", "olmo_hybrid")

GATED_KINDS = ("qwen3_next", "qwen3_5", "qwen3_5_vl", "official_headwise", "official_elementwise")
OFFICIAL_KINDS = ("official_headwise", "official_elementwise", "official_baseline")
# Families whose tokenizer prepends a BOS token when encoding (Llama/Mistral sentencepiece).
BOS_KINDS = ("llama", "mistral")

INIT_STD = 0.2
# Official checkpoints: rope theta as in the Qwen3 release configs (not the class default 1e4),
# so that a loader which drops the config's top-level `rope_theta` gives different logits.
OFFICIAL_ROPE_THETA = 1_000_000.0

TINY = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=2048,
    initializer_range=INIT_STD,
)
# Gated DeltaNet sizes for the hybrid kinds (Qwen3-Next's linear-attention layers, scaled down).
LINEAR = dict(
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
)
QWEN3_5_ROPE = {
    "rope_type": "default",
    "rope_theta": 1e4,
    "partial_rotary_factor": 0.25,
    # sum(mrope_section) must equal head_dim * partial_rotary_factor / 2
    "mrope_section": [1, 1, 0],
}

# Non-config keyword arguments that make_checkpoint accepts among **overrides.
_FACTORY_KEYS = ("gate_shift", "gate_std")
DEFAULT_GATE_SHIFT = -2.0  # mean gate logit of each gated layer (mean gate ~0.2 given the spread)


@contextlib.contextmanager
def single_thread():
    """Run torch on one intra-op thread for the duration (restored afterwards).

    These models are too small to gain from threads, and on a shared, loaded machine the
    OpenMP pool makes each tiny matmul cost milliseconds (3x the test time measured here).
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


# --------------------------------------------------------------------------------------------
# tokenizer

# Fixed built-in training text: pangrams plus the vocabulary of the project. Printable ASCII is
# in the initial alphabet, so any ASCII text encodes without loss; other characters become
# <unk> (llama style) or are dropped (byte-level styles: there is no room for 256 byte tokens).
_CORPUS = """\
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Hello world! Hello, world. hello world
Gated attention for large language models: non-linearity, sparsity, and attention-sink-free.
A sigmoid gate after scaled dot-product attention multiplies the output of each head.
The gate score is the sigmoid of a linear function of the hidden state of the query token.
Attention sinks put a large attention weight on the first token of the sequence.
Massive activations are a few very large values in the residual stream of the model.
The baseline model has no gate; the headwise gate has one score per head, the elementwise
gate has one score per dimension of each head. Query, key and value projections, rotary
position embeddings, RMS norm, MLP, softmax, layer, token, position, mean, max, min.
In 2025 the paper was accepted at NeurIPS; numbers 0 1 2 3 4 5 6 7 8 9 10 100 1000.
def forward(self, x): return self.o_proj(attn * torch.sigmoid(gate))  # (B, T, H, D)
"""

_STYLE = {
    "qwen3_next": "qwen",
    "qwen3_5": "qwen",
    "qwen3": "qwen",
    "qwen2": "qwen",
    "official_headwise": "qwen",
    "official_elementwise": "qwen",
    "official_baseline": "qwen",
    "qwen3_5_vl": "qwen",
    "llama": "llama",
    "mistral": "llama",
    "gpt2": "gpt2",
    "olmo2": "gpt2",
    "olmo_hybrid": "gpt2",
    "gemma3": "llama",
    "granite": "llama",
}

_SPECIALS = {
    # ids are the list order: llama's <unk>=0, <s>=1, </s>=2 match the real Llama/Mistral ids.
    "llama": ["<unk>", "<s>", "</s>"],
    "gpt2": ["<|endoftext|>"],
    "qwen": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
             "<|image_pad|>", "<|video_pad|>"],
}

# The special-token roles each family declares (transformers attribute names).
_ROLES = {
    "llama": dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"),
    "gpt2": dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"),
    # Qwen tokenizers have no BOS and no unk; <|endoftext|> is both eos and pad.
    "qwen": dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>"),
}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-unicode map used by byte-level BPE (space -> 'Ġ')."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


@functools.lru_cache(maxsize=None)
def _tokenizer_json(style: str) -> str:
    """Train the style's BPE once per process; return it serialised (callers get fresh copies)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    ascii_chars = [chr(i) for i in range(32, 127)] + ["\n", "\t"]
    specials = _SPECIALS[style]
    if style == "llama":
        # sentencepiece-like: spaces become '▁', attached to the following word
        tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        alphabet = ["▁" if c == " " else c for c in ascii_chars]
    else:
        # byte-level like GPT-2 / Qwen ('Ġworld'); no prefix space
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        b2u = _bytes_to_unicode()
        alphabet = [b2u[ord(c)] for c in ascii_chars]
    trainer = trainers.BpeTrainer(
        vocab_size=TINY["vocab_size"],
        special_tokens=specials,
        initial_alphabet=alphabet,
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer)
    if style == "llama":
        bos = tok.token_to_id("<s>")
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    assert tok.get_vocab_size() <= TINY["vocab_size"], tok.get_vocab_size()
    return tok.to_str()


def make_tokenizer(kind: str):
    """A fresh PreTrainedTokenizerFast for `kind` (trained once per process and style)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    style = _STYLE[kind]
    tok = Tokenizer.from_str(_tokenizer_json(style))
    extra = {"add_bos_token": True} if style == "llama" else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=TINY["max_position_embeddings"],
        **_ROLES[style],
        **extra,
    )


def special_token_ids(kind: str) -> dict[str, int | None]:
    """bos/eos/pad ids for the config, consistent with make_tokenizer(kind)."""
    style = _STYLE[kind]
    ids = {s: i for i, s in enumerate(_SPECIALS[style])}  # trainer puts specials first, in order
    roles = _ROLES[style]
    return {
        f"{r}_token_id": (ids[roles[f"{r}_token"]] if f"{r}_token" in roles else None)
        for r in ("bos", "eos", "pad")
    }


# --------------------------------------------------------------------------------------------
# models


def _config(kind: str, cfg_overrides: dict):
    import transformers as tf

    ids = special_token_ids(kind)
    if kind == "qwen3_next":
        kw = dict(TINY, **LINEAR, num_experts=0, **ids)
        return tf.Qwen3NextConfig(**{**kw, **cfg_overrides})
    if kind == "qwen3_5":
        kw = dict(TINY, **LINEAR, rope_parameters=dict(QWEN3_5_ROPE), **ids)
        return tf.Qwen3_5TextConfig(**{**kw, **cfg_overrides})
    if kind == "qwen3":
        return tf.Qwen3Config(**{**TINY, **ids, **cfg_overrides})
    if kind == "qwen2":
        return tf.Qwen2Config(**{**TINY, **ids, **cfg_overrides})
    if kind == "llama":
        return tf.LlamaConfig(**{**TINY, **ids, **cfg_overrides})
    if kind == "mistral":
        return tf.MistralConfig(**{**TINY, **ids, **cfg_overrides})
    if kind == "olmo2":                      # post-norm: norms after attention and MLP
        return tf.Olmo2Config(**{**TINY, **ids, **cfg_overrides})
    if kind == "olmo_hybrid":                # layers 0-2 Gated DeltaNet, layer 3 softmax (as qwen3_5)
        layers = ["linear_attention"] * 3 + ["full_attention"]
        return tf.OlmoHybridConfig(**{**TINY, **LINEAR, **ids, "layer_types": layers, **cfg_overrides})
    if kind == "gemma3":                     # sandwich norms; sliding layers, a global one every 6th
        return tf.Gemma3TextConfig(**{**TINY, **ids, "sliding_window": 16, **cfg_overrides})
    if kind == "granite":                    # not in probe's registry: analysed as ungated by layout
        return tf.GraniteConfig(**{**TINY, **ids, **cfg_overrides})
    if kind == "gpt2":
        kw = dict(
            vocab_size=TINY["vocab_size"],
            n_embd=TINY["hidden_size"],
            n_layer=TINY["num_hidden_layers"],
            n_head=TINY["num_attention_heads"],
            n_inner=TINY["intermediate_size"],
            n_positions=TINY["max_position_embeddings"],
            initializer_range=INIT_STD,
            **ids,
        )
        return tf.GPT2Config(**{**kw, **cfg_overrides})
    raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS + EXTRA_KINDS}")


# The class each Hugging Face kind is built with; AutoModelForCausalLM must load it back as such.
MODEL_CLASS = {
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "olmo2": "Olmo2ForCausalLM",
    "olmo_hybrid": "OlmoHybridForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "granite": "GraniteForCausalLM",
}


def _calibration_ids(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(30_000 + seed)
    return torch.randint(0, TINY["vocab_size"], (4, 64), generator=g)


# Gate shift. Neither gated format has a q_proj bias, and a random model's residual stream has
# no direction that all tokens share strongly (the mean of a layer's normalised input is ~0.8
# of its spread), so shifting gate rows along such a direction makes the gates noise around
# the target. Instead one hidden dimension k is reserved as a "bias dimension": every embedding
# holds BIAS_VALUE there, no layer reads it (its column is zeroed in every projection that
# reads the residual stream) or writes it (its row is zeroed in every projection that writes
# it), so it stays constant and after each RMSNorm it is BIAS_VALUE / rms(h), a positive value
# that varies only with the token's residual norm. The gate rows alone read it, with weights
# calibrated layer by layer so that the mean gate logit is `gate_shift` plus per-head offsets.
# (An offset along a random direction in all embeddings was tried first: attention and MLPs
# amplify it until later layers' inputs are nearly identical for all tokens.)
BIAS_VALUE = 1.0
HEAD_OFFSET_STD = 1.5
CALIBRATION_GRID = 64            # calibrated gate weights are multiples of 1/64
_RESIDUAL_READERS = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "lm_head")
_RESIDUAL_WRITERS = ("o_proj", "down_proj", "out_proj")


def _bias_dim(hidden: int, seed: int) -> int:
    g = torch.Generator().manual_seed(10_000 + seed)
    return int(torch.randint(0, hidden, (1,), generator=g))


def _reserve_bias_dim(model, k: int) -> None:
    """Make hidden dimension k a constant BIAS_VALUE that no layer reads or writes."""
    hidden = model.config.hidden_size
    emb = model.get_input_embeddings().weight
    emb[:, k] = BIAS_VALUE
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if leaf in _RESIDUAL_READERS or leaf.startswith("in_proj"):
            assert mod.in_features == hidden, name
            if mod.weight is not emb:  # a tied lm_head adds the same amount to every logit
                mod.weight[:, k] = 0.0
        elif leaf in _RESIDUAL_WRITERS:
            assert mod.out_features == hidden, name
            mod.weight[k, :] = 0.0
            if mod.bias is not None:
                mod.bias[k] = 0.0
        else:
            raise AssertionError(f"unclassified projection {name}")


def _gate_bias_weights(normed: torch.Tensor, gate_logits: torch.Tensor, k: int, shift: float,
                       generator: torch.Generator) -> torch.Tensor:
    """Per query head, the gate rows' weight on the bias dimension k: (H,).

    normed: the layer's normalised input (B, T, hidden); gate_logits: its gate logits so far
    (B, T, H, 1 or D), with zero weight on k. The gate rows do not influence their own
    layer's input, so on the calibration batch the layer's mean gate logit becomes exactly
    `shift`, with head means spread by N(0, HEAD_OFFSET_STD²) offsets.
    """
    H = gate_logits.shape[-2]
    offsets = HEAD_OFFSET_STD * torch.randn(H, generator=generator, dtype=torch.float64)
    target = shift + offsets - offsets.mean()  # (H,)
    weights = (target - float(gate_logits.double().mean())) / float(normed[..., k].double().mean())
    # On the grid of CALIBRATION_GRID: the calibration forward rounds its float32 parts (the
    # Gated DeltaNet kernel) in the way of the CPU's ATen kernels, a few ulps apart between
    # CPUs; a coarse grid gives every CPU the same weights (a value lands within 1e-6 of a
    # grid midpoint once in ~10^4) at the cost of a mean gate logit off by < 0.01.
    return torch.round(weights * CALIBRATION_GRID) / CALIBRATION_GRID


def _portable_decay(model, seed: int) -> None:
    """Gated DeltaNet's A_log, drawn as transformers does (log of uniform(0.01, 16)) but with a
    scalar log: the vectorised `log_` rounds a few values an ulp apart between CPU kernels."""
    g = torch.Generator().manual_seed(60_000 + seed)
    for module in model.modules():
        if isinstance(getattr(module, "A_log", None), torch.nn.Parameter):
            a = torch.empty(module.A_log.shape, dtype=torch.float64).uniform_(0.01, 16, generator=g)
            module.A_log.copy_(torch.tensor([math.log(x) for x in a.tolist()]).view_as(a))
        if type(module).__name__ == "OlmoHybridGatedDeltaNet":
            # its dt_bias too (transformers draws it through vectorised exp / log): softplus^-1 of
            # a log-uniform step in [0.001, 0.1], in scalar math
            dt = [math.exp(math.log(1e-3) + u * math.log(100.0))
                  for u in torch.rand(module.dt_bias.shape, dtype=torch.float64, generator=g).tolist()]
            module.dt_bias.copy_(torch.tensor([x + math.log(-math.expm1(-x)) for x in dt]))


def _sharpen_qk_norm(model, zero_centred: bool, seed: int) -> None:
    """Scale the query-norm weights ~2x: QK-normed random heads are otherwise near-uniform."""
    g = torch.Generator().manual_seed(40_000 + seed)
    for layer in model.model.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or getattr(attn, "q_norm", None) is None:
            continue
        w = attn.q_norm.weight
        scale = 2.0 * (1.0 + 0.1 * torch.randn(w.shape, generator=g))
        if zero_centred:  # Qwen3-Next / Qwen3.5 norms compute x * (1 + w)
            w.copy_((1.0 + w) * scale - 1.0)
        else:
            w.mul_(scale)


def make_checkpoint(
    kind: str, path: Path, *, seed: int = 0, tokenizer: bool = True, **overrides
) -> Path:
    """Write a tiny random checkpoint of `kind` into `path` and return `path`.

    `overrides` are config fields (e.g. `num_hidden_layers=2`, `tie_word_embeddings=True`,
    `qkv_bias=True` for the official kinds; GPT-2 accepts its own names or the common ones),
    plus two factory options for the gated kinds: `gate_shift` (the mean gate logit of every
    gated layer on random tokens, default -2.0, i.e. mean gate ~0.3; None or 0 leaves the
    gates centred on logit ~0) and, for the official kinds, `gate_std` (std of the random gate
    rows, default 0.2).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    opts = {k: overrides.pop(k) for k in _FACTORY_KEYS if k in overrides}
    if "gate_std" in opts and kind not in OFFICIAL_KINDS:
        raise TypeError("gate_std applies to the official kinds only")
    with single_thread():
        if kind in OFFICIAL_KINDS:
            _make_official(kind, path, seed=seed, overrides=overrides, **opts)
        else:
            _make_hf(kind, path, seed=seed, overrides=overrides, **opts)
    if tokenizer:
        make_tokenizer(kind).save_pretrained(path)
    return path


def _make_hf(kind, path, *, seed, overrides, gate_shift=DEFAULT_GATE_SHIFT):
    model = _build_hf(kind, seed=seed, overrides=overrides, gate_shift=gate_shift)
    model.save_pretrained(path)


def _build_hf(kind, *, seed, overrides, gate_shift=DEFAULT_GATE_SHIFT):
    import transformers as tf

    if kind == "qwen3_5_vl":
        return _wrap_qwen3_5_vl(_build_hf("qwen3_5", seed=seed, overrides=overrides,
                                          gate_shift=gate_shift))
    if kind not in MODEL_CLASS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS + EXTRA_KINDS}")
    config = _config(kind, overrides)
    torch.manual_seed(seed)
    model = getattr(tf, MODEL_CLASS[kind])(config).eval()
    with torch.no_grad():
        _portable_decay(model, seed)
        if kind in ("qwen3", "qwen3_next", "qwen3_5"):
            _sharpen_qk_norm(model, zero_centred=kind != "qwen3", seed=seed)
        if kind in GATED_KINDS and gate_shift:
            _reserve_bias_dim(model, _bias_dim(config.hidden_size, seed))
            _shift_native_gates(model, config, gate_shift, seed)
    return model


def _wrap_qwen3_5_vl(text_model):
    """Put a Qwen3_5ForCausalLM into a Qwen3_5ForConditionalGeneration with a tiny vision tower."""
    import transformers as tf

    tc = text_model.config
    ids = {s: i for i, s in enumerate(_SPECIALS["qwen"])}
    config = tf.Qwen3_5Config(
        text_config=tc.to_dict(),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=tc.hidden_size, patch_size=4,
                           num_position_embeddings=16),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tc.tie_word_embeddings,
    )
    torch.manual_seed(0)
    model = tf.Qwen3_5ForConditionalGeneration(config).eval()
    model.model.language_model.load_state_dict(text_model.model.state_dict())
    model.lm_head.load_state_dict(text_model.lm_head.state_dict())
    return model


def _shift_native_gates(model, config, shift, seed):
    """Qwen3-Next / Qwen3.5: q_proj viewed as (H, 2D) per head; the last D rows are the gate."""
    H, D = config.num_attention_heads, config.head_dim
    k = _bias_dim(config.hidden_size, seed)
    ids = _calibration_ids(seed)
    g = torch.Generator().manual_seed(50_000 + seed)
    for layer in model.model.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None:  # Gated DeltaNet layer
            continue
        seen = {}
        hooks = [
            layer.input_layernorm.register_forward_hook(
                lambda mod, args, out: seen.__setitem__("normed", out)),
            attn.q_proj.register_forward_hook(
                lambda mod, args, out: seen.__setitem__(
                    "gate", out.view(*out.shape[:-1], H, 2 * D)[..., D:])),  # (B, T, H, D)
        ]
        try:
            model.double()(ids)      # float64 but for the Gated DeltaNet kernel's float32 parts
        finally:
            model.float()            # exact: every weight was a float32 value
            for h in hooks:
                h.remove()
        bias_w = _gate_bias_weights(seen["normed"], seen["gate"], k, shift, g)  # (H,)
        w = attn.q_proj.weight.view(H, 2 * D, -1)  # (H, 2D, hidden)
        w[:, D:, k] = bias_w[:, None].float()


# --------------------------------------------------------------------------------------------
# the paper's official checkpoint format


def _official_flags(kind: str) -> tuple[bool, bool]:
    return kind == "official_headwise", kind == "official_elementwise"


def official_q_rows(cfg: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Row indices of an official `q_proj` (weight or bias): (query rows, gate rows).

    The query rows come out in the standard per-head order (head h = kv*G + j, then dim), so
    `w[query_rows]` is a stock Qwen3 `q_proj`; the gate rows come out per query head, H rows
    (headwise) or H*D rows (elementwise, head-major). Gate rows is None for the baseline.
    """
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    G = H // KV
    headwise = bool(cfg.get("headwise_attn_output_gate"))
    elementwise = bool(cfg.get("elementwise_attn_output_gate"))
    gate_width = G if headwise else G * D if elementwise else 0  # gate rows per KV group
    group = G * D + gate_width
    base = torch.arange(KV)[:, None] * group  # (KV, 1)
    query = (base + torch.arange(G * D)).reshape(-1)
    gate = (base + G * D + torch.arange(gate_width)).reshape(-1) if gate_width else None
    return query, gate


def _official_config(kind, *, tie, qkv_bias, extra):
    headwise, elementwise = _official_flags(kind)
    ids = special_token_ids(kind)
    # Written by hand in the style of a transformers 4.x Qwen3 config (top-level rope_theta,
    # torch_dtype, auto_map pointing to the repository's remote code), as released.
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_qwen3.Qwen3Config",
            "AutoModelForCausalLM": "modeling_qwen3.Qwen3ForCausalLM",
        },
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["bos_token_id"],
        "eos_token_id": ids["eos_token_id"],
        "head_dim": TINY["head_dim"],
        "hidden_act": "silu",
        "hidden_size": TINY["hidden_size"],
        "initializer_range": INIT_STD,
        "intermediate_size": TINY["intermediate_size"],
        "max_position_embeddings": TINY["max_position_embeddings"],
        "max_window_layers": TINY["num_hidden_layers"],
        "num_attention_heads": TINY["num_attention_heads"],
        "num_hidden_layers": TINY["num_hidden_layers"],
        "num_key_value_heads": TINY["num_key_value_heads"],
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": OFFICIAL_ROPE_THETA,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": tie,
        "torch_dtype": "float32",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "vocab_size": TINY["vocab_size"],
        "use_qk_norm": True,
        "qkv_bias": qkv_bias,
        "headwise_attn_output_gate": headwise,
        "elementwise_attn_output_gate": elementwise,
    }
    cfg.update(extra)
    return cfg


def _make_official(kind, path, *, seed, overrides, gate_shift=DEFAULT_GATE_SHIFT,
                   gate_std=INIT_STD):
    import transformers as tf
    from safetensors.torch import save_file

    overrides = dict(overrides)
    tie = bool(overrides.pop("tie_word_embeddings", False))
    qkv_bias = bool(overrides.pop("qkv_bias", False))
    if overrides.pop("use_qk_norm", True) is not True:
        raise ValueError("official tiny checkpoints always use QK-norm (use_qk_norm=True)")
    cfg = _official_config(kind, tie=tie, qkv_bias=qkv_bias, extra=overrides)
    cfg["tie_word_embeddings"] = tie

    # A stock Qwen3 of the same shape supplies every weight except the gate rows.
    stock = tf.Qwen3Config(
        **{k: cfg[k] for k in TINY},
        rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
        rms_norm_eps=cfg["rms_norm_eps"],
        attention_bias=qkv_bias,  # official qkv_bias also gives o_proj a bias, as here
        tie_word_embeddings=tie,
    )
    torch.manual_seed(seed)
    model = tf.Qwen3ForCausalLM(stock).eval()
    headwise, elementwise = _official_flags(kind)
    shift = gate_shift if (headwise or elementwise) else None
    bias_k = _bias_dim(cfg["hidden_size"], seed)
    with torch.no_grad():
        _sharpen_qk_norm(model, zero_centred=False, seed=seed)
        if shift:
            _reserve_bias_dim(model, bias_k)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if tie:
        sd.pop("lm_head.weight", None)

    if headwise or elementwise:
        H, D, hidden = cfg["num_attention_heads"], cfg["head_dim"], cfg["hidden_size"]
        n_gate = H if headwise else H * D
        g = torch.Generator().manual_seed(20_000 + seed)
        query_rows, gate_rows = official_q_rows(cfg)
        n_rows = len(query_rows) + len(gate_rows)
        for i in range(cfg["num_hidden_layers"]):
            key = f"model.layers.{i}.self_attn.q_proj"
            w = torch.empty(n_rows, hidden)
            w[query_rows] = sd[f"{key}.weight"]  # (H*D, hidden), standard per-head order
            w[gate_rows] = torch.randn(n_gate, hidden, generator=g) * gate_std
            if shift:
                w[gate_rows, bias_k] = 0.0  # set by the calibration below
            sd[f"{key}.weight"] = w
            if qkv_bias:
                b = torch.empty(n_rows)
                b[query_rows] = sd[f"{key}.bias"]
                b[gate_rows] = torch.randn(n_gate, generator=g) * gate_std
                sd[f"{key}.bias"] = b
        if shift:
            ids = _calibration_ids(seed)
            g = torch.Generator().manual_seed(50_000 + seed)
            rows_per_head = len(gate_rows) // H  # gate_rows are head-major
            for i in range(cfg["num_hidden_layers"]):
                _, internals = _reference(cfg, sd, ids, return_internals=True, dtype=torch.float64)
                bias_w = _gate_bias_weights(internals[i]["attn_in"], internals[i]["gate_logits"],
                                            bias_k, shift, g)  # (H,)
                w = sd[f"model.layers.{i}.self_attn.q_proj.weight"]
                w[gate_rows, bias_k] = bias_w.repeat_interleave(rows_per_head).float()
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path / "model.safetensors"),
              metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (single file or sharded safetensors)."""
    from safetensors.torch import load_file

    path = Path(path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        sd = {}
        for f in files:
            sd.update(load_file(str(path / f)))
        return sd
    return load_file(str(path / "model.safetensors"))


def official_to_stock(path: Path, out: Path, *, tokenizer: bool = False) -> Path:
    """Write the official checkpoint at `path` minus its gate rows as a stock Qwen3 checkpoint.

    With the gates open (sigmoid = 1) both compute the same function.
    """
    import transformers as tf

    cfg = json.loads((Path(path) / "config.json").read_text())
    sd = load_state_dict(path)
    query_rows, _ = official_q_rows(cfg)
    for k in list(sd):
        if k.endswith("self_attn.q_proj.weight") or k.endswith("self_attn.q_proj.bias"):
            sd[k] = sd[k][query_rows]
    stock = tf.Qwen3Config(
        **{k: cfg[k] for k in TINY if k in cfg},
        rope_parameters={"rope_type": "default", "rope_theta": _rope_theta(cfg)},
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        attention_bias=bool(cfg.get("qkv_bias", False)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
    model = tf.Qwen3ForCausalLM(stock)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if stock.tie_word_embeddings:
        model.tie_weights()
    model.save_pretrained(out)
    if tokenizer:
        make_tokenizer("qwen3").save_pretrained(out)
    return Path(out)


def _rope_theta(cfg: dict) -> float:
    if cfg.get("rope_theta") is not None:
        return float(cfg["rope_theta"])
    return float((cfg.get("rope_parameters") or {}).get("rope_theta", 10_000.0))


# --------------------------------------------------------------------------------------------
# independent reference implementation of the official model


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


@torch.no_grad()
def official_reference_forward(
    path: Path,
    input_ids: torch.Tensor,
    *,
    return_internals: bool = False,
    dtype: torch.dtype = torch.float32,
):
    """Logits (B, T, V) of the official gated-attention Qwen3 model at `path`, in plain torch.

    Written from the official `modeling_qwen3.py` (eager path), not from transformers: causal
    softmax attention, RMSNorm, QK-norm on the query part only, RoPE with the config's theta,
    SwiGLU MLP, and `attn_output * sigmoid(gate)` before `o_proj`. No padding, positions 0..T-1.

    With `return_internals=True` returns `(logits, internals)`, internals a list with one dict
    per layer: `attn_in` (the normalised input of q/k/v_proj, B, T, hidden), `gate_logits`
    (B, T, H, 1 or D) or None, `attn_probs` (B, H, T, T), `attn_out`
    (pre-gate, B, T, H, D), `o_proj_in` (gated, B, T, H*D), `resid_mid` and `resid_post`
    (B, T, hidden).
    """
    path = Path(path)
    cfg = json.loads((path / "config.json").read_text())
    with single_thread():
        return _reference(cfg, load_state_dict(path), input_ids,
                          return_internals=return_internals, dtype=dtype)


def _reference(cfg, sd, input_ids, *, return_internals=False, dtype=torch.float32):
    sd = {k: v.to(dtype) for k, v in sd.items()}
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    B, T = input_ids.shape
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    G = H // KV
    eps = cfg.get("rms_norm_eps", 1e-6)
    headwise = bool(cfg.get("headwise_attn_output_gate"))
    elementwise = bool(cfg.get("elementwise_attn_output_gate"))
    use_qk_norm = cfg.get("use_qk_norm", True)

    theta = _rope_theta(cfg)
    # RoPE angles in float32 as the official code computes them (float64 if dtype is float64):
    # at float32 the angle itself is rounded, which moves logits by ~1e-5 at T ~ 64.
    fdtype = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(fdtype) / D)
    freqs = torch.arange(T, dtype=fdtype)[:, None] * inv_freq[None]  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)  # (T, D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def lin(x, name):
        y = x @ sd[f"{name}.weight"].T
        bias = sd.get(f"{name}.bias")
        return y if bias is None else y + bias

    x = sd["model.embed_tokens.weight"][input_ids]  # (B, T, hidden)
    internals = []
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = h_attn = _rms(x, sd[p + "input_layernorm.weight"], eps)
        q_all = lin(h, p + "self_attn.q_proj").view(B, T, KV, -1)
        if headwise:
            q, gate = q_all.split([G * D, G], dim=-1)
            gate = gate.reshape(B, T, H, 1)
        elif elementwise:
            q, gate = q_all.split([G * D, G * D], dim=-1)
            gate = gate.reshape(B, T, H, D)
        else:
            q, gate = q_all, None
        q = q.reshape(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = lin(h, p + "self_attn.k_proj").view(B, T, KV, D).transpose(1, 2)  # (B, KV, T, D)
        v = lin(h, p + "self_attn.v_proj").view(B, T, KV, D).transpose(1, 2)
        if use_qk_norm:
            q = _rms(q, sd[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, sd[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(G, dim=1)  # query head h reads KV head h // G
        v = v.repeat_interleave(G, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # (B, H, T, T)
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(dtype)
        attn = (probs @ v).transpose(1, 2)  # (B, T, H, D), pre-gate
        gated = attn * torch.sigmoid(gate) if gate is not None else attn
        o_in = gated.reshape(B, T, H * D)
        x = x + lin(o_in, p + "self_attn.o_proj")
        resid_mid = x
        h = _rms(x, sd[p + "post_attention_layernorm.weight"], eps)
        mlp = lin(
            torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"),
            p + "mlp.down_proj",
        )
        x = x + mlp
        if return_internals:
            internals.append(
                dict(attn_in=h_attn, gate_logits=gate, attn_probs=probs, attn_out=attn,
                     o_proj_in=o_in,
                     resid_mid=resid_mid, resid_post=x)
            )
    x = _rms(x, sd["model.norm.weight"], eps)
    head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    logits = x @ head.T
    return (logits, internals) if return_internals else logits


# --------------------------------------------------------------------------------------------
# GGUF files (llama.cpp's format), written from a tiny Llama


def _gguf_permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp stores q / k rows with each head's rotary halves interleaved; transformers
    undoes this on load (convert_hf_to_gguf.py's `permute`)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_gguf(path: Path, *, quant: str = "F32", seed: int = 0, architecture: str = "llama", **overrides):
    """Write the tiny llama kind (byte-level BPE tokenizer inside) as a GGUF file; return
    (path, the Hugging Face model it was written from). quant: F32 or Q8_0 for the matrices
    (norms stay F32, as llama.cpp writes them). `architecture` only changes the name recorded
    in the file (for a file transformers cannot read)."""
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType as Q

    path = Path(path)
    model = _build_hf("llama", seed=seed, overrides=overrides)
    cfg = model.config
    tok = make_tokenizer("qwen2")                        # byte-level BPE: tokens + merges
    data = json.loads(tok.backend_tokenizer.to_str())
    vocab = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    tokens = [t for t, _ in vocab] + [f"<pad{i}>" for i in range(cfg.vocab_size - len(vocab))]
    specials = {a["content"]: a["id"] for a in data["added_tokens"]}

    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quant == "Q8_0" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(specials["<|endoftext|>"])
    w.add_pad_token_id(specials["<|endoftext|>"])
    w.add_add_bos_token(False)

    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    tensors = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"],
               "output.weight": sd["lm_head.weight"]}
    for i in range(cfg.num_hidden_layers):
        for hf, short in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if short == "attn_q":
                t = _gguf_permute(t, cfg.num_attention_heads)
            elif short == "attn_k":
                t = _gguf_permute(t, cfg.num_key_value_heads)
            tensors[f"blk.{i}.{short}.weight"] = t
    for name, t in tensors.items():
        array = t.numpy().astype(np.float32)
        if quant == "Q8_0" and array.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(array, Q.Q8_0), raw_dtype=Q.Q8_0)
        else:
            w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, model
