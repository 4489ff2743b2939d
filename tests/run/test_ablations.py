"""Sink ablations (probe/run/ablations.py, --ablate): the loss by position under each one,
against the model's own outputs on the changed input, and the spec's refusals.

Tolerances: the loss of a tiny float32 model recomputed with a plain forward (SDPA) on the same
input: 1e-6 (float32 logits, two kernels; measured 1e-7); the unablated pass against the
analysis pass's own loss: 1e-9 with the same kernel (the same logits, float64 sums in another
order), 1e-6 here, where the analysis runs sink anatomy, whose attention comes from its own fused
kernel (probe/metrics/anatomy/fused.py: float32 rounded another way; measured 4.5e-8).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import probe
from probe.core.ablation_kinds import parse_plan
from probe.core.errors import ProbeError
from probe.intervals.bootstrap import resample_weights
from probe.intervals.paired_loss import bucket_edges, paired_deltas, paired_difference
from tests.samples import TEXT

SPEC = "windows=4 sinks=0,1 key0 value0 first=remove,replace:id:7"


@pytest.fixture(scope="module")
def ablated(checkpoint):
    return probe.analyze(checkpoint("official_headwise"), texts=[TEXT], seq_len=24, max_sequences=6,
                         ablate=SPEC, resamples=200, progress=False, anatomy=True)


@pytest.fixture(scope="module")
def sequences(loaded):
    """The held-out sequences the `ablated` analysis reads (the same dataset, rebuilt)."""
    from probe.core.options import AnalysisOptions
    from probe.data.sequences import read_data
    from probe.run.pipeline import dataset_for

    lm = loaded("official_headwise")
    o = AnalysisOptions(seq_len=24, max_sequences=6)
    return dataset_for(read_data(None, texts=[TEXT]), None, lm.tokenizer, lm.model.config, o).sequences


@pytest.fixture(scope="module")
def eager_model(loaded):
    """A copy of the tiny model on transformers' float32 eager attention, which adds the 4-D
    attention mask it is handed to the scores as it is (the shared model stays on SDPA)."""
    import copy

    model = copy.deepcopy(loaded("official_headwise").model)
    model.set_attn_implementation("eager")
    return model.eval()


def _window_mask(T: int, window: int | None, sinks: int = 0) -> torch.Tensor:
    """(1, 1, T, T) additive float mask from docs/sinks.md's definition, written out pair by pair:
    query i sees key j iff j <= i and (i - j < window, the window counting the query itself, or
    j < sinks)."""
    mask = torch.full((1, 1, T, T), torch.finfo(torch.float32).min)
    for i in range(T):
        for j in range(i + 1):
            if window is None or i - j < window or j < sinks:
                mask[0, 0, i, j] = 0.0
    return mask


def _target_nll(model, seqs, mask_of=None) -> list[torch.Tensor]:
    """Per sequence, (T - 1,) float64 nll of targets 1 .. T - 1 by a plain forward of `model`,
    with the 4-D mask mask_of(T) when given."""
    out = []
    with torch.no_grad():
        for s in seqs:
            mask = None if mask_of is None else mask_of(len(s))
            logits = model(input_ids=s[None], attention_mask=mask, use_cache=False).logits[0, :-1].double()
            out.append(torch.nn.functional.cross_entropy(logits, s[1:], reduction="none"))
    return out


def _pooled(nll: list[torch.Tensor], lo: int, hi: int) -> tuple[float, int]:
    """(mean nll, count) of targets lo <= t < hi of every sequence (nll[s][t - 1] is target t)."""
    picked = torch.cat([x[max(lo, 1) - 1:hi - 1] for x in nll])
    return float(picked.mean()), len(picked)


def _zeroed_first_value(model, layers):
    """Forward hooks on v_proj of `layers` that zero the output at position 0: key 0's value."""
    def hook(module, args, output):
        output = output.clone()
        output[:, 0] = 0
        return output
    return [model.model.layers[i].self_attn.v_proj.register_forward_hook(hook) for i in layers]


def _plain_loss(model, seqs, first_target: int) -> float:
    """Mean next-token loss of targets >= first_target of each sequence, by a plain forward."""
    total, n = 0.0, 0
    with torch.no_grad():
        for s in seqs:
            logits = model(input_ids=s[None], use_cache=False).logits[0, :-1].double()
            nll = torch.nn.functional.cross_entropy(logits, s[1:], reduction="none")[first_target - 1:]
            total, n = total + float(nll.sum()), n + len(nll)
    return total / n


def test_the_reference_is_the_analysis_pass_and_windows_come_first(ablated):
    rows = ablated.ablations.set_index("ablation")
    assert (rows.base_loss[rows.kind != "first_remove"] - ablated.summary["loss"]).abs().max() <= 1e-6
    assert list(rows.index) == ["window 4", "window 4 + 1 sink", "key 0 masked", "key 0 value zeroed",
                                "first token removed", "first token -> 'id:7'"]


def test_first_token_ablations_equal_a_plain_forward(ablated, loaded):
    from probe.run.pipeline import dataset_for
    from probe.data.sequences import read_data
    from probe.core.options import AnalysisOptions

    lm = loaded("official_headwise")
    o = AnalysisOptions(seq_len=24, max_sequences=6)
    seqs = dataset_for(read_data(None, texts=[TEXT]), None, lm.tokenizer, lm.model.config, o).sequences
    rows = ablated.ablations.set_index("ablation")
    removed = _plain_loss(lm.model, [s[1:] for s in seqs], 1)                 # original targets >= 2
    assert abs(rows.loc["first token removed", "loss"] - removed) <= 1e-6
    assert abs(rows.loc["first token removed", "base_loss"] - _plain_loss(lm.model, seqs, 2)) <= 1e-6
    replaced = _plain_loss(lm.model, [torch.cat([s.new_tensor([7]), s[1:]]) for s in seqs], 1)
    assert abs(rows.loc["first token -> 'id:7'", "loss"] - replaced) <= 1e-6


def test_positions_inside_the_window_are_unchanged_and_effects_follow_the_interval(ablated):
    pos = ablated.ablation_positions
    inside = pos[(pos.ablation == "window 4") & (pos.bucket_hi <= 4)]
    assert len(inside) and (inside.delta_loss.abs() <= 1e-6).all()
    outside = pos[(pos.ablation == "window 4") & (pos.bucket_lo >= 4)]
    assert (outside.delta_loss.abs() > 1e-4).any()
    for r in ablated.ablations.itertuples():
        assert (r.delta_lo <= r.delta_loss <= r.delta_hi) or not math.isfinite(r.delta_lo)
        holds_zero = r.delta_lo <= 0 <= r.delta_hi
        assert (r.effect == "no measurable effect") == holds_zero, r
    # Under "key 0 masked" no query t >= 1 attends key 0: F-Attn is 0 exactly.
    assert ablated.ablations.set_index("ablation").loc["key 0 masked", "f_attn"] == 0.0


def test_window_losses_by_position_equal_eager_attention_with_the_mask_written_out(
        ablated, sequences, eager_model):
    """'window 4' and 'window 4 + 1 sink' in every (full-attention) layer: each bucket's loss and
    base_loss in ablation_positions.csv, and the pooled loss in ablations.csv, equal the tiny
    model on float32 eager attention with an explicit (T, T) mask from the definition
    (_window_mask), not probe's kernel or KeyAblation (1e-5; measured 6.1e-7 on bucket losses of ~7)."""
    pos, rows = ablated.ablation_positions, ablated.ablations.set_index("ablation")
    assert set(rows.layer[rows.kind == "window"]) == {-1}                  # every layer: all four full
    base = _target_nll(eager_model, sequences)
    got = {}
    for label, window, sinks in (("window 4", 4, 0), ("window 4 + 1 sink", 4, 1)):
        assert (rows.loc[label, "window"], rows.loc[label, "sinks"]) == (window, sinks)
        nll = _target_nll(eager_model, sequences, lambda T: _window_mask(T, window, sinks))
        mine = pos[pos.ablation == label]
        assert len(mine) >= 4 and mine.tokens.sum() == rows.loc[label, "tokens"] == sum(len(x) for x in nll)
        for r in mine.itertuples():
            want, n = _pooled(nll, r.bucket_lo, r.bucket_hi)
            assert r.tokens == n
            assert abs(r.loss - want) <= 1e-5, (label, r.bucket_lo, r.loss, want)
            assert abs(r.base_loss - _pooled(base, r.bucket_lo, r.bucket_hi)[0]) <= 1e-5
            assert abs(r.delta_loss - (want - _pooled(base, r.bucket_lo, r.bucket_hi)[0])) <= 2e-5
        got[label] = float(torch.cat(nll).mean())
        assert abs(rows.loc[label, "loss"] - got[label]) <= 1e-5, (label, rows.loc[label, "loss"], got[label])
    # The sink is seen: the two ablations differ (each from its own reference, and from each other).
    assert abs(got["window 4"] - got["window 4 + 1 sink"]) > 1e-3
    assert abs(rows.loc["window 4", "loss"] - rows.loc["window 4 + 1 sink", "loss"]) > 1e-3


def test_value0_equals_a_plain_forward_with_key_0s_value_zeroed(ablated, sequences, loaded):
    """'key 0 value zeroed' in every full-attention layer: the loss (pooled and by bucket) equals
    a plain forward of the model (SDPA, no probe back-end) with a hook zeroing v_proj's output at
    position 0 in each of those layers; its attention is kept (1e-6 relative, the float32 logits
    of two kernels; measured 1.3e-7 by bucket, 2.5e-8 pooled). And it does something: delta_loss is far from 0."""
    model = loaded("official_headwise").model
    rows = ablated.ablations.set_index("ablation")
    row = rows.loc["key 0 value zeroed"]
    assert row.kind == "key0_value" and row.layer == -1
    handles = _zeroed_first_value(model, range(len(model.model.layers)))
    try:
        nll = _target_nll(model, sequences)
    finally:
        for h in handles:
            h.remove()
    base = _target_nll(model, sequences)
    want, want_base = float(torch.cat(nll).mean()), float(torch.cat(base).mean())
    assert abs(row.loss - want) <= 1e-6 * want, (row.loss, want)
    assert abs(row.base_loss - want_base) <= 1e-6 * want_base
    assert abs(row.delta_loss - (want - want_base)) <= 2e-6 * want
    assert abs(want - want_base) > 1e-3 and abs(row.delta_loss) > 1e-3
    pos = ablated.ablation_positions
    for r in pos[pos.ablation == "key 0 value zeroed"].itertuples():
        bucket, n = _pooled(nll, r.bucket_lo, r.bucket_hi)
        assert r.tokens == n and abs(r.loss - bucket) <= 1e-6 * bucket, (r.bucket_lo, r.loss, bucket)


def test_the_per_sequence_sums_add_up_to_each_ablations_loss(ablated):
    """ablation_sequences.csv: per sequence the nll sums under the ablation and unablated over the
    same tokens; pooled, they give ablations.csv's loss and base_loss (1e-12: float64 sums)."""
    seqs = ablated.ablation_sequences
    assert set(seqs.ablation) == set(ablated.ablations.ablation)
    for r in ablated.ablations.itertuples():
        mine = seqs[seqs.ablation == r.ablation]
        assert mine.sequence.is_unique and len(mine) == 6
        assert int(mine.tokens.sum()) == r.tokens
        assert abs(mine.nll.sum() / mine.tokens.sum() - r.loss) <= 1e-12
        assert abs(mine.base_nll.sum() / mine.tokens.sum() - r.base_loss) <= 1e-12


def test_the_tables_round_trip_through_the_run_directory(ablated, tmp_path):
    back = probe.Analysis.load(ablated.save(tmp_path / "run"))
    for table in ("ablations", "ablation_positions", "ablation_sequences"):
        mine, read = getattr(ablated, table), getattr(back, table)
        assert len(mine), table
        # The writer prints floats in full (shortest repr that reads back to the same double):
        # every cell, NaN and empty string included, comes back exactly, in the schema's dtypes.
        pd.testing.assert_frame_equal(read.reset_index(drop=True), mine.reset_index(drop=True),
                                      check_exact=True, obj=table)


def test_paired_deltas_equal_the_resampled_sequences_pooled_by_hand():
    g = np.random.default_rng(1)
    n = g.integers(1, 5, size=(7, 3))
    a, b = g.random((7, 3)) * n, g.random((7, 3)) * n
    got = paired_deltas(a, b, n, 50)
    W = resample_weights(7, 50)
    diffs = []
    for w in W:                                  # each resample: its sequences listed, then pooled
        picked = [s for s in range(7) for _ in range(int(w[s]))]
        diffs.append((sum(a[s].sum() for s in picked) - sum(b[s].sum() for s in picked))
                     / sum(n[s].sum() for s in picked))
    assert abs(got[-1]["delta_lo"] - np.quantile(diffs, 0.025)) <= 1e-12
    assert abs(got[-1]["delta_loss"] - (a.sum() - b.sum()) / n.sum()) <= 1e-12
    assert list(bucket_edges(9)) == [1, 2, 4, 8, 16]


@pytest.mark.parametrize("spec, message", [
    ("windows=64", "not shorter than the 64-token"), ("windows=8 sinks=9", "9 sinks exceed the window of 8"),
    ("sinks=4", "sinks= needs windows="), ("key1", "unknown term"), ("first=drop", "first= takes"),
    ("massive=half", "massive= takes"), ("windows=0", "at least 1")])
def test_a_bad_spec_is_one_line(spec, message):
    with pytest.raises(ProbeError, match=message):
        parse_plan(spec, 64)


def test_a_replacement_of_several_tokens_is_refused_before_the_pass(checkpoint):
    with pytest.raises(ProbeError, match="name one token"):
        probe.analyze(checkpoint("official_headwise"), texts=[TEXT], seq_len=24, max_sequences=2,
                      ablate="key0;first=replace:brackets and braces", progress=False)


@pytest.mark.parametrize("kind, spec, message", [
    ("gemma3", "key0 layers=0", "layer 0 is a sliding-window layer"),
    ("official_headwise", "key0 layers=7", "layers=7 is not an attention layer"),
    ("official_headwise", "key0;first=replace:brackets and braces", "name one token"),
    ("official_headwise", "first=replace:id:999999", "outside the vocabulary")])
def test_what_the_config_and_tokenizer_answer_is_refused_before_any_weight_is_read(
        checkpoint, monkeypatch, kind, spec, message):
    """probe/run/ablations.preflight: from the config (an empty model on the meta device) and the
    tokenizer files; the weights' loading is made to fail, so the refusal must come first."""
    from probe.load import loader

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were read before the spec was checked")
    monkeypatch.setattr(loader, "from_pretrained", no_weights)
    with pytest.raises(ProbeError, match=message):
        probe.analyze(checkpoint(kind), texts=[TEXT], seq_len=24, max_sequences=2, ablate=spec, progress=False)


def test_a_sliding_window_layer_named_is_refused():
    from types import SimpleNamespace
    from probe.run.ablations import _mask_layers

    config = SimpleNamespace(layer_types=["sliding_attention", "full_attention"], sliding_window=16)
    layout = SimpleNamespace(layers=[SimpleNamespace(index=0, layer_type="attention"),
                                     SimpleNamespace(index=1, layer_type="attention")])
    assert _mask_layers(config, layout, None, 64) == [1]
    with pytest.raises(ProbeError, match="layer 0 is a sliding-window layer"):
        _mask_layers(config, layout, (0,), 64)


def test_where_the_sink_goes_is_read_from_the_received_attention(ablated):
    rows = ablated.ablations.set_index("ablation")
    for text in [*rows.top_keys, rows.base_top_keys.iloc[0]]:
        shares = {int(p): float(v) for p, v in (item.split(":") for item in text.split())}
        assert len(shares) == 3 and 0 < sum(shares.values()) <= 1 and max(shares) < 24
    # With key 0 masked only query 0 attends it (P = 1): key 0's share is 1 / (queries counted).
    masked = dict(item.split(":") for item in rows.loc["key 0 masked", "top_keys"].split())
    assert float(masked.get("0", 0)) <= 1 / 23 + 1e-3


def test_massive_activations_set_to_their_mean_and_to_zero(loaded):
    """_means / _set_massive on a tiny model with a threshold low enough to hit: the hooked layer
    output is where(|h| >= threshold, the channel's mean of the hits, h), from the raw outputs."""
    from probe.capture.hooks import installed
    from probe.run.ablations import _means, _set_massive

    lm = loaded("official_headwise")
    model, layout = lm.model, lm.layout
    ids = torch.randint(3, 256, (2, 16), generator=torch.Generator().manual_seed(2))
    raw = {}
    keep = [(layout.layers[1].layer, "forward", lambda m, a, o: raw.update(h=(o[0] if isinstance(o, tuple) else o)))]
    with installed(keep), torch.no_grad():
        model(input_ids=ids, use_cache=False)
    h = raw["h"].double()                                               # (B, T, C)
    threshold = float(h.abs().quantile(0.98))
    hit = h.abs() >= threshold

    def measure(regs):
        with installed(regs), torch.no_grad():
            model(input_ids=ids, use_cache=False)
    means = _means(layout, {1: threshold}, measure)
    want = (h * hit).sum((0, 1)) / hit.sum((0, 1)).clamp_min(1)
    torch.testing.assert_close(means[1].double(), want, atol=1e-6, rtol=1e-6)
    for mean in (means, None):
        got = {}
        regs = _set_massive(layout, {1: threshold}, mean) + [
            (layout.layers[1].layer, "forward", lambda m, a, o: got.update(h=(o[0] if isinstance(o, tuple) else o)))]
        with installed(regs), torch.no_grad():
            model(input_ids=ids, use_cache=False)
        fill = torch.zeros_like(h) if mean is None else want.expand_as(h)
        torch.testing.assert_close(got["h"].double(), torch.where(hit, fill, h), atol=1e-6, rtol=0)


def test_paired_difference_equals_both_models_resampled_together_by_hand():
    """Model one's loss change minus model two's on the same sequences: each resample draws the
    sequences once for both (1e-12)."""
    g = np.random.default_rng(2)
    n = g.integers(5, 20, size=8).astype(float)
    a, b, c, d = (g.random(8) * n for _ in range(4))
    got = paired_difference(a, b, c, d, n, 60)
    diffs = []
    for w in resample_weights(8, 60):
        picked = [s for s in range(8) for _ in range(int(w[s]))]
        total = sum(n[s] for s in picked)
        diffs.append(sum(a[s] - b[s] for s in picked) / total - sum(c[s] - d[s] for s in picked) / total)
    assert abs(got["difference"] - ((a.sum() - b.sum()) - (c.sum() - d.sum())) / n.sum()) <= 1e-12
    assert abs(got["lo"] - np.quantile(diffs, 0.025)) <= 1e-12 and abs(got["hi"] - np.quantile(diffs, 0.975)) <= 1e-12
    assert math.isnan(paired_difference(a[:1], b[:1], c[:1], d[:1], n[:1], 60)["lo"])   # one sequence: no interval


def test_massive_means_are_measured_once_for_both_scopes(checkpoint, monkeypatch):
    """'massive=mean' ablates in the first layer with a massive activation and in every such
    layer: one measuring pass serves both (the pass only reads the outputs), and the progress
    bar counts every pass. Thresholds lowered so that the tiny model has massive activations."""
    from probe.run import ablations

    monkeypatch.setattr(ablations, "MASSIVE_MIN_ABS", 0.0)
    monkeypatch.setattr(ablations, "MASSIVE_RATIO", 3.0)
    measured, real = [], ablations._means
    monkeypatch.setattr(ablations, "_means", lambda layout, thresholds, measure:
                        measured.append(sorted(thresholds)) or real(layout, thresholds, measure))
    bars, real_bar = [], ablations._bar
    monkeypatch.setattr(ablations, "_bar", lambda total, name: bars.append(real_bar(total, name)) or bars[-1])
    a = probe.analyze(checkpoint("official_headwise"), texts=[TEXT], seq_len=24, max_sequences=3,
                      ablate="massive=mean", resamples=100, progress=True)
    rows = a.ablations.set_index("kind")
    first, every = (a.ablations.iloc[i] for i in range(2))
    assert list(a.ablations.kind) == ["massive_mean", "massive_mean"] and rows.delta_loss.notna().all()
    hit = [int(x) for x in every.note.removeprefix("layers ").split(",")]
    assert len(hit) > 1 and first.note == f"layers {hit[0]}"             # two different interventions
    assert measured == [hit]                                            # one measuring pass, every hit layer
    assert bars[0].n == bars[0].total == 1 + 2 + 1                      # unablated, two ablations, the means


def test_a_layers_means_do_not_depend_on_the_layers_measured_with_it(loaded):
    """What lets one measuring pass serve both scopes: layer 1's means measured alone equal
    layer 1's means measured with layers 0 and 2, bit for bit."""
    from probe.capture.hooks import installed
    from probe.run.ablations import _means

    lm = loaded("official_headwise")
    ids = torch.randint(3, 256, (2, 16), generator=torch.Generator().manual_seed(3))

    def measure(regs):
        with installed(regs), torch.no_grad():
            lm.model(input_ids=ids, use_cache=False)
    alone = _means(lm.layout, {1: 0.5}, measure)
    together = _means(lm.layout, {0: 0.5, 1: 0.5, 2: 0.5}, measure)
    assert torch.equal(alone[1], together[1])
