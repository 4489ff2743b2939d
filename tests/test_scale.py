"""Scale (issue 6): long contexts, sliding windows, position buckets, low-precision models,
reducer precision, device maps. The 32K memory check is benchmarks/long_context.py."""
from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

import probe
from tests import tiny
from probe.capture import attention
from tests.samples import TEXT
from probe.metrics.first_token.reduce import FirstTokenStats
from probe.metrics.gates.reduce import GateStats
from probe.metrics.loss.reduce import LossStats
from probe.metrics.massive.reduce import MaxAbsStats
from probe.metrics.reducers import LogHistogram

LONG_T = 4096
F_ATTN_TOL = 1e-5
# bfloat16 model against float32 weights: about twice the worst case benchmarks/bf16_drift.py
# measured over every tiny kind and the shipped arms at T = 32, 128, 512 (F-Attn 4.9e-3, the
# model's own eager-attention F-Attn 5.8e-3; mean gate 1.8e-3; M-Act 4.4%; median 1.7%;
# sparsity 6.7e-3; loss 0.27%). They come from the model computing in bfloat16, not from the
# statistics, which accumulate in float64 / int64 either way (see the reducer tests).
# F-Attn from the arithmetic: a probability moves by at most Δs/4 when its logit moves by Δs,
# and a bfloat16 logit of magnitude up to ~10 (the tiny models' sharpened heads) rounds by
# 2**-8 * 10 ≈ 0.04, its inputs too: ~1e-2 per rounded logit, 2e-2 for two (the model's own
# drift reached 1.02e-2 on qwen3_5 with the CPU-independent tiny weights).
BF16_TOL = {"f_attn": 2e-2, "mean_gate": 5e-3, "m_act_rel": 1e-1, "median_rel": 5e-2,
            "sparsity": 2e-2, "loss_rel": 1e-2}

_kept: dict = {}


def _record(module, query, key, value, attention_mask, **kwargs):
    _kept[module.layer_idx] = (query.detach().double(), key.detach().double(),
                               kwargs.get("scaling") or query.shape[-1] ** -0.5)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register("scale_test_record", _record)
AttentionMaskInterface.register("scale_test_record", sdpa_mask)


def exact_p0(q, k, scale, qblock=512, kblock=1024):
    """P[b, h, t, 0] by an exact causal softmax over blocks of keys, float64, no T x T matrix:
    running max and sum of exp per query (independent of any kernel's log-sum-exp)."""
    B, H, T, D = q.shape
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    s0 = (q * k[:, :, :1]).sum(-1) * scale                               # (B, H, T)
    p0 = torch.empty(B, H, T, dtype=torch.float64)
    for qs in range(0, T, qblock):
        qe = min(qs + qblock, T)
        m = torch.full((B, H, qe - qs), -math.inf, dtype=torch.float64)
        total = torch.zeros(B, H, qe - qs, dtype=torch.float64)
        for ks in range(0, qe, kblock):
            ke = min(ks + kblock, qe)
            s = torch.einsum("bhtd,bhsd->bhts", q[:, :, qs:qe], k[:, :, ks:ke]) * scale
            s = s.masked_fill(torch.arange(ks, ke)[None, :] > torch.arange(qs, qe)[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            total = total * torch.exp(m - m_new) + torch.exp(s - m_new[..., None]).sum(-1)
            m = m_new
        p0[..., qs:qe] = torch.exp(s0[..., qs:qe] - m - torch.log(total))
    return p0


def recorded_p0(model, ids) -> dict:
    _kept.clear()
    previous = model.config._attn_implementation
    model.set_attn_implementation("scale_test_record")
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    return {layer: exact_p0(q, k, scale) for layer, (q, k, scale) in _kept.items()}


@pytest.fixture(scope="module")
def long_checkpoint(tmp_path_factory):
    """The official headwise kind (GQA 4/2, gated) with room for LONG_T positions."""
    return tiny.make_checkpoint("official_headwise", tmp_path_factory.mktemp("long") / "ckpt",
                                max_position_embeddings=2 * LONG_T)


def test_f_attn_and_buckets_exact_at_long_context(long_checkpoint, tmp_path):
    ids = torch.randint(3, 256, (1, LONG_T), generator=torch.Generator().manual_seed(7))
    torch.save(ids, tmp_path / "ids.pt")
    lm = probe.load(long_checkpoint)
    with tiny.single_thread():
        a = probe.analyze(lm, str(tmp_path / "ids.pt"), seq_len=LONG_T, batch_size=1, progress=False)
        expected = recorded_p0(lm.model, ids)
    assert a.summary["tokens"] == LONG_T
    ft = a.first_token.set_index(["layer", "head", "metric"]).value
    buckets = a.first_token_buckets
    assert set(buckets.columns) >= {"layer", "head", "bucket_lo", "bucket_hi", "value", "n_queries", "uniform"}
    for layer, p0 in expected.items():
        p0 = p0[0]                                                             # (H, T)
        for h in range(p0.shape[0]):
            assert ft[(layer, h, "f_attn")] == pytest.approx(float(p0[h, 1:].mean()), abs=F_ATTN_TOL)
            assert ft[(layer, h, "f_attn_paper")] == pytest.approx(float(p0[h].mean()), abs=F_ATTN_TOL)
        rows = buckets[buckets.layer == layer]
        powers = [(2 ** k, 2 ** (k + 1)) for k in range(12)]                # [1, 2) ... [2048, 4096)
        assert sorted(set(zip(rows.bucket_lo, rows.bucket_hi))) == powers
        for lo, hi in powers:
            got = rows[rows.bucket_lo == lo].sort_values("head")
            assert got.n_queries.tolist() == [hi - lo] * p0.shape[0]
            torch.testing.assert_close(torch.tensor(got.value.tolist(), dtype=torch.float64),
                                       p0[:, lo:hi].mean(1), atol=F_ATTN_TOL, rtol=0)
            uniform = (1.0 / torch.arange(lo + 1, hi + 1, dtype=torch.float64)).mean()
            assert got.uniform.iloc[0] == pytest.approx(float(uniform), rel=1e-12)


def test_buckets_split_queries_by_position():
    """FirstTokenStats buckets against a direct computation on random probabilities and padding."""
    stats = FirstTokenStats(3)
    g = torch.Generator().manual_seed(0)
    T = 5000
    p0 = torch.rand(2, 3, T, generator=g)
    valid = torch.ones(2, T, dtype=torch.bool)
    valid[1, 4500:] = False
    stats.update(p0, valid)
    edges = [2 ** k for k in range(14)]                                     # 1 ... 8192 > T
    for b, (lo, hi) in enumerate(zip(edges, edges[1:])):
        w = valid[:, lo:hi].double()
        expect = (p0[:, :, lo:hi].double() * w[:, None]).sum((0, 2)) / w.sum()
        torch.testing.assert_close(stats.bucket_sum[b] / stats.bucket_n[b], expect)
        assert int(stats.bucket_n[b]) == int(w.sum())
    rows = stats.bucket_rows()
    assert {(r["bucket_lo"], r["bucket_hi"]) for r in rows} == set(zip(edges, edges[1:]))
    assert sum(r["n_queries"] for r in rows) == 3 * int(stats.n_rest)       # 3 heads per bucket


# -- sliding windows ----------------------------------------------------------------------------

def test_sliding_windows_count_every_token_once(loaded, tmp_path):
    """--max-length 32 --stride 16 over a 100-token document: F-Attn, loss and M-Act equal a
    direct computation on the same windows with the context positions left out."""
    lm = loaded("qwen3")
    g = torch.Generator().manual_seed(3)
    docs = [torch.randint(3, 256, (100,), generator=g), torch.randint(3, 256, (20,), generator=g)]
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"input_ids": d.tolist()}) + "\n" for d in docs))
    with tiny.single_thread():
        a = probe.analyze(lm, str(data), per_document=True, max_length=32, stride=16, batch_size=3,
                          bos="none", progress=False)
    assert a.summary["tokens"] == 120
    assert a.meta["windows"] == {"max_length": 32, "stride": 16, "on_long": "slide", "windowed_documents": 1,
                                 "length": 32, "step": 16}

    # The windows by hand: [0,32) counts all, then [16,48) counts 32.., [32,64) counts 48.., ...
    pieces = [(docs[0][b:b + 32], max(0, c - b)) for b, c in
              ((0, 0), (16, 32), (32, 48), (48, 64), (64, 80), (80, 96))] + [(docs[1], 0)]
    p0_sum, queries, nll, targets = 0.0, 0, 0.0, 0
    site_max = {}
    with torch.no_grad():
        for ids, first in pieces:
            out = lm.model(input_ids=ids[None], use_cache=False, output_attentions=False,
                           output_hidden_states=True)
            p0 = recorded_p0(lm.model, ids[None])
            counted = torch.arange(len(ids)) >= first
            rest = counted.clone()
            rest[0] = False
            layer_p0 = torch.stack([p0[i][0] for i in sorted(p0)])            # (L, H, T)
            p0_sum = p0_sum + layer_p0[:, :, rest].sum(-1)                     # (L, H)
            queries += int(rest.sum())
            logp = torch.log_softmax(out.logits[0, :-1].double(), -1)
            nll_t = -logp.gather(-1, ids[1:, None])[:, 0]
            nll += float(nll_t[counted[1:]].sum())
            targets += int(counted[1:].sum())
            for i, h in enumerate(out.hidden_states[1:-1]):
                site_max[i] = max(site_max.get(i, 0.0), float(h[0][counted].abs().max()))
    assert queries == 99 + 19
    f = a.first_token[a.first_token.metric == "f_attn"].sort_values(["layer", "head"])
    torch.testing.assert_close(torch.tensor(f.value.tolist(), dtype=torch.float64),
                               (p0_sum / queries).reshape(-1), atol=F_ATTN_TOL, rtol=0)
    n = a.first_token[a.first_token.metric == "n_queries"].value
    assert set(n) == {queries}
    assert a.summary["loss"] == pytest.approx(nll / targets, abs=1e-5)
    m = a.massive[(a.massive.metric == "max_abs") & (a.massive.site == "resid_post")].set_index("layer").value
    for i, value in site_max.items():
        assert m[i] == pytest.approx(value, rel=1e-6)


def test_max_length_options(tmp_path):
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"input_ids": list(range(3, 103))}) + "\n")
    from probe.data.sequences import build_dataset

    with pytest.warns(UserWarning, match="1 of 1 documents longer than 32 tokens were truncated"):
        truncated = build_dataset(data, None, per_document=True, max_length=32, on_long="truncate")
    assert [len(s) for s in truncated.sequences] == [32] and truncated.tokens == 32
    windows = build_dataset(data, None, per_document=True, max_length=32)       # slide by default
    assert [len(s) for s in windows.sequences] == [32, 32, 32, 4] and windows.tokens == 100
    assert torch.equal(torch.cat(windows.sequences), torch.arange(3, 103))
    with pytest.raises(probe.ProbeError, match="more than max_length=32"):
        build_dataset(data, None, per_document=True, max_length=32, on_long="error")
    with pytest.raises(probe.ProbeError, match="stride= must be between 1 and 32"):
        build_dataset(data, None, per_document=True, max_length=32, stride=33)
    # Longer than the model's positions: windows of the model's length.
    with pytest.warns(UserWarning, match="lowered to the model's 40 positions"):
        capped = build_dataset(data, None, per_document=True, max_length=64, max_positions=40)
    assert [len(s) for s in capped.sequences] == [40, 40, 20]
    assert any("lowered to the model's 40 positions" in n for n in capped.notes)


def test_cli_max_length_and_bucket_table(checkpoint, tmp_path):
    from probe.api.cli import main

    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"input_ids": list(range(3, 203))}) + "\n")
    out = tmp_path / "run"
    with tiny.single_thread():
        assert main(["analyze", str(checkpoint("qwen3")), "--data", str(data), "--per-document",
                     "--max-length", "64", "--stride", "48", "--out", str(out), "--quiet"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["windows"]["max_length"] == 64 and meta["windows"]["stride"] == 48
    assert meta["tokens"] == 200
    assert meta["seq_len"] == 512 and meta["longest_sequence"] == 64      # as given / as run
    import pandas as pd

    buckets = pd.read_csv(out / "first_token_buckets.csv")
    assert list(buckets.columns) == ["model", "layer", "head", "bucket_lo", "bucket_hi", "value",
                                     "n_queries", "uniform"]
    # Every query t >= 1 of every window in exactly one bucket: 200 tokens, one position 0.
    assert set(buckets.groupby(["layer", "head"]).n_queries.sum()) == {199}


def test_meta_records_seq_len_and_stride_as_asked_and_as_run(checkpoint, tmp_path):
    """No stride given: meta.json says so (null) instead of inventing one; where windows ran,
    `step` is what ran. --max-length 40 without --stride: back-to-back windows of 40."""
    data = tmp_path / "docs.jsonl"
    data.write_text(json.dumps({"input_ids": list(range(3, 103))}) + "\n")
    path = checkpoint("llama")
    with tiny.single_thread():
        with pytest.warns(UserWarning, match="1 of 1 documents longer than 24 tokens were truncated to 24"):
            plain = probe.analyze(path, str(data), seq_len=24, bos="none", progress=False)
        windowed = probe.analyze(path, str(data), per_document=True, max_length=40, bos="none", progress=False)
    assert plain.meta["seq_len"] == 24
    assert plain.meta["windows"] == {"max_length": None, "stride": None, "on_long": "truncate",
                                     "windowed_documents": 0, "length": 24, "step": None}
    assert windowed.meta["windows"] == {"max_length": 40, "stride": None, "on_long": "slide",
                                        "windowed_documents": 1, "length": 40, "step": 40}
    assert windowed.meta["sequences"] == 3 and windowed.meta["longest_sequence"] == 40


# -- low precision ---------------------------------------------------------------------------

def own_f_attn_drift(path, ids) -> float:
    """The model's own bfloat16 drift of per-head F-Attn, without probe: transformers' eager
    attention probabilities P[t, 0], mean over t >= 1, bfloat16 against float32."""
    per_dtype = []
    for dtype in ("float32", "bfloat16"):
        model = probe.load(path, dtype=dtype).model
        model.set_attn_implementation("eager")
        with torch.inference_mode():
            maps = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
        per_dtype.append(torch.stack([m[0, :, 1:, 0].double().mean(-1) for m in maps if m is not None]))
    return float((per_dtype[1] - per_dtype[0]).abs().max())


@pytest.mark.parametrize("kind,seq_len", [("official_elementwise", 128), ("qwen3_next", 32), ("qwen3_5", 32)])
def test_bfloat16_model_within_stated_tolerance_of_float32(kind, seq_len, checkpoint):
    """The stated tolerances hold for probe's statistics and are no tighter than what the model
    itself drifts in bfloat16 (the worst cases of benchmarks/bf16_drift.py are among these)."""
    path = checkpoint(kind)
    with tiny.single_thread():
        runs = {dt: probe.analyze(str(path), texts=[TEXT * 4], seq_len=seq_len, dtype=dt, progress=False)
                for dt in ("float32", "bfloat16")}
        ids = probe.load(path).tokenizer(TEXT * 4, return_tensors="pt")["input_ids"][:, :seq_len]
        assert own_f_attn_drift(path, ids) <= BF16_TOL["f_attn"]
    f, b = runs["float32"], runs["bfloat16"]
    assert b.meta["dtype"] == "bfloat16" and f.meta["dtype"] == "float32"
    # One pass counts the mean-gate control exactly only where the histogram holds every value.
    assert b.meta["sparsity_exact"] == {"ungated": True, "gated": True, "mean_gate": True}
    assert f.meta["sparsity_exact"] == {"ungated": True, "gated": True, "mean_gate": False}
    assert f.summary["tokens"] == b.summary["tokens"]

    def values(a, frame, **where):
        df = getattr(a, frame)
        for k, v in where.items():
            df = df[df[k] == v]
        return torch.tensor(df.value.tolist(), dtype=torch.float64)

    def close(x, y, tol, rel=False):
        assert torch.equal(x.isnan(), y.isnan())            # hybrid models: no F-Attn in linear layers
        d = ((x - y).abs() / (y.abs() if rel else 1))[~y.isnan()]
        assert float(d.max()) <= tol, float(d.max())

    close(values(b, "first_token", metric="f_attn"), values(f, "first_token", metric="f_attn"), BF16_TOL["f_attn"])
    close(values(b, "gates", group="all", metric="mean"), values(f, "gates", group="all", metric="mean"),
          BF16_TOL["mean_gate"])
    close(values(b, "massive", metric="max_abs"), values(f, "massive", metric="max_abs"), BF16_TOL["m_act_rel"], True)
    close(values(b, "massive", metric="median_abs"), values(f, "massive", metric="median_abs"),
          BF16_TOL["median_rel"], True)
    close(values(b, "sparsity"), values(f, "sparsity"), BF16_TOL["sparsity"])
    assert b.summary["loss"] == pytest.approx(f.summary["loss"], rel=BF16_TOL["loss_rel"])
    for col in ("count",):                                   # the same tokens are counted
        assert values(b, "gates", group="all", metric=col).tolist() == values(f, "gates", group="all", metric=col).tolist()


def test_reducers_keep_full_precision_on_bfloat16_input():
    """Millions of bfloat16 values: sums in float64, counts in int64, nothing saturates."""
    v = torch.tensor(0.1, dtype=torch.bfloat16)
    exact = float(v)                                        # 0.10009765625
    gates = GateStats(4)
    block = torch.full((16384, 4, 16), exact, dtype=torch.bfloat16)
    for _ in range(8):                                      # 2.1M values per head
        gates.update(block[:1], block)
    assert gates.count.dtype == torch.int64 and gates.total.dtype == torch.float64
    assert int(gates.count[1, 0]) == 8 * 16384 * 16
    assert gates.mean() == pytest.approx(exact, rel=1e-12)   # a float32 running sum would drift
    assert float(gates.low.min()) == exact == float(gates.high.max())
    assert int(gates.hist.sum()) == int(gates.count.sum())

    big = GateStats(1)                                      # softplus-style gates in float16
    big.update(torch.full((1, 1, 1), 6e4, dtype=torch.float16), torch.full((1000, 1, 64), 6e4, dtype=torch.float16))
    assert float(big.total_sq[1, 0]) == 64000 * 60000.0 ** 2          # exact, no overflow to inf

    x = torch.randn(1000, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    x[3, 5], x[7, 1] = float("inf"), float("nan")
    h16, h32, habs = LogHistogram(), LogHistogram(), LogHistogram()
    h16.update(x)
    h32.update(x.float())
    finite = torch.isfinite(x.float())
    habs.update(x.float().abs()[finite])
    assert torch.equal(h16.counts, h32.counts) and torch.equal(h16.counts, habs.counts)
    assert int(h16.nonfinite) == 2 and h16.total == 1000 * 64 - 2

    m = MaxAbsStats(3)
    h = torch.randn(500, 32, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    n = torch.arange(500)
    m.update(h, torch.zeros(500, dtype=torch.long), n, n)
    top = h.float().abs().flatten().topk(3).values.tolist()
    assert [t[0] for t in m.top] == top and int(m.count) == h.numel()
    assert m.median_abs() == pytest.approx(float(h.float().abs().median()), rel=0.008)


def test_loss_in_blocks_equals_full_log_softmax(monkeypatch):
    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(2, 300, 1000, generator=g) * 4).to(torch.bfloat16)
    ids = torch.randint(0, 1000, (2, 300), generator=g)
    valid = torch.ones(2, 300, dtype=torch.bool)
    valid[1, 250:] = False
    monkeypatch.setattr(LossStats, "BLOCK", 7000)           # 7 rows of 1000 logits per step
    stats = LossStats()
    stats.update(logits, ids, valid)
    logp = torch.log_softmax(logits.double(), -1)[:, :-1]
    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
    pair = valid[:, 1:]
    assert int(stats.count) == int(pair.sum())
    assert stats.loss() == pytest.approx(float(nll[pair].mean()), rel=1e-6)


# -- devices -----------------------------------------------------------------------------------

def test_device_map_loads_through_accelerate(checkpoint, monkeypatch):
    """--device-map goes to accelerate (here every layer lands on the CPU); numbers unchanged."""
    import transformers

    seen = {}
    original = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    path = checkpoint("qwen3")
    with tiny.single_thread():
        mapped = probe.load(path, device_map="auto")
        assert seen["device_map"] == "auto"
        a = probe.analyze(mapped, texts=[TEXT], seq_len=64, max_sequences=2, progress=False)
        b = probe.analyze(str(path), texts=[TEXT], seq_len=64, max_sequences=2, progress=False)
    for key in ("f_attn", "m_act", "loss"):
        assert a.summary[key] == b.summary[key]


def test_reducers_follow_the_activations_device():
    stats = MaxAbsStats(3)
    assert stats.device == torch.device("cpu")
    stats.follow("cpu")                                     # already there: nothing moves
    assert stats.device.type == "cpu"
    stats.follow("meta")                                    # a device with no data: shapes only
    assert stats.device.type == "meta"
    assert stats.hist.counts.device.type == "meta" and stats.count.device.type == "meta"


# -- sliding-window attention at long context -------------------------------------------------

SW_LONG_T, SW_WINDOW = 2048, 256


def exact_windowed_p0(q, k, scale, window, qblock=256):
    """P[b, h, t, 0] under causal sliding-window attention (key j visible from query i iff
    0 <= i - j < window), float64, straight from its definition: per block of queries, the
    softmax over exactly the keys of its band; 0 for t >= window (key 0 is out of the band)."""
    B, H, T, D = q.shape
    k = k.repeat_interleave(H // k.shape[1], dim=1)
    p0 = torch.zeros(B, H, T, dtype=torch.float64)
    for qs in range(0, min(T, window), qblock):          # only queries t < window can see key 0
        qe = min(qs + qblock, window, T)
        s = torch.einsum("bhtd,bhsd->bhts", q[:, :, qs:qe], k[:, :, :qe]) * scale
        d = torch.arange(qs, qe)[:, None] - torch.arange(qe)[None, :]
        s = s.masked_fill((d < 0) | (d >= window), -math.inf)
        p0[..., qs:qe] = torch.softmax(s, dim=-1)[..., 0]
    return p0


def test_sliding_window_attention_exact_at_long_context(tmp_path, monkeypatch):
    """A windowed Mistral (window 256, 8 windows) at T = 2048 through probe.analyze: F-Attn per
    head and per position bucket against the definition on recorded q and k; key 0 leaves the
    window at t = 256, so the 1024+ bucket is exactly 0."""
    ckpt = tiny.make_checkpoint("mistral", tmp_path / "ckpt", tokenizer=False, sliding_window=SW_WINDOW)
    ids = torch.randint(3, 256, (1, SW_LONG_T), generator=torch.Generator().manual_seed(8))
    torch.save(ids, tmp_path / "ids.pt")
    lm = probe.load(ckpt)
    banded = []
    original = attention.banded_attention_with_lse
    monkeypatch.setattr(attention, "banded_attention_with_lse",
                        lambda *args, **kw: banded.append(args[3]) or original(*args, **kw))
    with tiny.single_thread():
        a = probe.analyze(lm, str(tmp_path / "ids.pt"), seq_len=SW_LONG_T, batch_size=1, progress=False)
        _kept.clear()
        logits = {}
        previous = lm.model.config._attn_implementation
        try:
            for impl in ("scale_test_record", "eager", attention.NAME):     # SDPA + recording first
                lm.model.set_attn_implementation(impl)
                with torch.no_grad():
                    logits[impl] = lm.model(input_ids=ids, use_cache=False).logits
        finally:
            lm.model.set_attn_implementation(previous)
    L = lm.model.config.num_hidden_layers
    assert banded == [SW_WINDOW] * (2 * L)                       # analyze + the forward: no (T, S) mask
    # F-Attn below only sees queries t < window (P[t, 0] = 0 beyond); the logits see the band
    # of every query: as close to SDPA as eager is (float32 rounding), or within 1e-5.
    sdpa = logits["scale_test_record"]
    bound = max(1e-5, float((logits["eager"] - sdpa).abs().max()))
    assert float((logits[attention.NAME] - sdpa).abs().max()) <= bound
    ft = a.first_token.set_index(["layer", "head", "metric"]).value
    buckets = a.first_token_buckets
    assert len(_kept) == lm.model.config.num_hidden_layers
    for layer, (q, k, scale) in _kept.items():
        p0 = exact_windowed_p0(q, k, scale, SW_WINDOW)[0]                       # (H, T)
        for h in range(p0.shape[0]):
            assert ft[(layer, h, "f_attn")] == pytest.approx(float(p0[h, 1:].mean()), abs=F_ATTN_TOL)
        rows = buckets[buckets.layer == layer]
        powers = [(2 ** k, 2 ** (k + 1)) for k in range(11)]                # [1, 2) ... [1024, 2048)
        assert sorted(set(zip(rows.bucket_lo, rows.bucket_hi))) == powers
        for lo, hi in powers:
            got = rows[rows.bucket_lo == lo].sort_values("head")
            torch.testing.assert_close(torch.tensor(got.value.tolist(), dtype=torch.float64),
                                       p0[:, lo:hi].mean(1), atol=F_ATTN_TOL, rtol=0)
        assert rows[rows.bucket_lo >= SW_WINDOW].value.abs().max() == 0   # key 0 out of the window
