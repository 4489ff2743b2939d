"""probe/capture/logits.py: the loss from the head applied a tile at a time equals the loss of
the model's own logits; the model's own logits are checked once per model object, and a model
that does more after its decoder keeps its own logits with each batch counted once."""
from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import probe
import probe.capture.logits as logits_module
from probe.capture.logits import LazyLogits, forward_for
from probe.metrics.loss.reduce import next_token_nll
from tests.samples import TEXT

# The tiled log-sum-exp adds the tiles' sums in another order than one logsumexp over a row.
NLL_TOL = dict(rtol=1e-5, atol=2e-5)
OPTIONS = dict(seq_len=48, batch_size=2, progress=False, display_len=0)


def head_and_hidden(seed: int, *, bias: bool, V: int = 300, C: int = 16, B: int = 2, T: int = 23):
    g = torch.Generator().manual_seed(seed)
    head = nn.Linear(C, V, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(V, C, generator=g))
        if bias:
            head.bias.copy_(torch.randn(V, generator=g))
    hidden = torch.randn(B, T, C, generator=g)
    ids = torch.randint(0, V, (B, T), generator=g)
    return head, hidden, ids


@pytest.mark.parametrize("softcap", [None, 3.0])
@pytest.mark.parametrize("bias", [False, True])
def test_tiled_loss_is_the_full_logits_loss(monkeypatch, bias, softcap):
    # Blocks of 64 head rows (the last one short) and tiles of 5 rows: several of each.
    monkeypatch.setattr(logits_module, "VOCAB_BLOCK", 64)
    monkeypatch.setattr(logits_module, "TILE_ELEMENTS", 64 * 5)
    head, hidden, ids = head_and_hidden(1, bias=bias)
    lazy = LazyLogits(hidden, head, softcap, head.out_features)
    assert lazy.tiled
    with torch.no_grad():
        full = head(hidden)
        if softcap:
            full = torch.tanh(full / softcap) * softcap
        expect = torch.nn.functional.cross_entropy(full[:, :-1].flatten(0, 1).double(), ids[:, 1:].flatten(),
                                                   reduction="none").view(2, -1)
        got = next_token_nll(lazy, ids)
        torch.testing.assert_close(got.double(), expect, **NLL_TOL)
        torch.testing.assert_close(next_token_nll(lazy, ids, batch_rows=[1])[0], got[1])
        torch.testing.assert_close(got, next_token_nll(full, ids), **NLL_TOL)


def test_tiled_loss_keeps_masked_and_nonfinite_logits_as_the_full_ones_do(monkeypatch):
    monkeypatch.setattr(logits_module, "VOCAB_BLOCK", 64)
    head, hidden, ids = head_and_hidden(2, bias=True)
    with torch.no_grad():
        head.bias[:64] = -torch.inf               # a whole first block masked: no NaN from -inf - -inf
        head.bias[100] = -torch.inf
        ids[:, 5] = 100                           # a masked target: an infinite loss
        hidden[0, 9] = torch.nan                  # a NaN row: a NaN loss for its target
        full = head(hidden)
        got = next_token_nll(LazyLogits(hidden, head, None, head.out_features), ids)
        want = next_token_nll(full, ids)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert bool(torch.isinf(got[:, 4]).all()) and bool(torch.isnan(got[0, 9]))
    keep = torch.isfinite(want)
    torch.testing.assert_close(got[keep], want[keep], **NLL_TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logsumexp_in_place_is_torchs_bit_for_bit(dtype):
    """logits.logsumexp_ against torch.logsumexp over the same rows: the same values bit for bit,
    rows of -inf, +inf, NaN and huge logits included; the input is what it overwrites."""
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(37, 1024, generator=g) * torch.logspace(-3, 3, 37)[:, None]).to(dtype)
    x[1] = -torch.inf
    x[2, 5] = torch.inf
    x[3, 7] = torch.nan
    x[4, :3] = -torch.inf
    x[5] = 1e30 if dtype == torch.float32 else 1e300
    want = torch.logsumexp(x, dim=-1)
    got = logits_module.logsumexp_(x.clone())
    assert got.dtype == dtype and torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()])
    assert bool(torch.isneginf(got[1])) and bool(torch.isposinf(got[2])) and bool(got[3].isnan())


def test_a_head_other_than_a_linear_is_applied_whole():
    head, hidden, ids = head_and_hidden(3, bias=False)
    wrapped = nn.Sequential(head)
    lazy = LazyLogits(hidden, wrapped, None, head.out_features)
    assert not lazy.tiled
    with torch.no_grad():
        torch.testing.assert_close(next_token_nll(lazy, ids), next_token_nll(head(hidden), ids))


class Calls:
    """What the model's forward was asked for: logits_to_keep of each call."""

    def __init__(self, model):
        self.seen = []
        self.forward = model.forward

        @functools.wraps(self.forward)
        def spy(*args, **kwargs):
            keep = kwargs.get("logits_to_keep", 0)
            self.seen.append(tuple(keep.shape) if isinstance(keep, torch.Tensor) else keep)
            return self.forward(*args, **kwargs)
        self.spy = spy


def reference_loss(model, loaded) -> float:
    """The mean next-token loss of every sequence of the analysed data, from the model's own
    (1, T, V) logits of each."""
    total, pairs = 0.0, 0
    with torch.no_grad():
        for ids in data_sequences(loaded):
            logits = model(input_ids=ids[None]).logits[0]
            total += float(torch.nn.functional.cross_entropy(logits[:-1].double(), ids[1:], reduction="sum"))
            pairs += len(ids) - 1
    return total / pairs


def data_sequences(loaded) -> list:
    return list(probe.data.sequences.build_dataset(None, loaded.tokenizer, texts=[TEXT],
                                                   seq_len=OPTIONS["seq_len"]).sequences)


def test_the_head_is_checked_once_then_no_logits_are_made(checkpoint):
    loaded = probe.load(checkpoint("qwen3"))
    calls = Calls(loaded.model)
    loaded.model.forward = calls.spy               # an instance attribute: the verdict's key
    first = probe.analyze(loaded, texts=[TEXT], **OPTIONS)
    second = probe.analyze(loaded, texts=[TEXT], **OPTIONS)
    # The first batch of the first analysis asks for its last logits, to check them; every other
    # batch for none (an empty tensor of positions); the display patterns are off.
    assert calls.seen[0] == 1 and set(calls.seen[1:]) == {(0,)}
    assert first.summary["loss"] == second.summary["loss"]
    assert first.summary["loss"] == pytest.approx(reference_loss(calls.forward.__self__, loaded), rel=1e-6)


def test_a_model_that_scales_its_logits_keeps_them_and_counts_its_first_batch_once(checkpoint):
    plain = probe.analyze(checkpoint("qwen3"), texts=[TEXT], **OPTIONS)
    loaded = probe.load(checkpoint("qwen3"))
    model = loaded.model
    original = model.forward

    @functools.wraps(original)                     # keeps the signature (logits_to_keep) visible
    def scaled(*args, **kwargs):
        out = original(*args, **kwargs)
        out.logits = out.logits * 2
        return out
    model.forward = scaled
    got = probe.analyze(loaded, texts=[TEXT], **OPTIONS)
    # The loss of its own (scaled) logits, not of its head's.
    assert got.summary["loss"] == pytest.approx(reference_loss(model, loaded), rel=1e-6)
    assert got.summary["loss"] != pytest.approx(plain.summary["loss"], rel=1e-3)
    # The checking forward fed the metrics, the second forward of that batch did not.
    counts = lambda a: a.massive[a.massive.metric == "count"].value.tolist()  # noqa: E731
    assert counts(got) == counts(plain)
    assert got.first_token.equals(plain.first_token)


def test_without_quiet_the_model_gives_its_own_logits(checkpoint):
    loaded = probe.load(checkpoint("qwen3"))
    ids = torch.stack(data_sequences(loaded)[:2])
    with torch.inference_mode(), forward_for(loaded.model, batch=2, length=ids.shape[1]) as forward:
        out = forward(ids)
    assert isinstance(out, torch.Tensor) and out.shape == (*ids.shape, loaded.model.config.vocab_size)
