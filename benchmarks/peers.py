"""probe against the other ways of getting the same numbers, as ratios against a plain forward.

On the tiny GQA model of common.py and the same random tokens, at T = 512, 2048, 8192, 32768, or
(--model smollm2) on SmolLM2-135M (probe.load.real_models; 30 layers, 9 query / 3 KV heads) and real
text repeated up to T:

  plain      Hugging Face forward, SDPA attention, no hooks (the reference, 1.00)
  probe      probe.analyze: the full pass (gates, F-Attn, M-Act at 4 sites with top-3 and median,
             sparsity sweep, loss) and the tidy tables, F-Attn from the kernel's log-sum-exp
  probe_pass the same pass through probe.Capture, without building tables (what the peers do)
  tl_cache   TransformerLens 4.3 TransformerBridge.run_with_cache of the patterns, hook_z and the
             four residual sites, metrics computed from the cache
  tl_hooks   TransformerBridge.run_with_hooks with hooks that reduce at once (nothing cached)
  nnsight    nnsight 0.8 trace over the HF model with eager attention, saving only the
             reductions (P[:, :, :, 0], max |h|, counts below 1e-2) computed inside the trace
  eager      Hugging Face eager attention, output_attentions=True and output_hidden_states=True
             (F-Attn and layer-output M-Act only)

Each peer also reports the numbers it got (F-Attn and M-Act of every layer, sparsity at 1e-2):
the `agree` column is the largest difference from probe's at the same T. Every measurement
runs in its own niced process, one thread, under a timeout and an address-space cap; a peer
that does not fit is reported as such. Time: CPU seconds (one thread), best of --repeat (--repeat-long at T >= 8192);
memory: peak RSS added over a warm-up at T = 64 (common.timed, under common.STEADY_HEAP: every
method, time included, runs with glibc's heap held steady). nnsight is optional (pip install nnsight).

    python benchmarks/peers.py [--lengths 512 2048 8192 32768] [--memory-gb 12] [--timeout 900]
    python benchmarks/peers.py --model smollm2 --lengths 512 2048 --memory-gb 20
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import MODEL_TEXT, build_model, child_args, clocks, run_child, token_ids  # noqa: E402

METHODS = ("plain", "probe", "probe_pass", "tl_cache", "tl_hooks", "nnsight", "eager")
MODELS = {"tiny": MODEL_TEXT,
          "smollm2": "SmolLM2-135M-Instruct Q4_1 GGUF, dequantised to float32: 30 layers, 9 query / 3 KV heads"}
SITES = ("hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
TAU = 1e-2


def metrics_store(layers: int) -> dict:
    return {"f_attn": [None] * layers, "m_act": [None] * layers, "sparsity": [None] * layers, "site_max": {}}


def load_model(which: str, attn: str):
    """The benchmark's model with the given attention implementation."""
    if which == "tiny":
        return build_model(attn)
    import probe
    from probe.load import real_models

    model = probe.load(real_models.fetch(which)).model
    model.set_attn_implementation(attn)
    return model


def token_ids_for(which: str, T: int):
    """(1, T) token ids: random ones for the tiny model, real text repeated for a real one."""
    if which == "tiny":
        return token_ids(T)
    import torch

    import probe
    from probe.load import real_models
    from probe.data.corpus import sample_texts

    tokenizer = probe.load(real_models.fetch(which)).tokenizer
    ids = tokenizer("\n\n".join(sample_texts()), add_special_tokens=False).input_ids
    return torch.tensor([(ids * (T // len(ids) + 1))[:T]])


def child(args: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    method, T, repeat = args["method"], args["T"], args["repeat"]
    ids = torch.load(args["ids"])
    small = ids[:, :64]
    which = args.get("model", "tiny")

    if method in ("plain", "eager", "nnsight", "probe", "probe_pass"):
        model = load_model(which, "eager" if method in ("eager", "nnsight") else "sdpa")
    else:
        model = load_model(which, "sdpa")
    LAYERS = model.config.num_hidden_layers
    out = metrics_store(LAYERS)

    if method == "plain":
        def run(x):
            model(input_ids=x, use_cache=False)

    elif method == "probe":
        import probe
        from probe.load.loader import LoadedModel, describe

        loaded = LoadedModel(model, describe(model), None, None, None)
        files = {}
        for name, x in (("small", small), ("full", ids)):
            files[x.shape[1]] = str(Path(args["ids"]).with_suffix(f".{name}.pt"))
            torch.save(x, files[x.shape[1]])

        def run(x):
            # past_positions: long_context_peers.py runs SmolLM2 past its 8192 positions.
            a = probe.analyze(loaded, files[x.shape[1]], seq_len=x.shape[1], progress=False, batch_size=1,
                              past_positions=bool(args.get("past_positions")))
            for layer in a.summary["layers"]:
                i = layer["layer"]
                out["f_attn"][i] = layer["f_attn"]
                out["m_act"][i] = layer["m_act"]["resid_post"]
                out["sparsity"][i] = layer["sparsity"]["ungated"][f"{TAU:g}"]

    elif method == "probe_pass":
        import probe
        from probe.load.loader import describe

        layout = describe(model)

        def run(x):
            with probe.Capture(model, layout) as cap, cap.batch(x):
                cap.observe_logits(model(input_ids=x, use_cache=False).logits)
            for i in range(LAYERS):
                out["f_attn"][i] = float(cap.first_token[i].f_attn().mean())
                out["m_act"][i] = cap.massive[(i, "resid_post")].max_abs()
                out["sparsity"][i] = cap.sparsity[i].ungated.fraction_below(TAU)

    elif method == "eager":
        def run(x):
            o = model(input_ids=x, use_cache=False, output_attentions=True, output_hidden_states=True)
            for i, att in enumerate(o.attentions):
                out["f_attn"][i] = float(att[0, :, 1:, 0].double().mean())
            for i, h in enumerate(o.hidden_states[1:LAYERS]):       # the last one is after the norm
                out["m_act"][i] = float(h.abs().max())

    elif method == "nnsight":
        from nnsight import NNsight

        traced = NNsight(model)

        def run(x):
            saved = []
            with traced.trace(x):
                for layer in traced.model.layers:
                    below = (layer.self_attn.o_proj.input.abs() < TAU).double().mean().save()
                    p0 = layer.self_attn.output[1][0, :, 1:, 0].double().mean().save()
                    o = layer.output
                    m = (o[0] if isinstance(o, tuple) else o).abs().max().save()
                    saved.append((p0, m, below))
            for i, (p0, m, below) in enumerate(saved):
                out["f_attn"][i], out["m_act"][i], out["sparsity"][i] = float(p0), float(m), float(below)

    elif method in ("tl_cache", "tl_hooks"):
        from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

        hf = model
        arch = (getattr(hf.config, "architectures", None) or [type(hf).__name__])[0]
        bridge = build_bridge_from_module(hf, arch, hf_config=hf.config)
        wanted = ("attn.hook_pattern", "attn.hook_z", *SITES)

        if method == "tl_cache":
            def run(x):
                _, cache = bridge.run_with_cache(x, names_filter=lambda n: n.endswith(wanted))
                for i in range(LAYERS):
                    out["f_attn"][i] = float(cache[f"blocks.{i}.attn.hook_pattern"][0, :, 1:, 0].double().mean())
                    out["sparsity"][i] = float((cache[f"blocks.{i}.attn.hook_z"].abs() < TAU).double().mean())
                    for site in SITES:
                        out["site_max"][f"{i}:{site}"] = float(cache[f"blocks.{i}.{site}"].abs().max())
                    out["m_act"][i] = out["site_max"][f"{i}:hook_resid_post"]
        else:
            def reducer(i, name):
                def hook(t, hook):
                    if name == "attn.hook_pattern":
                        out["f_attn"][i] = float(t[0, :, 1:, 0].double().mean())
                    elif name == "attn.hook_z":
                        out["sparsity"][i] = float((t.abs() < TAU).double().mean())
                    else:
                        out["site_max"][f"{i}:{name}"] = float(t.abs().max())
                        if name == "hook_resid_post":
                            out["m_act"][i] = out["site_max"][f"{i}:{name}"]
                return hook

            hooks = [(f"blocks.{i}.{name}", reducer(i, name)) for i in range(LAYERS) for name in wanted]

            def run(x):
                bridge.run_with_hooks(x, fwd_hooks=hooks)

    with torch.inference_mode():
        run(small)
        measured = clocks(lambda: run(ids), repeat)
    out.pop("site_max")
    return {"method": method, "T": T, **measured, **out}


def agreement(row: dict, probe_row: dict) -> str:
    """Largest difference from probe: F-Attn (absolute), M-Act (relative), sparsity (absolute)."""
    parts = []
    for key, rel in (("f_attn", False), ("m_act", True), ("sparsity", False)):
        pairs = [(a, b) for a, b in zip(row.get(key, []), probe_row.get(key, [])) if a is not None and b is not None]
        if pairs:
            d = max(abs(a - b) / (abs(b) if rel else 1) for a, b in pairs)
            parts.append(f"{key.split('_')[0]} {d:.0e}")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192, 32768])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs at T < 8192")
    parser.add_argument("--repeat-long", type=int, default=1, help="timed runs at T >= 8192")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    parser.add_argument("--memory-gb", type=float, default=12, help="address-space cap per process")
    parser.add_argument("--json", help="also write every row to this file")
    parser.add_argument("--model", choices=tuple(MODELS), default="tiny")
    args = parser.parse_args()
    import torch

    print(f"{MODELS[args.model]}; one thread; ratios against plain SDPA forward; cap {args.memory_gb:g} GB, "
          f"timeout {args.timeout:.0f} s")
    print(f"{'T':>6} {'method':>9} {'CPU s':>8} {'x plain':>8} {'peak MB':>9} {'x plain':>8}  agree with probe")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in args.lengths:
            ids_file = str(Path(tmp) / f"ids{T}.pt")
            torch.save(token_ids_for(args.model, T), ids_file)
            repeat = args.repeat if T < 8192 else args.repeat_long
            results = {}
            for m in args.methods:
                results[m] = run_child(__file__, {"method": m, "T": T, "repeat": repeat, "ids": ids_file,
                                                  "model": args.model}, args.timeout, args.memory_gb, steady_heap=True)
                r, plain = results[m], results.get("plain", {})
                rows.append(r)
                if "error" in r:
                    print(f"{T:>6} {m:>9}  did not finish: {r['error']}", flush=True)
                    continue
                tr = r["seconds"] / plain["seconds"] if "seconds" in plain else float("nan")
                mr = r["peak_mb"] / plain["peak_mb"] if plain.get("peak_mb") else float("nan")
                agree = agreement(r, results["probe"]) if m not in ("plain", "probe") and "f_attn" in results.get("probe", {}) else ""
                print(f"{T:>6} {m:>9} {r['seconds']:>8.2f} {tr:>8.2f} {r['peak_mb']:>9.0f} {mr:>8.2f}  {agree}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(child(spec)))
    else:
        main()
