"""SequenceValues.from_frame (probe/intervals/stats.py): every row of per_sequence.csv lands in its
cell of the arrays, and no cell holds a value that no row gave; on real analyses that write every
quantity (a gate, the exact mean-gate control, sink anatomy, a hybrid's layers, sliding windows)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import probe
from probe.data.corpus import sample_texts
from probe.intervals import SequenceValues
from probe.intervals.stats import SITES

ARMS = probe.shipped_checkpoints()
RUNS = {
    "gated, exact control": dict(model="elementwise", exact_control=True),
    "hybrid, anatomy": dict(model="hybrid-gated", anatomy=True),
    "baseline, windows": dict(model="none", max_length=48, stride=32, per_document=True),
}
# What each run must write for this test to read it (else it checks less than it says).
WRITES = {"gated, exact control": ("gate_sum", "mean_gate"), "hybrid, anatomy": ("key0_score", "gate_low"),
          "baseline, windows": ("document",)}


@pytest.fixture(scope="module", params=list(RUNS))
def table(request):
    spec = dict(RUNS[request.param])
    a = probe.analyze(ARMS / spec.pop("model"), texts=sample_texts()[:3], seq_len=64, max_sequences=6,
                      bos="prepend", progress=False, resamples=0, **spec)
    return request.param, a.per_sequence


def cell(v: SequenceValues, row) -> list[tuple[np.ndarray, tuple]]:
    """The cells of v that a per_sequence.csv row fills (sparsity_n: one per threshold of its variant)."""
    s, q, key = int(row.sequence), row.quantity, row.key
    a = v.attention_layers.index(int(row.layer)) if int(row.layer) in v.attention_layers else None
    h = int(row.head)
    by_head = {"f_attn_sum": v.f_sum, "gate_sum": v.gate_sum, "gate_n": v.gate_n, "gate_low": v.gate_low,
               "key0_score": v.key0_score}
    by_layer = {"f_attn_n": v.f_n, "f_attn_uniform": v.f_uniform, "key0_n": v.key0_n, "secondary_sinks": v.secondary}
    if q in by_head:
        return [(by_head[q], (s, a, h))]
    if q in by_layer:
        return [(by_layer[q], (s, a))]
    if q == "sparsity_below":
        return [(v.sparsity[(key, float(row.threshold))][0], (s, a))]
    if q == "sparsity_n":
        return [(below_n[1], (s, a)) for (variant, _), below_n in v.sparsity.items() if variant == key]
    if q == "m_act":
        return [(v.m_max, (s, v.layers.index(int(row.layer)), SITES.index(key)))]
    return [({"nll": v.nll, "nll_n": v.nll_n, "document": v.documents}[q], (s,))]


def test_every_row_lands_in_its_cell_and_nothing_else_is_filled(table):
    name, table = table
    assert set(WRITES[name]) <= set(table["quantity"]) | set(table["key"])
    v = SequenceValues.from_frame(table)
    assert v.sequences == int(table["sequence"].max()) + 1
    filled = {}
    for row in table.itertuples(index=False):
        for array, at in cell(v, row):
            got = array[at]
            assert got == row.value or (math.isnan(got) and math.isnan(row.value)), (row, got)
            filled.setdefault(id(array), set()).add(at)
    arrays = [v.f_sum, v.f_n, v.f_uniform, v.gate_sum, v.gate_n, v.gate_low, v.m_max, v.key0_score, v.key0_n,
              v.secondary, *(a for pair in v.sparsity.values() for a in pair)]
    for array in (a for a in arrays if a is not None):
        given = filled.get(id(array), set())
        extra = [at for at in zip(*np.nonzero(~np.isnan(array))) if tuple(int(i) for i in at) not in given]
        assert not extra, extra[:3]
    # the quantities each run writes reached the arrays they feed
    quantities = set(table["quantity"])
    assert ("gate_sum" in quantities) == (v.gate_sum is not None)
    assert ("key0_score" in quantities) == (v.key0_score is not None)
    assert ("document" in quantities) == (v.documents is not None)
    assert {variant for variant, _ in v.sparsity} == set(table.query("quantity == 'sparsity_below'")["key"])
