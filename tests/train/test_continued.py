"""Continued training (`probe train --from DIR --train gates|all`, probe/train/continued.py) of a
tiny grafted Llama: gates-only training leaves every base weight bit for bit and computes no base
gradient, all-weights training moves the base, runs are deterministic for a seed and a resumed
run ends where a straight one does, a plain (ungated) copy trains with --train all, and the
misuses are refused in one line."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from tests import tiny
from probe.api.cli import main
from probe.core.errors import ProbeError

STEPS = ("--steps", "4", "--seq-len", "32", "--batch-size", "2", "--save-every", "2", "--eval-every", "2",
         "--eval-rows", "2", "--bos", "none", "--threads", "1", "--quiet")


@pytest.fixture(scope="session")
def grafted(tmp_path_factory):
    root = tmp_path_factory.mktemp("continued")
    with tiny.single_thread():
        base = tiny.make_checkpoint("llama", root / "base", num_hidden_layers=2)
    assert main(["graft", str(base), "--gate", "headwise", "--init", "identity", "--out", str(root / "g")]) == 0
    return root


def train(root, corpus, out, *extra, source="g"):
    return main(["train", "--from", str(root / source), "--data", str(corpus), *STEPS,
                 "--out", str(root / out), *extra])


@pytest.fixture(scope="session")
def runs(grafted, corpus_file):
    """Gates-only twice (determinism), gates-only interrupted and resumed, all weights, plain base."""
    for out, extra in (("gates", ()), ("gates-again", ()), ("gates-resumed", ("--stop-after", "2")),
                       ("gates-resumed", ("--resume",))):
        assert train(grafted, corpus_file, out, "--train", "gates", *extra) == 0
    assert train(grafted, corpus_file, "all", "--train", "all") == 0
    assert train(grafted, corpus_file, "plain", "--train", "all", source="base") == 0
    return grafted


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def test_gates_only_leaves_the_base_bit_identical_and_moves_the_gates(runs):
    start, end = weights(runs / "g"), weights(runs / "gates")
    gates = [k for k in start if ".self_attn.gate_proj." in k]
    assert gates and all(torch.equal(start[k], end[k]) for k in start if k not in gates)
    assert all(not torch.equal(start[k], end[k]) for k in gates)
    settings = json.loads((runs / "gates" / "train_config.json").read_text())
    assert settings["frozen_digest_start"] == settings["result"]["frozen_digest_end"]
    assert settings["parameter_counts"]["trainable"] == 2 * (64 * 4 + 4)         # 2 layers, H = 4
    assert settings["graft"]["init"] == "identity" and settings["train"] == "gates"


def test_all_weights_moves_the_base(runs):
    start, end = weights(runs / "g"), weights(runs / "all")
    assert not torch.equal(start["model.layers.0.self_attn.q_proj.weight"], end["model.layers.0.self_attn.q_proj.weight"])
    plain = weights(runs / "plain")
    assert not any(".gate_proj." in k and "self_attn" in k for k in plain)
    assert json.loads((runs / "plain" / "config.json").read_text())["model_type"] == "llama"


def test_same_seed_same_weights_and_resume_ends_where_a_straight_run_does(runs):
    a, b, r = weights(runs / "gates"), weights(runs / "gates-again"), weights(runs / "gates-resumed")
    assert all(torch.equal(a[k], b[k]) and torch.equal(a[k], r[k]) for k in a)
    assert (runs / "gates" / "training.csv").read_text().replace("gates,", "x,") == \
        (runs / "gates-resumed" / "training.csv").read_text().replace("gates-resumed,", "x,")


def test_gates_only_computes_no_base_gradient(grafted, corpus_file, tmp_path):
    """At every checkpoint the frozen parameters hold no gradient (autograd never made one) and
    the gate projections do."""
    from probe.train.config import TrainConfig
    from probe.train.loop import train as train_loop

    seen = []

    def look(step, model):
        named = dict(model.named_parameters())
        seen.append((all(p.grad is None for n, p in named.items() if ".self_attn.gate_proj." not in n),
                     all(p.grad is not None for n, p in named.items() if ".self_attn.gate_proj." in n)))

    cfg = TrainConfig(from_dir=str(grafted / "g"), train_params="gates", out=str(tmp_path / "run"),
                      data=(str(corpus_file),), tokens=4 * 2 * 32, seq_len=32, batch_size=2, bos="none",
                      save_every=2, eval_every=2, eval_rows=2, threads=1, progress=False)
    with tiny.single_thread():
        result = train_loop(cfg, on_checkpoint=look)
    assert result.finished and seen == [(True, True)] * 2 and result.seconds_per_step > 0


def test_misuses_are_refused_in_one_line(grafted, corpus_file, capsys):
    cases = ((["--from", str(grafted / "base"), "--train", "gates"], "has none"),
             (["--arm", "none", "--train", "gates"], "--train gates continues a grafted checkpoint"),
             (["--arm", "none", "--from", str(grafted / "g")], "pass one of them"),
             (["--train", "all"], "--from DIR"),
             (["--from", str(grafted / "g"), "--steps", "0"], "--steps must be at least 1"))
    for args, message in cases:
        code = main(["train", *args, "--data", str(corpus_file), "--out", str(grafted / "refused"), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], (args, err)
    with pytest.raises(ProbeError):
        from probe.train.continued import freeze

        freeze(torch.nn.Linear(2, 2), "gates")


def _files(folder):
    """Every file under folder, as bytes: what a refused command must leave byte for byte."""
    from pathlib import Path

    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def _one_line_error(capsys, code, message):
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("probe: error: ") and message in err[0], err


def test_resume_after_the_from_weights_changed_is_refused(grafted, corpus_file, tmp_path, capsys):
    """Issue 37 #3: a --from checkpoint whose weights changed (same path) between an interrupted
    run and its --resume would train one model on two bases: refused in one line, nothing changed."""
    import shutil

    from safetensors.torch import save_file

    source, out = tmp_path / "g", tmp_path / "out"
    shutil.copytree(grafted / "g", source)
    args = ["train", "--from", str(source), "--data", str(corpus_file), *STEPS, "--out", str(out), "--train", "all"]
    assert main(args + ["--stop-after", "2"]) == 0
    capsys.readouterr()
    tensors = weights(source)
    tensors["model.layers.0.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"] * 1.5
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})
    before = _files(out)
    _one_line_error(capsys, main(args + ["--resume"]), "weights of --from")
    assert _files(out) == before


def test_train_from_its_own_output_is_refused_and_deletes_nothing(grafted, corpus_file, tmp_path, capsys):
    """Issue 37 #8: --out DIR --force with --from DIR (or --out inside DIR) would empty the
    checkpoint it trains from: refused before anything is touched, every file byte for byte."""
    import shutil

    source = tmp_path / "g"
    shutil.copytree(grafted / "g", source)
    (source / ".probe-output").write_text('{"written_by": "probe", "kind": "train"}\n')   # as a train folder has
    before = _files(source)
    for out, extra in ((source, ["--force"]), (source, ["--resume"]), (source / "inner", ["--force"])):
        code = main(["train", "--from", str(source), "--data", str(corpus_file), *STEPS, "--out", str(out), *extra])
        _one_line_error(capsys, code, str(source))
        assert _files(source) == before, extra


def test_a_refused_train_from_leaves_no_output_folder(grafted, corpus_file, tmp_path, capsys):
    """Issue 37: a --from run refused after its checks (no gates to train, a sequence longer than
    the model's positions) leaves neither --out nor its .probe-output marker behind."""
    short = tiny.make_checkpoint("llama", tmp_path / "short", num_hidden_layers=1, max_position_embeddings=64)
    capsys.readouterr()
    for source, extra, message in ((grafted / "base", ["--train", "gates"], "has none"),
                                   (short, ["--train", "all", "--seq-len", "128"], "64 positions")):
        out = tmp_path / "refused"
        args = ["train", "--from", str(source), "--data", str(corpus_file), "--steps", "2", "--batch-size", "2",
                "--quiet", "--out", str(out), *extra]
        _one_line_error(capsys, main(args), message)
        assert not out.exists(), extra


def test_shape_options_with_from_are_refused(grafted, corpus_file, tmp_path, capsys):
    """Issue 37 #7: --layers, --width, --vocab-size (and the other options that shape a new --arm
    model) would be ignored with --from: refused in one line instead."""
    for extra in (["--layers", "3"], ["--width", "256"], ["--vocab-size", "512"], ["--heads", "2"],
                  ["--kv-heads", "1"], ["--mlp-ratio", "2"], ["--no-qk-norm"]):
        out = tmp_path / "refused"
        code = main(["train", "--from", str(grafted / "g"), "--data", str(corpus_file), *STEPS, "--out", str(out),
                     *extra])
        _one_line_error(capsys, code, extra[0])
        assert not out.exists()


def test_a_from_run_killed_before_its_first_checkpoint_resumes(runs, corpus_file, tmp_path, monkeypatch, capsys):
    """Issue 37: killed before its first checkpoint, a --from run's --resume starts it from step 0
    (instead of answering "pass --resume") and ends where a straight run does."""
    import probe.train.loop as loop

    out = tmp_path / "killed"
    args = ["train", "--from", str(runs / "g"), "--data", str(corpus_file), *STEPS, "--out", str(out),
            "--train", "gates"]
    with monkeypatch.context() as m:
        def killed(*a, **k):
            raise KeyboardInterrupt
        m.setattr(loop, "save_checkpoint", killed)
        assert main(args) == 130
    assert out.is_dir() and not (out / "checkpoint").exists()
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    a, b = weights(runs / "gates"), weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)
