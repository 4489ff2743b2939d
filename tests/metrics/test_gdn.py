"""probe/metrics/gdn/ and probe/capture/gdn.py on the tiny hybrids (Qwen3-Next: fused
projections; Qwen3.5: separate ones; OLMo-Hybrid: every projection apart, a g_proj gate and beta
up to 2; all 4 value heads over 2 key heads), random and trained (the shipped hybrid-gated arm, a
Qwen3.5 model, and the same weights as a Qwen3-Next one: trained_hybrids.py), in float32:

- beta, g, SiLU(z), q, k and v as the event carries them equal the model's own: the arguments
  transformers' module passes its gated-delta-rule kernel (recorded by wrapping the kernel
  function the module calls) and the output norm's inputs (a forward pre-hook);
- the per-key terms add up to the kernel's own output, to the gate's and to out_proj's, to 1e-5
  relative (gdn_check.csv, and directly against transformers' torch_chunk_gated_delta_rule on
  random grouped-head inputs, chunked over several chunks);
- every term equals the one a float64 step-by-step recurrence gives, written here apart: each
  key's own part of the state, decayed and read by the query (1e-10); so do the state shares;
- the key-0 share of gdn_keys.csv is the mean over queries t >= 1 of |c_{t,0}| / sum_s |c_{t,s}|
  from those independent terms, and gdn_key0_buckets.csv its mean per query-position bucket.

gdn_sparsity, gdn_head_norms, gdn_gates' mean_g / half_life and gdn_top_beta are checked against
tensors recorded with plain hooks in test_gdn_tables.py; the run-level tests here check the
tables' shape and that fused and separate projections agree (a consistency check, not a value one).
"""
from __future__ import annotations

import math

import numpy as np

import pytest
import torch
import torch.nn.functional as F

import probe
from probe.core.events import GDN
from probe.families.gdn import describe_refused, gdn_parts
from probe.metrics.gdn.decompose import KeyTerms, state_share, written_values
from probe.metrics.gdn.keys import tolerance
from tests.metrics.trained_hybrids import TRAINED_KINDS, trained_checkpoint
from tests.samples import TEXT

KINDS = ("qwen3_next", "qwen3_5", "olmo_hybrid")
# The terms against the layer's own float32 output, relative per head (as gdn_check.csv): 1e-5 for
# the trained arms on every ATen CPU path (scalar, AVX2, AVX-512). The random tiny Qwen3-Next decays
# by e^g ~ 0.03 a token, and there the float32 chunk kernel itself lands up to 4.3e-5 from the
# exact value under AVX2 and the scalar path (1e-6 under AVX-512): the terms equal the float64
# recurrence to 1e-10, so that gap is the kernel's rounding; random kinds are held to the
# float32 tolerance that gdn_check applies (1e-4).
RTOL = 1e-5


def rtol(kind: str) -> float:
    return RTOL if kind in TRAINED_KINDS else tolerance(torch.float32)


@pytest.fixture(scope="module")
def hybrid(checkpoint, tmp_path_factory):
    """hybrid(kind) -> the checkpoint of a tiny hybrid of KINDS (random) or TRAINED_KINDS."""
    root = tmp_path_factory.mktemp("trained")
    return lambda kind: trained_checkpoint(kind, root) if kind in TRAINED_KINDS else checkpoint(kind)


def test_the_trained_qwen3_next_is_the_trained_qwen3_5(hybrid):
    """The converted arm computes what the arm computes: the same logits, bit for bit here (the
    same operations on the same numbers; 1e-6 allows another CPU's kernels)."""
    import transformers as tf

    ids = torch.randint(3, 1000, (2, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = tf.Qwen3_5ForCausalLM.from_pretrained(hybrid("trained_qwen3_5"))(input_ids=ids, use_cache=False).logits
        b = tf.Qwen3NextForCausalLM.from_pretrained(hybrid("trained_qwen3_next"))(input_ids=ids, use_cache=False).logits
    assert float((a - b).abs().max()) <= 1e-6 * float(a.abs().max())


def _modeling(lm):
    import importlib
    return importlib.import_module(type(lm.layout.layers[0].mixer).__module__)


@pytest.fixture(scope="module", params=KINDS + TRAINED_KINDS)
def recorded(request, hybrid, monkeypatch_module):
    """One forward pass of a tiny hybrid: probe's GDN events, and the model's own kernel
    arguments and output-norm inputs, recorded apart."""
    lm = probe.load(hybrid(request.param))
    module = _modeling(lm)
    kernel_args, norm_args = {}, {}
    original = module.torch_chunk_gated_delta_rule

    def recording(query, key, value, g, beta, **kw):
        out = original(query, key, value, g=g, beta=beta, **kw)
        kernel_args[len(kernel_args)] = dict(q=query.detach().clone(), k=key.detach().clone(),
                                             v=value.detach().clone(), g=g.detach().clone(),
                                             beta=beta.detach().clone(), o=out[0].detach().clone())
        return out
    monkeypatch_module.setattr(module, "torch_chunk_gated_delta_rule", recording)
    cap = probe.Capture(lm.model, lm.layout, gdn=True, anatomy=True, vocab_size=lm.model.config.vocab_size)
    calls, handles = {}, []
    cap.on(GDN, lambda layer, o, b, call: calls.__setitem__(layer, call))
    for p in lm.layout.layers:
        if p.layer_type == "linear_attention":
            handles.append(gdn_parts(p.mixer).norm.register_forward_pre_hook(
                lambda m, a, i=p.index: norm_args.__setitem__(i, (a[0].detach().clone(), a[1].detach().clone()))))
    ids = torch.randint(3, 200, (2, 150), generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad(), cap, cap.batch(ids):
            lm.model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    gdn_layers = [p.index for p in lm.layout.layers if p.layer_type == "linear_attention"]
    return lm, calls, dict(zip(gdn_layers, kernel_args.values())), norm_args, request.param


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_beta_decay_and_gate_are_the_models_own(recorded):
    lm, calls, kernel, norm, _ = recorded
    assert sorted(calls) == sorted(kernel) == [0, 1, 2]
    for layer, call in calls.items():
        own = kernel[layer]
        assert torch.equal(call.beta, own["beta"].float())
        assert torch.equal(call.g, own["g"])
        assert torch.equal(call.v, own["v"].float())
        parts = gdn_parts(lm.layout.layers[layer].mixer)
        rep = parts.group
        dk = own["q"].shape[-1]
        l2 = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
        assert torch.allclose(call.q, l2(own["q"].float()).repeat_interleave(rep, 2) / math.sqrt(dk), rtol=0, atol=1e-7)
        assert torch.equal(call.k, l2(own["k"].float()).repeat_interleave(rep, 2))
        o, z = norm[layer]
        assert torch.equal(call.z.reshape(z.shape), z) and torch.equal(call.o.reshape(o.shape), o)
        assert torch.equal(F.silu(call.z.float()).reshape(z.shape), F.silu(z.float()))
        assert call.beta.shape[-1] == parts.num_v_heads == 2 * parts.num_k_heads


def _terms_by_recurrence(q, k, v, beta, g):
    """Every term c[t, s] (H, T, T, dv), float64, step by step: key s's own part of the state,
    written at s (k_s u_s^T, u_s what the delta rule writes), decayed by e^{g} at every later
    step, read by q_t. Also the final per-key states (H, T, dk, dv)."""
    H, T, dk = k.shape
    dv = v.shape[-1]
    parts = torch.zeros(H, T, dk, dv, dtype=torch.float64)       # part of the state owed to key s
    c = torch.zeros(H, T, T, dv, dtype=torch.float64)
    for t in range(T):
        parts *= g[:, t].exp()[:, None, None, None]
        S = parts.sum(1)                                           # e^{g_t} S_{t-1}
        u = beta[:, t, None] * (v[:, t] - torch.einsum("hkd,hk->hd", S, k[:, t]))
        parts[:, t] = k[:, t, :, None] * u[:, None, :]
        c[:, t] = torch.einsum("hskd,hk->hsd", parts, q[:, t])
    return c, parts


def test_terms_sum_to_the_kernel_and_match_an_independent_recurrence(recorded):
    lm, calls, kernel, norm, kind = recorded
    for layer, call in calls.items():
        for row in range(call.q.shape[0]):
            H = lambda x: x[row].transpose(0, 1).double()
            q, k, v, beta, g = (H(x) for x in (call.q, call.k, call.v, call.beta, call.g))
            u, S = written_values(k, v, beta, g, chunk=32)          # several chunks at T = 150
            terms = KeyTerms(q, k, u, g, block_elements=4 * 150 * 40)
            c, parts = _terms_by_recurrence(q, k, v, beta, g)
            ref = H(call.o)                                          # (H, T, dv) the kernel's float32 output
            recons = []
            for t0, t1, P, recon in terms.blocks():
                mine = P[..., None] * u[:, None, :t1]                 # (H, Bq, t1, dv)
                assert torch.allclose(mine, c[:, t0:t1, :t1], rtol=0, atol=1e-10)
                recons.append(recon)
            # As gdn_check.csv measures it: per head, relative to the norm of its whole output.
            recon = torch.cat(recons, 1)
            assert float(((recon - ref).norm(dim=(1, 2)) / ref.norm(dim=(1, 2))).max()) < rtol(kind), (kind, layer)
            phi = state_share(k, u, g, S)
            S_T = parts.sum(1)
            expect = torch.einsum("hskd,hkd->hs", parts, S_T) / (S_T * S_T).sum((1, 2))[:, None]
            assert torch.allclose(phi, expect, rtol=0, atol=1e-10)
            assert torch.allclose(phi.sum(1), torch.ones(phi.shape[0], dtype=torch.float64), atol=1e-12)


def test_terms_against_transformers_chunk_kernel_on_random_grouped_inputs():
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    gen = torch.Generator().manual_seed(1)
    B, T, nk, nv, dk, dv = 1, 200, 2, 6, 16, 8
    q, k = torch.randn(B, T, nk, dk, generator=gen), torch.randn(B, T, nk, dk, generator=gen)
    v = torch.randn(B, T, nv, dv, generator=gen)
    beta = torch.rand(B, T, nv, generator=gen)
    g = -torch.rand(B, T, nv, generator=gen) * 0.3
    o, _ = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
    l2 = lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)
    qn = (l2(q) / math.sqrt(dk)).repeat_interleave(nv // nk, 2)
    kn = l2(k).repeat_interleave(nv // nk, 2)
    H = lambda x: x[0].transpose(0, 1).double()
    u, _ = written_values(H(kn), H(v), H(beta), H(g))
    recon = torch.cat([r for *_, r in KeyTerms(H(qn), H(kn), u, H(g), block_elements=6 * 200 * 50).blocks()], 1)
    assert float((recon - H(o)).norm() / H(o).norm()) < RTOL


@pytest.fixture(scope="module")
def run(hybrid):
    return {kind: probe.analyze(hybrid(kind), texts=[TEXT[:500]], seq_len=48, batch_size=2, max_sequences=3,
                                progress=False, gdn=True, anatomy=True, resamples=0) for kind in KINDS + TRAINED_KINDS}


def test_the_run_checks_its_terms_and_writes_every_table(run):
    for kind, a in run.items():
        check = a.tables["gdn_check"]
        assert sorted(set(check.layer)) == [0, 1, 2] and bool(check.passed.all()), kind
        main = check[check.site.isin(["kernel_output", "out_proj"])]
        assert float(main.max_rel_error.max()) < rtol(kind), kind
        for table, columns in probe.metrics.BY_NAME["gdn"].tables.items():
            assert list(a.tables[table].columns) == list(columns), (kind, table)
            # 48 tokens: no key is read by the 128 queries a state sink needs (test_gdn_received.py)
            assert len(a.tables[table]) or table == "gdn_state_sinks", (kind, table)
        gates = a.tables["gdn_gates"]
        assert set(gates.quantity) == {"gate_silu", "beta", "decay"}
        s = a.summary["gdn"]
        assert [e["layer"] for e in s["layers"]] == [0, 1, 2] and s["failed_layers"] == [] and s["refused"] is None
        beta_max = 2 if kind == "olmo_hybrid" else 1                # OLMo-Hybrid: beta = 2 sigmoid(b)
        assert 0 <= s["key0_share"] <= 1 and 0 < s["mean_beta"] < beta_max
        assert a.meta["gdn"] == [0, 1, 2]
        keys = a.tables["gdn_keys"]
        for layer in (0, 1, 2):
            frame = keys[(keys.layer == layer) & (keys.metric == "n_queries")]
            assert set(frame.value) == {3 * 47.0}                 # 3 sequences of 48 tokens, t >= 1


def _anatomy_pass(lm, ids):
    """(capture, {layer: GDNCall}): a --gdn --anatomy pass over ids, keeping each GDN layer's call."""
    cap = probe.Capture(lm.model, lm.layout, gdn=True, anatomy=True, vocab_size=lm.model.config.vocab_size)
    calls = {}
    cap.on(GDN, lambda layer, o, b, call: calls.__setitem__(layer, call))
    with torch.no_grad(), cap, cap.batch(ids):
        lm.model(input_ids=ids, use_cache=False)
    return cap, calls


def test_key0_share_is_the_mean_of_independent_terms(checkpoint, loaded):
    """One sequence: the metric's key-0 share per head against the recurrence's terms."""
    lm = loaded("qwen3_5")
    cap, calls = _anatomy_pass(lm, torch.randint(3, 200, (1, 40), generator=torch.Generator().manual_seed(3)))
    for layer, call in calls.items():
        H = lambda x: x[0].transpose(0, 1).double()
        c, _ = _terms_by_recurrence(*(H(x) for x in (call.q, call.k, call.v, call.beta, call.g)))
        mag = c.norm(dim=-1)                                           # (H, T, T)
        share = (mag[..., 0] / mag.sum(-1))[:, 1:].mean(1)
        got = cap.metrics["gdn"].keys[layer].values()["key0_share"]
        assert torch.allclose(got, share, rtol=1e-9, atol=1e-12)


def test_key0_buckets_are_bucketed_shares_of_independent_terms(loaded):
    """gdn_key0_buckets.csv, two sequences of 24 tokens: per layer, value head and query-position
    bucket [2^j, 2^(j+1)) (queries t >= 1; the last bucket [16, 32) holds t = 16..23), n_queries
    the queries of both sequences in it and value the mean over them of |c_{t,0}| / sum_s |c_{t,s}|
    from the float64 recurrence's terms, written here apart (_terms_by_recurrence); 1e-9 relative."""
    lm = loaded("qwen3_5")
    cap, calls = _anatomy_pass(lm, torch.randint(3, 200, (2, 24), generator=torch.Generator().manual_seed(7)))
    table = cap.tables("m", lm.tokenizer)["gdn_key0_buckets"]
    assert sorted(set(table.layer)) == sorted(calls) == [0, 1, 2]
    t = torch.arange(1, 24)
    bucket = [(2 ** j, 2 ** (j + 1)) for j in range(5)]                 # t = 1, 2-3, ..., 16-23
    for layer, call in calls.items():
        shares = []
        for row in range(2):
            H = lambda x: x[row].transpose(0, 1).double()
            c, _ = _terms_by_recurrence(*(H(x) for x in (call.q, call.k, call.v, call.beta, call.g)))
            mag = c.norm(dim=-1)                                       # (H, T, T)
            shares.append((mag[..., 0] / mag.sum(-1))[:, 1:])          # (H, 23): t = 1 .. 23
        share = torch.cat(shares, 1)                                   # (H, 46)
        tt = torch.cat([t, t])
        rows = table[table.layer == layer]
        for h in range(share.shape[0]):
            got = rows[rows["head"] == h].sort_values("bucket_lo")
            assert [(lo, hi) for lo, hi in zip(got.bucket_lo, got.bucket_hi)] == bucket, (layer, h)
            for (lo, hi), n, value in zip(bucket, got.n_queries, got.value):
                inside = (tt >= lo) & (tt < hi)
                assert n == int(inside.sum()), (layer, h, lo)
                assert value == pytest.approx(float(share[h, inside].mean()), rel=1e-9, abs=1e-12), (layer, h, lo)


def test_off_by_default_and_unknown_layouts_refused_in_one_line(loaded):
    lm = loaded("qwen3_next")
    assert not probe.Capture(lm.model, lm.layout).wants(GDN)
    assert isinstance(gdn_parts(lm.layout.layers[0].mixer), object)
    assert "Qwen3.5" in gdn_parts(torch.nn.Linear(2, 2))
    line = describe_refused({0: "why", 1: "why", 2: "other"})
    assert line == "linear-attention layers not measured (layers 0, 1: why; layer 2: other)"
    assert "\n" not in line


def test_gdn_on_a_model_without_such_layers_says_so(loaded):
    """--gdn on a softmax-only model measures nothing: a warning says why, rather than a run
    whose missing gdn_ tables read as measured and empty."""
    import warnings

    lm = loaded("qwen3")
    with pytest.warns(UserWarning, match=r"gdn=True: the model has no Gated DeltaNet \(linear-attention\) layers"):
        probe.Capture(lm.model, lm.layout, gdn=True)
    hybrid = loaded("qwen3_next")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        probe.Capture(hybrid.model, hybrid.layout, gdn=True)


def test_a_layer_probe_cannot_read_is_named_and_the_rest_measured(checkpoint, monkeypatch):
    """Layer 1 made unreadable (as an unknown layout would be): one warning line names it and
    why, meta.json says the same, and layers 0 and 2 are measured and checked as before."""
    import probe.capture.gdn as capture_gdn
    import probe.metrics.gdn.reduce as reduce_gdn

    def parts(mixer):
        return "KimiDeltaAttention: a channel-wise decay" if mixer.layer_idx == 1 else gdn_parts(mixer)
    monkeypatch.setattr(capture_gdn, "gdn_parts", parts)
    monkeypatch.setattr(reduce_gdn, "gdn_parts", parts)
    with pytest.warns(UserWarning, match=r"^linear-attention layers not measured \(layer 1: KimiDeltaAttention"):
        a = probe.analyze(checkpoint("qwen3_5"), texts=[TEXT[:300]], seq_len=32, batch_size=2, max_sequences=2,
                          progress=False, gdn=True, anatomy=True, resamples=0)
    assert a.meta["gdn"] == [0, 2]
    assert a.meta["gdn_refused"] == "linear-attention layers not measured (layer 1: KimiDeltaAttention: a channel-wise decay)"
    assert a.summary["gdn"]["refused"] == a.meta["gdn_refused"]
    check = a.tables["gdn_check"]
    assert sorted(set(check.layer)) == [0, 2] and bool(check.passed.all())
    assert 1 in set(a.tables["massive"].layer)


def test_key0_share_interval_resamples_each_sequences_own_shares(checkpoint):
    """summary.json gdn.key0_share_lo / _hi: the percentile bootstrap over sequences of the
    headline key-0 share, from each sequence's own shares. Independently: each sequence analysed
    alone gives its per-head key-0 shares and query counts (gdn_keys.csv); the resamples are
    recomputed from those with the same weights, here."""
    from probe.intervals.bootstrap import percentile_interval, resample_weights

    ids = torch.randint(3, 200, (4, 40), generator=torch.Generator().manual_seed(5))
    path = checkpoint("qwen3_5")
    opts = dict(seq_len=40, bos="none", batch_size=2, progress=False, gdn=True, anatomy=True)
    whole = probe.analyze(path, ids, resamples=300, **opts)
    alone = [probe.analyze(path, ids[i:i + 1], resamples=0, **opts).tables["gdn_keys"] for i in range(4)]
    layers = sorted(set(alone[0].layer))
    share = np.stack([[k[(k.layer == l) & (k.metric == "key0_share")].sort_values("head").value.to_numpy()
                       for l in layers] for k in alone])                                  # (S, layers, H)
    n = np.stack([[k[(k.layer == l) & (k.metric == "n_queries")].sort_values("head").value.to_numpy()
                   for l in layers] for k in alone])
    W = resample_weights(4, 300)                                                           # (R, S)
    per_cell = np.einsum("rs,slh->rlh", W, share * n) / np.einsum("rs,slh->rlh", W, n)    # (R, layers, H)
    lo, hi = percentile_interval(per_cell.mean(2).mean(1))
    s = whole.summary["gdn"]
    assert s["key0_share"] == pytest.approx(float(((share * n).sum(0) / n.sum(0)).mean()), rel=1e-9)
    assert (s["key0_share_lo"], s["key0_share_hi"]) == pytest.approx((float(lo), float(hi)), rel=1e-9)
    assert s["key0_share_lo"] < s["key0_share"] < s["key0_share_hi"]


def test_fused_and_separate_projections_give_the_same_tables(run):
    """The trained arm as Qwen3.5 (separate projections) and as Qwen3-Next (fused, grouped by key
    head): the same function, so every GDN table holds the same numbers, head by head."""
    a, b = run["trained_qwen3_5"], run["trained_qwen3_next"]
    for table in ("gdn_gates", "gdn_gate_hist", "gdn_sparsity", "gdn_head_norms", "gdn_keys", "gdn_key0_buckets",
                  "gdn_received"):
        x, y = a.tables[table], b.tables[table]
        assert len(x) == len(y) > 0, table
        numeric = [c for c in x.columns if c != "model" and x[c].dtype.kind == "f"]
        keys = [c for c in x.columns if c not in numeric and c != "model"]
        assert x[keys].equals(y[keys]), table
        np.testing.assert_allclose(x[numeric].to_numpy(), y[numeric].to_numpy(), rtol=1e-5, atol=1e-7, err_msg=table)
