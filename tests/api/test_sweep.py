"""Context sweeps (probe/api/sweep.py): each length equals that length analysed alone, bit for bit,
and equals eager softmax attention of the same model with the same rope scaling."""
from __future__ import annotations

import json
import warnings

import pandas as pd

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import probe
from tests import tiny
from probe.api.cli import main
from probe.api.sweep import counts, parse_lengths, sweep
from tests.samples import TEXT

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
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sweep(short, DATA, lengths=(32, 128), rope_scaling=spec, progress=False, display_len=0,
                       progress_line=lambda line: None)
    # A length past the model's positions is said once, before the runs (it ran past them silently).
    beyond = [str(w.message) for w in caught if "beyond the model's" in str(w.message)]
    assert beyond == ([] if spec else ["length 128 beyond the model's 64 positions: run past them (rotary "
                                       "positions extrapolated), marked beyond_positions in the sweep's table"])
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
    # Refused with one message: no "one sequence of 8 tokens is analysed" warning before it.
    with warnings.catch_warnings(), pytest.raises(probe.ProbeError, match="fewer than one sequence"):
        warnings.simplefilter("error")
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
    assert not (tmp_path / "sweep.partial").exists()               # the lengths' staging folder is gone
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
    assert not (tmp_path / "compare.partial").exists()


# -- each length saved as it finishes; --resume (probe/api/sweep_cli.py, probe/api/sweep_saved.py) --

def _sweep_args(ckpt, tmp_path, out, *more):
    return ["analyze", str(ckpt), "--data", str(_text(tmp_path)), "--seq-len", "32,64", "--max-sequences", "2",
            "--batch-size", "1", "--resamples", "0", "--out", str(out), "--quiet", *more]


def _interrupt_at_call(monkeypatch, call: int) -> dict:
    """analyze raises KeyboardInterrupt (as Ctrl-C would) on its `call`-th call; counts the calls."""
    import probe.api.analyze as module

    calls = {"n": 0}
    real = module.analyze

    def analyze(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(module, "analyze", analyze)
    return calls


def _summaries(out):
    return {p.name: json.loads((p / "summary.json").read_text()) for p in sorted(out.iterdir()) if p.is_dir()}


@pytest.fixture(scope="module")
def whole(checkpoint, tmp_path_factory):
    """An uninterrupted sweep: what an interrupted and resumed one must equal."""
    tmp = tmp_path_factory.mktemp("whole")
    out = tmp / "whole"
    assert main(_sweep_args(checkpoint("qwen3"), tmp, out)) == 0
    return out


def test_an_interrupted_sweep_keeps_its_finished_length_and_resumes_to_the_same_numbers(
        checkpoint, whole, tmp_path, monkeypatch, capsys):
    from probe.api.sweep_saved import FINGERPRINT

    ckpt, out = checkpoint("qwen3"), tmp_path / "ctx"
    partial = tmp_path / "ctx.partial"
    with monkeypatch.context() as m:
        _interrupt_at_call(m, 2)                          # qwen3@32 finishes, qwen3@64 is interrupted
        assert main(_sweep_args(ckpt, tmp_path, out)) == 130
    err = capsys.readouterr().err.strip()
    assert err == (f"probe: interrupted; qwen3@32 is saved in {partial}/; continue with the same command "
                   "plus --resume")
    assert not out.exists() and (partial / "README.txt").exists()
    saved = probe.Analysis.load(partial / "qwen3@32")                 # whole and readable
    assert saved.summary == _summaries(whole)["qwen3@32"]
    assert sorted(p.name for p in partial.iterdir()) == ["README.txt", "lock", "qwen3@32"]

    # A plain rerun does not start over what was saved.
    assert main(_sweep_args(ckpt, tmp_path, out)) == 2
    assert "pass --resume to continue it" in capsys.readouterr().err

    with monkeypatch.context() as m:
        calls = _interrupt_at_call(m, 0)
        assert main(_sweep_args(ckpt, tmp_path, out, "--resume")) == 0
    assert calls["n"] == 1                                            # only qwen3@64 ran
    assert not partial.exists()
    assert _summaries(out) == _summaries(whole)                       # every number, exactly
    assert (out / "context_length.csv").read_text() == (whole / "context_length.csv").read_text()
    assert not list(out.glob(f"*/{FINGERPRINT}"))


def test_a_resume_with_other_options_or_data_is_refused_in_one_line(checkpoint, tmp_path, monkeypatch, capsys):
    ckpt, out = checkpoint("qwen3"), tmp_path / "ctx"
    with monkeypatch.context() as m:
        _interrupt_at_call(m, 2)
        assert main(_sweep_args(ckpt, tmp_path, out)) == 130
    capsys.readouterr()
    for other, differs in ((["--seed", "1"], "seed differs"),
                           (["--max-sequences", "1"], "sequences, tokens_sha256, max_sequences differ")):
        args = _sweep_args(ckpt, tmp_path, out, "--resume")
        args[args.index("--max-sequences"):args.index("--max-sequences") + 2] = []
        args += ["--max-sequences", "2"] if other[0] != "--max-sequences" else []
        assert main(args + other) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("probe: error: ") and "\n" not in err, err
        assert f"qwen3@32 was made with other options, data or weights than this sweep ({differs})" in err, err
        assert "--force" in err
    assert (tmp_path / "ctx.partial" / "qwen3@32" / "summary.json").exists()      # left as it was
    assert not out.exists()


@pytest.mark.parametrize("edit", ["summary", "table", "extra file", "removed file"])
def test_an_edited_saved_length_is_refused_in_one_line(checkpoint, tmp_path, monkeypatch, capsys, edit):
    """Issue 37 #2: a saved length whose files were edited after it was saved (summary.json's
    f_attn set to 0.999, a table changed, a file added or removed) is refused by --resume, left
    as it was, and reaches neither --out nor context_length.csv."""
    ckpt, out = checkpoint("qwen3"), tmp_path / "ctx"
    with monkeypatch.context() as m:
        _interrupt_at_call(m, 2)
        assert main(_sweep_args(ckpt, tmp_path, out)) == 130
    capsys.readouterr()
    run = tmp_path / "ctx.partial" / "qwen3@32"
    if edit == "summary":
        summary = json.loads((run / "summary.json").read_text())
        summary["f_attn"] = 0.999
        (run / "summary.json").write_text(json.dumps(summary, indent=2))
    elif edit == "table":
        (run / "first_token.csv").write_text((run / "first_token.csv").read_text().replace("0.", "0.9", 1))
    elif edit == "extra file":
        (run / "notes.txt").write_text("mine\n")
    else:
        (run / "first_token.csv").unlink()
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main(_sweep_args(ckpt, tmp_path, out, "--resume")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("probe: error: ") and "\n" not in err, err
    assert "qwen3@32" in err and "changed since it was saved" in err and "--force" in err, err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert not out.exists()


def test_an_interrupted_pass_inside_a_sweep_continues_from_its_saved_batches(
        checkpoint, whole, tmp_path, monkeypatch, capsys):
    """Killed inside its longest length, a sweep keeps the shorter lengths and the batches done of
    the longest (--save-every 0: after every batch); --resume continues that pass."""
    from probe.capture.hf import Capture

    ckpt, out = checkpoint("qwen3"), tmp_path / "ctx"
    seen = {"n": 0}
    real = Capture.batch

    def batch(self, input_ids, *args, **kwargs):
        if input_ids.shape[1] == 64:
            seen["n"] += 1
            if seen["n"] == 2:
                raise KeyboardInterrupt
        return real(self, input_ids, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(Capture, "batch", batch)
        assert main(_sweep_args(ckpt, tmp_path, out, "--save-every", "0")) == 130
    err = capsys.readouterr().err
    assert "qwen3@32 is saved in" in err and "so are the batches done so far" in err
    assert main(_sweep_args(ckpt, tmp_path, out, "--save-every", "0", "--resume")) == 0
    assert "1 of 2 batches were done" in capsys.readouterr().err
    assert _summaries(out) == _summaries(whole)
    assert not (tmp_path / "ctx.partial").exists()


def test_an_interrupted_compare_sweep_resumes(checkpoint, short, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    args = ["compare", str(checkpoint("qwen3")), str(short), "--name", "base", "other", "--data", str(_text(tmp_path)),
            "--seq-len", "32,64", "--max-sequences", "1", "--resamples", "0", "--out", str(out), "--format", "",
            "--quiet"]
    with monkeypatch.context() as m:
        _interrupt_at_call(m, 4)                          # base@32, base@64 and other@32 done
        assert main(args) == 130
    assert "base@32, base@64, other@32 are saved in" in capsys.readouterr().err
    with monkeypatch.context() as m:
        calls = _interrupt_at_call(m, 0)
        assert main(args + ["--resume"]) == 0
    assert calls["n"] == 1
    assert sorted(_summaries(out)) == ["base@32", "base@64", "other@32", "other@64"]
    assert not (tmp_path / "cmp.partial").exists()
    # One length alone has nothing to resume: refused in one line.
    assert main(args[:args.index("--seq-len")] + ["--seq-len", "32", "--out", str(tmp_path / "one"), "--resume"]) == 2
    assert "--resume continues a --seq-len sweep" in capsys.readouterr().err


def test_a_python_sweep_with_a_partial_folder_resumes_and_removes_it(checkpoint, tmp_path, monkeypatch):
    path, partial = checkpoint("qwen3"), tmp_path / "ctx.partial"
    quiet = dict(lengths=(32, 64), max_sequences=2, resamples=0, progress=False, progress_line=lambda line: None)
    alone = sweep(path, DATA, **quiet)
    with monkeypatch.context() as m:
        _interrupt_at_call(m, 2)
        with pytest.raises(KeyboardInterrupt):
            sweep(path, DATA, partial=partial, **quiet)
    assert (partial / "qwen3@32" / "summary.json").exists()
    with pytest.raises(probe.ProbeError, match="resume=True"):            # not started over unasked
        sweep(path, DATA, partial=partial, **quiet)
    resumed = sweep(path, DATA, partial=partial, resume=True, **quiet)
    assert not partial.exists() and resumed.folders == {}
    _same(resumed.runs[64], alone.runs[64])                             # analysed after the resume
    saved = resumed.runs[32]                                            # read back from its run directory
    assert saved.summary == json.loads(json.dumps(alone.runs[32].summary))
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(saved, name), getattr(alone.runs[32], name), check_dtype=False,
                                      check_exact=True, obj=name)


@pytest.mark.parametrize("name", ["../escape", "a/b", ".", "..", "x" * 300, ""])
def test_a_sweep_name_that_is_no_folder_name_is_refused_in_one_line(checkpoint, tmp_path, capsys, name):
    """Issue 37 #10: --name ../escape wrote escape@32/ and escape@64/ beside --out (then said
    "nothing was written"); a/b, ., a 300-character name and a formula name gave tracebacks.
    Each is refused in one line before anything runs, and nothing is written anywhere."""
    ckpt = checkpoint("qwen3")
    capsys.readouterr()
    work = tmp_path / "work"
    work.mkdir()
    text = _text(work)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code = main(["analyze", str(ckpt), "--data", str(text), "--seq-len", "32,64", "--max-sequences", "1",
                 "--resamples", "0", "--out", str(work / "out"), "--name", name, "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("probe: error: ") and "--name" in err[0], err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
