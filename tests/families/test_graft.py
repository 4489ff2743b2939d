"""`probe graft` (probe/train/graft.py, probe/families/grafted_llama.py, probe/families/grafted.py) on a tiny
Llama saved to disk: the identity graft computes the base's logits exactly with every gate at 1,
the base's weights are copied untouched, `probe check` passes, the random graft's gate scores are
sigmoid of the gate projection computed here, and transformers reads the folder after `import probe`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import probe
from tests import tiny
from probe.api.cli import main
from probe.core.errors import ProbeError
from probe.train.graft import graft

IDS = torch.randint(3, 250, (2, 20), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="session")
def grafts(tmp_path_factory):
    """A tiny Llama and its grafts: headwise identity, elementwise identity, headwise random."""
    root = tmp_path_factory.mktemp("graft")
    with tiny.single_thread():
        base = tiny.make_checkpoint("llama", root / "base", num_hidden_layers=2)
        out = {"base": base}
        for name, gate, init in (("hw-id", "headwise", "identity"), ("ew-id", "elementwise", "identity"),
                                 ("hw-rand", "headwise", "random")):
            assert main(["graft", str(base), "--gate", gate, "--init", init, "--seed", "3",
                         "--out", str(root / name)]) == 0
            out[name] = root / name
    return out


def logits(folder) -> torch.Tensor:
    loaded = probe.load(folder)
    with torch.no_grad(), tiny.single_thread():
        return loaded.model(input_ids=IDS).logits


@pytest.mark.parametrize("name", ["hw-id", "ew-id"])
def test_identity_graft_gives_the_base_logits_and_gates_of_one(grafts, name):
    base, grafted = logits(grafts["base"]), logits(grafts[name])
    assert (grafted - base).abs().max().item() <= 1e-6          # the bound; in fact 0
    with tiny.single_thread():
        a = probe.analyze(grafts[name], IDS, seq_len=IDS.shape[1], bos="none", progress=False)
    gates = a.gates.query("group == 'all'").pivot_table(index=["layer", "head"], columns="metric", values="value")
    assert (gates["min"] == 1.0).all() and (gates["max"] == 1.0).all()
    granularity = {"hw-id": "headwise", "ew-id": "elementwise"}[name]
    assert a.summary["mean_gate"] == 1.0 and a.summary["gate_layout"] == f"plain_{granularity}"


def test_base_weights_are_copied_untouched_and_the_graft_is_recorded(grafts):
    base = load_file(str(grafts["base"] / "model.safetensors"))
    for name in ("hw-id", "ew-id", "hw-rand"):
        grafted = load_file(str(grafts[name] / "model.safetensors"))
        gate_keys = {k for k in grafted if ".self_attn.gate_proj." in k}
        assert len(gate_keys) == 2 * 2                            # weight and bias, 2 layers
        assert set(grafted) - gate_keys == set(base)
        assert all(torch.equal(grafted[k], base[k]) for k in base)
        config = json.loads((grafts[name] / "config.json").read_text())
        assert config["model_type"] == "grafted_llama" and "quantization_config" not in config
        init = "random" if name == "hw-rand" else "identity"
        assert config["graft"]["base"] == "base" and config["graft"]["init"] == init
        assert config["graft"]["scale"] == (1.0 if init == "random" else 2.0)
        assert (grafts[name] / "tokenizer.json").exists()
    heads, dims = 4, 16
    assert grafted_shape(grafts["hw-id"]) == (heads, 64) and grafted_shape(grafts["ew-id"]) == (heads * dims, 64)


def grafted_shape(folder) -> tuple:
    return tuple(load_file(str(folder / "model.safetensors"))["model.layers.0.self_attn.gate_proj.weight"].shape)


@pytest.mark.parametrize("name", ["hw-id", "ew-id", "hw-rand"])
def test_probe_check_passes_on_the_grafted_folder(grafts, name, capsys):
    assert main(["check", str(grafts[name])]) == 0
    activation = "sigmoid" if name == "hw-rand" else "2sigmoid"
    assert f"checks passed for gate gate_proj:plain:" in capsys.readouterr().out.splitlines()[-1]
    assert probe.load(grafts[name]).layout.gate.activation == activation


def test_random_graft_scores_are_sigmoid_of_the_gate_projection(grafts):
    """Gate scores per head against sigmoid(x W^T + b), x the attention input (input-layernorm
    output) recorded here, W and b read from the saved file."""
    loaded = probe.load(grafts["hw-rand"])
    weights = load_file(str(grafts["hw-rand"] / "model.safetensors"))
    inputs, a = attention_inputs_and_analysis(loaded)
    for i in range(2):
        w = weights[f"model.layers.{i}.self_attn.gate_proj.weight"].double()
        b = weights[f"model.layers.{i}.self_attn.gate_proj.bias"].double()
        scores = torch.sigmoid(inputs[i] @ w.T + b)                       # (B, T, H)
        got = a.gates.query(f"group == 'all' and layer == {i} and metric == 'mean'").sort_values("head").value
        torch.testing.assert_close(torch.tensor(got.to_numpy()), scores.mean((0, 1)), atol=1e-6, rtol=0)
        assert 0.2 < float(scores.mean()) < 0.8 and float(scores.std()) > 0.01   # near 0.5, not constant


def test_two_sigmoid_gate_histogram_spans_its_range_and_claim_1_is_not_judged(grafts):
    """A grafted 2 * sigmoid gate scores in (0, 2): gate_hist.csv's 50 equal bins span [0, 2] and
    each bin counts the scores 2 * sigmoid(x W^T + b) that fall in it (x the attention input
    recorded here, W and b the gate projection set to random values here), where bins on [0, 1]
    put every score above 1 in the last bin. Claim 1's sigmoid thresholds are not applied."""
    from probe.reports.claims import claims_table

    loaded = probe.load(grafts["hw-id"])
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for layer in loaded.model.model.layers:
            projection = layer.self_attn.gate_proj
            projection.weight.copy_(0.2 * torch.randn(projection.weight.shape, generator=generator))
            projection.bias.copy_(0.2 * torch.randn(projection.bias.shape, generator=generator))
    inputs, a = attention_inputs_and_analysis(loaded)
    assert a.gate_hist.bin_lo.min() == 0.0 and a.gate_hist.bin_hi.max() == 2.0
    for i, layer in enumerate(loaded.model.model.layers):
        projection = layer.self_attn.gate_proj
        with torch.no_grad():
            scores = 2 * torch.sigmoid(inputs[i] @ projection.weight.double().T + projection.bias.double())  # (B, T, H)
        assert float(scores.max()) > 1.2 and float(scores.min()) < 0.8         # both halves used
        expected = torch.histogram(scores.flatten(), bins=50, range=(0.0, 2.0)).hist
        got = a.gate_hist[a.gate_hist.layer == i].groupby("bin_lo", sort=True)["count"].sum()
        # A score within float32 rounding of a bin edge may land on either side of it.
        width = 2.0 / 50
        near_edge = int((((scores / width) - (scores / width).round()).abs() < 1e-5).sum())
        assert int((torch.tensor(got.to_numpy()) - expected).abs().sum()) <= 2 * near_edge
        assert int(got.sum()) == scores.numel()
    verdict = claims_table(a).query("claim == 1").verdict.item()
    assert verdict.startswith("not testable") and "2 * sigmoid" in verdict
    from probe.reports.runs import load_runs
    from probe.reports.sections import build_sections

    sections = build_sections(load_runs([a]))
    items = {item.id: item for section in sections for item in section.items}
    assert ("gate is 2 * sigmoid, scores in (0, 2): its mean gate is not on the paper's (0, 1) scale"
            in items["summary-table"].caption)
    # The gate sections name the gate too: no "sigmoid gate scores" for a 2 * sigmoid gate, and
    # the saturation thresholds read as multipliers that scores past 1 all exceed.
    histograms = items["gate-histograms"].caption
    assert "Histogram of gate scores (50 equal bins on [0, 2])" in histograms
    assert "gate is 2 * sigmoid, scores in (0, 2)." in histograms
    assert "a score of 1 passes the output unchanged" in items["gate-saturation"].caption
    gates = next(section for section in sections if section.id == "gates")
    assert gates.intro.endswith("gate is 2 * sigmoid, scores in (0, 2).")


def attention_inputs_and_analysis(loaded):
    """({layer: its attention input (input-layernorm output) over IDS, float64}, the analysis of IDS)."""
    inputs = {}
    handles = [layer.input_layernorm.register_forward_hook(
        lambda m, args, out, i=i: inputs.__setitem__(i, out.detach().double()))
        for i, layer in enumerate(loaded.model.model.layers)]
    with torch.no_grad(), tiny.single_thread():
        loaded.model(input_ids=IDS)
    for h in handles:
        h.remove()
    with tiny.single_thread():
        return inputs, probe.analyze(loaded, IDS, seq_len=IDS.shape[1], bos="none", progress=False)


def test_transformers_reads_a_grafted_folder_after_import_probe(grafts):
    """In a fresh process: `import probe`, then transformers' Auto classes (imported after) build
    the grafted class from config.json, with no flags."""
    code = ("import probe\nfrom transformers import AutoModelForCausalLM\n"
            f"m = AutoModelForCausalLM.from_pretrained({str(grafts['hw-id'])!r})\n"
            "print(type(m).__name__, type(m.model.layers[0].self_attn).__name__)")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                          env={"PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["GraftedLlamaForCausalLM", "GraftedLlamaAttention"]


def test_graft_refuses_gated_or_other_models_in_one_line(grafts, tmp_path):
    with pytest.raises(ProbeError, match="already gated"):
        graft(grafts["hw-id"], gate="headwise", init="identity", out=tmp_path / "x", say=lambda s: None)
    gpt2 = tiny.make_checkpoint("gpt2", tmp_path / "gpt2", n_layer=1)
    with pytest.raises(ProbeError, match="ungated llama model"):
        graft(gpt2, gate="headwise", init="identity", out=tmp_path / "y", say=lambda s: None)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    (tmp_path / "file").write_text("")
    with pytest.raises(ProbeError, match="is a file"):
        graft(grafts["base"], gate="headwise", init="identity", out=tmp_path / "file", say=lambda s: None)
    # A --gate-weights file that is not there: said before the base loads (a GGUF base takes a minute).
    said = []
    with pytest.raises(ProbeError, match=r"--gate-weights .*nowhere\.safetensors does not exist"):
        graft(grafts["base"], gate="headwise", init="identity", out=tmp_path / "z", say=said.append,
              gate_weights=tmp_path / "nowhere.safetensors")
    assert said == [] and not (tmp_path / "z").exists()


@pytest.mark.parametrize("gate, article", [("headwise", "a"), ("elementwise", "an")])
def test_graft_says_what_it_grafted(grafts, tmp_path, gate, article):
    said = []
    graft(grafts["base"], gate=gate, init="identity", out=tmp_path / gate, say=said.append)
    assert said[-1].startswith(f"grafted {article} {gate} gate (identity, scale 2 * sigmoid) onto ")


def test_trained_gate_weights_rebuild_the_trained_model_from_the_base(grafts, tmp_path):
    """save_gate_weights writes the gates alone; probe graft --gate-weights puts them back onto the
    base, and the rebuilt model's logits are the trained model's; a file for another base is refused."""
    from probe.train.graft import save_gate_weights

    trained = probe.load(grafts["hw-rand"]).model                    # stands for a trained graft
    with torch.no_grad():
        trained.model.layers[1].self_attn.gate_proj.bias.fill_(0.7)
    file = save_gate_weights(trained, tmp_path / "gates.safetensors", steps=0)
    stored = load_file(str(file))
    assert set(stored) == {f"model.layers.{i}.self_attn.gate_proj.{p}" for i in range(2) for p in ("weight", "bias")}
    with pytest.raises(ProbeError, match="hold a headwise gate"):
        graft(grafts["base"], gate="elementwise", init="identity", out=tmp_path / "w", gate_weights=file, say=print)
    assert main(["graft", str(grafts["base"]), "--gate", "headwise", "--gate-weights", str(file),
                 "--out", str(tmp_path / "rebuilt")]) == 0
    rebuilt = probe.load(tmp_path / "rebuilt")
    assert rebuilt.config.graft["gate_weights"]["steps"] == 0 and rebuilt.config.graft["init"] == "random"
    with torch.no_grad(), tiny.single_thread():
        assert torch.equal(rebuilt.model(input_ids=IDS).logits, trained(input_ids=IDS).logits)
    other = tiny.make_checkpoint("llama", tmp_path / "other", seed=5, num_hidden_layers=2)
    with pytest.raises(ProbeError, match="were trained on"):
        graft(other, gate="headwise", init="identity", out=tmp_path / "z", gate_weights=file, say=lambda s: None)


def test_a_gate_file_of_the_earlier_sha256_fingerprint_is_checked_in_its_own_scheme(grafts, gate_file, tmp_path):
    """Gate-weights files written before the XXH3 fingerprint hold 16 hex digits of SHA-256: such a
    file still grafts onto its own base (and the new checkpoint records the base's XXH3
    fingerprint, which its runs' meta.json will carry) and is still refused on another base."""
    from safetensors import safe_open

    from probe.load.fingerprint import embedding_fingerprint

    with safe_open(str(gate_file), "pt") as f:
        record = json.loads(f.metadata()["graft"])
    base = probe.load(grafts["base"]).model
    old = embedding_fingerprint(base, like="0" * 16)
    assert len(old) == 16 and record["base_fingerprint"] == embedding_fingerprint(base)
    earlier = _rewrite(gate_file, tmp_path / "earlier.safetensors", record={**record, "base_fingerprint": old})
    graft(grafts["base"], gate="headwise", init="identity", out=tmp_path / "g", gate_weights=earlier, say=lambda s: None)
    assert probe.load(tmp_path / "g").config.graft["base_fingerprint"] == embedding_fingerprint(base)
    other = tiny.make_checkpoint("llama", tmp_path / "other", seed=5, num_hidden_layers=2)
    with pytest.raises(ProbeError, match="were trained on"):
        graft(other, gate="headwise", init="identity", out=tmp_path / "z", gate_weights=earlier, say=lambda s: None)


def test_a_graft_analysed_in_memory_pairs_with_its_base_and_with_no_other(grafts, tmp_path):
    """A graft being trained is analysed as a model object, with no folder to read its record
    from: meta.json takes the record from the model's config and every run's embedding
    fingerprint, so the report pairs the graft with its own base (and not with another model of
    the same architecture)."""
    from transformers import AutoModelForCausalLM

    from probe.load.fingerprint import embedding_fingerprint
    from probe.reports.claims import pairs as claims_pairs
    from probe.reports.runs import load_runs

    def run(folder, name):
        model = AutoModelForCausalLM.from_pretrained(folder)
        with tiny.single_thread():
            probe.analyze(model, IDS, seq_len=IDS.shape[1], progress=False, name=name).save(tmp_path / name)
        return json.loads((tmp_path / name / "meta.json").read_text())

    base, graft = run(grafts["base"], "base"), run(grafts["hw-id"], "graft")
    other = tiny.make_checkpoint("llama", tmp_path / "other-ckpt", num_hidden_layers=2, seed=9)
    run(other, "other")
    assert graft["graft"]["base_fingerprint"] == base["embedding_fingerprint"]
    assert base["embedding_fingerprint"] == embedding_fingerprint(AutoModelForCausalLM.from_pretrained(grafts["base"]))
    runs = load_runs([tmp_path / "base", tmp_path / "graft", tmp_path / "other"])
    assert claims_pairs.pairing(runs, "base", "graft") is None
    assert claims_pairs.pairing(runs, "other", "graft") is not None


def _rewrite(file, out, *, record=..., change=None):
    """A copy of a gate-weights file with its graft record replaced (record) or its tensors
    changed (change(tensors))."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(file), "pt") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if record is not ...:
        meta["graft"] = json.dumps(record)
    if change is not None:
        change(tensors)
    save_file(tensors, str(out), metadata=meta)
    return out


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


@pytest.fixture
def gate_file(grafts, tmp_path):
    from probe.train.graft import save_gate_weights

    return save_gate_weights(probe.load(grafts["hw-rand"]).model, tmp_path / "gates.safetensors", steps=0)


def test_gate_weights_that_cannot_be_trusted_are_refused_in_one_line(grafts, gate_file, tmp_path, capsys):
    """Issue 37 #4 and its tracebacks: a record without base_fingerprint (another base's file
    would pass), NaN or inf gate weights, a record with no init, an unknown init, or one that is a
    list, a string or a number: each refused in one line, nothing written."""
    from safetensors import safe_open

    with safe_open(str(gate_file), "pt") as f:
        record = json.loads(f.metadata()["graft"])

    def nan(t):
        t["model.layers.0.self_attn.gate_proj.weight"][0, 0] = float("nan")

    def inf(t):
        t["model.layers.1.self_attn.gate_proj.bias"][0] = float("inf")
    cases = {
        "no fingerprint": (dict(record={k: v for k, v in record.items() if k != "base_fingerprint"}), "base_fingerprint"),
        "nan weight": (dict(change=nan), "not finite"),
        "inf bias": (dict(change=inf), "not finite"),
        "no init": (dict(record={k: v for k, v in record.items() if k != "init"}), "init"),
        "unknown init": (dict(record={**record, "init": "zeros"}), "init"),
        "a list": (dict(record=["gate", "headwise"]), "not an object"),
        "a string": (dict(record="headwise"), "not an object"),
        "a number": (dict(record=3), "not an object"),
        "unknown gate": (dict(record={**record, "gate": "sideways"}), "gate"),
    }
    for name, (how, message) in cases.items():
        bad = _rewrite(gate_file, tmp_path / f"{name}.safetensors", **how)
        out = tmp_path / f"out-{name}"
        code = main(["graft", str(grafts["base"]), "--gate", "headwise", "--gate-weights", str(bad), "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("probe: error: ") and message in err[0], (name, err)
        assert not out.exists(), name


def test_graft_never_deletes_its_own_gate_weights(grafts, tmp_path, capsys):
    """Issue 37 #9: --gate-weights OUT/gates.safetensors --out OUT --force deleted its own input:
    refused, every file of OUT byte for byte."""
    from probe.train.graft import save_gate_weights

    out = tmp_path / "out"
    assert main(["graft", str(grafts["base"]), "--gate", "headwise", "--init", "random", "--out", str(out)]) == 0
    save_gate_weights(probe.load(out).model, out / "gates.safetensors", steps=0)
    before = _files(out)
    capsys.readouterr()
    code = main(["graft", str(grafts["base"]), "--gate", "headwise", "--gate-weights", str(out / "gates.safetensors"),
                 "--out", str(out), "--force"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "gate weights" in err[0], err
    assert _files(out) == before


def test_graft_seed_out_of_range_and_a_full_disk_are_one_line(grafts, tmp_path, monkeypatch, capsys):
    """Issue 37: --seed 2**70 and a disk that fills up while the graft is saved (safetensors
    raises its own error, not an OSError) end in one line, with nothing left behind."""
    from safetensors import SafetensorError

    out = tmp_path / "g"
    code = main(["graft", str(grafts["base"]), "--gate", "headwise", "--init", "random", "--seed", str(2 ** 70),
                 "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--seed" in err[0], err

    import transformers.modeling_utils as mu

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    monkeypatch.setattr(mu, "safe_save_file", full)
    code = main(["graft", str(grafts["base"]), "--gate", "headwise", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []
