"""probe/metrics/: each metric writes the tables and summary keys it declares, and the
run-directory schema is theirs."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import probe
from probe import metrics
from probe.events import EVENTS
from probe.results import Analysis
from samples import TEXT


@pytest.fixture(scope="module")
def analysis(checkpoint):
    groups = {"the": [" the"]}
    return probe.analyze(checkpoint("official_headwise"), texts=[TEXT[:300]], seq_len=32, batch_size=2,
                         max_sequences=2, display_len=4, progress=False, token_groups=groups)


def test_every_metric_writes_the_columns_it_declares(analysis):
    for metric in metrics.METRICS:
        for table, columns in metric.TABLES.items():
            if table in metrics.OPTIONAL_TABLES:       # off by default: tests/test_metrics_anatomy.py
                assert not len(getattr(analysis, table)), table
                continue
            frame = getattr(analysis, table)
            assert len(frame), table
            assert list(frame.columns) == list(columns), table


def test_the_summary_keys_are_the_metrics_in_order(analysis):
    keys = [k for m in metrics.SUMMARY_ORDER if not getattr(m, "OPTION", None) for k in m.SUMMARY_KEYS]
    written = [k for k in analysis.summary if k in keys]
    assert written == keys
    assert set(keys) | {"model", "gated", "gate_layout", "num_layers", "num_heads", "attention_layers",
                        "tokens", "sequences", "layers"} == set(analysis.summary)


def test_the_schema_holds_every_table_of_an_analysis():
    tables = {f.name for f in dataclasses.fields(Analysis) if f.name not in ("meta", "summary")}
    assert tables == set(metrics.TABLES) - {"inference", "trajectory"}
    from reports.schema import TABLES

    assert TABLES is metrics.TABLES


def test_the_schema_declares_exactly_the_metrics_tables_and_the_others():
    """probe/schema.py declares every table once (torch-free, so that reports/ reads runs
    without torch); each metric takes its own from there. A metric whose tables are not there,
    or a table there that nothing writes, fails here."""
    from probe import schema
    from probe.events import SITES
    from probe.token_types import BUILTIN

    declared = {t: c for m in metrics.METRICS for t, c in m.TABLES.items()}
    assert list(schema.TABLES) == [*declared, *schema.OTHER_TABLES]
    assert schema.TABLES == {**declared, **schema.OTHER_TABLES}
    assert metrics.TABLES is schema.TABLES
    # The values that key the rows: the events' sites, the token classifier's types.
    assert SITES == schema.SITES and BUILTIN is schema.TOKEN_TYPES


def test_metrics_subscribe_to_known_events_only(loaded):
    lm = loaded("official_headwise")
    cap = probe.Capture(lm.model, lm.layout)
    assert set(cap._subscribers) <= set(EVENTS)
    with pytest.raises(ValueError, match="unknown event"):
        cap.on("attn.hook_pattern", lambda *a: None)
    seen = []
    cap.on("hook_resid_post", lambda layer, x, b: seen.append((layer, tuple(x.shape))))
    ids = torch.randint(3, 100, (1, 8))
    with torch.no_grad(), cap, cap.batch(ids):
        lm.model(input_ids=ids, use_cache=False)
    assert [layer for layer, _ in seen] == [p.index for p in lm.layout.layers]
    assert all(shape[:2] == (1, 8) for _, shape in seen)
