"""Position scaling on load: `--rope-scaling yarn:4` (or a transformers rope type as JSON).

transformers 5 reads a model's rotary embedding from `config.rope_parameters` (not the 4.x
`rope_scaling`) when it builds the model, so the scaling is written into the config before the
weights are loaded. The length the model was trained at (YaRN's
`original_max_position_embeddings`) comes from the config: an earlier scaling's original length
if the config already has one, else `max_position_embeddings`. The model's positions become
original x factor, so sequences up to that length are not cut.

Configs with one rope dict per layer type (Gemma 3: `full_attention` / `sliding_attention`) get
the scaling on their full-attention layers only: a sliding-window layer never sees a distance
beyond its window, so its positions need no stretching.

This module imports neither torch nor transformers at import time (options.py checks the
spec through `parse`).
"""
from __future__ import annotations

import copy
import json
import math
import numbers

from ..core.errors import ProbeError, flag

# rope types whose parameters carry the original (pretraining) length.
WITH_ORIGINAL = ("yarn", "longrope", "llama3")
# rope types that stretch the usable length by `factor` (dynamic NTK rescales as it runs and
# reads max_position_embeddings as the original length, so it is left as it is).
STRETCHES = ("linear", "yarn", "longrope", "llama3")
MAX_POSITIONS = 2 ** 31 - 1          # a position index beyond this fits no int32 (the scaled length's bound)
FULL = "full_attention"


def parse(spec) -> dict:
    """'yarn:4' -> {'rope_type': 'yarn', 'factor': 4.0}; a JSON object (or a dict) as given.
    The rope type is checked against transformers' own list when it is imported."""
    if isinstance(spec, dict):
        params = dict(spec)
    elif isinstance(spec, str) and spec.strip().startswith("{"):
        try:
            params = json.loads(spec)
        except json.JSONDecodeError as err:
            raise ProbeError(f"{flag('rope_scaling')} is not valid JSON ({err.msg} at character {err.pos}); "
                             'e.g. {"rope_type": "yarn", "factor": 4}') from None
        if not isinstance(params, dict):
            raise ProbeError(f"{flag('rope_scaling')} must be a JSON object, e.g. "
                             '{"rope_type": "yarn", "factor": 4}')
    elif isinstance(spec, str) and ":" in spec:
        kind, _, factor = spec.partition(":")
        try:
            value = float(factor)
        except ValueError:
            value = math.nan
        params = {"rope_type": kind.strip(), "factor": value}
    else:
        raise ProbeError(f"{flag('rope_scaling', spec)}: give TYPE:FACTOR (e.g. yarn:4) or a JSON object "
                         'such as {"rope_type": "yarn", "factor": 4, "beta_fast": 32}')
    kind = params.get("rope_type", params.get("type"))
    if not isinstance(kind, str) or not kind:
        raise ProbeError(f"{flag('rope_scaling')} names no rope_type; e.g. yarn:4")
    params.pop("type", None)
    params["rope_type"] = kind
    factor = params.get("factor")
    if "factor" in params and (isinstance(factor, bool) or not isinstance(factor, numbers.Real)
                               or not math.isfinite(factor) or factor < 1):
        raise ProbeError(f"{flag('rope_scaling')}: the factor must be a number of at least 1 (got {factor!r})")
    if "factor" in params:
        params["factor"] = float(factor)
    original = params.get("original_max_position_embeddings")
    if "original_max_position_embeddings" in params and (
            isinstance(original, bool) or not isinstance(original, numbers.Integral) or original < 1):
        raise ProbeError(f"{flag('rope_scaling')}: original_max_position_embeddings must be a whole number of "
                         f"positions of at least 1, the length the model was trained at (got {original!r})")
    known = _rope_types()
    if known is not None and kind not in known:
        raise ProbeError(f"unknown rope type {kind!r} in {flag('rope_scaling')}; transformers knows "
                         f"{', '.join(sorted(known))}")
    return params


def _rope_types():
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:          # pragma: no cover - transformers is a dependency
        return None
    return set(ROPE_INIT_FUNCTIONS) | {"default"}


def rope_of(config) -> dict | None:
    """The config's rope parameters (flat, or per layer type), None for a model without RoPE."""
    params = getattr(config, "rope_parameters", None)
    return params if isinstance(params, dict) and params else None


def nested(config, params: dict) -> list[str]:
    """The layer types `params` is keyed by (Gemma 3), [] for one flat dict."""
    # Every dict-valued key: a config whose layers are all of one type (a small Gemma 3 of
    # sliding layers only) still keeps a full_attention entry that transformers' own helper,
    # which only counts the layer types in use, would not name.
    return [k for k in params if isinstance(params[k], dict)]


def describe(config, original: int | None = None) -> dict | None:
    """What meta.json records of the model's positions: the rope parameters, the positions the
    config allows and the original (training) length (`original`: the one a scaling on load
    started from); None for a model without RoPE."""
    params = rope_of(config)
    if params is None:
        return None
    groups = nested(config, params)
    flat = params.get(FULL, params[groups[0]]) if groups else params
    original = original or (flat.get("original_max_position_embeddings") if isinstance(flat, dict) else None)
    return {"rope_parameters": copy.deepcopy(params),
            "max_position_embeddings": getattr(config, "max_position_embeddings", None),
            "original_max_position_embeddings": original or getattr(config, "max_position_embeddings", None)}


def apply(config, spec, *, where: str = "the model") -> dict:
    """Write the scaling `spec` (parse's input) into `config.rope_parameters` (in place, before
    the model is built); returns the record for meta.json. One line for a model without RoPE."""
    params = parse(spec)
    current = rope_of(config)
    if current is None:
        raise ProbeError(f"{flag('rope_scaling')}: {where} has no rotary position embedding (its config has "
                         "no rope_parameters), so there is nothing to scale; leave the option out")
    groups = nested(config, current)
    targets = ([FULL] if FULL in groups else groups) if groups else [None]
    base = current[targets[0]] if groups else current
    positions = getattr(config, "max_position_embeddings", None)
    # The training length: the user's (JSON), an earlier scaling's, else the config's positions.
    original = (params.get("original_max_position_embeddings") or base.get("original_max_position_embeddings")
                or positions)
    if params["rope_type"] in WITH_ORIGINAL and not original:
        raise ProbeError(f"{flag('rope_scaling')}: {where}'s config gives no max_position_embeddings, so the "
                         "original length is unknown; pass it in the JSON as original_max_position_embeddings")
    given = params.get("original_max_position_embeddings")
    if given and isinstance(positions, int) and given > positions:
        raise ProbeError(f"{flag('rope_scaling')}: original_max_position_embeddings {given:,} is more than the "
                         f"{positions:,} positions of {where}'s config; give the length it was trained at")
    factor = params.get("factor")
    if params["rope_type"] in STRETCHES and factor and original and original * factor > MAX_POSITIONS:
        raise ProbeError(f"{flag('rope_scaling')}: a factor of {factor:g} stretches {int(original):,} positions "
                         f"past {MAX_POSITIONS:,}, more than any sequence can have; give a smaller factor")
    updated = copy.deepcopy(current)
    for target in targets:
        old = updated[target] if target else updated
        new = {k: old[k] for k in ("rope_theta", "partial_rotary_factor", "mrope_section",
                                   "mrope_interleaved") if k in old}
        new.update(params)
        if params["rope_type"] in WITH_ORIGINAL:
            new.setdefault("original_max_position_embeddings", int(original))
        if target:
            updated[target] = new
        else:
            updated = new
    config.rope_parameters = updated
    factor = params.get("factor")
    if params["rope_type"] in STRETCHES and factor and original:
        config.max_position_embeddings = int(round(original * factor))
    return {**describe(config, int(original) if original else None), "spec": params,
            "layer_types": [t for t in targets if t] or None, "max_position_embeddings_before": positions}
