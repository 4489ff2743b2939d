"""Gated DeltaNet layers (--gdn): the metric. Per GDN layer it folds each pass's
`linear_attn.hook_gdn` event (probe/capture/gdn.py) into TokenStats / OutputStats (stats.py,
per token) and KeyStats (keys.py, the per-key terms of decompose.py, one sequence at a time).

A linear-attention layer probe cannot read (an unknown layout: probe/families/gdn.py) is
measured for what every layer is (M-Act at its sites) and named, with the reason, in one line:
meta.json gdn_refused, and a warning.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import torch

from ...core.errors import flag
from ...families.gdn import describe_refused, gdn_parts
from ..base import Metric, mean
from ..bins import Bins
from ..first_token import SINK_EPSILON
from ..massive.reduce import token_text
from ..reducers import F64
from ..token_index import TokenIndex
from . import CHECK_SITES, DECLARATION, QUANTITIES, SPARSITY_VARIANTS
from .keys import BUCKETS, KEY0_SHARES, KeyStats, tolerance
from .received import ReceivedStats
from .stats import BINS, OutputStats, TokenStats

BASE_GROUPS = ("all", "first", "rest")


class GatedDeltaNet(Metric):
    declaration = DECLARATION

    def setup(self) -> None:
        layout, options, token_groups = self.layout, self.options, self.context.token_groups
        self.enabled = bool(getattr(options, "gdn", False))
        # The per-key terms cost an extra Q.K^T pass per GDN layer (O(T^2 d), float64), more than
        # the forward at long T: like the softmax layers' per-key view, they come with --anatomy.
        self.per_key = self.enabled and bool(getattr(options, "anatomy", False))
        # The per-query key-0 shares are left in Batch.derived for the per-token series.
        self.keep_shares = self.per_key and int(getattr(options, "token_series", 0) or 0) > 0
        self.groups = token_groups
        extra = [n for n in (token_groups.names if token_groups is not None else ()) if n != "first"]
        self.names = [*BASE_GROUPS, *extra]
        self.refused: dict[int, str] = {}
        self.heads: dict[int, int] = {}
        self.dtype: dict[int, torch.dtype] = {}
        self.tokens, self.outputs, self.keys, self.received = {}, {}, {}, {}
        if not self.enabled:
            return
        # The received shares' by-token tables: a row per token id of the data when known.
        index = TokenIndex.of(self.context.token_ids, self.context.vocab_size) if self.per_key else None
        for p in layout.layers:
            if p.layer_type != "linear_attention":
                continue
            parts = gdn_parts(p.mixer)
            if isinstance(parts, str):
                self.refused[p.index] = parts
                continue
            H = self.heads[p.index] = parts.num_v_heads
            self.tokens[p.index] = TokenStats(len(self.names), H, beta_max=parts.beta_scale)
            self.outputs[p.index] = OutputStats(len(self.names), H, options.thresholds)
            if self.per_key:
                self.keys[p.index] = KeyStats(H, self.context.sequences)
                self.received[p.index] = ReceivedStats(H, _longest(options.seq_len), self.context.vocab_size,
                                                       index=index)
        if self.refused:
            warnings.warn(describe_refused(self.refused))
        if not any(p.layer_type == "linear_attention" for p in layout.layers):
            # Asked for and silently empty would read as "measured, nothing to see".
            warnings.warn(f"{flag('gdn', True)}: the model has no Gated DeltaNet (linear-attention) "
                          "layers; no gdn_ table is written")

    def listens(self, event: str) -> bool:
        return self.enabled and bool(self.tokens)

    def reducers(self) -> list:
        return [r for layer in sorted(self.tokens)
                for r in (self.tokens[layer], self.outputs[layer],
                          *([self.keys[layer], self.received[layer]] if self.per_key else []))]

    @torch.no_grad()
    def update(self, layer, o, b, call=None) -> None:                        # o (B, T, Hv, dv)
        if layer not in self.tokens or call is None:
            return
        dev = o.device
        self.dtype[layer] = o.dtype
        seq, pos, tok = b.where(dev)
        member = [torch.ones_like(pos, dtype=torch.bool), pos == 0, pos >= 1]
        if self.groups is not None:
            m = self.groups.membership(tok, pos)                               # (N, G)
            member += [m[:, i] for i, n in enumerate(self.groups.names) if n != "first"]
        member = torch.stack(member)                                           # (G, N)
        values = {"gate_silu": torch.nn.functional.silu(b.rows(call.z).float()),
                  "beta": b.rows(call.beta)[..., None], "decay": b.rows(call.g).exp()[..., None]}
        self.tokens[layer].follow(dev).update(values, b.rows(call.g), member, (seq, pos, tok))
        normed = _normed(call.o, call.norm_weight, call.eps)                   # (B, T, Hv, dv)
        rows = {"pre_gate": b.rows(call.o), "normed": b.rows(normed), "gated": b.rows(call.y)}
        bins = {k: Bins(v) for k, v in rows.items()}
        norms = {"pre": _norm(rows["pre_gate"]), "normed": _norm(rows["normed"]), "post": _norm(rows["gated"])}
        self.outputs[layer].follow(dev).update(bins, norms, member)
        if not self.per_key:
            return
        keys, received = self.keys[layer].follow(dev), self.received[layer].follow(dev)
        valid = b.valid.to(dev)
        shares = b.derived(KEY0_SHARES, o, dict) if self.keep_shares else None
        for row, sequence in enumerate(b.seq_index.tolist()):
            keys.update(call, row, valid[row], int(sequence), received=received, ids=b.input_ids[row],
                        shares=shares)

    # -- what a finished pass writes ------------------------------------------------------------
    def mean_gate(self, layer: int) -> float:
        t = self.tokens[layer]
        n = int(t.count[0, 0].sum())
        return float(t.total[0, 0].sum()) / n if n else math.nan

    def frames(self, done) -> dict:
        if not self.enabled:
            return {}
        name = done.name
        gates, hist, top, sparsity, norms, keys, buckets, check = ([] for _ in range(8))
        received, by_token, sinks = [], [], []
        for layer in sorted(self.tokens):
            t, out = self.tokens[layer], self.outputs[layer]
            for qi, quantity in enumerate(QUANTITIES):
                for metric, values in t.metrics(qi).items():
                    for gi, group in enumerate(self.names):
                        if group not in BASE_GROUPS and int(t.count[qi, gi].sum()) == 0:
                            continue                                     # a token type the data does not hold
                        gates += [dict(model=name, layer=layer, head=h, quantity=quantity, group=group,
                                       metric=metric, value=float(v)) for h, v in enumerate(values[gi].tolist())]
                lo, hi = t.ranges[quantity]
                edges = torch.linspace(lo, hi, BINS + 1).tolist()
                for h, counts in enumerate(t.hist[qi].tolist()):
                    hist += [dict(model=name, layer=layer, head=h, quantity=quantity, bin_lo=edges[i],
                                  bin_hi=edges[i + 1], count=c) for i, c in enumerate(counts)]
            for h, best in enumerate(t.top):
                top += [dict(model=name, layer=layer, head=h, rank=r, sequence=s, position=p, token_id=tid,
                             token=token_text(done.tokenizer, tid) if done.tokenizer is not None else str(tid),
                             beta=beta) for r, (beta, s, p, tid) in enumerate(best)]
            for variant, by_t in out.shares(self.mean_gate(layer)).items():
                sparsity += [dict(model=name, layer=layer, variant=variant, threshold=th, value=v)
                             for th, v in by_t.items()]
            for gi, group in enumerate(self.names):
                for h in range(self.heads[layer]):
                    n = int(out.tokens[gi, h])
                    if n == 0 and group not in BASE_GROUPS:
                        continue
                    pre, normed, post = (_div(getattr(out, k)[gi, h], n) for k in ("pre", "normed", "post"))
                    norms.append(dict(model=name, layer=layer, head=h, group=group, tokens=n, pre=pre,
                                      normed=normed, post=post, ratio_of_means=_div(post, normed)))
            if self.per_key:
                self._key_rows(name, layer, keys, buckets, check)
                self._received_rows(name, layer, done.tokenizer, received, by_token, sinks)
        cols = {t: list(c) for t, c in self.TABLES.items()}
        frames = dict(gdn_gates=gates, gdn_gate_hist=hist, gdn_top_beta=top, gdn_sparsity=sparsity,
                      gdn_head_norms=norms, gdn_keys=keys, gdn_key0_buckets=buckets, gdn_check=check,
                      gdn_received=received, gdn_received_by_token=by_token, gdn_state_sinks=sinks)
        return {k: pd.DataFrame(v, columns=cols[k]) for k, v in frames.items()}

    def _key_rows(self, name: str, layer: int, keys: list, buckets: list, check: list) -> None:
        """gdn_keys, gdn_key0_buckets and gdn_check rows of one layer's per-key terms (--anatomy)."""
        ks = self.keys[layer]
        for metric, values in ks.values().items():
            keys += [dict(model=name, layer=layer, head=h, metric=metric, value=float(v))
                     for h, v in enumerate(values.tolist())]
        for h in range(self.heads[layer]):
            for j in range(BUCKETS):
                n = int(ks.bucket_n[h, j])
                if n:
                    buckets.append(dict(model=name, layer=layer, head=h, bucket_lo=float(2 ** j),
                                        bucket_hi=float(2 ** (j + 1)), value=float(ks.bucket_sum[h, j]) / n,
                                        n_queries=float(n)))
        tol = tolerance(self.dtype.get(layer, torch.float32))
        for i, site in enumerate(CHECK_SITES):
            err = float(ks.error[i]) if int(ks.sequences) else math.nan
            site_tol = 1e-9 if site == "state_share_sum" else tol
            check.append(dict(model=name, layer=layer, site=site, max_rel_error=err, tolerance=site_tol,
                              passed=bool(err <= site_tol)))

    def _received_rows(self, name: str, layer: int, tokenizer, received: list, by_token: list, sinks: list) -> None:
        """gdn_received, gdn_received_by_token and gdn_state_sinks rows of one layer (--anatomy)."""
        r = self.received[layer]
        text = lambda tid: token_text(tokenizer, tid) if tokenizer is not None else str(tid)
        received += [dict(model=name, layer=layer, **row) for row in r.by_position()]
        by_token += [dict(model=name, layer=layer, rank=i, token_id=row["token_id"], token=text(row["token_id"]),
                          cells=row["cells"], score=row["score"]) for i, row in enumerate(r.by_token())]
        for h, best in enumerate(r.sinks):
            sinks += [dict(model=name, layer=layer, head=h, rank=i, sequence=seq, position=pos, token_id=tid,
                           token=text(tid), score=score) for i, (score, seq, pos, tid) in enumerate(best)]

    def summarise(self, a, layers, done) -> dict:
        """summary.json `gdn`: per GDN layer its mean SiLU gate, beta, half-life, key-0 share and
        worst reconstruction error; overall their means, the GDN sink rate (the share of (layer,
        value head) cells whose key-0 share is above the softmax sink rate's epsilon) and the
        layers that failed the check."""
        if not self.enabled:
            return {}
        per_layer, cells = [], []
        for layer in sorted(self.tokens):
            t, ks = self.tokens[layer], self.keys.get(layer)
            key0 = ks.values()["key0_share"] if ks is not None else torch.full((self.heads[layer],), math.nan)
            cells += [float(v) for v in key0.tolist() if not math.isnan(v)]
            beta, decay = t.metrics(1), t.metrics(2)
            check = a.tables.get("gdn_check")
            rows = check[check.layer == layer] if check is not None and len(check) else None
            per_layer.append({
                "layer": layer, "mean_gate_silu": self.mean_gate(layer),
                "mean_beta": _nanmean(beta["mean"][0]), "mean_decay": _nanmean(decay["mean"][0]),
                "half_life": _nanmean(decay["half_life"][0]),
                "key0_share": _nanmean(key0), "max_rel_error": float(ks.error[:3].max()) if ks is not None else None,
                "passed": None if rows is None else bool(rows.passed.all())})
        lo, hi = self.key0_interval(done.resamples, done.documents)
        return {"gdn": {
            "layers": per_layer,
            "key0_share": mean([e["key0_share"] for e in per_layer]) if self.per_key else None,
            "key0_share_lo": lo, "key0_share_hi": hi,
            "sink_rate": (sum(v > SINK_EPSILON for v in cells) / len(cells)) if cells else None,
            "sink_epsilon": SINK_EPSILON,
            "mean_beta": mean([e["mean_beta"] for e in per_layer]),
            "mean_gate_silu": mean([e["mean_gate_silu"] for e in per_layer]),
            "max_rel_error": max((e["max_rel_error"] for e in per_layer if e["max_rel_error"] is not None),
                                 default=None),
            "failed_layers": [e["layer"] for e in per_layer if e["passed"] is False],
            "refused": describe_refused(self.refused) if self.refused else None}}

    def key0_interval(self, resamples: int, documents=None) -> tuple[float | None, float | None]:
        """The 95% interval of the headline key-0 share (the mean over GDN layers of the head mean
        of each head's key-0 share) over sequences: each resample's shares are ratios of the
        per-sequence sums (KeyStats.seq_share / seq_n), so one matrix product per layer gives them
        all. Resampled as the softmax numbers are (by documents where sliding windows group
        sequences: probe/intervals/), so that the two sets of intervals are comparable."""
        from ...intervals.bootstrap import MIN_SEQUENCES, MIN_RESAMPLES, percentile_interval, resample_weights

        layers = [layer for layer in sorted(self.keys) if int(self.keys[layer].sequences)]
        if not layers or resamples < MIN_RESAMPLES:
            return None, None
        S = max(int(self.keys[layer].seq_n.shape[0]) for layer in layers)
        # Per sequence its document: only where one holds several (sliding windows), as
        # per_sequence.csv writes it.
        if documents is not None and (len(documents) != S or len(set(documents)) == S):
            documents = None
        units = S if documents is None else len(set(documents.tolist()))
        if units < MIN_SEQUENCES:
            return None, None
        W = resample_weights(S, resamples, clusters=documents)                          # (R, S)
        shares = []
        for layer in layers:
            ks = self.keys[layer]
            share = grown_rows(ks.seq_share, S).numpy()                                  # (S, H)
            n = grown_rows(ks.seq_n, S).double().numpy()
            with np.errstate(invalid="ignore", divide="ignore"):
                shares.append(np.nanmean((W @ share) / (W @ n), axis=1))                  # (R,)
        lo, hi = percentile_interval(np.nanmean(np.stack(shares), axis=0))
        return _num(lo), _num(hi)

    def meta(self, done) -> dict:
        if not self.enabled:
            return {}
        return {"gdn": sorted(self.tokens), "gdn_refused": describe_refused(self.refused) if self.refused else None}

    def nonfinite(self) -> dict[str, int]:
        out = {}
        for layer in self.tokens:
            n = int(self.tokens[layer].nonfinite) + (int(self.keys[layer].nonfinite) if layer in self.keys else 0)
            if n:
                out[f"{layer}:gdn"] = n
        return out


def _longest(seq_len) -> int:
    """The longest row the pass can see: seq_len, or the largest of a sweep's lengths."""
    return max(int(n) for n in seq_len) if isinstance(seq_len, (list, tuple)) else int(seq_len or 1)


def grown_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x (S', H) on the CPU with `rows` rows (zeros past S': sequences this layer never saw)."""
    x = x.to("cpu")
    return torch.cat([x, x.new_zeros(rows - x.shape[0], *x.shape[1:])]) if x.shape[0] < rows else x


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _normed(o: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * rmsnorm(o), as RMSNormGated forms it before the gate (in float32, then o's dtype)."""
    x = o.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(o.dtype)


def _norm(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(x.to(F64), dim=-1)                        # (N, H)


def _div(total, n) -> float:
    total = float(total)
    return total / n if n else math.nan


def _nanmean(x: torch.Tensor) -> float | None:
    x = x[~torch.isnan(x)]
    return float(x.mean()) if len(x) else None
