"""probe/metrics/head_norms/ against norms formed explicitly on the same forward pass: the
pre-gate output O = softmax(q k^T * scale, causal) @ v in float64 from the query, keys and values
the attention back-end was called with, the post-gate output from o_proj's input (the model's own
g * O, a plain forward pre-hook), on a tiny official gated Qwen3; tolerance 1e-6 relative (the
kernel's float32 O against the float64 one). An ungated model writes the ratio 1 exactly."""
from __future__ import annotations

import math

import pytest
import torch

import probe
from probe.data.token_types import TokenGroups
from probe.core.events import ATTENTION
from tests.samples import TEXT

RTOL = 1e-6


@pytest.fixture(scope="module")
def gated(loaded):
    lm = loaded("official_headwise")
    ids = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (2, 24), generator=ids)                      # (B, T)
    groups = TokenGroups.build(lm.tokenizer, lm.model.config.vocab_size, None, ids=ids.unique().tolist())
    cap = probe.Capture(lm.model, lm.layout, token_groups=groups)
    calls, o_in, handles = {}, {}, []

    def keep(layer, query, b, *, key, value, scale, **extra):
        calls[layer] = query.double(), key.double(), value.double(), scale

    cap.on(ATTENTION, keep)
    for p in lm.layout.layers:
        handles.append(p.o_proj.register_forward_pre_hook(
            lambda m, a, i=p.index: o_in.__setitem__(i, a[0].detach().double())))
    try:
        with torch.no_grad(), cap, cap.batch(ids):
            lm.model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    table = cap.tables("m", lm.tokenizer)["head_norms"]
    summary = {"layers": [{"layer": i, "head_norm_ratio": None} for i in range(len(lm.layout.layers))]}
    summary.update(cap.metrics["head_norms"].summarise(None, summary["layers"], None))
    return lm, ids, groups, table, summary, explicit_norms(lm, calls, o_in)


def explicit_norms(lm, calls, o_in):
    """layer -> (pre, post), each (B * T, H) float64: ||softmax(q k^T * scale) @ v|| per head, and
    the norm of each head's slice of o_proj's input."""
    H = lm.layout.num_heads
    out = {}
    for i, (q, k, v, scale) in calls.items():
        B, _, T, D = q.shape
        k, v = (x.repeat_interleave(H // x.shape[1], dim=1) for x in (k, v))   # (B, H, T, D)
        logits = (q @ k.transpose(-1, -2)) * scale                               # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        o = logits.masked_fill(~causal, -math.inf).softmax(-1) @ v              # (B, H, T, D)
        pre = o.transpose(1, 2).reshape(B * T, H, D).norm(dim=-1)
        post = o_in[i].view(B * T, H, D).norm(dim=-1)
        out[i] = pre, post
    return out


def test_norms_match_explicit_softmax_attention_and_the_gate(gated):
    lm, ids, groups, table, summary, explicit = gated
    B, T = ids.shape
    pos = torch.arange(T).expand(B, T).reshape(-1)
    member = groups.membership(ids.reshape(-1), pos)                             # (N, G)
    masks = {"all": torch.ones(B * T, dtype=torch.bool),
             **{name: member[:, g] for g, name in enumerate(groups.names)}}
    checked = 0
    ratio_total, ratio_n = 0.0, 0
    for layer, (pre, post) in explicit.items():
        ratio = post / pre
        ratio_total, ratio_n = ratio_total + float(ratio.sum()), ratio_n + ratio.numel()
        for token_type, mask in masks.items():
            rows = table[(table.layer == layer) & (table.token_type == token_type)].set_index("head")
            if not bool(mask.any()):
                assert rows.empty, token_type
                continue
            for head in range(lm.layout.num_heads):
                row = rows.loc[head]
                p, q = pre[mask, head], post[mask, head]
                assert row.tokens == int(mask.sum())
                assert row.pre == pytest.approx(float(p.mean()), rel=RTOL)
                assert row.post == pytest.approx(float(q.mean()), rel=RTOL)
                assert row.ratio_of_means == pytest.approx(float(q.mean() / p.mean()), rel=RTOL)
                assert row.mean_ratio == pytest.approx(float((q / p).mean()), rel=RTOL)
                checked += 1
        entry = summary["layers"][layer]
        assert entry["head_norm_ratio"] == pytest.approx(float(ratio.mean()), rel=RTOL)
    assert checked > 4 * len(explicit)
    assert summary["head_norm_ratio"] == pytest.approx(ratio_total / ratio_n, rel=RTOL)
    # The gate shrinks every head here (sigmoid < 1), so the check is not of 1 against 1.
    assert (table.ratio_of_means < 1).all() and summary["head_norm_ratio"] < 0.99


def test_an_ungated_model_writes_the_ratio_one_exactly(checkpoint):
    a = probe.analyze(checkpoint("qwen3"), texts=[TEXT[:400]], seq_len=32, batch_size=2, max_sequences=2,
                      display_len=4, progress=False)
    rows = a.head_norms
    assert len(rows) and set(rows.token_type) == {"all"}           # no token types without a gate
    assert (rows.pre == rows.post).all() and (rows.pre > 0).all()
    assert (rows.ratio_of_means == 1.0).all() and (rows.mean_ratio == 1.0).all()
    assert a.summary["head_norm_ratio"] == 1.0
    assert all(e["head_norm_ratio"] == 1.0 for e in a.summary["layers"] if e["layer_type"] == "attention")
    assert rows.tokens.iloc[0] == a.summary["tokens"]


def test_a_nonfinite_norm_is_left_out_and_counted(loaded):
    from probe.metrics.head_norms.reduce import HeadNormStats

    s = HeadNormStats(1, 2)
    pre = torch.tensor([[1.0, 2.0], [math.nan, 4.0], [0.0, 1.0]], dtype=torch.float64)
    post = torch.tensor([[0.5, 1.0], [1.0, 1.0], [0.0, 0.5]], dtype=torch.float64)
    s.update(pre, post, None)
    assert s.tokens.tolist() == [[2, 3]] and int(s.nonfinite) == 1
    assert s.ratio_n.tolist() == [[1, 3]]                           # pre = 0: no ratio to take
    assert s.ratio.tolist() == [[0.5, 0.5 + 0.25 + 0.5]]
