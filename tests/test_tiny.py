"""Tests of the tiny-checkpoint factory (tests/tiny.py) that the rest of the suite relies on."""

from __future__ import annotations

import json
import math
import os
import shutil
import types
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests import tiny

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

HF_KINDS = [k for k in tiny.KINDS if k not in tiny.OFFICIAL_KINDS]
OFFICIAL_GATED = ["official_headwise", "official_elementwise"]


@pytest.fixture(autouse=True, scope="module")
def _quiet_and_single_threaded():
    logging = transformers.utils.logging
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    with tiny.single_thread():  # tiny models: threads only add overhead
        yield
    if bars:
        logging.enable_progress_bar()
    logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Every kind, built once for the module (with tokenizer)."""
    root = tmp_path_factory.mktemp("tiny")
    return {k: tiny.make_checkpoint(k, root / k) for k in tiny.KINDS + tiny.EXTRA_KINDS}


def _ids(n=2, t=48, seed=0):
    return torch.randint(0, 256, (n, t), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ every kind


def test_kinds_list():
    assert tiny.KINDS == (
        "qwen3_next", "qwen3_5", "official_headwise", "official_elementwise",
        "qwen3", "qwen2", "llama", "mistral", "gpt2",
    )


@pytest.mark.parametrize("kind", tiny.KINDS + tiny.EXTRA_KINDS)
def test_files_and_config(checkpoints, kind):
    path = checkpoints[kind]
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert (path / "tokenizer.json").is_file() and (path / "tokenizer_config.json").is_file()
    cfg = AutoConfig.from_pretrained(path)  # official kinds too: model_type qwen3, no remote code
    cfg = cfg.get_text_config()
    assert cfg.vocab_size == 256
    assert cfg.hidden_size == 64 and cfg.num_hidden_layers == 4 and cfg.num_attention_heads == 4
    assert cfg.max_position_embeddings >= 512
    if kind != "gpt2":
        assert cfg.num_key_value_heads == 2 and cfg.head_dim == 16
        assert cfg.intermediate_size == 128
    else:
        assert cfg.n_inner == 128 and cfg.hidden_size // cfg.num_attention_heads == 16
    if kind in ("qwen3_next", "qwen3_5", "qwen3_5_vl"):
        assert cfg.layer_types == ["linear_attention"] * 3 + ["full_attention"]


def test_qwen3_5_vl_is_the_real_release_format(checkpoints):
    path = checkpoints["qwen3_5_vl"]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5"
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    keys = tiny.load_state_dict(path).keys()
    assert "model.language_model.layers.3.self_attn.q_proj.weight" in keys
    assert any(k.startswith("model.visual.") for k in keys)
    full = transformers.AutoModelForImageTextToText.from_pretrained(path)
    assert type(full).__name__ == "Qwen3_5ForConditionalGeneration"
    assert len(full.model.language_model.layers) == 4
    # AutoModelForCausalLM maps it to the text-only class (layers at model.layers), which
    # computes exactly what the "qwen3_5" kind with the same seed computes
    text = AutoModelForCausalLM.from_pretrained(path)
    assert type(text).__name__ == "Qwen3_5ForCausalLM" and len(text.model.layers) == 4
    plain = AutoModelForCausalLM.from_pretrained(checkpoints["qwen3_5"])
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(text(ids).logits, plain(ids).logits, rtol=0, atol=0)
        torch.testing.assert_close(full(input_ids=ids).logits, plain(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("kind", HF_KINDS)
def test_loads_and_runs(checkpoints, kind):
    path = checkpoints[kind]
    model = AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == tiny.MODEL_CLASS[kind]  # Auto* picks the class the factory built
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("The gate score is a sigmoid.", return_tensors="pt")["input_ids"]
    assert int(ids.max()) < 256
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 256)
    assert torch.isfinite(logits).all() and logits.std() > 0.5
    layers = model.transformer.h if kind == "gpt2" else model.model.layers
    assert len(layers) == 4


@pytest.mark.parametrize("kind", HF_KINDS)
def test_attention_is_not_uniform(checkpoints, kind):
    model = AutoModelForCausalLM.from_pretrained(checkpoints[kind], attn_implementation="eager")
    with torch.no_grad():
        out = model(_ids(t=64), output_attentions=True)
    probs = [a for a in out.attentions if a is not None]
    assert len(probs) == (1 if kind in ("qwen3_next", "qwen3_5") else 4)
    for a in probs:
        ent = -(a.clamp_min(1e-12).log() * a).sum(-1)[..., 8:]  # (B, H, T-8)
        uniform = torch.log(torch.arange(9, 65, dtype=torch.float32))
        assert (ent / uniform).mean() < 0.75


def test_native_gates_vary_and_are_shifted(checkpoints):
    for kind in ("qwen3_next", "qwen3_5"):
        model = AutoModelForCausalLM.from_pretrained(checkpoints[kind])
        cfg = model.config
        H, D = cfg.num_attention_heads, cfg.head_dim
        seen = []
        layer = model.model.layers[3]
        hook = layer.self_attn.q_proj.register_forward_hook(
            lambda m, a, out: seen.append(out.view(*out.shape[:-1], H, 2 * D)[..., D:]))
        with torch.no_grad():
            model(_ids(seed=5))
        hook.remove()
        gate = torch.sigmoid(seen[0])
        assert 0.15 < gate.mean() < 0.45, kind
        assert gate.std() > 0.15, kind
        assert gate.mean(dim=(0, 1, 3)).std() > 0.02, kind  # heads differ
        assert not hasattr(model.model.layers[0], "self_attn")  # layer 0 is Gated DeltaNet
        # the reserved bias dimension: one embedding column is constant
        assert (model.get_input_embeddings().weight.std(dim=0) == 0).sum() == 1


def test_deterministic_given_seed(tmp_path):
    for kind in ("qwen3", "official_elementwise"):
        def make(name, seed):
            return tiny.load_state_dict(
                tiny.make_checkpoint(kind, tmp_path / name, seed=seed, tokenizer=False))

        a, b, c = make("a", 1), make("b", 1), make("c", 2)
        assert a.keys() == b.keys() == c.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])
        for d in "abc":
            shutil.rmtree(tmp_path / d)


def test_overrides_and_no_tokenizer(tmp_path):
    p = tiny.make_checkpoint("llama", tmp_path / "l", tokenizer=False, num_hidden_layers=2)
    assert not (p / "tokenizer.json").exists()
    assert AutoConfig.from_pretrained(p).num_hidden_layers == 2
    p = tiny.make_checkpoint("gpt2", tmp_path / "g", tokenizer=False, num_hidden_layers=2)
    assert AutoConfig.from_pretrained(p).n_layer == 2
    with pytest.raises(ValueError):
        tiny.make_checkpoint("bert", tmp_path / "x")
    with pytest.raises(TypeError):
        tiny.make_checkpoint("qwen3_next", tmp_path / "x", gate_std=0.5)


def test_gate_shift_off(tmp_path):
    """gate_shift=0: plain random gates centred on 0.5, no reserved bias dimension."""
    p = tiny.make_checkpoint("official_headwise", tmp_path / "o", tokenizer=False, gate_shift=0)
    _, internals = tiny.official_reference_forward(p, _ids(), return_internals=True)
    gate = torch.sigmoid(torch.cat([d["gate_logits"] for d in internals]))
    assert 0.4 < gate.mean() < 0.6 and gate.std() > 0.15
    p = tiny.make_checkpoint("qwen3_next", tmp_path / "n", tokenizer=False, gate_shift=0)
    emb = tiny.load_state_dict(p)["model.embed_tokens.weight"]
    assert emb.std(dim=0).min() > 0.05  # no constant column


# ------------------------------------------------------------------ tokenizer


@pytest.mark.parametrize("kind", tiny.KINDS)
def test_tokenizer_bos_behaviour(checkpoints, kind):
    tok = AutoTokenizer.from_pretrained(checkpoints[kind])
    cfg = json.loads((checkpoints[kind] / "config.json").read_text())
    assert len(tok) <= 256
    ids = tok("hello world")["input_ids"]
    bare = tok("hello world", add_special_tokens=False)["input_ids"]
    if kind in tiny.BOS_KINDS:
        assert tok.bos_token == "<s>" and tok.eos_token == "</s>" and tok.unk_token == "<unk>"
        assert ids[0] == tok.bos_token_id == 1 and ids[1:] == bare
        assert tok.convert_ids_to_tokens(ids)[0] == "<s>"
        assert tok.decode(ids, skip_special_tokens=True) == "hello world"
    else:
        assert ids == bare
        assert tok.decode(ids) == "hello world"
        if kind == "gpt2":
            assert tok.bos_token == tok.eos_token == "<|endoftext|>"
            assert ids[0] != tok.bos_token_id
        else:
            assert tok.bos_token is None
            assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    # the config's special ids agree with the tokenizer's
    assert cfg["eos_token_id"] == tok.eos_token_id
    assert cfg.get("bos_token_id") == tok.bos_token_id


def test_tokenizer_roundtrip_and_cache():
    text = "Attention sinks, massive activations: x = 3.14 * (y + 2)!\n\tdone"
    for kind in ("qwen3", "llama", "gpt2"):
        tok = tiny.make_tokenizer(kind)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
        assert len(ids) < len(text)  # BPE merged something
    assert tiny.make_tokenizer("qwen3") is not tiny.make_tokenizer("qwen3")  # fresh objects
    assert tiny._tokenizer_json.cache_info().hits > 0


# ------------------------------------------------------------------ official format


@pytest.mark.parametrize("kind", OFFICIAL_GATED)
def test_official_format(checkpoints, kind):
    path = checkpoints[kind]
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "qwen3" and cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["use_qk_norm"] is True and cfg["qkv_bias"] is False
    headwise = kind == "official_headwise"
    assert cfg["headwise_attn_output_gate"] is headwise
    assert cfg["elementwise_attn_output_gate"] is (not headwise)
    sd = tiny.load_state_dict(path)
    rows = 4 * 16 + 4 if headwise else 2 * 4 * 16
    for i in range(4):
        assert sd[f"model.layers.{i}.self_attn.q_proj.weight"].shape == (rows, 64)
        assert sd[f"model.layers.{i}.self_attn.k_proj.weight"].shape == (32, 64)
    # stock transformers refuses the checkpoint (q_proj size mismatch) rather than loading it
    with pytest.raises(Exception):
        AutoModelForCausalLM.from_pretrained(path)


def test_official_q_rows_layout():
    cfg = dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_size=64)
    q, g = tiny.official_q_rows({**cfg, "headwise_attn_output_gate": True})
    # per KV group: 32 query rows then 2 gate rows
    assert q.tolist() == list(range(32)) + list(range(34, 66))
    assert g.tolist() == [32, 33, 66, 67]
    q, g = tiny.official_q_rows({**cfg, "elementwise_attn_output_gate": True})
    assert q.tolist() == list(range(32)) + list(range(64, 96))
    assert g.tolist() == list(range(32, 64)) + list(range(96, 128))
    q, g = tiny.official_q_rows(cfg)
    assert q.tolist() == list(range(64)) and g is None


def float32_atol(logits: torch.Tensor, layers: int = 4, width: int = 128) -> float:
    """How far two float32 forwards of the same weights may be apart when they reduce in other
    orders (the reference's matmuls against transformers' eager path): each layer's widest
    reduction (the MLP, `width` terms) moves a value by up to width * 2**-24 of the magnitudes
    it sums, over `layers` layers, on the scale of the logits. A wrong head, gate or row order
    moves logits by a good part of their scale, far beyond this."""
    return layers * width * 2**-24 * float(logits.abs().max())


def _stock_logits(path, out, ids):
    stock = AutoModelForCausalLM.from_pretrained(tiny.official_to_stock(path, out),
                                                 attn_implementation="eager")
    with torch.no_grad():
        return stock(ids).logits


def _set_gates(path, closed_heads=()):
    """Constant gates: zero gate weight rows, gate bias +30 (open) or -30 for `closed_heads`."""
    cfg = json.loads((path / "config.json").read_text())
    sd = tiny.load_state_dict(path)
    _, gate_rows = tiny.official_q_rows(cfg)
    per_head = len(gate_rows) // cfg["num_attention_heads"]  # 1 (headwise) or D (elementwise)
    for i in range(cfg["num_hidden_layers"]):
        w = sd[f"model.layers.{i}.self_attn.q_proj.weight"]
        b = sd[f"model.layers.{i}.self_attn.q_proj.bias"]
        w[gate_rows] = 0.0
        b[gate_rows] = 30.0
        for h in closed_heads:
            b[gate_rows[h * per_head:(h + 1) * per_head]] = -30.0
    save_file(sd, str(path / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize("kind", OFFICIAL_GATED)
def test_official_reference_matches_stock_with_open_gates(tmp_path, kind):
    path = tiny.make_checkpoint(kind, tmp_path / "o", tokenizer=False, qkv_bias=True)
    _set_gates(path)  # sigmoid(30) == 1 in float32
    ids = _ids()
    ref, internals = tiny.official_reference_forward(path, ids, return_internals=True)
    assert torch.sigmoid(internals[0]["gate_logits"]).min() == 1.0
    torch.testing.assert_close(ref, _stock_logits(path, tmp_path / "s", ids), atol=float32_atol(ref), rtol=0)


@pytest.mark.parametrize("kind", OFFICIAL_GATED)
def test_official_reference_gate_head_mapping(tmp_path, kind):
    """Closing query head 1's gate equals zeroing head 1's o_proj input columns."""
    path = tiny.make_checkpoint(kind, tmp_path / "o", tokenizer=False, qkv_bias=True)
    _set_gates(path, closed_heads=[1])  # sigmoid(-30) ~ 1e-13: head 1 off, rest open
    ids = _ids()
    ref = tiny.official_reference_forward(path, ids)
    stock = AutoModelForCausalLM.from_pretrained(tiny.official_to_stock(path, tmp_path / "s"))
    with torch.no_grad():
        for layer in stock.model.layers:
            layer.self_attn.o_proj.weight[:, 16:32] = 0.0  # head 1 = KV group 0, slot 1
        logits = stock(ids).logits
    torch.testing.assert_close(ref, logits, atol=float32_atol(ref), rtol=0)


def test_official_baseline_reference_matches_stock(checkpoints, tmp_path):
    path = checkpoints["official_baseline"]
    ids = _ids()
    ref = tiny.official_reference_forward(path, ids)
    torch.testing.assert_close(ref, _stock_logits(path, tmp_path / "s", ids), atol=float32_atol(ref), rtol=0)


@pytest.mark.parametrize("kind", OFFICIAL_GATED)
def test_official_reference_internals(checkpoints, kind):
    logits, internals = tiny.official_reference_forward(checkpoints[kind], _ids(),
                                                        return_internals=True)
    assert len(internals) == 4 and logits.shape == (2, 48, 256)
    for d in internals:
        B, T, H, D = d["attn_out"].shape
        assert (B, T, H, D) == (2, 48, 4, 16)
        gate_width = 1 if kind == "official_headwise" else 16
        assert d["gate_logits"].shape == (2, 48, 4, gate_width)
        gated = d["attn_out"] * torch.sigmoid(d["gate_logits"])
        torch.testing.assert_close(d["o_proj_in"], gated.reshape(B, T, H * D))
        torch.testing.assert_close(d["attn_probs"].sum(-1), torch.ones(B, H, T))
        assert torch.all(d["attn_probs"].triu(1) == 0)
        gate = torch.sigmoid(d["gate_logits"])
        assert 0.15 < gate.mean() < 0.45 and gate.std() > 0.15
    # the gates matter: what o_proj reads differs from the ungated attention output
    assert not torch.allclose(internals[-1]["o_proj_in"], internals[-1]["attn_out"].flatten(2))


def test_official_tied_embeddings(tmp_path):
    path = tiny.make_checkpoint("official_headwise", tmp_path / "t", tokenizer=False,
                                tie_word_embeddings=True)
    assert "lm_head.weight" not in tiny.load_state_dict(path)
    assert json.loads((path / "config.json").read_text())["tie_word_embeddings"] is True
    assert torch.isfinite(tiny.official_reference_forward(path, _ids())).all()


# The official modeling code (qiuzh20/gated_attention) sits beside the checkout, in
# ../shared/reference/; PROBE_OFFICIAL_REFERENCE points elsewhere.
OFFICIAL_REFERENCE = Path(os.environ.get(
    "PROBE_OFFICIAL_REFERENCE",
    Path(__file__).resolve().parents[2] / "shared" / "reference" / "qiuzh20-gated_attention"))


def _official_repo_source(name):
    path = OFFICIAL_REFERENCE / name
    return path.read_text() if path.is_file() else None


@pytest.mark.parametrize("kind", OFFICIAL_GATED)
def test_official_reference_equals_official_code(tmp_path, kind):
    """Run the repository's own attention/MLP/norm code (where a copy exists) against ours.

    Its modeling file does not import on transformers >= 5, so the needed definitions are
    pulled out of it and run with a plain namespace config.
    """
    import ast

    src = _official_repo_source("modeling_qwen3.py")
    if src is None:
        pytest.skip(f"no copy of the official code at {OFFICIAL_REFERENCE} "
                    "(set PROBE_OFFICIAL_REFERENCE)")
    from transformers.activations import ACT2FN

    want = {"Qwen3RMSNorm", "rotate_half", "apply_rotary_pos_emb", "Qwen3MLP", "repeat_kv",
            "Qwen3Attention"}
    ns = dict(torch=torch, nn=torch.nn, math=math, ACT2FN=ACT2FN, Optional=object,
              Tuple=tuple, Cache=object, Qwen3Config=object,
              Qwen3RotaryEmbedding=lambda config: None,
              logger=types.SimpleNamespace(warning_once=lambda *a, **k: None))
    for node in ast.parse(src).body:
        if getattr(node, "name", None) in want:
            exec(compile(ast.Module([node], []), "official_modeling_qwen3", "exec"), ns)
    path = tiny.make_checkpoint(kind, tmp_path / "o", tokenizer=False, qkv_bias=True)
    cfgd = json.loads((path / "config.json").read_text())
    cfg = types.SimpleNamespace(**cfgd)
    sd = tiny.load_state_dict(path)

    def sub(prefix):
        return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}

    ids = _ids()
    T, D = ids.shape[1], cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    freqs = torch.arange(T).float()[:, None] * inv[None]
    emb = torch.cat((freqs, freqs), -1)[None]
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
    norm = ns["Qwen3RMSNorm"]
    with torch.no_grad():
        x = sd["model.embed_tokens.weight"][ids]
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            attn, mlp = ns["Qwen3Attention"](cfg, i), ns["Qwen3MLP"](cfg)
            attn.load_state_dict(sub(p + "self_attn."))
            mlp.load_state_dict(sub(p + "mlp."))
            n1 = norm(cfg.hidden_size, cfg.rms_norm_eps)
            n2 = norm(cfg.hidden_size, cfg.rms_norm_eps)
            n1.load_state_dict(sub(p + "input_layernorm."))
            n2.load_state_dict(sub(p + "post_attention_layernorm."))
            x = x + attn(n1(x), attention_mask=mask, position_embeddings=(cos, sin))[0]
            x = x + mlp(n2(x))
        fn = norm(cfg.hidden_size, cfg.rms_norm_eps)
        fn.load_state_dict(sub("model.norm."))
        logits = fn(x) @ sd["lm_head.weight"].T
    torch.testing.assert_close(tiny.official_reference_forward(path, ids), logits,
                               atol=1e-6, rtol=0)
