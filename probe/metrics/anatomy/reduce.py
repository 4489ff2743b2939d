"""Sink anatomy (`anatomy=True`, `--anatomy`): per attention layer, the attention every key
position receives (Gu et al., ICLR 2025: the mean of P[t, k] over the queries that see k), by
position and by token, the secondary sinks away from position 0, the value drains of each head's
top sink key and, for gated models, the gate against the attention a query puts on that key.

Reads attn.hook_attention (the `probe` back-end's call: query, key, value, out, lse, mask, scale,
softcap), which the Hugging Face source emits only when this metric listens, and attn.hook_gate:
a layer's gate mean per query and head is paired with the sink attention of the same layer in the
same forward pass (the same `Batch`), whichever of the two events fires first (the gate rows of
q_proj fire before attention, a grafted gate_proj after it: issue 37); the first one is kept until
its partner arrives, then dropped.
Received attention comes from the kernel's log-sum-exp in blocks of queries (received.py here),
never a T x S matrix; stats.py reduces it over the data.

Tables (written only when the option is on: probe.results.schema.OPTIONAL_TABLES): received_by_position,
received_by_token, secondary_sinks, value_drains, gate_sink (gated models); summary.json
`anatomy`; meta.json `anatomy`, `anatomy_min_queries`, `anatomy_sink_min_queries`.
"""
from __future__ import annotations

import torch

from ...core.events import GATE
from . import DECLARATION
from . import SINK_MIN_QUERIES as DECLARED_SINK_MIN_QUERIES
from ..base import Metric, rows_table, table
from ..massive.reduce import token_text

# Keys seen by fewer queries than this are left out of the token table and the choice of each
# head's top sink key (the last keys of a causal sequence: noisy scores).
MIN_QUERIES = 16
# A secondary sink must be seen by this many queries: fewer read high from recency alone. On the
# real models (benchmarks/anatomy_min_queries.py, T = 1024, scores against 512 queries) a key's
# score over its first 128 queries is a median 3.6x its 512-query score (17x over 16); of the
# cells above epsilon with 16 queries 13% (SmolLM2: 15 of 114) and none (Gemma 3: 0 of 2) stay
# above it with 512, with 128 queries 52% (15 of 29) and no cell on Gemma 3.
SINK_MIN_QUERIES = DECLARED_SINK_MIN_QUERIES
TOP_TOKENS = 20         # rows of received_by_token.csv per layer (and for layer -1)
SUMMARY_TOKENS = 5      # summary.json anatomy.top_sink_tokens: the first rows of layer -1
ALL_LAYERS = -1         # received_by_token rows pooled over every attention layer


class Anatomy(Metric):
    declaration = DECLARATION     # its tables are written only when its option is on

    def setup(self) -> None:
        layout, options = self.layout, self.options
        vocab_size, sequences = self.context.vocab_size, self.context.sequences
        self.enabled = bool(getattr(options, self.OPTION))
        # layer -> (batch, "gate" | "attention", value): the event of a layer that fired first in a
        # forward pass, until the other one of the same batch pairs with it (keep_gate / update).
        self._waiting: dict[int, tuple] = {}
        if self.enabled:
            # Imported here: probe.metrics.anatomy.received needs the attention back-end (transformers), and
            # reports/ reads this module's TABLES without loading a model library.
            from ..token_index import TokenIndex
            from .stats import EPSILON, AnatomyStats

            if not vocab_size:
                raise ValueError("sink anatomy needs the vocabulary size (vocab_size=)")
            from .sequences import SequenceAnatomy

            index = TokenIndex.of(self.context.token_ids, vocab_size)      # the by-token tables' rows
            self.stats = {i: AnatomyStats(i, layout.num_heads, vocab_size, epsilon=EPSILON,
                                          min_queries=MIN_QUERIES, sink_min_queries=SINK_MIN_QUERIES,
                                          index=index)
                          for i in layout.attention_layers}
            self.column = {layer: a for a, layer in enumerate(layout.attention_layers)}
            # The per-sequence values behind the intervals (per_sequence.csv, sequences.py).
            self.sequences = SequenceAnatomy(len(self.column), layout.num_heads, sequences)

    def listens(self, event: str) -> bool:
        return self.enabled and (event != GATE or self.layout.gated)

    def keep_gate(self, layer, g, b) -> None:                                   # (B, T, H, Dg)
        if layer in self.stats:
            self._pair(layer, b, "gate", g.float().mean(-1).transpose(1, 2))          # (B, H, T)

    def _pair(self, layer, b, kind: str, value) -> None:
        """Pair a layer's gate (B, H, T) with its sink attention ((B, H, T), valid) of the same
        batch, in whichever order the two events come; a value whose partner is from another
        batch (or never comes) is replaced, never paired across batches."""
        waiting = self._waiting.pop(layer, None)
        if waiting is None or waiting[0] is not b or waiting[1] == kind:
            self._waiting[layer] = (b, kind, value)
            return
        gate, (attention, valid) = (value, waiting[2]) if kind == "gate" else (waiting[2], value)
        self.stats[layer].update_gate(attention, gate.to(attention.device), valid)

    def update(self, layer, query, b, *, key, value, out, lse, mask, scale, softcap=None) -> None:
        """query (B, H, T, D), key / value (B, KV, S, D), out (B, H, T, D), lse (B, H, T)."""
        from .received import key_probability, shared_received_attention, top_keys, value_drains

        stats = self.stats.get(layer)
        if stats is None:
            return
        stats = stats.follow(query.device)
        valid = None if b.all_valid else b.valid.to(query.device)
        received = shared_received_attention(b, query, key, lse, mask, scale, softcap)
        secondary = stats.update(received, b.input_ids, b.seq_index)                  # (B,)
        self.sequences.follow(query.device).update(self.column[layer], received, secondary, b.seq_index)
        keys = top_keys(received, 1, min_queries=stats.min_queries)              # (B, H, 1)
        p = key_probability(query, key, lse, keys, mask, scale, softcap=softcap)  # (B, H, T, 1)
        if value is not None:
            stats.update_drains(value_drains(value, out, p, keys, valid=valid), valid)
        if self.layout.gated:
            self._pair(layer, b, "attention", (p.sum(-1), valid))                  # (B, H, T)

    def reducers(self) -> list:
        return [*super().reducers(), self.sequences] if self.enabled else []

    def frames(self, done) -> dict:
        if not self.enabled:
            return {}
        tables = {t: [] for t in self.TABLES}
        text = {}

        def token(t: int) -> str:
            if t not in text:
                text[t] = token_text(done.tokenizer, t)
            return text[t]

        def token_table(layer: int, rows: list[dict]) -> list[dict]:
            return [{"model": done.name, "layer": layer, "rank": rank, "token_id": r["token"],
                     "token": token(r["token"]), "cells": r["cells"], "score": r["score"],
                     "sink_share": r["sink_share"]} for rank, r in enumerate(rows, start=1)]

        by_position = {c: [] for c in self.TABLES["received_by_position"]}
        for layer, st in sorted(self.stats.items()):
            where = {"model": done.name, "layer": layer}
            columns = st.position_columns()
            n = len(columns["head"])
            for c, values in {"model": [done.name] * n, "layer": [layer] * n, **columns}.items():
                by_position[c] += values
            tables["received_by_token"] += token_table(layer, st.token_rows(TOP_TOKENS))
            tables["secondary_sinks"] += [
                {**where, "head": c["head"], "sequence": c["sequence"], "position": c["position"],
                 "token_id": c["token"], "token": token(c["token"]), "score": c["score"]}
                for c in st.secondary_sinks()]
            tables["value_drains"] += [{**where, **row} for row in st.drain_rows()]
            if self.layout.gated:
                tables["gate_sink"] += [{**where, **row} for row in st.gate_rows()]
        tables["received_by_token"] += token_table(ALL_LAYERS, self.pooled_token_rows(TOP_TOKENS))
        frames = {t: rows_table(rows, list(self.TABLES[t])) for t, rows in tables.items()}
        if by_position["head"]:
            frames["received_by_position"] = table(by_position)
        return frames

    def summarise(self, a, layers, done) -> dict:
        if not self.enabled:
            return {}
        from ...intervals import SequenceValues, anatomy_intervals

        epsilon = next(iter(self.stats.values())).epsilon if self.stats else None
        # Key 0's score and sink rate, and the secondary sinks' interval, from per_sequence.csv's
        # rows (probe/intervals/): the numbers the report's key-0 table shows.
        values = done.derived_from("sequence_values", a.tables.get("per_sequence"), SequenceValues.from_frame)
        key0 = anatomy_intervals(values, done.resamples, epsilon) if epsilon is not None else {}
        return {"anatomy": {"epsilon": epsilon,
                            "secondary_sinks": sum(int(st.secondary_cells.sum()) for st in self.stats.values()),
                            **key0, "top_sink_tokens": self.top_tokens(done.tokenizer)}}

    def pooled_token_rows(self, k: int | None) -> list[dict]:
        """The one definition of a token's received attention over a whole model: the mean
        importance score of its cells over every attention layer and head (cells seen by at
        least MIN_QUERIES queries), the k highest, ties by id. received_by_token.csv's layer -1
        rows, summary.json's top_sink_tokens and the report's token table all read this.
        Rows: token (id), cells (over layers), score, sink_share."""
        if not self.stats:
            return []
        st = next(iter(self.stats.values()))
        score = sum(s.token_score for s in self.stats.values())                   # (U,) rows of st.index
        cells = sum(s.token_cells for s in self.stats.values())                   # (U,) cell-layers
        sinks = sum(s.token_sinks for s in self.stats.values())                   # (U,)
        seen = (cells > 0).nonzero()[:, 0]
        mean = (score[seen] / (cells[seen].double() * st.heads)).tolist()
        # Rows are in increasing token id order: ties by row are ties by id.
        order = sorted(range(len(seen)), key=lambda i: (-mean[i], int(seen[i])))[:k]
        return [{"token": st.index.id(seen[i]), "cells": int(cells[seen[i]]), "score": mean[i],
                 "sink_share": int(sinks[seen[i]]) / (int(cells[seen[i]]) * st.heads)} for i in order]

    def top_tokens(self, tokenizer, k: int = SUMMARY_TOKENS) -> list[dict]:
        """summary.json's top_sink_tokens: the first k rows of pooled_token_rows."""
        return [{"token": token_text(tokenizer, r["token"]), "token_id": r["token"], "score": r["score"]}
                for r in self.pooled_token_rows(k)]

    def meta(self, done) -> dict:
        if not self.enabled:
            return {}
        return {"anatomy": True, "anatomy_min_queries": MIN_QUERIES,
                "anatomy_sink_min_queries": SINK_MIN_QUERIES}
