"""`probe graft`: add an attention-output gate to an ungated pretrained Llama-family model.

    probe graft SmolLM2-135M-Instruct.Q4_1.gguf --gate headwise --init identity --out grafted/
    probe check grafted/          # probe reads the gate the model applies
    probe train --from grafted/ --train gates --steps 200 --out runs/gates

The result is a checkpoint folder of `model_type` grafted_llama (probe/families/grafted_llama.py):
the base's weights untouched (a GGUF base dequantised to float32), plus one `gate_proj` per
attention layer on the layer's attention input, applied to the SDPA output before o_proj as
scale * sigmoid. Initialisations:

  identity  gate_proj weights and bias zero, scale 2: every gate is exactly 1, so the grafted
            model's logits are the base's (the zero-initialised 2 * sigmoid gate of the official
            repository's issue 10)
  random    weights normal(0, initializer_range) from --seed, bias zero, scale 1: the paper's
            sigmoid gate as a model trained from scratch starts it (gates near 0.5)

  --gate-weights FILE  trained gate weights (a file save_gate_weights wrote, e.g. the shipped
            examples/grafts/), for the same base: the trained grafted model, rebuilt from the
            base and ~155k numbers (headwise SmolLM2)

config.json records the graft: {"base", "base_digest" (probe's config / GGUF header hash),
"base_fingerprint" (of the embedding weights), "gate", "init", "scale", "seed"} (and
"gate_weights", the file's own record, when they came from a file).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..core.errors import ProbeError, printable

INITS = ("identity", "random")
SCALE = {"identity": 2.0, "random": 1.0}
BASE_MODEL_TYPES = ("llama",)
# Keys of the base's config that describe how it was stored or built, not the architecture.
DROPPED_CONFIG_KEYS = ("quantization_config", "model_type", "architectures", "transformers_version",
                       "_name_or_path", "auto_map", "dtype", "torch_dtype")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help="an ungated Llama-family checkpoint folder or .gguf file (e.g. SmolLM2)")
    p.add_argument("--gate", choices=("headwise", "elementwise"), required=True,
                   help="one gate per head, or one per head dimension")
    p.add_argument("--init", choices=INITS, default="identity",
                   help="identity: every gate exactly 1 (2 * sigmoid of zero); random: sigmoid of a "
                        "random projection, as a gate trained from scratch starts (default identity)")
    from ..core.options import seed_argument

    p.add_argument("--seed", type=seed_argument, default=0, help="the random initialisation's seed")
    p.add_argument("--gate-weights", metavar="FILE",
                   help="trained gate weights (.safetensors from save_gate_weights) instead of --init")
    p.add_argument("--out", required=True, help="the grafted checkpoint folder to write")
    p.add_argument("--force", action="store_true", help="replace an existing --out")


def base_fingerprint(model, like: str | None = None) -> str:
    """The base's embedding fingerprint (probe/load/fingerprint.py): which weights a graft was made
    on; in the scheme of the recorded fingerprint `like` when given (older files hold SHA-256)."""
    from ..load.fingerprint import embedding_fingerprint

    return embedding_fingerprint(model, like=like)


def grafted_config(base_config, *, gate: str, init: str, base: str, digest: str | None, seed: int,
                   fingerprint: str | None = None):
    from ..families.grafted_llama import GraftedLlamaConfig

    fields = {k: v for k, v in base_config.to_dict().items() if k not in DROPPED_CONFIG_KEYS}
    graft = {"base": base, "base_digest": digest, "base_fingerprint": fingerprint, "gate": gate, "init": init,
             "scale": SCALE[init], "seed": seed if init == "random" else None}
    return GraftedLlamaConfig(**fields, graft=graft)


def graft_model(base_model, config, *, init: str, seed: int):
    """The grafted model: `base_model`'s weights copied in, gate_proj initialised by `init`."""
    import torch

    from ..families.grafted_llama import GraftedLlamaForCausalLM

    model = GraftedLlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(base_model.state_dict(), strict=False)
    stray = [k for k in missing if ".self_attn.gate_proj." not in k]
    if stray or unexpected:
        raise ProbeError(f"the base's weights do not fit a grafted {config.model_type} "
                         f"(missing {stray[:3]}, unexpected {unexpected[:3]}); is it a Llama-family model?")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            proj = layer.self_attn.gate_proj
            proj.bias.zero_()
            if init == "identity":
                proj.weight.zero_()
            else:
                proj.weight.copy_(torch.randn(proj.weight.shape, generator=gen) * config.initializer_range)
    return model.eval()


def graft(checkpoint, *, gate: str, init: str, out, seed: int = 0, force: bool = False, say=print,
          gate_weights=None) -> Path:
    """Write the grafted copy of `checkpoint` into `out` (atomically); returns `out`.
    gate_weights: a file of trained gate weights (save_gate_weights) loaded over the init."""
    import torch

    from ..core.atomic import atomic_directory, check_output_dir, check_writable
    from ..load.loader import load, quiet_transformers

    if init not in INITS:
        raise ProbeError(f"unknown --init {init!r}; use one of {', '.join(INITS)}")
    out = Path(out)
    # Never an --out that holds (and --force would delete) what the graft reads.
    inputs = {"checkpoint": checkpoint, "gate weights": gate_weights}
    check_output_dir(out, force, inputs)          # before the minute a GGUF base takes to load
    check_writable(out)
    if gate_weights is not None and not Path(gate_weights).is_file():   # before the load, as --out
        raise ProbeError(f"--gate-weights {gate_weights} does not exist")
    say(f"loading {checkpoint} ...")
    loaded = load(checkpoint, dtype="float32")
    model_type = loaded.config.model_type
    if model_type not in BASE_MODEL_TYPES or loaded.layout.gated:
        raise ProbeError(f"probe graft adds a gate to an ungated {' or '.join(BASE_MODEL_TYPES)} model; "
                         f"{checkpoint} is {model_type!r}{' and already gated' if loaded.layout.gated else ''}")
    if loaded.tokenizer is None:
        raise ProbeError(f"{checkpoint} has no tokenizer; the grafted folder needs one to be trained and analysed")
    base = Path(checkpoint).name
    trained = read_gate_weights(gate_weights, loaded) if gate_weights else None
    if trained is not None:
        record = trained[1]
        if record["gate"] != gate:
            raise ProbeError(f"--gate-weights {gate_weights} hold a {record['gate']} gate; pass --gate {record['gate']}")
        init = record["init"]
    config = grafted_config(loaded.config, gate=gate, init=init, base=base, digest=loaded.config_hash, seed=seed,
                            fingerprint=base_fingerprint(loaded.model))
    model = graft_model(loaded.model, config, init=init, seed=seed)
    if trained is not None:
        config.graft["gate_weights"] = record
        load_gates(model, trained[0], gate_weights)
    from safetensors import SafetensorError

    with atomic_directory(out, force=force, inputs=inputs) as tmp, quiet_transformers(), torch.no_grad():
        try:
            model.save_pretrained(str(tmp), safe_serialization=True)
        except SafetensorError as err:            # a full disk, from safetensors' writer: not an OSError
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise ProbeError(f"could not write {out} ({reason}); nothing was written") from None
        loaded.tokenizer.save_pretrained(str(tmp))
    gates = sum(p.numel() for n, p in model.named_parameters() if ".self_attn.gate_proj." in n)
    say(f"grafted {'an' if gate[0] in 'aeiou' else 'a'} {gate} gate ({init}, scale {SCALE[init]:g} * sigmoid) onto {base}: "
        f"{len(model.model.layers)} layers, {gates:,} gate parameters -> {out}/")
    return out


def run(args, command_line: str | None = None) -> int:
    graft(args.checkpoint, gate=args.gate, init=args.init, out=args.out, seed=args.seed, force=args.force,
          gate_weights=args.gate_weights)
    return 0


# ----------------------------------------------------------------------------- trained gates

GATE_KEY = ".self_attn.gate_proj."


def save_gate_weights(model, file, **record) -> Path:
    """Write only the gate projections of a grafted `model` (never the base's weights) to `file`
    (.safetensors, float32), with the graft and `record` (how they were trained) as metadata."""
    from safetensors.torch import save_file

    from ..core.atomic import write_with

    tensors = {k: v.detach().float().contiguous() for k, v in model.state_dict().items() if GATE_KEY in k}
    if not tensors:
        raise ProbeError("this model has no grafted gates (self_attn.gate_proj) to save")
    meta = {**model.config.graft, **record}
    file = Path(file)
    tmp = file.with_name(file.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"graft": json.dumps(meta, sort_keys=True)})
    write_with(file, lambda f: f.write(tmp.read_bytes()))
    tmp.unlink()
    return file


def read_gate_weights(file, loaded) -> tuple[dict, dict]:
    """(tensors, record) of a gate-weights file, checked against the base it is grafted onto."""
    from safetensors import safe_open

    file = Path(file)
    if not file.is_file():
        raise ProbeError(f"--gate-weights {file} does not exist")
    try:
        with safe_open(str(file), "pt") as f:
            record = json.loads((f.metadata() or {}).get("graft", "null"))
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as err:                                      # not a safetensors file
        raise ProbeError(f"cannot read --gate-weights {file} ({str(err).splitlines()[0][:120]})") from None
    check_gate_record(file, record)
    found = base_fingerprint(loaded.model, like=record["base_fingerprint"])
    if record["base_fingerprint"] != found:
        raise ProbeError(f"--gate-weights {file} were trained on {printable(str(record.get('base')))} (embedding "
                         f"fingerprint {printable(record['base_fingerprint'])[:60]}), not on this base ({found})")
    bad = sorted(k for k, v in tensors.items() if not v.is_floating_point() or not bool(v.isfinite().all()))
    if bad:
        raise ProbeError(f"--gate-weights {file}: {printable(bad[0])} holds values that are not finite (NaN or "
                         f"inf){f' (and {len(bad) - 1} more tensors)' if len(bad) > 1 else ''}; the graft would "
                         "output NaN: use a file of finite trained gates")
    return tensors, record


def check_gate_record(file, record) -> None:
    """The graft record of a gate-weights file, as save_gate_weights writes it: an object with a
    known gate and init and the base's embedding fingerprint (without it, any base would pass)."""
    from ..families.grafted_llama import GATES

    again = "write the file again with probe.train.graft.save_gate_weights"
    if not record:
        raise ProbeError(f"--gate-weights {file} has no graft record; {again}")
    if not isinstance(record, dict):
        raise ProbeError(f"--gate-weights {file}: its graft record is a JSON {type(record).__name__}, not an "
                         f"object; {again}")
    for key, allowed in (("gate", GATES), ("init", INITS)):
        if record.get(key) not in allowed:
            raise ProbeError(f"--gate-weights {file}: its graft record's {key} is "
                             f"{printable(repr(record.get(key)))[:60]}, not one of {', '.join(allowed)}; {again}")
    if not isinstance(record.get("base_fingerprint"), str) or not record["base_fingerprint"]:
        raise ProbeError(f"--gate-weights {file}: its graft record has no base_fingerprint, so the base the "
                         f"gates were trained on cannot be checked; {again}")


def load_gates(model, tensors: dict, file) -> None:
    import torch

    own = {k: v for k, v in model.state_dict().items() if GATE_KEY in k}
    if set(own) != set(tensors) or any(own[k].shape != tensors[k].shape for k in own):
        raise ProbeError(f"--gate-weights {file} do not fit this base's gates "
                         f"({len(tensors)} tensors for {len(own)}); were they trained on another model?")
    with torch.no_grad():
        for k, v in tensors.items():
            own[k].copy_(v)


def read_graft(folder) -> dict | None:
    """The `graft` record of a grafted folder's config.json; None for any other folder."""
    path = Path(folder) / "config.json"
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("graft")
