"""Where an analysis's events come from: a model source, one per kind of model object, behind
one `probe.analyze` (analyze.py).

    source = source_for(model, options)         # loaded, checked and named
    cap = source.capture(options, token_groups=..., vocab_size=..., sequences=..., token_ids=...)
    with source.forwarding(cap, dataset, options) as forward:
        pipeline.run_pass(cap, forward, dataset, options, dev=source.device, ...)

  HFSource      a checkpoint path, a Hugging Face causal LM or a `LoadedModel`: module hooks and
                the `probe` attention back-end (capture.Capture); shares its batches out over
                torchrun processes
  BridgeSource  a TransformerLens `TransformerBridge`: the bridge's own hook points
                (bridge.BridgeCapture); every option it cannot honour is refused in one line
                (HF_ONLY), before any work

The run's name is worked out here, once (`source_for`, through run_names.run_name): the name
option, else the checkpoint's (its folder, a GGUF file without its suffix), else the model's
class.
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Callable, ContextManager, Protocol

import pandas as pd
import torch
from torch import nn

from ..core.errors import ProbeError, flag
from ..load.loader import (LoadedModel, check_tokenizer_dir, config_hash, describe, load, load_tokenizer,
                           text_config, warn_if_gate_declared_away)
from ..core.options import AnalysisOptions
from .pipeline import check_model_as_is, checkpoint_of, pattern_frame
from ..results.run_names import run_name


class Source(Protocol):
    """What `probe.analyze` needs of a model source."""

    loaded: LoadedModel      # the Hugging Face model (a bridge's original_model), layout, tokenizer,
                             # checkpoint: what meta.json and the resume fingerprint describe
    name: str                # the run's name (source_for)
    dtype: str               # what the weights hold ("float32", ...)
    rank: int                # this process and the processes that share the batches out (a
    world: int               # source that cannot share them refuses torchrun: 0 and 1)

    @property
    def layout(self): ...                              # the ModelLayout: layers, gate, heads
    @property
    def tokenizer(self): ...
    @property
    def config(self): ...                              # the text config
    @property
    def device(self) -> torch.device: ...              # where the batches go
    @property
    def desc(self) -> str: ...                         # the progress bar's label
    def capture(self, options: AnalysisOptions, *, token_groups, vocab_size: int | None,
                sequences: int, token_ids=None):  ...                  # the Pass whose context installs its hooks
    def forwarding(self, cap, dataset, options: AnalysisOptions) -> ContextManager[Callable]: ...
    def check_fired(self, cap) -> None: ...            # after the pass: every hook saw data
    def display_patterns(self, dataset, n: int, cap=None) -> pd.DataFrame: ...
    def meta(self) -> dict: ...                        # meta.json keys of this source


def source_for(model, o: AnalysisOptions) -> Source:
    """The source of `model` (a bridge, or anything the Hugging Face path loads), checked against
    the options and named."""
    from ..capture.bridge import is_bridge

    source = BridgeSource.of(model, o) if is_bridge(model) else HFSource.of(model, o)
    source.name = run_name(o.name, source.name_from, type(source.loaded.model).__name__)
    return source


@dataclasses.dataclass
class _Common:
    """What both sources hold and read the same way."""

    loaded: LoadedModel
    dtype: str
    name_from: str | None = None      # what the default name is read from (a checkpoint, a hub id)
    rank: int = 0
    world: int = 1
    name: str = ""

    @property
    def layout(self):
        return self.loaded.layout

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def config(self):
        return text_config(self.loaded.model.config)

    @property
    def device(self) -> torch.device:
        return next(self.loaded.model.parameters()).device

    def check_fired(self, cap) -> None:
        pass


# -- Hugging Face ---------------------------------------------------------------------------------

@dataclasses.dataclass
class HFSource(_Common):
    @classmethod
    def of(cls, model, o: AnalysisOptions) -> "HFSource":
        """Load a checkpoint (or take a model object as it is: a dtype or device asked for must
        be what it holds), join torchrun's process group, check the declared gate."""
        from . import distributed
        from ..capture.gate_logits import validate_gate

        dtype, device = o.dtype, o.device
        if not isinstance(model, (str, Path)):
            held = model.model if isinstance(model, LoadedModel) else model
            check_model_as_is(held, dtype=dtype, device=device, device_map=o.device_map)
            # What it holds, for the resume fingerprint too (a float32 partial run must not be
            # continued with the bfloat16 copy of the same model).
            params = next(held.parameters())
            device = device or str(params.device)
            dtype = dtype or str(params.dtype).replace("torch.", "")
        dtype, device = o.replace(dtype=dtype, device=device).loading()
        rank, world, device = distributed.setup(device)
        if world > 1 and o.device_map:
            raise ProbeError(f"{flag('device_map')} shards one model over this process's GPUs; under "
                             f"torchrun each process holds a whole model: pass {flag('device', 'cuda')} instead")
        if (not isinstance(model, (str, Path)) and o.rope_scaling is not None
                and not _scaled_as_asked(model, o.rope_scaling)):
            raise ProbeError(f"{flag('rope_scaling')} is applied while loading; pass the checkpoint path, not a "
                             "model object")
        loaded = load_model(model, o, dtype=dtype, device=device)
        validate_gate(loaded.layout)               # a declared layout that cannot fit: one line, now
        warn_if_gate_declared_away(loaded.model, loaded.layout, o.gate)
        return cls(loaded, dtype, loaded.path, rank, world)

    @property
    def desc(self) -> str:
        return f"analyse {self.name}"

    def capture(self, options, *, token_groups, vocab_size, sequences, token_ids=None):
        from ..capture.display import DisplayPatterns
        from ..capture.hf import Capture

        cap = Capture(self.loaded.model, self.layout, options, token_groups=token_groups,
                      vocab_size=vocab_size, sequences=sequences, token_ids=token_ids)
        if self.world == 1:         # under torchrun every rank forms them alike: display_patterns
            cap.display = DisplayPatterns(options.display_len)
        return cap

    @contextlib.contextmanager
    def forwarding(self, cap, dataset, options):
        """forward(ids) -> logits, the full logits or a block at a time (logits.py), once the
        largest batch is known to fit (memory_checks.py)."""
        from . import memory_checks
        from ..capture.logits import forward_for

        batch, length = memory_checks.before_pass(self.loaded, dataset, options)
        with forward_for(self.loaded.model, batch=batch, length=length, quiet=cap.quiet) as forward:
            yield forward

    def display_patterns(self, dataset, n: int, cap=None) -> pd.DataFrame:
        """Head-averaged full attention of one short prompt: the only T x T the tool forms (T <= n).
        Read off the pass (cap.display, capture/display.py) when it saw the prompt in every
        attention layer; else from an eager forward of the prompt alone."""
        if n <= 0:
            return pd.DataFrame()
        model, layers = self.loaded.model, self.layout.attention_layers
        seen = getattr(cap, "display", None)
        if seen is not None and seen.complete(layers):
            return pattern_frame(self.name, [(layer, seen.maps[layer]) for layer in layers])
        ids = dataset.sequences[0][:n][None].to(self.device)
        previous = model.config._attn_implementation
        try:
            model.set_attn_implementation("eager")
            with torch.inference_mode():
                out = model(input_ids=ids, output_attentions=True, use_cache=False)
        finally:
            model.set_attn_implementation(previous)
        maps = [a for a in (out.attentions or ()) if a is not None]
        if len(maps) != len(layers):       # some models return one entry per layer, None for linear ones
            maps = [out.attentions[i] for i in layers]
        return pattern_frame(self.name, [(layer, att[0].float().mean(0)) for layer, att in zip(layers, maps)])

    def meta(self) -> dict:
        return {}


def _scaled_as_asked(model, spec) -> bool:
    """A LoadedModel that load() already scaled with this spec (a sweep's model)."""
    from ..load.rope import parse

    record = getattr(model, "rope_scaling", None)
    return isinstance(model, LoadedModel) and record is not None and record["spec"] == parse(spec)


def load_model(model, o: AnalysisOptions, *, dtype: str, device: str) -> LoadedModel:
    """The one way an analysis and a context sweep (probe/api/sweep.py) get their model: a
    checkpoint path checked for memory first (a length that cannot fit: one line, before the
    weights load), then loaded in `dtype` onto `device` through the loader; a model object (or
    a LoadedModel) taken as it is, with the options' tokenizer."""
    from . import memory_checks

    if isinstance(model, (str, Path)):
        memory_checks.before_loading(model, o, dtype)
    return as_loaded(model, dtype=dtype, device=device, device_map=o.device_map, gate=o.gate,
                     tokenizer=o.tokenizer, rope_scaling=o.rope_scaling)


def as_loaded(model, *, dtype, device, device_map, gate, tokenizer, rope_scaling=None) -> LoadedModel:
    """tokenizer: None (the checkpoint's own), a folder, or a tokenizer object; a folder is
    loaded for a model object too (never stored as if it were a tokenizer)."""
    if isinstance(model, (str, Path)):
        loaded = load(model, dtype=dtype, device=device, device_map=device_map, gate=gate,
                      tokenizer=tokenizer if isinstance(tokenizer, (str, Path)) else None,
                      rope_scaling=rope_scaling)
        if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
            loaded.tokenizer = tokenizer
        return loaded
    tokenizer = _tokenizer(tokenizer)
    if isinstance(model, LoadedModel):
        if tokenizer is None:
            return model
        return dataclasses.replace(model, tokenizer=tokenizer)
    if isinstance(model, nn.Module) and hasattr(model, "config"):
        model.eval()
        return LoadedModel(model, describe(model, gate, user_declared=gate is not None),
                           tokenizer, getattr(model.config, "_name_or_path", None) or None, None)
    raise ProbeError(f"cannot analyse a {type(model).__name__}; pass a checkpoint directory or a "
                     "Hugging Face causal LM")


def _tokenizer(tokenizer):
    """The tokenizer option for a model object: a folder is loaded, an object kept."""
    return load_tokenizer(check_tokenizer_dir(tokenizer)) if isinstance(tokenizer, (str, Path)) else tokenizer


# -- TransformerLens ------------------------------------------------------------------------------

HF_PATH = "pass the checkpoint path or the Hugging Face model to probe.analyze instead of the bridge"

# Options only the Hugging Face path honours: name -> why (each refused in one line when set).
HF_ONLY = {
    "gate": "TransformerLens decides where the gate is",
    "interventions": "interventions need the Hugging Face path",
    "ablate": "sink ablations run in probe's attention back-end, on the Hugging Face path",
    "exact_control": "the exact mean-gate control (a second pass) needs the Hugging Face path",
    "anatomy": "sink anatomy reads the attention kernel's log-sum-exp, which only the Hugging Face path runs",
    "gdn": "Gated DeltaNet layers are read through Hugging Face module hooks",
    "device_map": "probe does not shard a bridge (place the bridge's model yourself before building it)",
    "partial": "saving and resuming an interrupted pass needs the Hugging Face path",
    "resume": "saving and resuming an interrupted pass needs the Hugging Face path",
    "checkpoint_seconds": "saving and resuming an interrupted pass needs the Hugging Face path",
    "rope_scaling": "position scaling is applied while loading a checkpoint (build the bridge from a scaled model)",
    "past_positions": "TransformerLens keeps its own n_ctx",
    "loss_by_position": "the loss by position is kept on the Hugging Face path",
}


@dataclasses.dataclass
class BridgeSource(_Common):
    """TransformerLens recomputes every softmax-attention layer as an explicit T x T pattern:
    F-Attn is read from hook_pattern[..., 0] (bridge.py). bos="auto" follows the bridge's
    tokenizer, i.e. TransformerLens's convention (it may add a BOS token where the Hugging Face
    tokenizer does not, e.g. GPT-2); pass bos="none" or "prepend" to fix what sits at position 0."""

    bridge: object = None
    gate_dim: int | None = None

    @classmethod
    def of(cls, bridge, o: AnalysisOptions) -> "BridgeSource":
        from ..capture.bridge import bridge_layout, check_bridge

        check_bridge(bridge)
        hf = bridge.original_model
        cls.refuse(hf, o)
        layout, gate_dim = bridge_layout(bridge)
        config = text_config(hf.config)
        tokenizer = _tokenizer(o.tokenizer) if o.tokenizer is not None else getattr(bridge, "tokenizer", None)
        path = getattr(config, "_name_or_path", None) or getattr(bridge.cfg, "model_name", None)
        ckpt = checkpoint_of(path)
        loaded = LoadedModel(hf, layout, tokenizer, path if ckpt else None, config_hash(ckpt) if ckpt else None)
        dtype = str(next(hf.parameters()).dtype).replace("torch.", "")
        return cls(loaded, dtype, None if path == "external" else path, bridge=bridge, gate_dim=gate_dim)

    @property
    def desc(self) -> str:
        return f"analyse {self.name} (TransformerLens)"

    @staticmethod
    def refuse(hf, o: AnalysisOptions) -> None:
        """One ProbeError line for an option this path cannot honour, before any work is done."""
        from . import distributed

        defaults = AnalysisOptions()
        for option, why in HF_ONLY.items():
            value = getattr(o, option)
            if value != getattr(defaults, option) and value is not False:
                raise ProbeError(f"{flag(option)} does not apply to a TransformerBridge: {why}; {HF_PATH}")
        if distributed.world()[1] > 1:  # every process would repeat the whole pass
            raise ProbeError(f"sharing the data over torchrun processes needs the Hugging Face path: {HF_PATH}")
        # A bridge is already built: converting or moving it here would change the user's model
        # behind their back, so a dtype or device asked for must be what it holds.
        check_model_as_is(hf, dtype=o.dtype, device=o.device, device_map=None)

    def capture(self, options, *, token_groups, vocab_size, sequences, token_ids=None):
        from ..capture.bridge import BridgeCapture

        return BridgeCapture(self.bridge, self.layout, options, gate_dim=self.gate_dim,
                             token_groups=token_groups, sequences=sequences)

    def forwarding(self, cap, dataset, options):
        return contextlib.nullcontext(cap.forward)     # run_with_hooks with the capture's hooks

    def check_fired(self, cap) -> None:
        cap.check_fired()

    def display_patterns(self, dataset, n: int, cap=None) -> pd.DataFrame:
        """Head-averaged attention of the first prompt's first n tokens, from hook_pattern."""
        layers = self.layout.attention_layers
        if n <= 0 or not layers:
            return pd.DataFrame()
        ids = dataset.sequences[0][:n][None].to(self.device)
        maps: dict[int, torch.Tensor] = {}

        def keep(layer):
            def hook(pattern, hook):
                maps[layer] = pattern[0].float().mean(0).cpu()                     # (T, T)
            return hook

        with torch.inference_mode():
            self.bridge.run_with_hooks(ids, fwd_hooks=[(f"blocks.{i}.attn.hook_pattern", keep(i)) for i in layers],
                                       return_type=None)
        return pattern_frame(self.name, [(layer, maps[layer]) for layer in layers])

    def meta(self) -> dict:
        import importlib.metadata as md

        from ..families.official import is_reordered

        try:
            version = md.version("transformer-lens")
        except md.PackageNotFoundError:
            version = None
        bridge = self.bridge
        return {
            "backend": "transformer_lens",
            "transformer_lens_version": version,
            "bridge_architecture": getattr(bridge.cfg, "architecture", None),
            "bridge_compatibility_mode": bool(getattr(bridge, "compatibility_mode", False)),
            "q_proj_reordered": is_reordered(bridge.original_model),
            "f_attn_source": "hook_pattern[..., 0] (TransformerLens forms the T x T pattern)",
        }
