"""probe/metrics/: each metric writes the tables and summary keys it declares, and the
run-directory schema is theirs."""
from __future__ import annotations

import pytest
import torch

import probe
from probe import metrics
from probe.core.events import EVENTS
from tests.samples import TEXT


@pytest.fixture(scope="module")
def analysis(checkpoint):
    groups = {"the": [" the"]}
    return probe.analyze(checkpoint("official_headwise"), texts=[TEXT[:300]], seq_len=32, batch_size=2,
                         max_sequences=2, display_len=4, progress=False, token_groups=groups)


def test_every_metric_writes_the_columns_it_declares(analysis):
    for d in metrics.DECLARATIONS:
        for table, columns in d.tables.items():
            if d.option:                               # off by default: tests/test_metrics_anatomy.py
                assert not len(getattr(analysis, table)), table
                continue
            frame = getattr(analysis, table)
            assert len(frame), table
            assert list(frame.columns) == list(columns), table


def test_the_summary_keys_are_the_metrics_in_order(analysis):
    keys = [k for d in metrics.summary_order() if not d.option for k in d.summary_keys]
    written = [k for k in analysis.summary if k in keys]
    assert written == keys
    assert set(keys) | {"model", "gated", "gate_layout", "num_layers", "num_heads", "attention_layers",
                        "tokens", "sequences", "layers"} == set(analysis.summary)
    assert {k for d in metrics.DECLARATIONS if d.summary_keys for k in d.summary_keys} >= set(keys)


def test_every_layer_entry_holds_the_declared_layer_keys_then_the_heads(analysis):
    declared = [k for d in sorted(metrics.DECLARATIONS, key=lambda d: d.layer_order) for k in d.layer_keys]
    for entry in analysis.summary["layers"]:           # then the intervals' *_lo / *_hi (per_sequence)
        keys = ["layer", "layer_type", *declared, "heads"]
        assert list(entry)[:len(keys)] == keys
        assert all(k.endswith(("_lo", "_hi")) for k in list(entry)[len(keys):])


def test_every_declared_meta_key_is_written(analysis):
    """meta.json's metric keys are the declarations' meta_keys (the anatomy's only with its option)."""
    for d in metrics.DECLARATIONS:
        assert (set(d.meta_keys) <= set(analysis.meta)) != bool(d.option), d.name
        if d.option:
            assert not set(d.meta_keys) & set(analysis.meta), d.name


def test_the_bus_subscribes_what_each_metric_listens_to(loaded):
    """Every declared event, in the metrics' order, unless the metric declines it in this pass:
    the anatomy without its option, the gate metrics of an ungated model."""
    from probe.core.events import ATTENTION, GATE

    gated = probe.Capture(loaded("official_headwise").model, loaded("official_headwise").layout)
    assert not gated.wants(ATTENTION) and gated.wants(GATE)
    lm = loaded("official_baseline")
    plain = probe.Capture(lm.model, lm.layout)
    assert not plain.wants(GATE) and not plain.wants(ATTENTION)
    on = probe.Capture(lm.model, lm.layout, anatomy=True, vocab_size=256)
    assert on.wants(ATTENTION) and not on.wants(GATE)       # the gate-sink table needs a gate


def test_declarations_are_complete_and_name_their_events():
    """Each declaration names a Metric subclass whose methods take the events it declares."""
    for d in metrics.DECLARATIONS:
        cls = metrics.metric_class(d)
        assert cls.declaration is d and cls.name == d.name and cls.TABLES is d.tables
        assert d.events and set(d.events) <= set(EVENTS), d.name
        assert d.summary_order is None or d.summary_keys, d.name
        for table, columns in d.counts.items():
            assert set(columns) <= {c for c, kind in d.tables[table].items() if kind == "float"}, d.name
    for field in ("order", "summary_order"):
        orders = [getattr(d, field) for d in metrics.DECLARATIONS if getattr(d, field) is not None]
        assert len(orders) == len(set(orders)), field
    assert [d.order for d in metrics.DECLARATIONS] == sorted(d.order for d in metrics.DECLARATIONS)


def test_the_schema_is_the_declarations_and_the_others():
    """probe/results/schema.py joins the declarations' tables (torch-free, so that reports/ reads runs
    without torch) with those other parts of probe write; optional tables and counts come from
    the declarations too."""
    from probe.results import schema
    from probe.core.events import SITES
    from probe.data.token_types import BUILTIN

    declared = {t: c for d in metrics.DECLARATIONS for t, c in d.tables.items()}
    assert list(schema.TABLES) == [*declared, *schema.OTHER_TABLES]
    assert schema.OPTIONAL_TABLES == {**{t: d.option for d in (metrics.BY_NAME["anatomy"], metrics.BY_NAME["gdn"])
                                         for t in d.tables},
                                      "ablations": "ablate", "ablation_positions": "ablate",
                                      "ablation_sequences": "ablate"}   # probe/run/ablations.py
    assert schema.COUNTS["gate_hist"] == ("count",)
    # The values that key the rows: the events' sites, the token classifier's types.
    assert SITES == schema.SITES and BUILTIN is schema.TOKEN_TYPES


def test_a_misspelt_context_keyword_is_refused(loaded):
    lm = loaded("official_headwise")
    with pytest.raises(TypeError, match="sequence"):
        metrics.build_metrics(lm.layout, probe.AnalysisOptions(), sequence=3)


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


def test_the_metric_lists_name_every_declared_metric():
    """probe/metrics/__init__.py's docstring and docs/layout.md list the metrics by hand: each list
    names every declaration, in the declarations' order, and nothing else (issue 32)."""
    import re
    from pathlib import Path

    import probe.metrics

    names = [d.name for d in probe.metrics.DECLARATIONS]
    assert re.findall(r"^    (\w+)/ ", probe.metrics.__doc__, re.M) == names
    layout = (Path(__file__).resolve().parents[2] / "docs" / "layout.md").read_text(encoding="utf-8")
    listed = re.search(r"metrics/\s+one package per metric \(([^)]*)\)", layout).group(1)
    assert [n.strip() for n in listed.split(",")] == names


def test_a_metric_declared_twice_is_refused_naming_both():
    """A metric package copied under another folder (same name, or the same order) is refused in
    one line naming both packages (issue 32), never a silent second registration."""
    import dataclasses

    import pytest

    from probe.core.registry import DuplicateRegistration
    from probe.metrics import DECLARATIONS, registered

    gates = next(d for d in DECLARATIONS if d.name == "gates")
    places = [(d, f"probe/metrics/{d.name}/__init__.py") for d in DECLARATIONS]
    with pytest.raises(DuplicateRegistration, match=r"^metric 'gates' is registered twice: in probe/metrics/gates/"
                                                    r"__init__.py and in probe/metrics/gates_copy/__init__.py$"):
        registered([*places, (gates, "probe/metrics/gates_copy/__init__.py")])
    other = dataclasses.replace(gates, name="gates_v2")
    with pytest.raises(DuplicateRegistration, match="metric order"):
        registered([*places, (other, "probe/metrics/gates_v2/__init__.py")])
    assert registered(places) == DECLARATIONS
