"""Which path an analysis takes for its CPU metrics (probe/metrics/kernels.py `sized_for`, set by
probe.analyze from run/pipeline.py `activation_values`): the compiled kernels from MIN_VALUES
activation values on, the torch path below, with the same numbers either way."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import probe
from probe.metrics import kernels
from probe.run.pipeline import activation_values
from tests import tiny
from tests.samples import TEXT

ROOT = Path(__file__).resolve().parents[2]
UNEQUAL = [TEXT[:70], TEXT[:190], TEXT[:120]]           # per document: padded rows


def test_activation_values_are_tokens_times_hidden_size_times_layers(loaded):
    lm = loaded("qwen3")
    from probe.run.pipeline import dataset_for
    from probe.core.options import AnalysisOptions

    o = AnalysisOptions(seq_len=16, max_sequences=3, bos="none")
    dataset = dataset_for(None, [TEXT], lm.tokenizer, lm.model.config, o)
    tokens = sum(len(s) for s in dataset.sequences)
    assert tokens == 48
    config = lm.model.config
    assert activation_values(config, lm.layout, dataset) == tokens * config.hidden_size * len(lm.layout.layers)

    class NoHidden:
        pass
    assert activation_values(NoHidden(), lm.layout, dataset) is None    # unknown: the kernels


def _numbers(analysis) -> dict:
    frames = {k: v for k, v in vars(analysis).items() if isinstance(v, pd.DataFrame)}
    return {"frames": frames, "summary": analysis.summary}


def _assert_close(a, b, where=""):
    """Equal structure; floats within 1e-12 relative (the two paths sum float64 norms in
    another order), everything else equal."""
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-12, atol=0, obj=where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) and math.isnan(b)):
        assert a == pytest.approx(b, rel=1e-12, abs=0), where
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, where


@pytest.mark.parametrize("kind,options", [
    ("qwen3_next", dict(anatomy=True)),                 # gated hybrid, sink anatomy, padding
    ("llama", dict()),                                  # ungated: O carried to o_proj, padding
])
def test_the_torch_path_gives_the_kernels_numbers(checkpoint, monkeypatch, kind, options):
    """A small analysis (the torch path) against the same analysis with the kernels forced: the
    same tables and summary, counts exactly."""
    path = checkpoint(kind)

    def run():
        with tiny.single_thread():
            return probe.analyze(path, texts=UNEQUAL, per_document=True, seq_len=48, batch_size=3,
                                 max_sequences=None, progress=False, **options)

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # the truncated document's warning, twice
        calls = []
        real = kernels.scan_rows
        monkeypatch.setattr(kernels, "scan_rows", lambda *a: calls.append(1) or real(*a))
        small = run()
        assert not calls                                  # below MIN_VALUES: no compiled scan
        monkeypatch.setattr(kernels, "MIN_VALUES", 0)
        forced = run()
        assert calls                                      # the kernels, forced
    _assert_close(_numbers(small), _numbers(forced))


def test_a_small_analysis_never_loads_numba(tmp_path):
    """The quickstart's analysis (a tiny model, 8 x 128 tokens) runs without importing numba: a new
    process would pay ~0.5 s to load it for kernels that save milliseconds there."""
    code = ("import sys, probe\n"
            "from probe.data.corpus import sample_texts\n"
            "a = probe.analyze(probe.shipped_checkpoints() / 'elementwise', texts=sample_texts(), seq_len=128,"
            " max_sequences=8, bos='prepend', progress=False)\n"
            "assert len(a.massive) and len(a.sparsity) and a.meta['sequences'] == 8, a.meta\n"
            "print('numba' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
