"""Gold run directories: the same numbers, within a tolerance by column kind, from a fixed set of
tiny checkpoints.

Every case builds a tiny random checkpoint (tests/tiny.py, or a config of a registered family
tiny.py has no kind for), analyses a few dozen tokens with the public API (`probe.analyze(...)`
then `.save(...)`; the CLI where that is what the case tests) and compares the run directory
with tests/gold_runs/<case>/ cell by cell (tests/gold_diff.py): strings, integers and counts
exactly, other floats to 1e-4 relative (+ 1e-6), the numbers of a float32 forward pass on
another CPU; summary.json and meta.json as JSON with the keys that legitimately vary removed
(VARYING_META) and the temporary folder written ROOT. A failure names the case, file, column,
row and both values.

The cases cover every family the registry knows (probe/families/registry.py), gated and not,
the official grouped layout, the hybrids with linear-attention layers, Gemma 2 soft-capping,
Gemma 3 sliding windows, gpt-oss sinks, a model outside the registry, GGUF, the
TransformerLens bridge, padding (per-document sequences of unequal length), sliding windows
over long documents, interventions, token groups, the exact mean-gate control and sink anatomy (CASES says
which case covers what). A restructure of the pipeline must leave every number unchanged.

After an intended change of numbers, or a new case, regenerate and review the diff
(docs/gold.md): `make gold` (PROBE_REGENERATE_GOLD=1 python -m pytest tests/run/test_pipeline_gold.py)
rewrites only the files that differ beyond the tolerances.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch

from probe.metrics import kernels
from tests import tiny
from tests.gold_diff import diff_files, read_folder, summary, write_gold
from tests.samples import TEXT

GOLD = Path(__file__).parents[1] / "gold_runs"
REGENERATE = os.environ.get("PROBE_REGENERATE_GOLD") == "1"

# Few tokens, few layers: every case runs in well under a second once its checkpoint exists.
# 2 layers of 2 query heads sharing 1 KV head (1 layer where a family has nothing that differs
# by layer). The official elementwise case keeps 2 KV heads (4 query heads): the official q_proj
# is grouped per KV head.
SMALL = dict(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
ONE = dict(SMALL, num_hidden_layers=1)
HYBRID = dict(SMALL, full_attention_interval=2)  # layer 0 linear attention, layer 1 full
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
HYBRID_MOE = dict(HYBRID, **tiny.LINEAR, **MOE,
                  shared_expert_intermediate_size=32, rope_parameters=dict(tiny.QWEN3_5_ROPE))
NAME = "tiny"  # the model column of every row: short, the gold is mostly that column
COMMON = dict(seq_len=32, batch_size=2, max_sequences=2, display_len=8, progress=False)
UNEQUAL = [TEXT[:70], TEXT[:190], TEXT[:120]]          # per-document: padded to the longest
LONG = [TEXT[:420], TEXT[:60]]                         # one document needs sliding windows
GROUPS = {"gate words": [" gate", " head", "The"], "id five": [5]}


# -- checkpoints ---------------------------------------------------------------------------------

def tiny_kind(kind: str, **overrides) -> Callable[[Path], Path]:
    return lambda path: tiny.make_checkpoint(kind, path, **overrides)


def _save(model, path: Path, style: str) -> Path:
    """A model built here from a config, saved with the tiny tokenizer of `style` (a tiny kind)."""
    model.save_pretrained(path)
    tiny.make_tokenizer(style).save_pretrained(path)
    return path


def _sizes(style: str, **extra) -> dict:
    return {**tiny.TINY, **SMALL, **tiny.special_token_ids(style), **extra}



def from_config(config_class: str, style: str, **extra) -> Callable[[Path], Path]:
    """A registered family tiny.py builds no kind of (phi3, mixtral, qwen3_moe, ...), random init,
    one layer unless `extra` says otherwise."""
    def build(path: Path) -> Path:
        import transformers as tf

        torch.manual_seed(0)
        config = getattr(tf, config_class)(**_sizes(style, **{**ONE, **extra}))
        model = tf.AutoModelForCausalLM.from_config(config).eval()
        return _save(model, path, style)
    return build


def gemma2(path: Path) -> Path:
    """Gemma 2 with attention-logit soft-capping that bites (as tests/capture/test_attention.py)."""
    import transformers as tf

    torch.manual_seed(0)
    model = tf.Gemma2ForCausalLM(tf.Gemma2Config(
        **_sizes("llama", sliding_window=16, attn_logit_softcapping=0.5))).eval()
    with torch.no_grad():                     # random-init scores are ~0.01: make them reach the cap
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return _save(model, path, "llama")


def gpt_oss(path: Path) -> Path:
    """gpt-oss: attention sinks (large enough to matter), sliding layers, a tiny MoE."""
    import transformers as tf

    torch.manual_seed(0)
    sizes = _sizes("qwen3", intermediate_size=64, sliding_window=16, num_local_experts=4,
                   num_experts_per_tok=2)
    model = tf.GptOssForCausalLM(tf.GptOssConfig(**sizes)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 2.0, generator=torch.Generator().manual_seed(3))
    return _save(model, path, "qwen3")


def massive(path: Path) -> Path:
    """Qwen3 with one massive activation: hidden dimension 7 of the text's first token set to
    10^4 in the embedding, which the residual stream carries into every layer output (far above
    max(100, 1000 x the median |h|), so that massive_zero zeroes it)."""
    model = tiny._build_hf("qwen3", seed=0, overrides=dict(SMALL))
    tokenizer = tiny.make_tokenizer("qwen3")
    first = tokenizer(TEXT, add_special_tokens=False)["input_ids"][0]
    with torch.no_grad():
        model.get_input_embeddings().weight[first, 7] = 1e4
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def grafted(path: Path) -> Path:
    """probe graft of a tiny Llama: a headwise gate_proj with a random (sigmoid) initialisation."""
    from probe.train.graft import graft

    base = tiny.make_checkpoint("llama", path.with_name(path.name + "-base"), **SMALL)
    return graft(base, gate="headwise", init="random", seed=0, out=path, say=lambda line: None)


def gguf(path: Path) -> Path:
    path.mkdir(parents=True)
    file, _ = tiny.make_gguf(path / "tiny-llama.gguf", **ONE)
    return file


# -- cases ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    covers: str
    build: Callable[[Path], Path]
    options: dict = field(default_factory=dict)   # probe.analyze keyword arguments
    cli: tuple[str, ...] | None = None            # run `probe analyze CHECKPOINT ...` instead
    bridge: bool = False                          # analyse through a TransformerLens bridge
    # The UserWarnings the case must give (a regex each); any other warning fails the case.
    warns: tuple[str, ...] = ()


TRUNCATED = r"documents longer than 48 tokens were truncated"
NOTHING_ZEROED = r"massive_zero'?: no activation reached the threshold"


CASES = (
    Case("qwen3_next_groups", "Qwen3-Next hybrid (linear + gated full attention), token groups",
         tiny_kind("qwen3_next", **HYBRID), dict(texts=[TEXT], token_groups=GROUPS)),
    Case("qwen3_5_padding", "Qwen3.5 hybrid, per-document sequences of unequal length (padding)",
         tiny_kind("qwen3_5", **HYBRID),
         dict(texts=UNEQUAL, per_document=True, seq_len=48, batch_size=3, max_sequences=None), warns=(TRUNCATED,)),
    Case("qwen3_5_vl", "Qwen3.5 release format (ForConditionalGeneration, text_config)",
         tiny_kind("qwen3_5_vl", **HYBRID), dict(texts=[TEXT])),
    Case("official_headwise_interventions", "official grouped layout, headwise gate, every intervention",
         tiny_kind("official_headwise", **SMALL), dict(texts=[TEXT], interventions="all"), warns=(NOTHING_ZEROED,)),
    Case("official_elementwise_exact", "official grouped layout, elementwise gate, exact control",
         tiny_kind("official_elementwise", num_hidden_layers=1), dict(texts=[TEXT], exact_control=True)),
    Case("official_baseline", "official gate-free baseline (stock Qwen3), interventions on a baseline",
         tiny_kind("official_baseline", **ONE), dict(texts=[TEXT], interventions="all"), warns=(NOTHING_ZEROED, r"mean_gate,gate_one,gate_zero'?: not applicable: the model has no gate")),
    Case("qwen3", "Qwen3 ungated", tiny_kind("qwen3", **ONE), dict(texts=[TEXT])),
    Case("qwen3_massive_zero", "a massive activation that massive_zero zeroes", massive,
         dict(texts=[TEXT], interventions="massive_zero")),
    Case("qwen2", "Qwen2 ungated", tiny_kind("qwen2", **ONE), dict(texts=[TEXT])),
    Case("llama_padding", "Llama (tokenizer adds BOS), per-document padding",
         tiny_kind("llama", **SMALL),
         dict(texts=UNEQUAL, per_document=True, seq_len=48, batch_size=3, max_sequences=None), warns=(TRUNCATED,)),
    Case("mistral_windows", "Mistral, sliding windows over a long document (max_length / stride)",
         tiny_kind("mistral", **SMALL),
         dict(texts=LONG, per_document=True, max_length=24, stride=16, batch_size=3,
              max_sequences=None)),
    Case("gpt2", "GPT-2 (Conv1D projections, no GQA), bos prepend",
         tiny_kind("gpt2", n_layer=1, n_head=2), dict(texts=[TEXT], bos="prepend")),
    Case("olmo2", "OLMo 2 (post-norm)", tiny_kind("olmo2", **ONE), dict(texts=[TEXT])),
    Case("gemma3_windows", "Gemma 3 sliding-window layers, documents longer than the window",
         tiny_kind("gemma3", **SMALL),
         dict(texts=LONG, per_document=True, max_length=40, stride=24, batch_size=3,
              max_sequences=None)),
    Case("gemma2_softcap", "Gemma 2 attention-logit soft-capping", gemma2, dict(texts=[TEXT])),
    Case("gpt_oss_sinks", "gpt-oss attention sinks (outside the registry: gate none)", gpt_oss,
         dict(texts=[TEXT], gate="none")),
    Case("granite_unregistered", "a decoder outside the registry, analysed as ungated",
         tiny_kind("granite", **ONE), dict(texts=[TEXT], gate="none")),
    Case("phi3", "Phi-3 (fused qkv_proj)", from_config("Phi3Config", "llama"), dict(texts=[TEXT])),
    Case("mixtral", "Mixtral (MoE, mistral family)", from_config("MixtralConfig", "llama",
         num_local_experts=4, num_experts_per_tok=2), dict(texts=[TEXT])),
    Case("qwen3_moe", "Qwen3-MoE (qwen3 family, no gate)", from_config("Qwen3MoeConfig", "qwen3",
         **MOE), dict(texts=[TEXT])),
    Case("qwen2_moe", "Qwen2-MoE (qwen2 family)", from_config("Qwen2MoeConfig", "qwen3",
         **MOE, shared_expert_intermediate_size=32), dict(texts=[TEXT])),
    Case("qwen3_5_moe", "Qwen3.5-MoE hybrid (qwen3_next family, gated)",
         from_config("Qwen3_5MoeTextConfig", "qwen3", **HYBRID_MOE), dict(texts=[TEXT])),
    Case("olmo_hybrid", "OLMo-Hybrid: a Gated DeltaNet layer (--gdn; separate projections, beta up to 2) and an "
         "ungated post-norm softmax layer", tiny_kind("olmo_hybrid", **dict(SMALL, num_hidden_layers=2,
         layer_types=["linear_attention", "full_attention"])), dict(texts=[TEXT], gdn=True)),
    Case("gemma", "Gemma 1", from_config("GemmaConfig", "llama"), dict(texts=[TEXT])),
    Case("gguf_llama", "a GGUF file (llama.cpp format) read through transformers", gguf,
         dict(texts=[TEXT])),
    Case("grafted_llama", "probe graft: a Llama with a grafted gate_proj (plain headwise layout)", grafted,
         dict(texts=[TEXT])),
    Case("qwen3_next_anatomy", "sink anatomy (anatomy=True) on a gated hybrid: gate_sink, padding",
         tiny_kind("qwen3_next", **HYBRID),
         dict(texts=UNEQUAL, per_document=True, seq_len=48, batch_size=3, max_sequences=None, anatomy=True), warns=(TRUNCATED,)),
    Case("bridge_qwen3_next", "the TransformerLens bridge path, hybrid gated model",
         tiny_kind("qwen3_next", **HYBRID), dict(texts=[TEXT]), bridge=True),
    Case("cli_qwen3_next", "probe analyze on the command line: data file, token groups "
         "file, two interventions (hybrid gated model)", tiny_kind("qwen3_next", **HYBRID),
         cli=("--name", NAME, "--seq-len", "32", "--batch-size", "2", "--max-sequences", "2", "--quiet",
              "--token-groups", "{root}/groups.json", "--interventions", "mean_gate,gate_zero",
              "--data", "{root}/sample.txt")),
)
BY_NAME = {case.name: case for case in CASES}


# -- running a case ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def gold_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gold")
    (root / "sample.txt").write_text(TEXT, encoding="utf-8")
    (root / "groups.json").write_text(json.dumps(GROUPS), encoding="utf-8")
    return root


def run_case(case: Case, root: Path) -> Path:
    """Build the case's checkpoint under root/checkpoints and write its run directory; return it."""
    import probe

    out = root / "runs" / case.name
    shutil.rmtree(out, ignore_errors=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _run(case, root, out)
    messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    for pattern in case.warns:
        assert any(re.search(pattern, m) for m in messages), f"case {case.name}: no warning {pattern!r} in {messages}"
    unexpected = [m for m in messages if not any(re.search(p, m) for p in case.warns)]
    assert not unexpected, f"case {case.name}: unexpected warnings {unexpected}"
    return out


def _run(case: Case, root: Path, out: Path) -> None:
    import probe

    # One thread: the same float sums whatever the machine. The compiled kernels, as a larger
    # analysis takes them (these tiny ones would take the torch path: the same numbers,
    # tests/api/test_kernel_choice.py), for their padding, window and anatomy cases.
    with tiny.single_thread(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "MIN_VALUES", 0)
        checkpoint = case.build(root / "checkpoints" / case.name)
        if case.cli is not None:
            from probe.api.cli import main

            args = [arg.format(root=root) for arg in case.cli]
            assert main(["analyze", str(checkpoint), "--out", str(out), *args]) == 0
        else:
            model = checkpoint
            if case.bridge:
                from probe.capture.bridge import build_bridge

                model = build_bridge(checkpoint)
            probe.analyze(model, name=NAME, **{**COMMON, **case.options}).save(out)


def compare_with_gold(name: str, files: dict[str, str], run: Path, root: Path) -> None:
    """Fail naming every difference beyond the tolerances (the first gold_diff.SHOWN of them);
    with PROBE_REGENERATE_GOLD=1 write the files that differ instead."""
    folder, covers = GOLD / name, BY_NAME[name].covers
    gold = read_folder(folder) if folder.is_dir() else {}
    differences = diff_files(gold, files)
    if REGENERATE:
        write_gold(folder, files, differences)
        return
    assert folder.is_dir(), f"{folder} is missing; make gold writes it"
    if differences:
        pytest.fail(f"case {name} ({covers}): {len(differences)} difference"
                    f"{'s' if len(differences) > 1 else ''} from tests/gold_runs/{name}/ beyond the "
                    f"tolerances (make gold to accept an intended change; every one of them: python "
                    f"tests/gold_diff.py tests/gold_runs/{name} {run} {root}):\n{summary(differences)}",
                    pytrace=False)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_run_directory_matches_gold(name, gold_root):
    case = BY_NAME[name]
    run = run_case(case, gold_root)
    compare_with_gold(name, read_folder(run, gold_root), run, gold_root)


def test_every_gold_folder_is_a_case():
    if REGENERATE:
        return
    assert sorted(path.name for path in GOLD.iterdir()) == sorted(BY_NAME)


def test_every_registered_family_has_a_case():
    """The registry's families, each analysed by at least one case (read from the gold meta)."""
    from probe.families.registry import ADAPTERS

    if REGENERATE:
        return
    seen = {json.loads((GOLD / name / "meta.json").read_text())["family"] for name in BY_NAME}
    assert {adapter.name for adapter in ADAPTERS} <= seen, seen
