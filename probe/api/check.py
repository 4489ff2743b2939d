"""`probe check`: does probe read the gate the model actually applies?

The implementation checks that the gated-attention literature recommends, run on a few random
token sequences, each with the numbers behind its verdict:

  layout fits          the declared gate layout can be carved out of the gate module's output
  sdpa x gate          act(gate logits as probe reads them) * the SDPA output == o_proj's input
  zero logits          gate logits set to 0 give gate act(0) (0.5 for the sigmoid), not identity:
                       o_proj receives 0.5 * the SDPA output (1 * it for a grafted 2 * sigmoid gate)
  gate = 1             gate logits forced to +inf: every layer's output equals the same model with
                       o_proj fed the ungated SDPA output (recorded in that very pass)
  gate = 0, branch     gate logits forced to -inf: the attention branch outputs o_proj(0)
                       (zero, or o_proj's bias)
  gate = 0, residual   ... and the layer output is still input + branch + MLP(norm(input + branch)):
                       only the attention branch disappears, the residual stream flows

The forced passes write logits where the declared `GateSpec` says they are. If the layout was
guessed wrong (interleaved declared on a grouped checkpoint, headwise for elementwise, ...)
the forced numbers land in the queries or miss the gate, and the checks fail with large
differences; the report then names the layouts that do fit the recorded tensors.

Every hook exists only for its own pass (`interventions.installed`); nothing stays behind.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch

from ..core.errors import ProbeError
from ..families.gates import ACTIVATIONS, GateSpec
from ..load.finite import describe, non_finite_weights
from ..run.interventions import (first_output, gate_channels, gate_logit, installed, using_probe_attention,
                                 set_gate_logits)

COLUMNS = ["check", "layer", "value", "tolerance", "passed", "detail"]
# act(0) of each activation: what a zero gate logit multiplies the attention output by.
ZERO_LOGIT_GATE = {"sigmoid": 0.5, "softplus": math.log(2.0), "2sigmoid": 1.0}
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10, torch.bfloat16: 2e-2, torch.float16: 5e-3}


@dataclass
class CheckReport:
    frame: pd.DataFrame              # one row per (check, layer)
    gated: bool
    suggestions: list[str]           # gate specs that fit the recorded tensors, when a check failed

    @property
    def passed(self) -> bool:
        return bool(self.frame.passed.all()) if len(self.frame) else True

    @property
    def failed(self) -> pd.DataFrame:
        return self.frame[~self.frame.passed]

    def to_string(self) -> str:
        shown = self.frame.assign(
            layer=[("-" if l is None or (isinstance(l, float) and math.isnan(l)) else str(int(l)))
                   for l in self.frame.layer],
            value=[_num(v) for v in self.frame.value],
            tolerance=[_num(v) for v in self.frame.tolerance],
            passed=["pass" if p else "FAIL" for p in self.frame.passed])
        return shown.rename(columns={"passed": "result"}).to_string(index=False)


def _num(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


class _Recorder:
    """Observer for the `probe` attention back-end: keeps each layer's pre-gate SDPA output."""

    def __init__(self, layout):
        self.sdpa: dict[int, torch.Tensor] = {}
        self._layer = {id(p.mixer): p.index for p in layout.layers}

    def on_attention(self, module, query, key, out, lse, mask, scale, softcap=None, value=None) -> None:
        layer = self._layer.get(id(module), getattr(module, "layer_idx", None))
        self.sdpa[layer] = out.transpose(1, 2).detach().clone()            # (B, T, H, D)


def _record_hooks(layout, rec: dict) -> list:
    def keep(store, key, where):
        def hook(module, args, *rest):
            if where == "input":
                x = args[0]
            elif where == "input_kwargs":
                x = args[0] if args else rest[0]["hidden_states"]
            else:
                x = first_output(rest[0])
            store[key] = x.detach().clone()
        return hook

    regs = []
    for p in layout.layers:
        i = p.index
        regs.append((p.layer, "pre_kwargs", keep(rec["layer_in"], i, "input_kwargs")))
        regs.append((p.layer, "forward", keep(rec["layer_out"], i, "output")))
        regs.append((p.mixer, "forward", keep(rec["branch"], i, "output")))
        if p.o_proj is not None:
            regs.append((p.o_proj, "pre", keep(rec["o_in"], i, "input")))
        if p.gate_module is not None:
            regs.append((p.gate_module, "forward", keep(rec["gate_out"], i, "output")))
    return regs


def _ungate_hooks(layout, recorder: _Recorder) -> list:
    """Feed o_proj the SDPA output of the same pass, i.e. the same attention with no gate."""
    def hook(module, args, layer):
        x = args[0]
        return (recorder.sdpa[layer].reshape(x.shape).to(x.dtype),)
    return [(p.o_proj, "pre", lambda m, a, layer=p.index: hook(m, a, layer))
            for p in layout.layers if p.o_proj is not None and p.gate_module is not None]


def _forward(loaded, ids, *, logit: float | None = None, ungated: bool = False) -> tuple[dict, _Recorder]:
    model, layout = loaded.model, loaded.layout
    recorder = _Recorder(layout)
    rec = {k: {} for k in ("layer_in", "layer_out", "branch", "o_in", "gate_out")}
    regs = []
    if logit is not None:
        regs += set_gate_logits(layout, {i: logit for i in layout.attention_layers})
    if ungated:
        regs += _ungate_hooks(layout, recorder)
    regs += _record_hooks(layout, rec)          # after the changes: record what the model used
    with using_probe_attention(model, recorder), installed(regs), torch.inference_mode():
        model(input_ids=ids, use_cache=False)
    rec["sdpa"] = recorder.sdpa
    return rec, recorder


def _diff(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(max |actual - expected|, max |expected|) in float64; inf when anything is not finite."""
    a, e = actual.double(), expected.double()
    if a.shape != e.shape:
        return math.inf, math.nan
    if not (torch.isfinite(a).all() and torch.isfinite(e).all()):
        return math.inf, float(e[torch.isfinite(e)].abs().max()) if torch.isfinite(e).any() else math.nan
    return float((a - e).abs().max()) if a.numel() else 0.0, float(e.abs().max()) if e.numel() else 0.0


def _row(rows, check, layer, actual, expected, tol, detail=""):
    diff, scale = _diff(actual, expected)
    bound = tol * max(scale if math.isfinite(scale) else 1.0, 1.0)
    rows.append(dict(check=check, layer=layer, value=diff, tolerance=bound,
                     passed=bool(diff <= bound), detail=detail))


def _gated_output(spec: GateSpec, layout, gate_out, sdpa) -> torch.Tensor:
    """What o_proj should receive if `spec` is right: act(logits) * SDPA output, (B, T, H*D)."""
    scores = spec.scores(gate_out, layout.num_heads, layout.num_kv_heads, layout.head_dim)
    return (sdpa.float() * scores).reshape(*sdpa.shape[:2], -1)


def fitting_specs(layout, rec, tol: float) -> list[str]:
    """Gate specs on the same module whose product with the SDPA output matches o_proj's input."""
    found = []
    for lay in ("interleaved", "grouped", "plain"):
        for gran in ("elementwise", "headwise"):
            for act in ACTIVATIONS:
                spec = GateSpec(layout.gate.module, lay, gran, act)
                if all(_fits(spec, layout, rec, i, tol) for i in layout.attention_layers):
                    found.append(f"{spec.module}:{lay}:{gran}:{act}")
    return found


def _fits(spec, layout, rec, layer, tol) -> bool:
    if layer not in rec["gate_out"] or layer not in rec["sdpa"] or layer not in rec["o_in"]:
        return False
    try:
        gate_channels(spec, rec["gate_out"][layer].shape[-1], layout.num_heads, layout.num_kv_heads,
                      layout.head_dim)
    except ProbeError:
        return False
    expected = _gated_output(spec, layout, rec["gate_out"][layer], rec["sdpa"][layer])
    diff, scale = _diff(rec["o_in"][layer], expected)
    return diff <= tol * max(scale, 1.0)


def refuse_non_finite_weights(model) -> None:
    """Every check compares two forward passes; with a NaN or inf weight both are NaN and each
    check would fail as if the gate layout were wrong. Say what is wrong instead."""
    bad = non_finite_weights(model)
    if bad:
        raise ProbeError(f"the weights are not finite ({describe(bad)}), so no gate check can run: fix or "
                         "re-download the checkpoint")


def run_checks(loaded, *, seq_len: int = 16, batch_size: int = 2, seed: int = 0,
               input_ids: torch.Tensor | None = None) -> CheckReport:
    """Run the implementation checks on `loaded` (a `probe.load(...)` result)."""
    model, layout = loaded.model, loaded.layout
    if not layout.gated:
        return CheckReport(pd.DataFrame(columns=COLUMNS), gated=False, suggestions=[])
    refuse_non_finite_weights(model)
    spec = layout.gate
    dev = next(model.parameters()).device
    if input_ids is None:
        vocab = model.config.get_text_config().vocab_size
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(0, vocab, (batch_size, max(seq_len, 2)), generator=g)
    ids = input_ids.to(dev)
    tol = TOLERANCE.get(next(model.parameters()).dtype, 1e-5)
    layers = layout.attention_layers
    rows: list[dict] = []

    plain, _ = _forward(loaded, ids)
    # 1. The layout fits the gate module's output.
    fits = True
    for i in layers:
        width = plain["gate_out"][i].shape[-1]
        try:
            gate_channels(spec, width, layout.num_heads, layout.num_kv_heads, layout.head_dim)
            rows.append(dict(check=f"gate layout {spec.name} fits {spec.module} output", layer=i,
                             value=float(width), tolerance=math.nan, passed=True,
                             detail=f"{width} channels"))
        except ProbeError as err:
            fits = False
            rows.append(dict(check=f"gate layout {spec.name} fits {spec.module} output", layer=i,
                             value=float(width), tolerance=math.nan, passed=False, detail=str(err)))
    if not fits:
        return CheckReport(pd.DataFrame(rows, columns=COLUMNS), True, fitting_specs(layout, plain, tol))

    # 2. sdpa_output * act(gate) == o_proj input.
    for i in layers:
        _row(rows, "sdpa_output * gate == o_proj input", i, plain["o_in"][i],
             _gated_output(spec, layout, plain["gate_out"][i], plain["sdpa"][i]), tol)

    # 3. Zero logits: the gate is act(0) (0.5 for the sigmoid), not identity.
    # 2 * sigmoid (a grafted gate) is the one activation whose zero logit is identity, by design.
    act0 = float(ACTIVATIONS[spec.activation](torch.zeros(())))
    expect = ZERO_LOGIT_GATE[spec.activation]
    identity = expect == 1.0
    rows.append(dict(check=f"zero logit gives {spec.activation}(0) = {expect:.4g}"
                           + ("" if identity else ", not identity (1)"),
                     layer=None, value=act0, tolerance=1e-7,
                     passed=abs(act0 - expect) <= 1e-7 and (act0 == 1.0) == identity,
                     detail="a zero-initialised 2 * sigmoid gate passes the attention output unchanged" if identity
                     else "a zero-initialised gate scales the attention output, it does not pass it"))
    zero, _ = _forward(loaded, ids, logit=0.0)
    for i in layers:
        _row(rows, f"zero logits: o_proj input == {act0:.4g} * sdpa_output", i, zero["o_in"][i],
             act0 * zero["sdpa"][i].float().reshape(zero["o_in"][i].shape), tol)

    # 4. Gate forced to 1 == the same attention with no gate.
    one, _ = _forward(loaded, ids, logit=gate_logit(spec.activation, 1.0))
    ungated, _ = _forward(loaded, ids, ungated=True)
    for i in layers:
        _row(rows, "gate = 1: layer output == ungated attention", i, one["layer_out"][i],
             ungated["layer_out"][i], tol,
             detail=f"o_proj input max diff {_diff(one['o_in'][i], ungated['o_in'][i])[0]:.3g}")

    # 5. Gate forced to 0: only the attention branch disappears.
    off, _ = _forward(loaded, ids, logit=gate_logit(spec.activation, 0.0))
    for p in layout.layers:
        if p.index not in layers:
            continue
        i = p.index
        x = off["layer_in"][i]
        with torch.inference_mode():
            o_zero = p.o_proj(torch.zeros(1, 1, off["o_in"][i].shape[-1], dtype=x.dtype, device=x.device))
        branch = first_output(o_zero).expand_as(x)
        _row(rows, "gate = 0: attention branch == o_proj(0)", i, off["branch"][i], branch, tol,
             detail="zero" if not bool(first_output(o_zero).abs().max() > 0) else "o_proj bias")
        if p.post_attn_norm is None or p.mlp is None:
            rows.append(dict(check="gate = 0: layer output == residual + MLP path", layer=i,
                             value=math.nan, tolerance=math.nan, passed=True,
                             detail="skipped: no post-attention norm / MLP found"))
            continue
        with torch.inference_mode():
            mid = x + branch
            expected = mid + first_output(p.mlp(p.post_attn_norm(mid)))
        _row(rows, "gate = 0: layer output == residual + MLP path", i, off["layer_out"][i], expected, tol,
             detail=f"|layer output| max {float(off['layer_out'][i].abs().max()):.3g}")

    # 6. Hybrids: the Gated DeltaNet layers' per-key terms add up to their output (check_gdn.py).
    from .check_gdn import gdn_rows
    rows += gdn_rows(loaded, ids)

    frame = pd.DataFrame(rows, columns=COLUMNS)
    suggestions = [] if bool(frame.passed.all()) else fitting_specs(layout, plain, tol)
    return CheckReport(frame, True, suggestions)


def summary_line(report: CheckReport, layout) -> str:
    if not report.gated:
        return (f"no attention-output gate in this {layout.model_type} checkpoint: nothing to check "
                "(declare one with --gate MODULE:LAYOUT:GRANULARITY if it has one)")
    n, bad = len(report.frame), int((~report.frame.passed).sum())
    if not bad:
        return f"all {n} checks passed for gate {layout.gate.module}:{layout.gate.layout}:" \
               f"{layout.gate.granularity}:{layout.gate.activation}"
    spec = layout.gate
    line = (f"{bad} of {n} checks failed: probe does not read the gate this model applies with "
            f"--gate {spec.module}:{spec.layout}:{spec.granularity}:{spec.activation}")
    fits = [s for s in report.suggestions if s != f"{spec.module}:{spec.layout}:{spec.granularity}:{spec.activation}"]
    if fits:
        line += f"; the recorded tensors fit --gate {' or '.join(fits)}"
    else:
        line += "; the gate layout, module or activation is wrong"
    return line
