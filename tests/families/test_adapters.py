"""The family registry (probe/families/), family by family, on tiny configs.

Every model type the registry knows is built from a tiny config of its own (CASES; the text
model, or the release format with a vision tower where the type names a multimodal wrapper),
saved, loaded back through `probe.load` like a user's checkpoint, and checked: the class
transformers (or the official adapter) builds, the family, gate layout, heads and layer types
the layout reports against the config, the module each M-Act site reads, and one short
analysis, whose F-Attn must equal the model's own eager softmax attention and whose gate
scores must equal sigmoid of the gate rows of q_proj applied to q_proj's input (rows picked
from the family's documented layout, not through probe's GateSpec).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import pandas as pd
import pytest
import torch

import probe
from tests import tiny
from probe.families.describe import describe
from probe.families import official, registry
from tests.reference import eager_attentions

SIZES = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
             initializer_range=0.2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
H, KV, D = 4, 2, 16
HYBRID = dict(tiny.LINEAR, full_attention_interval=2)          # layer 0 linear attention, layer 1 softmax
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
SHARED = dict(MOE, shared_expert_intermediate_size=32)
QWEN3_5 = dict(SIZES, **HYBRID, rope_parameters=dict(tiny.QWEN3_5_ROPE))
# Qwen4-Exp: two residual streams (hyper-connections), a token indexer on the softmax layers
QWEN4 = dict(SIZES, **HYBRID, **SHARED, hc_count=2, hc_lowrank=8, indexer_n_heads=2, indexer_kv_heads=1,
             indexer_head_dim=16, indexer_budget=8, indexer_compress_ratio=4)
QWEN_VISION = dict(vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                                      out_hidden_size=64, patch_size=4, num_position_embeddings=16),
                   image_token_id=124, video_token_id=125, vision_start_token_id=126, vision_end_token_id=127)
# OLMo-Hybrid: layer 0 Gated DeltaNet (every projection apart, g_proj gate, beta up to 2), layer 1 softmax
OLMO_HYBRID = dict(SIZES, **{k: v for k, v in tiny.LINEAR.items() if k.startswith("linear_")},
                   layer_types=["linear_attention", "full_attention"])
GEMMA3 = dict(SIZES, sliding_window=16)
GEMMA_VISION = dict(vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, image_size=28, patch_size=14),
                    mm_tokens_per_image=4, image_token_index=127, boi_token_index=125, eoi_token_index=126)
GPT2 = dict(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_inner=128, n_positions=128, initializer_range=0.2,
            bos_token_id=1, eos_token_id=2)
# probe graft's Llama with a sigmoid gate_proj (scale 1); random gate weights from the init.
GRAFT = {"base": None, "gate": "headwise", "init": "random", "scale": 1.0, "seed": None}
PHI3 = {k: v for k, v in SIZES.items() if k != "head_dim"}          # head_dim = hidden / heads = 16

B, T = 2, 24
IDS = torch.randint(3, 120, (B, T), generator=torch.Generator().manual_seed(0))
F_ATTN_TOL = 1e-5
GATE_TOL = 1e-5


@dataclass(frozen=True)
class Case:
    model_type: str                # config.model_type of the model built
    family: str
    text: dict                     # the text model's config
    wrapper: dict | None = None    # the multimodal release format's other settings (vision tower, token ids)
    gate_layout: str = "none"
    # the layer's module whose input is the residual after attention (or one per layer type)
    resid_mid: str | dict | None = "post_attention_layernorm"
    flags: dict = field(default_factory=dict)            # official gate flags on a qwen3 config
    model_class: str | None = None                       # the class probe.load must build, when not transformers' own
    gate_module: str = "q_proj"                          # the attention's module whose output holds the gate logits

    @property
    def gated(self) -> bool:
        return self.gate_layout != "none"


INTERLEAVED, GROUPED_HW, GROUPED_EW = "interleaved_elementwise", "grouped_headwise", "grouped_elementwise"
OFFICIAL_CLASS = "OfficialGatedQwen3ForCausalLM"
CASES = {c.model_type if not c.flags else f"qwen3+{next(iter(c.flags))}": c for c in (
    Case("qwen3_next", "qwen3_next", dict(SIZES, **HYBRID, **SHARED), gate_layout=INTERLEAVED),
    Case("qwen3_5_text", "qwen3_next", QWEN3_5, gate_layout=INTERLEAVED),
    Case("qwen3_5", "qwen3_next", QWEN3_5, QWEN_VISION, gate_layout=INTERLEAVED),
    Case("qwen3_5_moe_text", "qwen3_next", dict(QWEN3_5, **SHARED), gate_layout=INTERLEAVED),
    Case("qwen3_5_moe", "qwen3_next", dict(QWEN3_5, **SHARED), QWEN_VISION, gate_layout=INTERLEAVED),
    Case("qwen4_exp_text", "qwen3_next", QWEN4, gate_layout=INTERLEAVED, resid_mid=None),
    Case("qwen4_exp", "qwen3_next", QWEN4, QWEN_VISION, gate_layout=INTERLEAVED, resid_mid=None),
    Case("qwen3", "qwen3", SIZES),
    Case("qwen3", "qwen3", SIZES, gate_layout=GROUPED_HW, flags=dict(headwise_attn_output_gate=True),
         model_class=OFFICIAL_CLASS),
    Case("qwen3", "qwen3", SIZES, gate_layout=GROUPED_EW, flags=dict(elementwise_attn_output_gate=True),
         model_class=OFFICIAL_CLASS),
    Case("qwen3", "qwen3", SIZES, flags=dict(use_qk_norm=False), model_class=OFFICIAL_CLASS),
    Case("qwen3_moe", "qwen3", dict(SIZES, **MOE)),
    Case("qwen2", "qwen2", SIZES),
    Case("qwen2_moe", "qwen2", dict(SIZES, **SHARED)),
    Case("llama", "llama", SIZES),
    Case("grafted_llama", "grafted_llama", dict(SIZES, graft=GRAFT), gate_layout="plain_headwise",
         model_class="GraftedLlamaForCausalLM", gate_module="gate_proj"),
    Case("mistral", "mistral", SIZES),
    Case("mixtral", "mistral", dict(SIZES, num_local_experts=4, num_experts_per_tok=2)),
    Case("gemma", "gemma", SIZES),
    Case("gemma2", "gemma", dict(SIZES, sliding_window=16, attn_logit_softcapping=1.0),   # a cap that binds
         resid_mid="pre_feedforward_layernorm"),
    Case("gemma3_text", "gemma", GEMMA3, resid_mid="pre_feedforward_layernorm"),
    Case("gemma3", "gemma", GEMMA3, GEMMA_VISION, resid_mid="pre_feedforward_layernorm"),
    Case("olmo2", "olmo2", SIZES, resid_mid="mlp"),                  # post-norm: the MLP reads the stream
    # pre-norm GDN layers, post-norm softmax layers (as OLMo 2's)
    Case("olmo_hybrid", "olmo_hybrid", OLMO_HYBRID,
         resid_mid={"linear_attention": "post_attention_layernorm", "attention": "mlp"}),
    Case("phi3", "phi3", PHI3),
    Case("gpt2", "gpt2", GPT2, resid_mid="ln_2"),
)}
# Outside the registry, analysed as ungated from its layout (with a note): gpt-oss, whose
# attention sinks probe's back-end folds into the log-sum-exp.
OUTSIDE = {"gpt_oss": Case("gpt_oss", "unregistered", dict(SIZES, intermediate_size=64, sliding_window=16,
                                                          num_local_experts=4, num_experts_per_tok=2))}


def build(case: Case):
    """The case's model, freshly initialised (seed 0), in eval mode."""
    import transformers as tf
    from transformers import AutoConfig

    torch.manual_seed(0)
    if case.wrapper is not None:                                  # the release format: text + vision
        text_type = {"gemma3": "gemma3_text"}.get(case.model_type, f"{case.model_type}_text")
        text = AutoConfig.for_model(text_type, **case.text).to_dict()
        config = AutoConfig.for_model(case.model_type, text_config=text, **case.wrapper)
        return tf.AutoModelForImageTextToText.from_config(config).eval()
    config = AutoConfig.for_model(case.model_type, **case.text, **case.flags)
    if case.model_class == OFFICIAL_CLASS:
        from probe.families.official_qwen3 import OfficialGatedQwen3ForCausalLM

        return OfficialGatedQwen3ForCausalLM(config).eval()
    model = tf.AutoModelForCausalLM.from_config(config).eval()
    if case.model_type == "gpt_oss":
        with torch.no_grad():                             # sinks large enough to matter
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 2.0, generator=torch.Generator().manual_seed(3))
    return model


@dataclass
class Run:
    built: object                  # the model as built (config.model_type is the case's)
    loaded: object                 # probe.load of its saved folder
    analysis: object


@pytest.fixture(scope="session")
def family(tmp_path_factory):
    """family(case id) -> Run, built, saved, loaded and analysed once per session."""
    root = tmp_path_factory.mktemp("families")
    runs: dict[str, Run] = {}

    def get(name: str) -> Run:
        if name not in runs:
            case = {**CASES, **OUTSIDE}[name]
            with tiny.single_thread(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", "architecture .* is not in probe's registry")
                model = build(case)
                folder = root / name
                model.save_pretrained(folder)
                loaded = probe.load(folder)
                analysis = probe.analyze(loaded, IDS, seq_len=T, progress=False, display_len=0)
            runs[name] = Run(model, loaded, analysis)
        return runs[name]
    return get


def test_every_registered_model_type_has_a_case():
    """A family added to the registry without a tiny case here fails this test."""
    assert set(registry.supported_model_types()) == {c.model_type for c in CASES.values()}


@pytest.mark.parametrize("name", list(CASES))
def test_builds_loads_and_gets_its_layout(name, family):
    case, run = CASES[name], family(name)
    config = registry.text_config(run.built.config)
    assert run.built.config.model_type == case.model_type
    built = describe(run.built)
    assert (built.family, built.model_type) == (case.family, case.model_type)
    if case.model_class:
        assert type(run.loaded.model).__name__ == case.model_class
    layout = run.loaded.layout
    # Heads from the config, layer types from the config's own list (hybrids) or all softmax.
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim) == (H, KV if case.model_type != "gpt2" else H, D)
    types = getattr(config, "layer_types", None) or ["full_attention"] * 2
    expected = ["linear_attention" if t == "linear_attention" else "attention" for t in types]
    for lay in (built, layout):
        assert lay.family == case.family and lay.gate_layout == case.gate_layout, lay
        assert [p.layer_type for p in lay.layers] == expected
    assert not layout.note                                           # registered: no "unregistered" note
    for part in layout.layers:
        name = case.resid_mid.get(part.layer_type) if isinstance(case.resid_mid, dict) else case.resid_mid
        want = getattr(part.layer, name) if name else None
        assert part.resid_mid is want, (part.index, case.resid_mid)
        assert part.mlp is not None
        if part.layer_type == "attention":
            assert part.o_proj is not None
            assert part.gate_module is (getattr(part.mixer, case.gate_module) if case.gated else None)
    meta = run.analysis.meta
    assert (meta["family"], meta["gate_layout"], meta["model_type"]) == (case.family, case.gate_layout,
                                                                        layout.model_type)
    assert run.analysis.summary["tokens"] == B * T
    sites = set(run.analysis.massive.site)
    assert sites == {"attn_out", "mlp_out", "resid_post"} | ({"resid_mid"} if case.resid_mid else set())


def f_attn_table(analysis):
    rows = analysis.first_token.query("metric == 'f_attn'").dropna(subset=["value"])
    return {(int(r.layer), int(r.head)): r.value for r in rows.itertuples()}


@pytest.mark.parametrize("name", list(CASES) + list(OUTSIDE))
def test_first_token_attention_is_the_models_own(name, family):
    """F-Attn (probe's back-end, from the log-sum-exp) against the model's eager softmax, with
    Gemma 2's soft-capping, sliding windows, gpt-oss's sinks and Qwen4-Exp's token selection as
    the model does them."""
    run = family(name)
    layout = run.loaded.layout
    with tiny.single_thread():
        attentions = eager_attentions(run.loaded.model, IDS).attentions
    attentions = [a for a in attentions if a is not None]
    assert len(attentions) == len(layout.attention_layers)
    want = {}
    for layer, att in zip(layout.attention_layers, attentions):            # att: (B, H, T, T)
        per_head = att[:, :, 1:, 0].double().mean((0, 2))                  # (H,), queries t >= 1
        want.update({(layer, h): float(v) for h, v in enumerate(per_head)})
    got = f_attn_table(run.analysis)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=F_ATTN_TOL), key


def gate_rows(case: Case) -> torch.Tensor:
    """Row indices of the gate module's gate logits (q_proj's, or a gate_proj's), (H, Dg), head
    by head, from the family's layout."""
    if case.gate_layout == INTERLEAVED:                                    # per head [D query | D gate]
        return torch.arange(H)[:, None] * 2 * D + D + torch.arange(D)
    if case.gate_layout == "plain_headwise":                               # a gate module of its own, H rows
        return torch.arange(H)[:, None]
    _, rows = tiny.official_q_rows({**SIZES, **case.flags})               # grouped per KV head
    return rows.view(H, -1)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.gated])
def test_gate_scores_are_sigmoid_of_the_gate_rows(name, family):
    """Mean and max gate score per head against sigmoid(x W_gate^T), x the recorded q_proj input."""
    case, run = CASES[name], family(name)
    layout, model = run.loaded.layout, run.loaded.model
    inputs = {}
    handles = [p.gate_module.register_forward_pre_hook(
        lambda module, args, i=p.index: inputs.__setitem__(i, args[0].detach().double()))
        for p in layout.layers if p.gate_module is not None]
    try:
        with torch.no_grad(), tiny.single_thread():
            model(input_ids=IDS, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    gates = run.analysis.gates.query("group == 'all'")
    rows = gate_rows(case)
    for part in layout.layers:
        if part.gate_module is None:
            continue
        weight = part.gate_module.weight.detach().double()[rows.reshape(-1)]
        scores = torch.sigmoid(inputs[part.index] @ weight.T).view(B, T, H, -1)    # (B, T, H, Dg)
        for metric, value in (("mean", scores.mean((0, 1, 3))), ("max", scores.amax((0, 1, 3)))):
            got = gates.query(f"layer == {part.index} and metric == '{metric}'").sort_values("head").value
            torch.testing.assert_close(torch.tensor(got.to_numpy()), value, atol=GATE_TOL, rtol=0)


@pytest.mark.parametrize("name", ["qwen3+headwise_attn_output_gate", "qwen3+elementwise_attn_output_gate"])
def test_reordered_official_model_says_so_itself(name, family, tmp_path):
    """After reorder_official_q_proj the layout reads the gate per head, from the attention modules
    themselves: the config gains no attributes (a saved copy would carry them), and the gate
    scores and F-Attn are the grouped layout's."""
    from probe.load.reorder import reorder_official_q_proj

    case, run = CASES[name], family(name)
    model = build(case)
    model.save_pretrained(tmp_path)
    loaded = probe.load(tmp_path)
    before = loaded.model.config.to_dict()
    assert not official.is_reordered(loaded.model)
    reorder_official_q_proj(loaded)
    assert official.is_reordered(loaded.model) and loaded.layout.gate_layout == INTERLEAVED
    assert loaded.model.config.to_dict() == before
    assert describe(loaded.model).gate_layout == INTERLEAVED
    with tiny.single_thread():
        after = probe.analyze(loaded, IDS, seq_len=T, progress=False, display_len=0)
    mean = "metric == 'mean' and group == 'all'"
    torch.testing.assert_close(torch.tensor(after.gates.query(mean).value.to_numpy()),
                               torch.tensor(run.analysis.gates.query(mean).value.to_numpy()), atol=1e-6, rtol=0)
    assert f_attn_table(after) == pytest.approx(f_attn_table(run.analysis), abs=1e-6)


def test_official_checkpoint_is_decided_by_model_type_and_flag():
    """One place decides: model_type qwen3 with a gate flag is official; the same flag on another
    type is not (its class has no gate rows); use_qk_norm false needs the official class only."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    from probe.families.official_qwen3 import OfficialGatedQwen3ForCausalLM

    for flags, is_official, cls in ((dict(headwise_attn_output_gate=True), True, OfficialGatedQwen3ForCausalLM),
                                    (dict(elementwise_attn_output_gate=True), True, OfficialGatedQwen3ForCausalLM),
                                    (dict(use_qk_norm=False), False, OfficialGatedQwen3ForCausalLM),
                                    ({}, False, None)):
        config = Qwen3Config(**SIZES, **flags)
        assert official.is_official(config) is is_official and registry.model_class(config) is cls, flags
    moe = Qwen3MoeConfig(**SIZES, headwise_attn_output_gate=True)
    assert not official.is_official(moe) and registry.model_class(moe) is None
    assert registry.registered("qwen3_moe").gate(None, moe) is None


def test_gpt_oss_outside_the_registry_is_analysed_as_ungated_with_a_note(family):
    run = family("gpt_oss")
    layout = run.loaded.layout
    assert layout.family == "unregistered" and not layout.gated
    assert "no attention-output gate" in layout.note and run.analysis.meta["layout_note"] == layout.note
    assert layout.attention_layers == [0, 1]


def test_a_model_type_registered_twice_is_refused_naming_both():
    """Two adapters claiming one model type: the second would take the first's place silently
    (issue 32); the registry refuses it in one line that names both entries."""
    from probe.core.registry import DuplicateRegistration
    from probe.families.registry import ADAPTERS, Adapter, by_model_type

    with pytest.raises(DuplicateRegistration) as error:
        by_model_type((*ADAPTERS, Adapter("my_llama", ("llama",))))
    message = str(error.value)
    assert "\n" not in message and "'llama'" in message
    assert "Adapter 'llama'" in message and "Adapter 'my_llama'" in message


ANATOMY_IDS = torch.randint(3, 120, (5, 32), generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.gated])
def test_gate_sink_pairs_each_batchs_gate_with_its_own_attention(name, family):
    """Issue 37 #1: sink anatomy pairs a layer's attention with the gate of the same forward
    pass, whichever event fires first (grafted_llama's gate_proj runs after SDPA, the others'
    gate rows in q_proj before it): 5 sequences at batch sizes 1, 2, 3 (a short last batch) and
    5 (a single batch) give the same tables, gate_sink included and not empty."""
    run = family(name)
    tables = {}
    for batch_size in (1, 2, 3, 5):
        with tiny.single_thread():
            a = probe.analyze(run.loaded, ANATOMY_IDS, seq_len=32, max_sequences=5, anatomy=True,
                              batch_size=batch_size, progress=False, display_len=0, resamples=0)
        tables[batch_size] = a
    first = tables[1].gate_sink
    assert not first.empty and first.queries.sum() > 0
    for batch_size in (2, 3, 5):
        other = tables[batch_size]
        for table in ("gate_sink", "received_by_position", "value_drains"):
            want, got = getattr(tables[1], table), getattr(other, table)
            assert list(got.columns) == list(want.columns) and len(got) == len(want), (table, batch_size)
            pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                          check_exact=False, rtol=0, atol=1e-12)
