"""Context sweeps (probe/api/sweep.py): each length equals that length analysed alone, bit for bit,
and equals eager softmax attention of the same model with the same rope scaling."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import probe
import tiny
from probe.api.cli import main
from probe.api.sweep import counts, parse_lengths, sweep
from samples import TEXT

LENGTHS = (32, 64, 128)
DATA = [TEXT * 2]
TABLES = ("first_token", "first_token_buckets", "massive", "massive_top", "sparsity", "gates", "gate_hist")
F_ATTN_TOL = 1e-5


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """A tiny Llama (BOS first) whose config allows only 64 positions: 128 runs past them."""
    return tiny.make_checkpoint("llama", tmp_path_factory.mktemp("sweep") / "llama",
                                max_position_embeddings=64)


def _same(a, b) -> None:
    for name in TABLES:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or not len(x):
            assert y is None or not len(y), name
            continue
        pd.testing.assert_frame_equal(x.drop(columns="model").reset_index(drop=True),
                                      y.drop(columns="model").reset_index(drop=True), check_exact=True)
    for key in ("f_attn", "f_attn_paper", "sink_rate", "m_act", "loss", "tokens", "sequences"):
        assert a.summary[key] == b.summary[key], key


@pytest.mark.parametrize("kind", ["qwen3", "llama"])           # no BOS / BOS first
def test_each_length_equals_it_analysed_alone(kind, checkpoint):
    path = checkpoint(kind)
    result = sweep(path, DATA, lengths=LENGTHS, progress=False, display_len=0, progress_line=lambda line: None)
    bos = kind == "llama"
    n = result.runs[128].meta["sequences"]
    assert n >= 2
    for T, k in counts(n, LENGTHS, bos, as_rows=False).items():
        alone = probe.analyze(path, DATA, seq_len=T, max_sequences=k, progress=False, display_len=0)
        _same(result.runs[T], alone)
        assert result.runs[T].meta["longest_sequence"] == T
        assert result.runs[T].meta["context_sweep"]["length"] == T
    # The same tokens at every length (up to the BOS of each sequence).
    text_tokens = {T: a.meta["tokens"] - (a.meta["sequences"] if bos else 0) for T, a in result.runs.items()}
    assert max(text_tokens.values()) - min(text_tokens.values()) < 128


def _eager_f_attn(model, ids) -> dict[int, torch.Tensor]:
    """Per layer and head: mean over queries t >= 1 of the eager softmax weight on key 0."""
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
    return {i: a[:, :, 1:, 0].double().mean((0, 2)) for i, a in enumerate(out.attentions)}


@pytest.mark.parametrize("spec", [None, "yarn:4"])
def test_sweep_equals_eager_attention_with_the_same_rope_scaling(spec, short):
    result = sweep(short, DATA, lengths=(32, 128), rope_scaling=spec, progress=False, display_len=0,
                   progress_line=lambda line: None)
    # The reference model: transformers' own, the rope parameters written by hand.
    config = AutoConfig.from_pretrained(short)
    if spec:
        config.rope_parameters = {"rope_type": "yarn", "factor": 4.0, "rope_theta": config.rope_parameters["rope_theta"],
                                  "original_max_position_embeddings": 64}
        config.max_position_embeddings = 256
    model = AutoModelForCausalLM.from_pretrained(short, config=config, dtype=torch.float32).eval()
    tok = probe.load(short).tokenizer
    stream = tok(DATA[0], add_special_tokens=False)["input_ids"]
    for T, a in result.runs.items():
        # The run's sequences, rebuilt: BOS, then the next T - 1 tokens of the text.
        ids = torch.tensor([[tok.bos_token_id] + stream[i * (T - 1):(i + 1) * (T - 1)]
                            for i in range(a.meta["sequences"])])
        eager = _eager_f_attn(model, ids)
        ft = a.first_token[(a.first_token.metric == "f_attn")]
        for layer, heads in ft.groupby("layer"):
            got = torch.tensor(heads.sort_values("head").value.to_numpy())
            assert torch.allclose(got, eager[layer].float().double(), atol=F_ATTN_TOL), (T, layer)
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits
        nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).double(), ids[:, 1:],
                                                reduction="none")                  # (B, T - 1)
        assert abs(a.summary["loss"] - nll.mean().item()) < 1e-5
        # By target position in powers of two: targets 1, 2-3, 4-7, ...
        for entry in a.summary["loss_by_position"]:
            lo, hi = int(entry["bucket_lo"]), min(int(entry["bucket_hi"]), T)
            assert entry["pairs"] == nll.shape[0] * (hi - lo)
            assert abs(entry["loss"] - nll[:, lo - 1:hi - 1].mean().item()) < 1e-5, (T, lo)
    # Past the config's 64 positions unscaled; within the 256 that YaRN x4 gives.
    assert result.runs[128].meta["context_sweep"]["beyond_positions"] is (spec is None)
    if spec:
        record = result.runs[128].meta["rope_scaling"]
        assert record["spec"] == {"rope_type": "yarn", "factor": 4.0}
        assert record["original_max_position_embeddings"] == 64
        assert result.runs[128].meta["context_sweep"]["positions"]["max_position_embeddings"] == 256


def test_lengths_and_refusals(checkpoint, short):
    assert parse_lengths([2048, 512, 512, 8192]) == (512, 2048, 8192)
    with pytest.raises(probe.ProbeError, match="at least two different lengths"):
        parse_lengths([512])
    with pytest.raises(probe.ProbeError, match="fewer than one sequence"):
        sweep(short, ["tiny text"], lengths=(32, 64), progress=False)
    gpt2 = tiny.make_checkpoint("gpt2", short.parent / "gpt2", max_position_embeddings=64)
    with pytest.raises(probe.ProbeError, match="no rotary embedding"):
        sweep(gpt2, DATA, lengths=(32, 128), progress=False)
    with pytest.raises(probe.ProbeError, match="sliding windows"):
        sweep(short, DATA, lengths=(32, 64), stride=8, progress=False)


def test_cli_sweep_writes_runs_and_table(short, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["analyze", str(short), "--data", str(_text(tmp_path)), "--seq-len", "32,128",
                 "--rope-scaling", "yarn:4", "--out", str(out), "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["llama@128", "llama@32"]
    table = pd.read_csv(out / "context_length.csv")
    for T in (32, 128):
        summary = json.loads((out / f"llama@{T}" / "summary.json").read_text())
        row = table[(table.length == T) & (table.scope == "pooled") & (table.metric == "f_attn")]
        assert row.value.item() == pytest.approx(summary["f_attn"], rel=1e-12)
        assert row.series.item() == "llama + yarn x4"
    # The section itself: tests/reports/test_context.py.
    assert main(["analyze", str(short), "--seq-len", "32,abc", "--out", str(tmp_path / "x")]) == 2
    assert "comma list" in capsys.readouterr().err


def _text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(DATA[0])
    return path


def test_compare_sweeps_each_model_into_one_folder(checkpoint, short, tmp_path):
    out = tmp_path / "compare"
    assert main(["compare", str(checkpoint("qwen3")), str(short), "--name", "base", "other", "--data",
                 str(_text(tmp_path)), "--seq-len", "32,64", "--out", str(out), "--format", "", "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["base@32", "base@64", "other@32", "other@64"]
    assert set(pd.read_csv(out / "context_length.csv").series) == {"base", "other"}
