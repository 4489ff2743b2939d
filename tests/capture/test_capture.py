"""The capture's numbers against independent computations on the same tensors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.samples import BASELINES, GATED
from probe import Capture
from probe.capture import attention
from probe.capture.hooks import installed
from tests.reference import eager_attentions, recorded
from tests.capture.captures import ids_for, run_capture

F_ATTN_TOL = 1e-5
ALL = GATED + BASELINES


@pytest.mark.parametrize("kind", ALL)
def test_f_attn_equals_eager_softmax(kind, loaded):
    lm = loaded(kind)
    ids = ids_for(lm.model)
    cap, _ = run_capture(lm, ids)
    eager = eager_attentions(lm.model, ids).attentions
    maps = [a for a in eager if a is not None]
    layers = lm.layout.attention_layers
    assert len(maps) == len(layers)
    for layer, att in zip(layers, maps):
        p0 = att[:, :, :, 0].double()                                        # (B, H, T)
        expect_rest = p0[:, :, 1:].mean((0, 2))
        expect_all = p0.mean((0, 2))
        stats = cap.first_token[layer]
        torch.testing.assert_close(stats.f_attn(), expect_rest, atol=F_ATTN_TOL, rtol=0)
        torch.testing.assert_close(stats.f_attn_paper(), expect_all, atol=F_ATTN_TOL, rtol=0)
        uniform = (1.0 / torch.arange(2, ids.shape[1] + 1).double()).mean()
        assert stats.uniform_reference() == pytest.approx(float(uniform), abs=1e-12)


@pytest.mark.parametrize("kind", ("qwen3_next", "official_headwise", "llama", "gpt2"))
def test_padding_counts_nowhere(kind, loaded):
    """Right-padded rows give the same F-Attn, gates and M-Act as the sequences run alone."""
    lm = loaded(kind)
    ids = ids_for(lm.model, B=2, T=30, seed=2)
    lengths = [30, 17]
    valid = torch.arange(30)[None, :] < torch.tensor(lengths)[:, None]
    padded = ids.masked_fill(~valid, 0)
    cap, _ = run_capture(lm, padded, valid)
    alone = []
    for b, n in enumerate(lengths):
        c, _ = run_capture(lm, ids[b:b + 1, :n])
        alone.append(c)
    merged = alone[0]
    for c in alone[1:]:
        for layer in merged.first_token:
            merged.first_token[layer].merge(c.first_token[layer])
            if merged.gates:
                merged.gates[layer].merge(c.gates[layer])
        for key in merged.massive:
            merged.massive[key].merge(c.massive[key])
    for layer in cap.first_token:
        torch.testing.assert_close(cap.first_token[layer].f_attn(), merged.first_token[layer].f_attn(),
                                   atol=1e-6, rtol=0)
        assert int(cap.first_token[layer].n_rest) == sum(lengths) - len(lengths)
        if cap.gates:
            assert cap.gates[layer].mean() == pytest.approx(merged.gates[layer].mean(), abs=1e-6)
            assert torch.equal(cap.gates[layer].count, merged.gates[layer].count)
    for key in cap.massive:
        assert cap.massive[key].max_abs() == pytest.approx(merged.massive[key].max_abs(), rel=1e-5)


@pytest.mark.parametrize("kind", GATED)
def test_sdpa_output_times_gate_is_o_proj_input(kind, loaded):
    lm = loaded(kind)
    L = lm.layout
    ids = ids_for(lm.model)
    with torch.no_grad(), recorded(lm.model, L) as rec:
        lm.model(input_ids=ids, use_cache=False)
    assert rec["o_in"], "no attention layer was recorded"
    for layer, o_in in rec["o_in"].items():
        sdpa = rec["sdpa"][layer]                                             # (B, T, H, D)
        gate = L.gate.scores(rec["gate_out"][layer], L.num_heads, L.num_kv_heads, L.head_dim)
        gated = (sdpa * gate.to(sdpa.dtype)).reshape(o_in.shape)
        assert torch.equal(gated, o_in), f"layer {layer}: max diff {(gated - o_in).abs().max()}"


@pytest.mark.parametrize("kind", ALL)
def test_massive_activations_equal_direct_max(kind, loaded):
    lm = loaded(kind)
    ids = ids_for(lm.model, seed=3)
    with torch.no_grad(), recorded(lm.model, lm.layout) as rec:
        lm.model(input_ids=ids, use_cache=False)
    cap, _ = run_capture(lm, ids)
    # The model's own hidden states: entry i+1 is layer i's output, except the last (after norm).
    with torch.no_grad():
        hidden = lm.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    for p in lm.layout.layers[:-1]:
        assert cap.massive[(p.index, "resid_post")].max_abs() == pytest.approx(
            float(hidden[p.index + 1].abs().max()), rel=1e-6)
    for (layer, site), tensor in rec["sites"].items():
        stats = cap.massive[(layer, site)]
        a = tensor.abs()
        assert stats.max_abs() == pytest.approx(float(a.max()), rel=1e-6)
        top = a.flatten().topk(3).values.tolist()
        assert [t[0] for t in stats.top] == pytest.approx(top, rel=1e-6)
        b, pos, dim = stats.top[0][2], stats.top[0][3], stats.top[0][4]
        assert float(a[b, pos, dim]) == pytest.approx(stats.top[0][0], rel=1e-6)
        assert stats.top[0][5] == int(ids[b, pos])
        assert stats.median_abs() == pytest.approx(float(a.flatten().median()), rel=0.008)


SPARSITY_THRESHOLDS = (1e-1, 3e-2, 1e-2, 1e-3, 2e-3, 0.0031)


def count_below(x: torch.Tensor, t: float, scale: float = 1.0) -> float:
    """The share of |x| * scale < t, counted directly in float64 on the whole tensor."""
    return int((x.double().abs() * scale < t).sum()) / x.numel()


def capture_recording_sparsity(lm, ids):
    """A Capture pass that also keeps what its sparsity reducers saw: O as the attention back-end
    handed it to the reducer, o_proj's input and the gate module's output, per layer."""
    seen, o_in, gate_out, hooks = {}, {}, {}, []
    with torch.no_grad(), Capture(lm.model, lm.layout, thresholds=SPARSITY_THRESHOLDS) as cap:
        observe = cap.on_attention

        def keep_out(module, query, key, out, *args, **kwargs):     # the tensor the reducer sees
            seen[cap._mixer_layer[id(module)]] = out.transpose(1, 2).clone()
            observe(module, query, key, out, *args, **kwargs)
        cap.on_attention = keep_out
        for p in lm.layout.layers:
            if p.o_proj is not None:
                hooks.append(p.o_proj.register_forward_pre_hook(
                    lambda m, a, i=p.index: o_in.__setitem__(i, a[0].clone())))
            if p.gate_module is not None:
                hooks.append(p.gate_module.register_forward_hook(
                    lambda m, a, out, i=p.index: gate_out.__setitem__(i, out.clone())))
        try:
            with cap.batch(ids):
                lm.model(input_ids=ids, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
    L = lm.layout
    means = {}
    for layer in cap.sparsity:
        if cap.gates:
            g = L.gate.scores(gate_out[layer], L.num_heads, L.num_kv_heads, L.head_dim)
            means[layer] = cap.gates[layer].mean()
            assert means[layer] == pytest.approx(float(g.double().mean()), abs=1e-9)
    return cap, seen, o_in, means


def assert_shares_are_direct_counts(cap, seen, o_in, means, control=None):
    for layer, stats in cap.sparsity.items():
        O = seen[layer]                                          # (B, T, H, D)
        shares = stats.shares(means.get(layer), (control or {}).get(layer))
        for t in SPARSITY_THRESHOLDS:
            assert shares["ungated"][t] == (count_below(O, t), True), (layer, t)
            assert shares["gated"][t] == (count_below(o_in[layer], t), True), (layer, t)
            if means:
                assert shares["mean_gate"][t] == (count_below(O, t, means[layer]), True), (layer, t)


@pytest.mark.parametrize("kind", GATED)
def test_gate_statistics_of_the_first_token_and_the_rest_equal_the_gate_modules_output(kind, loaded):
    """gates.csv's groups, the paper's comparison of the gate at the first token with the rest:
    per head, count, mean, std, min, max and the shares below / above each cut against the gate
    module's own output at position 0 and at positions 1 on (a swap of the two groups, which
    leaves "all" as it was, failed no test before this one)."""
    lm = loaded(kind)
    L = lm.layout
    ids = ids_for(lm.model, B=3, seed=5)
    gate_out, hooks = {}, []
    with torch.no_grad(), Capture(lm.model, L) as cap:
        for p in L.layers:
            if p.gate_module is not None:
                hooks.append(p.gate_module.register_forward_hook(
                    lambda m, a, out, i=p.index: gate_out.__setitem__(i, out.clone())))
        try:
            with cap.batch(ids):
                lm.model(input_ids=ids, use_cache=False)
        finally:
            for h in hooks:
                h.remove()
    assert cap.gates and set(cap.gates) == set(gate_out)
    for layer, stats in cap.gates.items():
        g = L.gate.scores(gate_out[layer], L.num_heads, L.num_kv_heads, L.head_dim).double()   # (B, T, H, Dg)
        rows = {(r["group"], r["head"], r["metric"]): r["value"] for r in stats.rows()}
        for group, part in (("first", g[:, :1]), ("rest", g[:, 1:]), ("all", g)):
            for h in range(L.num_heads):
                x = part[:, :, h].reshape(-1)
                want = {"count": x.numel(), "mean": x.mean(), "std": x.std(correction=0), "min": x.min(),
                        "max": x.max(), **{f"frac_lt_{t}": (x < t).double().mean() for t in stats.LOW},
                        **{f"frac_gt_{t}": (x > t).double().mean() for t in stats.HIGH}}
                for metric, value in want.items():
                    assert rows[(group, h, metric)] == pytest.approx(float(value), rel=1e-9, abs=1e-7), \
                        (layer, group, h, metric)


@pytest.mark.parametrize("kind", GATED + ("qwen3",))
def test_sparsity_equals_direct_count_exactly(kind, loaded):
    """Every share equals a direct count on the tensors of the same pass, exactly: ungated O and
    the dynamic gate in the pass itself, the mean-gate control in the second pass (control.py)
    once the layer's mean gate is known."""
    from probe.run.control import ControlCounter
    from probe.run.interventions import _PassState, using_probe_attention

    lm = loaded(kind)
    ids = ids_for(lm.model, B=3, seed=4)
    cap, seen, o_in, means = capture_recording_sparsity(lm, ids)
    counter = ControlCounter(lm.layout, means, SPARSITY_THRESHOLDS, _PassState())
    with torch.no_grad(), using_probe_attention(lm.model, counter):
        lm.model(input_ids=ids, use_cache=False)
    assert_shares_are_direct_counts(cap, seen, o_in, means, counter.hists)


@pytest.mark.parametrize("kind", ("official_elementwise", "qwen3_next"))
def test_sparsity_of_a_bfloat16_model_is_exact_in_one_pass(kind, checkpoint):
    """bfloat16 outputs: every share, the mean-gate control included, is an exact count from the
    one pass (the histogram holds each bfloat16 value)."""
    import probe

    lm = probe.load(checkpoint(kind), dtype="bfloat16")
    ids = ids_for(lm.model, B=3, seed=4)
    cap, seen, o_in, means = capture_recording_sparsity(lm, ids)
    assert all(x.dtype == torch.bfloat16 for x in (*seen.values(), *o_in.values()))
    assert_shares_are_direct_counts(cap, seen, o_in, means)


@pytest.mark.parametrize("kind", ALL)
def test_probing_does_not_change_logits(kind, loaded):
    lm = loaded(kind)
    ids = ids_for(lm.model, seed=5)
    with torch.no_grad():
        plain = lm.model(input_ids=ids, use_cache=False).logits
    _, probed = run_capture(lm, ids)
    torch.testing.assert_close(probed, plain, atol=1e-6, rtol=0)


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_hooks_removed_on_exit_and_on_exception(loaded):
    lm = loaded("qwen3_next")
    before, impl = _hook_count(lm.model), lm.model.config._attn_implementation
    run_capture(lm, ids_for(lm.model))
    assert _hook_count(lm.model) == before
    with pytest.raises(RuntimeError, match="boom"):
        with Capture(lm.model, lm.layout) as cap:
            assert _hook_count(lm.model) > before
            with cap.batch(ids_for(lm.model)):
                raise RuntimeError("boom")
    assert _hook_count(lm.model) == before
    assert lm.model.config._attn_implementation == impl
    assert not attention.observed(lm.model)


def test_loss_equals_model_loss(loaded):
    lm = loaded("llama")
    ids = ids_for(lm.model, seed=6)
    cap, _ = run_capture(lm, ids)
    with torch.no_grad():
        expected = lm.model(input_ids=ids, labels=ids, use_cache=False).loss
    assert cap.loss.loss() == pytest.approx(float(expected), abs=1e-5)


def test_residual_after_attention_with_sandwich_norms():
    """Gemma 2 normalises the attention output before adding it (post_attention_layernorm is
    not its pre-MLP norm): resid_mid must be input + norm(attention output), computed here
    from the layer's input and the attention module's output."""
    from tests.capture.softmax_term_models import _gemma2

    from probe.load.loader import describe

    model = _gemma2()
    layout = describe(model)
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(7))
    seen, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        handles.append(layer.register_forward_pre_hook(
            lambda m, args, kwargs, i=i: seen.__setitem__(("in", i), (args[0] if args else kwargs["hidden_states"]).clone()),
            with_kwargs=True))
        handles.append(layer.self_attn.register_forward_hook(
            lambda m, args, out, i=i: seen.__setitem__(("attn", i), out[0].clone())))
    try:
        cap, _ = run_capture(SimpleNamespace(model=model, layout=layout), ids)
    finally:
        for h in handles:
            h.remove()
    for i, layer in enumerate(model.model.layers):
        with torch.no_grad():
            resid_mid = seen[("in", i)] + layer.post_attention_layernorm(seen[("attn", i)])
        assert cap.massive[(i, "resid_mid")].max_abs() == pytest.approx(float(resid_mid.abs().max()), rel=1e-6)


def test_reducers_hold_no_autograd_graph_when_grad_is_on(loaded):
    """A notebook user who runs the model without inference_mode: the logits carry a graph,
    the statistics must not (they would chain every batch's graph and keep it alive)."""
    lm = loaded("official_headwise")
    ids = ids_for(lm.model, T=20)
    with Capture(lm.model, lm.layout) as cap:
        with cap.batch(ids, None):
            logits = lm.model(input_ids=ids, use_cache=False).logits
            cap.observe_logits(logits)
    assert logits.requires_grad
    tensors = [t for r in cap.reducers() + [cap.loss] for t in r.state_tensors().values()]
    assert tensors and not any(t.requires_grad for t in tensors)


def test_f_attn_counts_only_queries_whose_output_row_is_finite(loaded):
    """An inf activation at position 7 of sequence 0: the CPU kernel returns NaN output rows for
    that sequence, some beside a finite lse (so a finite P[t, 0]). Those queries are left out
    and counted; F-Attn is that of sequence 1 alone, as eager softmax gives it."""
    lm = loaded("qwen3")
    ids = ids_for(lm.model, B=2, T=20, seed=6)
    where = (torch.tensor([0]), torch.tensor([7]), torch.tensor([3]))
    inf = torch.tensor(float("inf"))
    hook = lm.model.get_input_embeddings().register_forward_hook(lambda m, a, out: out.index_put(where, inf))
    outs = {}
    try:
        with torch.no_grad(), Capture(lm.model, lm.layout) as cap:
            observe = cap.on_attention

            def keep(module, query, key, out, lse, *args, **kwargs):
                outs[cap._mixer_layer[id(module)]] = (out.clone(), lse.clone())
                observe(module, query, key, out, lse, *args, **kwargs)
            cap.on_attention = keep
            with cap.batch(ids):
                lm.model(input_ids=ids, use_cache=False)
    finally:
        hook.remove()
    eager = eager_attentions(lm.model, ids[1:]).attentions
    some_finite_lse = False
    for layer, att in zip(lm.layout.attention_layers, [a for a in eager if a is not None]):
        out, lse = outs[layer]
        finite = torch.isfinite(out).all(-1).all(1)                          # (B, T)
        assert not finite[0].any() and finite[1].all()                       # the case this is about
        some_finite_lse |= bool(torch.isfinite(lse[0]).all(0).any())
        stats = cap.first_token[layer]
        assert int(stats.nonfinite) == int((~finite).sum()) and int(stats.n_all) == int(finite.sum())
        expect = att[0, :, 1:, 0].double().mean(1)                           # (H,) sequence 1 only
        torch.testing.assert_close(stats.f_attn(), expect, atol=F_ATTN_TOL, rtol=0)
    assert some_finite_lse, "no layer had a NaN output row beside a finite lse"


# Where the norms sit, per family: what the layer adds to its input after attention is the
# attention output itself (pre-norm), or that output normalised (sandwich / post-norm).
NORMED_ATTENTION_BRANCH = {"gemma2": True, "gemma3": True, "olmo2": True,
                           "llama": False, "qwen3": False, "gpt2": False}


def _site_model(kind):
    from tests import tiny
    from tests.capture.softmax_term_models import _gemma2

    return _gemma2() if kind == "gemma2" else tiny._build_hf(kind, seed=0, overrides={})


@pytest.mark.parametrize("kind", sorted(NORMED_ATTENTION_BRANCH))
def test_residual_after_attention_is_the_residual_stream(kind):
    """resid_mid against the residual stream itself, from the layer's own input and branches:
    x + attn(...) in pre-norm layers, x + post_attention_layernorm(attn(...)) in Gemma 2 / 3
    (sandwich) and OLMo 2 (post-norm, where post_attention_layernorm's input is the raw
    attention output, not the stream); cross-checked as layer output minus the MLP branch."""
    from probe.load.loader import describe

    model = _site_model(kind)
    layout = describe(model)
    layers = [p.layer for p in layout.layers]
    ids = torch.randint(3, 250, (2, 24), generator=torch.Generator().manual_seed(7))
    seen, handles = {}, []

    def keep(key, take_input=False):
        def hook(module, args, kwargs_or_out, out=None):
            x = (args[0] if args else kwargs_or_out["hidden_states"]) if take_input else kwargs_or_out
            seen[key] = (x[0] if isinstance(x, tuple) else x).detach().clone()
        return hook

    for i, layer in enumerate(layers):
        p = layout.layers[i]
        handles.append(layer.register_forward_pre_hook(keep(("in", i), True), with_kwargs=True))
        handles.append(layer.register_forward_hook(keep(("out", i))))
        handles.append(p.mixer.register_forward_hook(keep(("attn", i))))
        post_ffn = getattr(layer, "post_feedforward_layernorm", None)
        handles.append((post_ffn or p.mlp).register_forward_hook(keep(("mlp_branch", i))))
    try:
        cap, _ = run_capture(SimpleNamespace(model=model, layout=layout), ids)
    finally:
        for h in handles:
            h.remove()
    for i, layer in enumerate(layers):
        with torch.no_grad():
            branch = layer.post_attention_layernorm(seen[("attn", i)]) if NORMED_ATTENTION_BRANCH[kind] \
                else seen[("attn", i)]
        stream = seen[("in", i)] + branch                                   # (B, T, hidden)
        assert torch.allclose(stream, seen[("out", i)] - seen[("mlp_branch", i)], atol=1e-4, rtol=1e-5)
        stats = cap.massive[(i, "resid_mid")]
        assert stats.max_abs() == pytest.approx(float(stream.abs().max()), rel=1e-6), (kind, i)
        _, value, seq, pos, dim, _ = stats.top[0]
        assert value == pytest.approx(float(stream[seq, pos, dim]), rel=1e-6)


def test_two_captures_on_two_models_each_see_their_own_attention(loaded):
    """The attention back-end's observer is per model: two captures open at once (two models,
    interleaved forward passes, closed out of order) count what one capture alone counts."""
    a, b = loaded("qwen3"), loaded("official_headwise")
    ids_a, ids_b = ids_for(a.model, seed=2), ids_for(b.model, T=24, seed=3)
    alone = {"a": run_capture(a, ids_a)[0], "b": run_capture(b, ids_b)[0]}
    cap_a, cap_b = Capture(a.model, a.layout), Capture(b.model, b.layout)
    with torch.no_grad():
        cap_a.__enter__()
        cap_b.__enter__()
        with pytest.raises(RuntimeError, match="already active on this model"):
            Capture(a.model, a.layout).__enter__()
        with cap_b.batch(ids_b):
            b.model(input_ids=ids_b, use_cache=False)
        with cap_a.batch(ids_a):
            a.model(input_ids=ids_a, use_cache=False)
        cap_a.__exit__(None, None, None)              # out of order: b is still observed
        assert not attention.observed(a.model) and attention.observed(b.model)
        cap_b.__exit__(None, None, None)
    assert not attention.observed(b.model)
    for cap, lone in ((cap_a, alone["a"]), (cap_b, alone["b"])):
        for layer, stats in cap.first_token.items():
            assert int(stats.n_all) == int(lone.first_token[layer].n_all) > 0
            torch.testing.assert_close(stats.f_attn(), lone.first_token[layer].f_attn(), atol=0, rtol=0)
            assert cap.sparsity[layer].ungated.total == lone.sparsity[layer].ungated.total


def _state(cap) -> dict:
    """Every reducer's state tensors, by position (to compare two passes bit for bit)."""
    return {f"{i}.{name}": t.clone() for i, r in enumerate(cap.reducers()) for name, t in r.state_tensors().items()}


@pytest.mark.parametrize("anatomy, padded, dtype", [(False, False, "float32"), (True, False, "float32"),
                                                   (False, True, "float32"), (True, True, "bfloat16")])
def test_ungated_o_proj_input_reads_what_o_gave(checkpoint, monkeypatch, anatomy, padded, dtype):
    """An ungated layer's o_proj input is O itself (the same memory, unchanged): its events read
    O's bins and head norms (one binning and one norm pass per layer, not two; also with sink
    anatomy's event between the two, padded rows and bfloat16), and every reducer ends bit for
    bit where reading it again leaves it."""
    import probe
    from probe.capture import bus, hf
    from probe.metrics import bins as binning
    from probe.metrics.head_norms import reduce as head_norms

    lm = probe.load(checkpoint("llama"), dtype=dtype)
    ids = ids_for(lm.model, B=2, T=24, seed=6)
    valid = torch.arange(24)[None, :] < torch.tensor([[24], [15]]) if padded else None
    calls = {"norms": 0, "bins": 0}
    norms, derived = head_norms._norms, bus.Batch.derived

    def counted(x):
        calls["norms"] += 1
        return norms(x)

    def counted_derived(self, name, x, make):                # the events' binnings (batch_bins)
        def made():
            calls["bins"] += name == binning.BINNED
            return make()
        return derived(self, name, x, made)

    def run():
        options = dict(anatomy=True, vocab_size=lm.model.config.vocab_size) if anatomy else {}
        with torch.no_grad(), Capture(lm.model, lm.layout, **options) as cap:
            with cap.batch(ids, valid):
                cap.observe_logits(lm.model(input_ids=ids, use_cache=False).logits)
        return cap
    monkeypatch.setattr(head_norms, "_norms", counted)
    monkeypatch.setattr(bus.Batch, "derived", counted_derived)
    shared = run()
    layers = len(lm.layout.attention_layers)
    assert calls == {"norms": layers, "bins": layers}
    monkeypatch.setattr(hf, "_same_values", lambda *a: False)
    again = run()
    assert calls == {"norms": 3 * layers, "bins": 3 * layers}
    a, b = _state(shared), _state(again)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _swap_head_between_rows(D: int):
    """A pre-hook that patches head 1 (of size D) of o_proj's input between the two rows, in
    place: the same values in another order (the sum need not move)."""
    def hook(module, args):
        z = args[0]                                                   # (2, T, H * D)
        head = z[:, :, D:2 * D].clone()
        z[:, :, D:2 * D] = head.flip(0)
    return hook


@pytest.mark.parametrize("change", ["halve", "swap"])
def test_o_changed_in_place_before_o_proj_is_read_again(loaded, monkeypatch, change):
    """A hook that changes o_proj's input in place, in O's own memory, after the SDPA event (halves
    it, or patches a head between the rows, which keeps its sum): the o_proj-side numbers are
    those of the changed values (every reducer as when nothing is carried; halved: post norms
    exactly half the pre norms, the gated shares the direct counts of |O / 2| < t)."""
    from probe.capture import hf

    lm = loaded("llama")
    ids = ids_for(lm.model, B=2, T=24, seed=6)
    seen = {}

    def halve(module, args, i):
        seen[i] = args[0].mul_(0.5).clone()

    def run():
        # Installed before the capture: these hooks see o_proj's input before probe's.
        with installed((p.o_proj, "pre", (lambda m, a, i=p.index: halve(m, a, i)) if change == "halve"
                        else _swap_head_between_rows(lm.layout.head_dim))
                       for p in lm.layout.layers if p.o_proj is not None):
            with torch.no_grad(), Capture(lm.model, lm.layout, thresholds=SPARSITY_THRESHOLDS) as cap:
                with cap.batch(ids):
                    lm.model(input_ids=ids, use_cache=False)
        return cap
    cap = run()
    monkeypatch.setattr(hf, "_same_values", lambda *a: False)
    again = run()
    a, b = _state(cap), _state(again)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    if change == "swap":
        return
    for layer in lm.layout.attention_layers:
        s = cap.head_norms[layer]
        assert torch.equal(s.post * 2, s.pre) and float(s.pre.sum()) > 0
        z = seen[layer].abs()
        for t in SPARSITY_THRESHOLDS:
            share, exact = cap.sparsity[layer].gated.share_below(t)
            assert exact and share == float((z < t).double().mean()), (layer, t)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_same_values_sees_in_place_changes_that_keep_a_rounded_sum(dtype):
    """The o_proj input's check against the attention output's float64 sum: a few tiny values
    zeroed in place (which a bfloat16 sum would not see) and any change at all are seen; the
    unchanged memory passes; another memory or a copy never does."""
    from probe.capture.hf import _same_values, _total

    g = torch.Generator().manual_seed(3)
    o = torch.randn(2, 8, 3, 16, generator=g).to(getattr(torch, dtype))     # (B, T, H, D)
    o.view(-1)[::97] = 1e-4
    total = _total(o)
    assert total == pytest.approx(float(o.sum(dtype=torch.float64)), rel=1e-12)
    z = o.view(2, 8, 48)
    assert _same_values(z, o, total)
    assert not _same_values(z.clone(), o, total)
    z.view(-1)[::97] = 0.0
    assert not _same_values(z, o, total)


@pytest.mark.parametrize("kind", ["llama", "official_headwise"])
def test_kept_values_do_not_outlive_their_layer(loaded, kind):
    """What the attention output's event keeps for o_proj's is gone by the layer's next event, in
    an ungated model (taken by o_proj's event) and a gated one (never kept)."""
    lm = loaded(kind)
    ids = ids_for(lm.model, B=2, T=24, seed=6)
    held = []
    with torch.no_grad(), Capture(lm.model, lm.layout) as cap, installed(
            (p.mixer, "forward", lambda m, a, out: held.append(cap._batch._held)) for p in lm.layout.layers):
        with cap.batch(ids):
            lm.model(input_ids=ids, use_cache=False)
    assert len(held) == len(lm.layout.layers) and all(h is None for h in held)
