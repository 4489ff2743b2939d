"""The `probe` attention back-end (probe/capture/attention.py) against eager float64 softmax attention.

Each path is checked on the same tensors: the CPU flash kernel, the exact blockwise fallback,
and the CUDA memory-efficient path. CI has no GPU, so the CUDA path runs here against a CPU
stand-in for the kernel that enforces the kernel's contract (equal head counts, a (B, H, T, S)
bias with 16-element aligned rows, lse padded to a multiple of 32 queries with junk in the
padding); the real kernel is exercised only where a GPU is present (last test).
"""
from __future__ import annotations

import math

import pytest
import torch

from probe.capture import attention
from tests.capture.softmax_term_models import CAP, _gemma2

TOL = dict(atol=1e-5, rtol=1e-5)


def reference(query, key, value, mask, scale):
    """Eager softmax in float64: out (B, H, T, D), lse (B, H, T), P[..., 0] (B, H, T)."""
    heads, T, S = query.shape[1], query.shape[2], key.shape[2]
    k = key.double().repeat_interleave(heads // key.shape[1], dim=1)
    v = value.double().repeat_interleave(heads // value.shape[1], dim=1)
    scores = query.double() @ k.transpose(-1, -2) * scale                    # (B, H, T, S)
    if mask is None:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), -math.inf)
    else:
        scores = scores.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)
    return probs @ v, lse, probs[..., 0]


def tensors(B=2, H=4, KV=2, T=37, D=16, seed=0, dtype=torch.float32):
    """T = 37 is neither a multiple of 16 (bias alignment) nor of 32 (lse padding)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, n, T, D, generator=g) * 2 for n in (H, KV, KV))
    return q.to(dtype), k.to(dtype), v.to(dtype)


def padding_mask(B=2, T=37):
    """Causal and left padding on the second row: a bool (B, 1, T, S) mask, True = attend.
    Query rows that see no key at all are left out of comparisons (they are padding)."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[1, :5] = False
    return (causal[None] & keep[:, None, :])[:, None], keep


def efficient_kernel_standin(q, k, v, bias, compute_log_sumexp, dropout_p, is_causal, *, scale):
    """What aten._scaled_dot_product_efficient_attention does on a GPU, with its checks."""
    assert compute_log_sumexp and dropout_p == 0.0
    assert q.shape[1] == k.shape[1] == v.shape[1], "the kernel needs equal head counts"
    B, H, T, _ = q.shape
    S = k.shape[2]
    if bias is None:
        mask = None
        assert is_causal
    else:
        assert not is_causal and bias.dtype == q.dtype
        assert tuple(bias.shape) == (B, H, T, S)
        assert bias.stride(-1) == 1 and bias.stride(-2) % 16 == 0, "attn_bias is not correctly aligned"
        mask = bias > -math.inf
    out, lse, _ = reference(q, k, v, mask, scale)
    padded = torch.full((B, H, -(-T // 32) * 32), float("nan"))              # junk past T
    padded[..., :T] = lse
    return out.to(q.dtype), padded, torch.empty(()), torch.empty(())


@pytest.fixture
def emulated_cuda(monkeypatch):
    """Route CPU tensors through the CUDA branch with the stand-in kernel."""
    monkeypatch.setattr(attention, "fused_kernel", lambda query: "cuda-efficient")
    monkeypatch.setattr(attention, "_efficient_kernel", efficient_kernel_standin)


def check(out, lse, query, key, value, mask, scale, rows=None):
    want_out, want_lse, want_p0 = reference(query, key, value, mask, scale)
    p0 = attention.first_key_probability(query, key, lse, mask, scale)
    if rows is not None:  # (B, T) query rows that attend to something
        out, want_out = out.transpose(1, 2)[rows], want_out.transpose(1, 2)[rows]
        lse, want_lse, p0, want_p0 = (x.transpose(1, 2)[rows] for x in (lse, want_lse, p0, want_p0))
    torch.testing.assert_close(out.double(), want_out, **TOL)
    torch.testing.assert_close(lse.double(), want_lse, **TOL)
    torch.testing.assert_close(p0.double(), want_p0, **TOL)


PATHS = ("cpu-flash", "blockwise", "cuda-emulated")


def run_path(path, q, k, v, mask, scale, request):
    if path == "cuda-emulated":
        request.getfixturevalue("emulated_cuda")
    if path == "blockwise":
        return attention.chunked_attention_with_lse(q, k, v, attention.additive_mask(mask, q.dtype),
                                                    scale, chunk=16)
    return attention.attention_with_lse(q, k, v, mask, scale)


@pytest.mark.parametrize("path", PATHS)
def test_causal_grouped_query(path, request):
    q, k, v = tensors()
    scale = q.shape[-1] ** -0.5
    out, lse = run_path(path, q, k, v, None, scale, request)
    assert lse.shape == q.shape[:3] and lse.dtype == torch.float32
    check(out, lse, q, k, v, None, scale)


@pytest.mark.parametrize("path", PATHS)
def test_padding_mask_grouped_query(path, request):
    q, k, v = tensors(seed=1)
    mask, keep = padding_mask()
    scale = 0.3
    out, lse = run_path(path, q, k, v, mask, scale, request)
    check(out, lse, q, k, v, mask, scale, rows=keep)


def test_aligned_bias_pads_rows_and_keeps_values():
    mask, _ = padding_mask()
    for given in (mask, attention.additive_mask(mask, torch.float32)):
        bias = attention.aligned_bias(given, torch.float32)
        assert bias.shape == mask.shape and bias.stride(-2) == 48              # 37 -> 48
        torch.testing.assert_close(bias, attention.additive_mask(mask, torch.float32))


def test_kernel_refusal_falls_back_to_blockwise_with_one_warning(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("attn_bias is not correctly aligned\nmore detail")

    monkeypatch.setattr(attention, "fused_kernel", lambda query: "cuda-efficient")
    monkeypatch.setattr(attention, "_efficient_kernel", refuse)
    monkeypatch.setattr(attention, "_fallback_warned", False)
    q, k, v = tensors(seed=2)
    scale = q.shape[-1] ** -0.5
    with pytest.warns(UserWarning, match=r"not correctly aligned\); using exact blockwise") as seen:
        out, lse = attention.attention_with_lse(q, k, v, None, scale)
        attention.attention_with_lse(q, k, v, None, scale)
    assert len(seen) == 1
    check(out, lse, q, k, v, None, scale)


def test_out_of_memory_is_not_hidden_by_the_fallback(monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(attention, "fused_kernel", lambda query: "cuda-efficient")
    monkeypatch.setattr(attention, "_efficient_kernel", oom)
    q, k, v = tensors()
    with pytest.raises(torch.OutOfMemoryError):
        attention.attention_with_lse(q, k, v, None, 0.25)


def test_float64_uses_the_exact_blockwise_path():
    q, k, v = tensors(dtype=torch.float64)
    assert attention.fused_kernel(q) is None
    out, lse = attention.attention_with_lse(q, k, v, None, 0.25)
    check(out, lse, q, k, v, None, 0.25)
    want_out, _, _ = reference(q, k, v, None, 0.25)
    assert out.dtype == torch.float64 and float((out - want_out).abs().max()) < 1e-12   # not via float32


def test_analysis_through_the_cuda_branch_equals_the_cpu_path(loaded, emulated_cuda, monkeypatch):
    """A whole capture on a gated GQA model: the CUDA branch's glue gives the CPU numbers."""
    from tests.capture.captures import ids_for, run_capture

    lm = loaded("official_elementwise")
    ids = ids_for(lm.model, T=45)
    cap_cuda, logits_cuda = run_capture(lm, ids)
    monkeypatch.undo()                                                        # back to the CPU kernel
    cap_cpu, logits_cpu = run_capture(lm, ids)
    torch.testing.assert_close(logits_cuda, logits_cpu, **TOL)
    for layer in cap_cpu.first_token:
        torch.testing.assert_close(cap_cuda.first_token[layer].f_attn(), cap_cpu.first_token[layer].f_attn(),
                                   atol=1e-6, rtol=0)
        torch.testing.assert_close(cap_cuda.gates[layer].mean(), cap_cpu.gates[layer].mean(), atol=1e-6, rtol=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CI has none)")
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_real_cuda_kernel(dtype):
    q, k, v = (x.cuda() for x in tensors(dtype=dtype))
    mask, keep = padding_mask()
    tol = TOL if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    for m, rows in ((None, None), (mask.cuda(), keep.cuda())):
        out, lse = attention.attention_with_lse(q, k, v, m, 0.25)
        want_out, want_lse, want_p0 = reference(q.cpu(), k.cpu(), v.cpu(), None if m is None else mask, 0.25)
        p0 = attention.first_key_probability(q, k, lse, m, 0.25)
        got = [x.cpu().double() for x in (out, lse, p0)]
        want = [want_out, want_lse, want_p0]
        if rows is not None:
            got = [x.transpose(1, 2)[keep] for x in got]
            want = [x.transpose(1, 2)[keep] for x in want]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **tol)


# -- sliding-window attention -----------------------------------------------------------------
#
# Without padding, sliding-window layers get no mask (probe_mask) and attend band by band
# (attention.SlidingWindow); with padding they keep transformers' materialised mask.

WINDOW = 16


def band(T, window):
    """The reference sliding-window mask, (1, 1, T, T) bool: 0 <= i - j < window."""
    d = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    return ((d >= 0) & (d < window))[None, None]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("window,block", [(16, None), (16, 24), (5, 7), (37, 8), (1, 8), (101, None)])
def test_sliding_window_grouped_query(path, window, block, request, monkeypatch):
    """T = 101: several windows, and no block size divides it; window 1 sees only itself,
    window >= T is plain causal."""
    if path == "cuda-emulated":
        request.getfixturevalue("emulated_cuda")
    elif path == "blockwise":
        monkeypatch.setattr(attention, "fused_kernel", lambda query: None)
    if block is not None:
        monkeypatch.setattr(attention, "band_block", lambda w: block)
    q, k, v = tensors(T=101, seed=5)
    scale = 0.3
    win = attention.SlidingWindow(window)
    out, lse = attention.attention_with_lse(q, k, v, win, scale)
    assert out.shape == q.shape and lse.shape == q.shape[:3] and lse.dtype == torch.float32
    if window < 101:                                                  # banded: (B, T, H, D) underneath
        assert out.transpose(1, 2).is_contiguous()
    want_out, want_lse, want_p0 = reference(q, k, v, band(101, window), scale)
    p0 = attention.first_key_probability(q, k, lse, win, scale)
    torch.testing.assert_close(out.double(), want_out, **TOL)
    torch.testing.assert_close(lse.double(), want_lse, **TOL)
    torch.testing.assert_close(p0.double(), want_p0, **TOL)
    assert torch.all(p0[..., window:] == 0)                          # key 0 is out of their window


def test_band_mask_matches_transformers_sliding_window():
    from transformers.masking_utils import sliding_window_causal_mask_function

    full = sdpa_mask_for(sliding_window_causal_mask_function(WINDOW), T=60)     # (1, 1, 60, 60)
    assert torch.equal(full, band(60, WINDOW))
    for start, end, k_start in ((0, 10, 0), (20, 45, 5), (50, 60, 35)):
        assert torch.equal(attention.band_mask(start, end, k_start, WINDOW, "cpu"),
                           full[..., start:end, k_start:end])


def sdpa_mask_for(mask_function, T, **kw):
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(batch_size=1, q_length=T, kv_length=T, mask_function=mask_function,
                     allow_is_causal_skip=False, **kw)


def test_layer_window_reads_the_kwarg_then_the_module():
    class Module:
        sliding_window = 8

    assert attention.layer_window(Module(), {"sliding_window": 4}) == 4
    assert attention.layer_window(Module(), {"sliding_window": None}) is None     # a full layer says so
    assert attention.layer_window(Module(), {}) == 8                               # Qwen2-MoE style
    assert attention.layer_window(object(), {}) is None
    with pytest.raises(ValueError, match="sliding_window"):
        attention.layer_window(object(), {"sliding_window": (4, 0)})


# Tiny models with a window of 16 under T = 150 (two full blocks of 64 and a partial one).
SW_T = 150


def _hf_windowed(kind):
    """Windowed models built from configs: mistral (window for every layer, from the config),
    qwen2 (layers 2-3 windowed), qwen2_moe (window only as a module attribute), gemma3
    (sliding / full layers, query_pre_attn_scalar scaling)."""
    import transformers as tf
    from tests import tiny

    base = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, initializer_range=0.2)
    if kind in ("mistral", "qwen2"):
        over = dict(sliding_window=WINDOW) if kind == "mistral" else \
            dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2)
        return tiny._build_hf(kind, seed=0, overrides=over)
    torch.manual_seed(0)
    if kind == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(**base, num_hidden_layers=2, moe_intermediate_size=32,
                                shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)
        return tf.Qwen2MoeForCausalLM(cfg).eval()
    cfg = tf.Gemma3TextConfig(**base, num_hidden_layers=2, sliding_window=WINDOW,
                              layer_types=["sliding_attention", "full_attention"])
    return tf.Gemma3ForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def windowed():
    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = _hf_windowed(kind)
        return cache[kind]
    return get


class _P0Recorder:
    """Observer: per layer, P[t, 0] from the back-end's lse and the mask it saw."""

    def __init__(self):
        self.p0, self.mask = {}, {}

    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None):
        self.p0[module.layer_idx] = attention.first_key_probability(query, key, lse, mask, scale,
                                                                    softcap=softcap)
        self.mask[module.layer_idx] = mask


def run_probe(model, ids, attention_mask=None, **kw):
    rec = _P0Recorder()
    with attention.observing(model, rec), torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention_mask, **kw).logits
    return logits, rec


def run_impl(model, impl, ids, attention_mask=None, **kw):
    previous = model.config._attn_implementation
    model.set_attn_implementation(impl)
    try:
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=attention_mask, **kw)
    finally:
        model.set_attn_implementation(previous)


def window_of_layers(model):
    """Each layer's window (None: full attention), from the config, as the models pick masks
    (Mistral has no layer_types: every layer is windowed)."""
    cfg = model.config
    types = getattr(cfg, "layer_types", None) or ["sliding_attention"] * cfg.num_hidden_layers
    return [cfg.sliding_window if t == "sliding_attention" else None for t in types]


@pytest.mark.parametrize("kind", ("mistral", "qwen2", "qwen2_moe", "gemma3"))
def test_sliding_window_models_equal_eager(kind, windowed):
    model = windowed(kind)
    ids = torch.randint(3, 256, (2, SW_T), generator=torch.Generator().manual_seed(11))
    logits, rec = run_probe(model, ids, use_cache=False)
    sdpa = run_impl(model, "sdpa", ids, use_cache=False).logits
    eager_out = run_impl(model, "eager", ids, use_cache=False, output_attentions=True)
    eager = eager_out.attentions
    # Logits up to ~7 in float32: eager and SDPA themselves differ by up to 1.8e-5 on these
    # models (probe against SDPA: at most 1.1e-5, measured; both are 2.3e-5 from a float64
    # forward); probe must be as close to SDPA as eager is, and within 1e-5 where eager is.
    bound = max(1e-5, float((eager_out.logits - sdpa).abs().max()))
    assert float((logits - sdpa).abs().max()) <= bound
    windows = window_of_layers(model)
    assert WINDOW in windows
    for layer, window in enumerate(windows):
        # Windowed layers took the banded path (no mask), full layers the causal one.
        assert rec.mask[layer] == (attention.SlidingWindow(window) if window else None)
        want = eager[layer][..., 0].double()                                   # (B, H, T)
        torch.testing.assert_close(rec.p0[layer].double(), want, atol=1e-5, rtol=0)
        if window:
            assert torch.all(rec.p0[layer][..., window:] == 0) and torch.all(want[..., window:] == 0)


def test_sliding_window_capture_equals_eager(tmp_path):
    """The whole Capture on a saved windowed checkpoint: F-Attn per head against eager."""
    import probe
    from tests import tiny
    from probe import Capture

    lm = probe.load(tiny.make_checkpoint("mistral", tmp_path / "ckpt", tokenizer=False, sliding_window=WINDOW))
    ids = torch.randint(3, 256, (2, SW_T), generator=torch.Generator().manual_seed(12))
    with torch.no_grad(), Capture(lm.model, lm.layout) as cap:
        with cap.batch(ids):
            lm.model(input_ids=ids, use_cache=False)
    eager = run_impl(lm.model, "eager", ids, use_cache=False, output_attentions=True).attentions
    for layer in lm.layout.attention_layers:
        p0 = eager[layer][..., 0].double()
        torch.testing.assert_close(cap.first_token[layer].f_attn(), p0[:, :, 1:].mean((0, 2)), atol=1e-5, rtol=0)


def test_sliding_window_with_padding_keeps_the_mask(windowed):
    """Left padding: the materialised (B, 1, T, S) mask, window included, as before."""
    model = windowed("mistral")
    ids = torch.randint(3, 256, (2, SW_T), generator=torch.Generator().manual_seed(13))
    keep = torch.ones(2, SW_T, dtype=torch.long)
    keep[1, :7] = 0
    logits, rec = run_probe(model, ids, keep, use_cache=False)
    sdpa = run_impl(model, "sdpa", ids, keep, use_cache=False).logits
    eager = run_impl(model, "eager", ids, keep, use_cache=False, output_attentions=True).attentions
    rows = keep.bool()
    torch.testing.assert_close(logits[rows], sdpa[rows], **TOL)
    for layer, att in enumerate(eager):
        assert isinstance(rec.mask[layer], torch.Tensor) and rec.mask[layer].shape[-2:] == (SW_T, SW_T)
        torch.testing.assert_close(rec.p0[layer].transpose(1, 2)[rows].double(),
                                   att[..., 0].transpose(1, 2)[rows].double(), atol=1e-5, rtol=0)


def test_sliding_window_with_a_cache_and_generation(windowed):
    """Prefill into transformers' sliding-window cache (banded), then decoding: the prompt is
    longer than the window, so each decoding step gets a materialised (1, 1, 1, S) mask."""
    model = windowed("mistral")
    ids = torch.randint(3, 256, (1, 40), generator=torch.Generator().manual_seed(14))
    logits, rec = run_probe(model, ids)                                        # use_cache default
    assert rec.mask[0] == attention.SlidingWindow(WINDOW)
    torch.testing.assert_close(logits, run_impl(model, "sdpa", ids).logits, **TOL)
    outputs = {}
    for impl in ("sdpa", attention.NAME):
        previous = model.config._attn_implementation
        model.set_attn_implementation(impl)
        try:
            with torch.no_grad():
                outputs[impl] = model.generate(ids, max_new_tokens=5, do_sample=False,
                                               output_scores=True, return_dict_in_generate=True)
        finally:
            model.set_attn_implementation(previous)
    assert torch.equal(outputs["sdpa"].sequences, outputs[attention.NAME].sequences)
    for a, b in zip(outputs["sdpa"].scores, outputs[attention.NAME].scores):
        torch.testing.assert_close(a, b, **TOL)


class _Shapes(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the shape of every tensor any aten op returns (views and masks included)."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in torch.utils._pytree.tree_leaves(out):
            if isinstance(x, torch.Tensor):
                self.shapes.append(tuple(x.shape))
        return out


def quadratic_shapes(model, ids, attention_mask=None, impl=attention.NAME):
    """Shapes with two dimensions of at least T (vocab 256 < T, so logits do not count)."""
    T = ids.shape[1]
    previous = model.config._attn_implementation
    model.set_attn_implementation(impl)
    try:
        with torch.no_grad(), _Shapes() as seen:
            model(input_ids=ids, attention_mask=attention_mask, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    return [s for s in seen.shapes if len(s) >= 2 and sorted(s)[-2] >= T]


def test_sliding_window_path_forms_no_t_by_s_tensor(windowed):
    model = windowed("mistral")
    T = 300
    ids = torch.randint(3, 256, (1, T), generator=torch.Generator().manual_seed(15))
    assert quadratic_shapes(model, ids) == []
    # The detector sees the T x S masks where they exist: SDPA, and probe with padding.
    assert (1, 1, T, T) in quadratic_shapes(model, ids, impl="sdpa")
    keep = torch.ones(1, T, dtype=torch.long)
    keep[0, :2] = 0
    assert (1, 1, T, T) in quadratic_shapes(model, ids, keep)


# -- logit soft-capping (Gemma 2) and attention sinks (gpt-oss) ---------------------------------


def _gpt_oss():
    from transformers import GptOssConfig, GptOssForCausalLM

    model = GptOssForCausalLM(GptOssConfig(
        vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=16, num_local_experts=4,
        num_experts_per_tok=2)).eval()
    with torch.no_grad():
        for layer in model.model.layers:                      # sinks large enough to matter
            layer.self_attn.sinks.normal_(0.0, 2.0, generator=torch.Generator().manual_seed(3))
    return model


@pytest.mark.parametrize("build,feature", [(_gemma2, "softcap"), (_gpt_oss, "s_aux")])
def test_softcap_and_sinks_match_eager(build, feature):
    """The eager implementations apply the cap / the sink inside their softmax; probe applies the
    cap on the exact blockwise path and the sink through the lse. T = 40 > window 16."""
    from probe import Capture
    from probe.load.loader import describe

    torch.manual_seed(0)
    model = build()
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(4))
    model.set_attn_implementation("eager")
    with torch.no_grad():
        ref = model(input_ids=ids, output_attentions=True, use_cache=False)
    # Without the feature the numbers would be visibly different: the test can fail.
    plain = {"softcap": "attn_logit_softcapping", "s_aux": None}[feature]
    if plain:
        setattr(model.config, plain, None)
        for layer in model.model.layers:
            layer.self_attn.attn_logit_softcapping = None
        with torch.no_grad():
            uncapped = model(input_ids=ids, output_attentions=True, use_cache=False).attentions
        assert (uncapped[0][..., 0] - ref.attentions[0][..., 0]).abs().max() > 1e-3
        setattr(model.config, plain, CAP)
        for layer in model.model.layers:
            layer.self_attn.attn_logit_softcapping = CAP
    layout = describe(model, gate="none") if feature == "s_aux" else describe(model)
    with torch.no_grad(), Capture(model, layout) as cap:
        with cap.batch(ids, None):
            logits = model(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(logits, ref.logits, atol=1e-5, rtol=1e-5)
    for layer, att in zip(layout.attention_layers, ref.attentions):
        want = att[:, :, 1:, 0].double().mean((0, 2))                          # (H,)
        torch.testing.assert_close(cap.first_token[layer].f_attn(), want, atol=1e-5, rtol=0)


def test_sink_takes_mass_from_every_key():
    q, k, v = tensors(seed=5)
    scale = 0.25
    out, lse = attention.attention_with_lse(q, k, v, None, scale)
    sinks = torch.tensor([0.0, 3.0, -2.0, 8.0])
    out_s, lse_s = attention.add_sink(out.clone(), lse.clone(), sinks)
    # Reference: softmax over [scores, sink] in float64, sink column dropped.
    want_out, want_lse, _ = reference(q, k, v, None, scale)
    total = torch.logaddexp(want_lse, sinks.double()[None, :, None])
    torch.testing.assert_close(lse_s.double(), total, **TOL)
    torch.testing.assert_close(out_s.double(), want_out * torch.exp(want_lse - total)[..., None], **TOL)


def test_softcap_runs_the_exact_path_on_every_device(monkeypatch):
    monkeypatch.setattr(attention, "fused_kernel", lambda query: pytest.fail("no fused kernel caps logits"))
    q, k, v = tensors(seed=6)
    out, lse = attention.attention_with_lse(q, k, v, None, 0.25, softcap=2.0)
    scores = (q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2)) * 0.25
    scores = torch.tanh(scores / 2.0) * 2.0
    scores = scores.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), **TOL)


def test_bidirectional_request_without_mask_is_refused():
    q, k, v = tensors()
    with pytest.raises(ValueError, match="bidirectional"):
        attention.probe_attention(torch.nn.Module(), q, k, v, None, scaling=0.25, is_causal=False)


def test_uniform_reference_counts_only_visible_keys():
    """Uniform attention over the keys a query sees: 1/(t+1) causally; under a window W key 0
    is out of sight for t >= W, so it gets 0 there; a padding mask divides by what is left."""
    T = 10
    assert attention.uniform_first_key(None, T, "cpu") is None
    got = attention.uniform_first_key(attention.SlidingWindow(4), T, "cpu")[0]
    want = torch.tensor([1 / (t + 1) if t < 4 else 0.0 for t in range(T)], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
    mask, _ = padding_mask(T=T)                                   # row 1: keys 0-4 hidden
    for m in (mask, attention.additive_mask(mask, torch.float32)):
        u = attention.uniform_first_key(m, T, "cpu")
        torch.testing.assert_close(u[0], 1 / torch.arange(1, T + 1, dtype=torch.float64))
        assert float(u[1].abs().max()) == 0.0


def test_windowed_capture_reports_the_windowed_uniform_reference(tmp_path):
    """Capture's uniform reference on a windowed Mistral: the mean over t >= 1 of 1/(t+1) for
    t < W and 0 after, not the causal mean (which would understate a windowed baseline's sink)."""
    from tests.capture.captures import run_capture
    from types import SimpleNamespace

    from probe.load.loader import describe
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=8)).eval()
    ids = torch.randint(0, 128, (2, 30), generator=torch.Generator().manual_seed(1))
    cap, _ = run_capture(SimpleNamespace(model=model, layout=describe(model)), ids)
    want = sum(1 / (t + 1) for t in range(1, 8)) / 29
    for stats in cap.first_token.values():
        assert stats.uniform_reference() == pytest.approx(want, rel=1e-12)
