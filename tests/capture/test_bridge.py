"""probe through a TransformerLens 4.x TransformerBridge against probe's Hugging Face path.

The bridge recomputes attention as an explicit softmax (F-Attn from hook_pattern) while the HF
path reads it from the SDPA log-sum-exp, so the two are independent computations of the same
definitions on the same tokens.
"""
from __future__ import annotations

import math

import inspect
import json
import warnings

import pytest
import torch

import probe
from tests import tiny
from tests.samples import TEXT
from probe import ProbeError
from probe.capture.bridge import BridgeCapture, build_bridge, is_bridge
from probe.load.loader import describe
from probe.load.reorder import reorder_official_q_proj

F_ATTN_TOL = 1e-5
GATE_TOL = 1e-5
# One gate score of the two paths: float32 logits of O(1) reduced in other orders, a few ulps.
SCORE_ROUNDING = 1e-6
M_ACT_REL = 1e-4
LOGITS_TOL = 1e-5
OFFICIAL = ("official_headwise", "official_elementwise")


def _tl_builder():
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    return build_bridge_from_module


def ids_for(B=2, T=40, seed=1):
    return torch.randint(3, tiny.TINY["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed))


def analyses(path, **options):
    """(HF path, bridge path) on the same text: 244 tokens, 6 rows of <= 48, the last padded."""
    kwargs = {**dict(texts=[TEXT[:400]], seq_len=48, batch_size=4, progress=False, display_len=12), **options}
    return probe.analyze(path, **kwargs), probe.analyze(build_bridge(path), **kwargs)


def joined(a, b, keys):
    m = a.merge(b, on=keys, suffixes=("_hf", "_tl"), how="outer", indicator=True)
    assert (m._merge == "both").all(), m[m._merge != "both"]
    return m


@pytest.mark.parametrize("kind", ("qwen3_next", "qwen3") + OFFICIAL)
def test_bridge_path_gives_the_hf_numbers(kind, checkpoint):
    hf, tl = analyses(checkpoint(kind))
    assert tl.meta["backend"] == "transformer_lens"
    assert_same_numbers(hf, tl, gated=kind != "qwen3")


def assert_same_numbers(hf, tl, *, gated: bool) -> None:
    """Every table of the two paths agrees (tolerances at the top of the file)."""
    assert (tl.meta["tokens"], tl.meta["sequences"], tl.meta["position0"]) == \
        (hf.meta["tokens"], hf.meta["sequences"], hf.meta["position0"])
    assert tl.meta["windows"] == hf.meta["windows"]
    assert tl.summary["gate_layout"] == hf.summary["gate_layout"]

    ft = joined(hf.first_token, tl.first_token, ["layer", "head", "metric"])
    assert list(ft.layer_type_hf) == list(ft.layer_type_tl)
    attn = ft[ft.layer_type_hf == "attention"]
    assert len(attn) and attn.value_tl.notna().all()
    assert (attn.value_hf - attn.value_tl).abs().max() <= F_ATTN_TOL
    assert ft[ft.layer_type_hf != "attention"].value_tl.isna().all()     # linear layers: marked, not 0
    for key in ("f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate"):
        assert tl.summary[key] == pytest.approx(hf.summary[key], abs=F_ATTN_TOL)

    if not gated:
        assert tl.gates.empty and hf.gates.empty
        assert tl.gates_by_token_type.empty and hf.gates_by_token_type.empty
    else:
        g = joined(hf.gates, tl.gates, ["layer", "head", "group", "metric"])
        counts = g.metric == "count"
        assert (g[counts].value_hf == g[counts].value_tl).all()          # headwise: one score per head
        assert (g[~counts].value_hf - g[~counts].value_tl).abs().max() <= GATE_TOL
        h = joined(hf.gate_hist, tl.gate_hist, ["layer", "head", "bin_lo"])
        # A score within its rounding (SCORE_ROUNDING) of a bin edge may land on either side:
        # of N scores in bins of width w, about N * 2 * SCORE_ROUNDING / w do; each move
        # changes two bins' counts by one.
        width = float((h.bin_hi_hf - h.bin_lo).min())
        moves = math.ceil(h.count_hf.sum() * 2 * SCORE_ROUNDING / width)
        assert (h.count_hf - h.count_tl).abs().sum() <= 2 * max(moves, 1)
        assert tl.summary["mean_gate"] == pytest.approx(hf.summary["mean_gate"], abs=GATE_TOL)
        assert_same_token_types(hf, tl)

    m = joined(hf.massive, tl.massive, ["layer", "site", "metric"])
    assert len(m[m.metric == "max_abs"]) == 4 * 4                        # 4 layers x 4 sites
    # M-Act is the max; the median is read from a log histogram, where one value that moves
    # across a bin edge shifts the interpolation (its resolution is ~0.5%).
    for metric, rel in (("max_abs", M_ACT_REL), ("median_abs", 1e-3)):
        mm = m[m.metric == metric]
        assert ((mm.value_hf - mm.value_tl).abs() / mm.value_hf.abs()).max() <= rel, metric
    assert (m[m.metric == "count"].value_hf == m[m.metric == "count"].value_tl).all()
    top = joined(hf.massive_top, tl.massive_top, ["layer", "site", "rank"])
    assert ((top.abs_value_hf - top.abs_value_tl).abs() / top.abs_value_hf).max() <= M_ACT_REL
    assert tl.summary["m_act"] == pytest.approx(hf.summary["m_act"], rel=M_ACT_REL)

    sp = joined(hf.sparsity, tl.sparsity, ["layer", "variant", "threshold"])
    assert (sp.value_hf - sp.value_tl).abs().max() <= 1e-3
    assert tl.summary["loss"] == pytest.approx(hf.summary["loss"], abs=1e-5)
    pat = joined(hf.attention_patterns, tl.attention_patterns, ["layer", "query", "key"])
    assert (pat.value_hf - pat.value_tl).abs().max() <= 1e-5


def assert_same_token_types(hf, tl) -> float:
    """gates_by_token_type: the same rows, equal counts, statistics within GATE_TOL; returns the
    largest difference seen."""
    assert len(hf.gates_by_token_type) and list(tl.gates_by_token_type.columns) == list(hf.gates_by_token_type.columns)
    t = joined(hf.gates_by_token_type, tl.gates_by_token_type, ["layer", "head", "token_type", "metric"])
    exact = t.metric.isin(["tokens", "count"])
    assert (t[exact].value_hf == t[exact].value_tl).all()
    rest = t[~exact]
    assert (rest.value_hf.isna() == rest.value_tl.isna()).all()          # empty user groups: NaN on both
    diff = float((rest.value_hf - rest.value_tl).abs().max())
    assert diff <= GATE_TOL
    return diff


USER_GROUPS = {"period": ["."], "the": [" the", "The"], "ids": [5, 6], "never_seen": [250]}


@pytest.mark.parametrize("kind", ("qwen3_next", "official_headwise"))
def test_token_groups_match_the_hf_path(kind, checkpoint):
    """gates_by_token_type with a user --token-groups dict: bridge == HF path."""
    hf, tl = analyses(checkpoint(kind), token_groups=USER_GROUPS)
    assert_same_token_types(hf, tl)
    frame = tl.gates_by_token_type
    tokens = frame[(frame.metric == "tokens") & (frame["head"] == 0) & (frame.layer == frame.layer.min())]
    tokens = dict(zip(tokens.token_type, tokens.value))
    assert set(USER_GROUPS) <= set(tokens) and tokens["never_seen"] == 0
    assert tokens["period"] > 0 and tokens["the"] > 0
    assert tokens["first"] == tl.meta["sequences"]
    assert sum(tokens.get(t, 0) for t in probe.data.token_types.BUILTIN) == tl.meta["tokens"]


@pytest.mark.parametrize("kind,per_document", [("qwen3_next", True), ("official_elementwise", False)])
def test_sliding_windows_match_the_hf_path(kind, per_document, checkpoint):
    """max_length / stride: windows whose context counts nowhere, the same on both paths."""
    options = dict(max_length=32, stride=16, token_groups=USER_GROUPS)
    if per_document:
        options.update(per_document=True, texts=[TEXT[:400], TEXT[400:500]])
    hf, tl = analyses(checkpoint(kind), **options)
    assert tl.meta["windows"]["stride"] == 16 and tl.meta["windows"]["max_length"] == 32
    assert tl.meta["sequences"] > 6                                      # overlapping windows
    assert tl.meta["tokens"] < tl.meta["sequences"] * 32                 # context left out
    assert_same_numbers(hf, tl, gated=True)


# -- every option of probe.analyze is honoured or refused ----------------------------------------

# Options the bridge path cannot carry out: each must stop with one line naming it.
REFUSED = {"gate": "q_proj:interleaved:elementwise", "device_map": "auto", "interventions": "all",
           "partial": "PARTIAL", "resume": True, "checkpoint_seconds": 0.0, "ablate": "key0",
           "dtype": "bfloat16", "device": "cuda", "exact_control": True, "anatomy": True, "gdn": True,
           "rope_scaling": "yarn:2", "past_positions": True, "loss_by_position": True}     # the bridge holds float32 weights on the CPU


class RecordingTokenizer:
    """A tokenizer that counts its uses: shows that the tokenizer option reached the data."""

    def __init__(self, tokenizer):
        self.__dict__.update(_tok=tokenizer, uses=0)

    def __getattr__(self, key):
        self.__dict__["uses"] += 1
        return getattr(self._tok, key)

    def __call__(self, *args, **kwargs):
        self.__dict__["uses"] += 1
        return self._tok(*args, **kwargs)

    def __len__(self):
        return len(self._tok)


def honoured_cases(tmp_path, tokenizer) -> dict[str, tuple[object, dict]]:
    """option -> (a value, arguments both runs share): the value must change what comes back."""
    text = tmp_path / "doc.txt"
    text.write_text(TEXT[:150])
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"body": TEXT[:150]}) + "\n")
    return {
        "data": (str(text), {"texts": None}),
        "texts": ([TEXT[:100]], {}),
        "tokenizer": (RecordingTokenizer(tokenizer), {}),
        "name": ("renamed", {}),
        "seq_len": (24, {}),
        "batch_size": (1, {}),                                            # more forward passes
        "bos": ("prepend", {}),                                           # Qwen has no BOS: refused (data/sequences.py)
        "per_document": (True, {}),
        "max_sequences": (2, {}),
        "thresholds": ((0.5,), {}),
        "display_len": (5, {}),
        "progress": (True, {}),
        "seed": (7, {}),
        "on_long": ("error", {"per_document": True}),                     # the document is longer than seq_len
        "text_field": ("body", {"data": str(jsonl), "texts": None}),
        "command": ("probe analyze x", {}),
        "token_groups": ({"period": ["."]}, {}),
        "max_length": (16, {}),
        "stride": (16, {}),
        "resamples": (0, {}),                                             # no intervals
        "token_series": (0, {}),                                          # no per-token series
    }


def test_every_analyze_option_is_honoured_or_refused(checkpoint, tmp_path, monkeypatch, capsys):
    """Introspects AnalysisOptions: an option added there and forgotten here fails this test."""
    import dataclasses

    from probe.core.options import AnalysisOptions

    options = ["data", "texts"] + [f.name for f in dataclasses.fields(AnalysisOptions)]
    bridge = build_bridge(checkpoint("official_headwise"))       # gated, and quicker than a hybrid
    honoured = honoured_cases(tmp_path, bridge.tokenizer)
    unknown = sorted(set(options) - set(honoured) - set(REFUSED))
    assert not unknown, f"probe.analyze options that the bridge path neither honours nor refuses: {unknown}"
    # probe.analyze takes the options whole (and data, texts): none is declared twice; the bridge
    # refuses exactly the options of HF_ONLY.
    assert list(inspect.signature(probe.analyze).parameters)[1:4] == ["data", "texts", "options"]
    from probe.run.source import HF_ONLY

    assert set(HF_ONLY) == set(REFUSED) - {"dtype", "device"}

    for option, value in REFUSED.items():
        with pytest.raises(ProbeError, match=option) as err:
            probe.analyze(bridge, texts=[TEXT[:200]], seq_len=32, progress=False,
                          **{option: str(tmp_path / value) if value == "PARTIAL" else value})
        assert "\n" not in str(err.value), option

    passes = []
    real_forward = BridgeCapture.forward
    monkeypatch.setattr(BridgeCapture, "forward", lambda self, ids: passes.append(1) or real_forward(self, ids))
    base = dict(texts=[TEXT[:200]], seq_len=32, progress=False, display_len=12)   # 122 tokens, 4 rows

    def observed(**kwargs):
        """What a run shows of its options (or the ProbeError it stops with)."""
        passes.clear()
        try:
            with warnings.catch_warnings(record=True) as seen:   # a warning is part of what it shows
                warnings.simplefilter("always")
                a = probe.analyze(bridge, **kwargs)
        except ProbeError as err:
            return ("refused", str(err))
        finally:
            stderr = capsys.readouterr().err
        warned = tuple(str(w.message) for w in seen if issubclass(w.category, UserWarning))
        m = a.meta
        return (m["name"], m["data"], m["seq_len"], m["seed"], m["command"], m["tokens"], m["sequences"],
                m["bos_policy"], m["windows"], len(m["display_tokens"]), sorted(set(a.sparsity.threshold)),
                sorted(set(a.gates_by_token_type.token_type)), len(passes), bool(stderr.strip()),
                a.summary["loss"], warned, a.summary["f_attn_lo"], a.token_series is not None)

    baselines = {}                                  # one run per distinct set of shared arguments
    for option, (value, shared) in honoured.items():
        key = repr(sorted(shared.items()))
        if key not in baselines:
            baselines[key] = observed(**{**base, **shared})
        before = baselines[key]
        uses = getattr(value, "uses", 0)
        after = observed(**{**base, **shared, option: value})
        assert after != before or getattr(value, "uses", 0) > uses, f"{option}={value!r} changed nothing"


def test_gate_scores_equal_sigmoid_of_hook_q_gate(checkpoint):
    """Issue 2: the gate scores probe carves out of q_proj equal TransformerLens's hook_q_gate."""
    path = checkpoint("qwen3_next")
    lm = probe.load(path)
    L = lm.layout
    ids = ids_for()
    hf_scores = {}
    handles = [p.gate_module.register_forward_hook(
        lambda mod, args, out, i=p.index: hf_scores.__setitem__(
            i, L.gate.scores(out, L.num_heads, L.num_kv_heads, L.head_dim)))
        for p in L.layers if p.gate_module is not None]
    with torch.no_grad():
        lm.model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()

    bridge = build_bridge(path)
    q_out, q_gate = {}, {}
    hooks = []
    for i in L.attention_layers:
        # q_proj's output; the bridge shows it split into (2H, D) "heads": flatten it back.
        hooks.append((f"blocks.{i}.attn.q.hook_out",
                      lambda x, hook, i=i: q_out.__setitem__(i, x.flatten(2).clone())))
        hooks.append((f"blocks.{i}.attn.hook_q_gate", lambda x, hook, i=i: q_gate.__setitem__(i, x.clone())))
    with torch.no_grad():
        bridge.run_with_hooks(ids, fwd_hooks=hooks)
    assert set(q_gate) == set(hf_scores) == set(L.attention_layers)
    for i, logits in q_gate.items():
        tl_scores = torch.sigmoid(logits.view(*ids.shape, L.num_heads, L.head_dim))
        # Same tensor, two readings of it: probe's layout logic against TransformerLens's.
        assert torch.equal(L.gate.scores(q_out[i], L.num_heads, L.num_kv_heads, L.head_dim), tl_scores)
        # Across the two forward passes (HF and bridge) on the same tokens.
        torch.testing.assert_close(hf_scores[i], tl_scores, atol=1e-6, rtol=0)


def hf_logits(model, ids, impl="eager"):
    """TransformerLens computes attention as eager softmax; SDPA differs from it by ~1e-5 in fp32."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(impl)
    try:
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False).logits
    finally:
        model.set_attn_implementation(previous)


@pytest.mark.parametrize("kind", OFFICIAL)
def test_official_layout_is_refused_until_reordered(kind, checkpoint):
    path = checkpoint(kind)
    ids = ids_for(seed=2)
    original = probe.load(path).model
    reference, reference_sdpa = hf_logits(original, ids), hf_logits(original, ids, "sdpa")
    build = _tl_builder()

    # What a TransformerLens user would do: Qwen3-Next's per-head gate on the official q_proj.
    raw = probe.load(path).model
    bridge = build(raw, "Qwen3NextForCausalLM", hf_config=raw.config)
    if kind == "official_elementwise":                     # silently wrong, which is why probe refuses
        with torch.no_grad():
            assert (bridge(ids) - reference).abs().max() > 1e-2
    with pytest.raises(ProbeError, match=r"official .* gate layout.*reorder_official_q_proj") as err:
        probe.analyze(bridge, texts=[TEXT], seq_len=32, progress=False)
    assert "\n" not in str(err.value)

    # Reordered first, the same construction is right, and so is build_bridge's.
    lm = probe.load(path)
    fixed = reorder_official_q_proj(lm.model)
    torch.testing.assert_close(hf_logits(fixed, ids), reference, atol=LOGITS_TOL, rtol=0)
    manual = build(fixed, "Qwen3NextForCausalLM", hf_config=fixed.config, tokenizer=lm.tokenizer)
    for bridge in (manual, build_bridge(path)):
        with torch.no_grad():
            logits = bridge(ids)
        torch.testing.assert_close(logits, reference, atol=LOGITS_TOL, rtol=0)
        torch.testing.assert_close(logits, reference_sdpa, atol=5e-5, rtol=0)
        probe.analyze(bridge, texts=[TEXT], seq_len=32, max_sequences=2, progress=False, display_len=0)


@pytest.mark.parametrize("kind", OFFICIAL)
def test_reordered_rows_are_the_per_head_layout(kind, checkpoint):
    """Against tiny.official_q_rows, the factory's own account of the official row order."""
    path = checkpoint(kind)
    cfg = json.loads((path / "config.json").read_text())
    H, D = cfg["num_attention_heads"], cfg["head_dim"]
    query_rows, gate_rows = tiny.official_q_rows(cfg)
    model = probe.load(path).model
    before = [a.self_attn.q_proj.weight.clone() for a in model.model.layers]
    reorder_official_q_proj(model)
    assert reorder_official_q_proj(model) is model                       # idempotent
    for w, layer in zip(before, model.model.layers):
        new = layer.self_attn.q_proj.weight.view(H, 2 * D, -1)
        torch.testing.assert_close(new[:, :D], w[query_rows].view(H, D, -1), atol=0, rtol=0)
        gates = w[gate_rows].view(H, -1, w.shape[1])                     # (H, 1 or D, hidden)
        torch.testing.assert_close(new[:, D:], gates.expand(H, D, -1), atol=0, rtol=0)
    assert probe.load(path).layout.gate.layout == "grouped"              # a fresh load is untouched
    assert describe(model).gate.layout == "interleaved"                   # probe's HF path follows


def test_hooks_are_gone_and_logits_untouched(checkpoint):
    bridge = build_bridge(checkpoint("qwen3_next"))
    ids = ids_for(seed=3)
    with torch.no_grad():
        plain = bridge(ids)
    probe.analyze(bridge, texts=[TEXT], seq_len=32, max_sequences=3, progress=False)

    def live(b):
        return sum(len(hp._forward_hooks) + len(hp._forward_pre_hooks) for hp in b.hook_dict.values())
    assert live(bridge) == 0
    with torch.no_grad():
        torch.testing.assert_close(bridge(ids), plain, atol=0, rtol=0)
    with pytest.raises(ProbeError, match="gate= does not apply"):
        probe.analyze(bridge, texts=[TEXT], gate="q_proj:interleaved:elementwise")
    assert is_bridge(bridge) and not is_bridge(bridge.original_model)


def _functions_called_in(module, call):
    """The names of the functions of `module`'s file that run while `call()` runs."""
    import sys

    file, seen = module.__file__, set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == file:
            seen.add(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seen


def test_one_analysis_two_sources(checkpoint):
    """probe.analyze of a Hugging Face checkpoint asks bridge.py only whether the model is a
    bridge; of a bridge, it runs the same recipe (source.py) with the bridge's hooks."""
    import probe.capture.bridge
    import probe.run.source

    path = checkpoint("qwen3")
    run = dict(texts=[TEXT[:120]], seq_len=16, max_sequences=2, progress=False, display_len=4)
    assert _functions_called_in(probe.capture.bridge, lambda: probe.analyze(path, **run)) == {"is_bridge"}
    asked = []
    real = probe.capture.bridge.is_bridge
    with pytest.MonkeyPatch.context() as patch:           # one bridge check per analysis (issue 32)
        patch.setattr(probe.capture.bridge, "is_bridge", lambda model: asked.append(model) or real(model))
        probe.analyze(path, **run)
    assert len(asked) == 1
    bridge = build_bridge(path)
    called = _functions_called_in(probe.run.source, lambda: probe.analyze(bridge, **run))
    assert {"source_for", "of", "capture", "forwarding", "display_patterns", "meta"} <= called
    assert "as_loaded" not in called                       # nothing of the Hugging Face source's
