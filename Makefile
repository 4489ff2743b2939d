# The two commands a new user needs: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: setup demo test test-kernels gold bench clean

# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0

# The package itself (editable, with its test extras): once, and again only when pyproject.toml
# changes, not on every make call.
INSTALLED := $(VENV)/.probe-installed

# PYTHONWARNINGS=ignore: setuptools prints an "Editable installation" notice (a warning block
# that reads like trouble) for every editable install, whatever editable_mode; errors still show.
EDITABLE := PYTHONWARNINGS=ignore $(PIP) install -q -e

$(INSTALLED): pyproject.toml | $(PY)
	$(EDITABLE) '.[test]'
	touch $@

setup: $(INSTALLED)

demo: setup
	$(PY) examples/demo.py

# Two test processes (pytest-xdist): 9.7 minutes instead of 15 on this project's 2-core machine.
# More cores: make test TEST_WORKERS=4 (each process builds its own session fixtures and loads
# the real models once, ~1 GB each).
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS)

# The numbers that are compared with stored or independent ones (the gold runs, the real-model
# tier) again on the other ATen CPU kernels: scalar (default), and AVX2 where the CPU has
# AVX-512 (then AVX-512 is what the suite ran). The tolerances must hold on any CPU.
# The GDN split's checks too: they compare with the float32 chunk kernel, whose rounding depends on
# these kernels (docs/gdn.md, "The reconstruction check").
KERNEL_TESTS := tests/run/test_pipeline_gold.py tests/reports/test_gold.py tests/test_real_models.py \
                tests/metrics/test_gdn.py
test-kernels: setup
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -p no:cacheprovider $(KERNEL_TESTS)
	@if grep -q avx512f /proc/cpuinfo 2>/dev/null; then \
	  echo "ATEN_CPU_CAPABILITY=avx2"; \
	  ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest -q -p no:cacheprovider $(KERNEL_TESTS); fi

# Rewrite the gold files after an intended change of numbers, of a report's text, or a new
# case: the run directories (tests/gold_runs/: only the files beyond the tolerances) and the
# report's tables and captions (tests/reports/gold/); review them with git diff (docs/gold.md).
gold: setup
	PROBE_REGENERATE_GOLD=1 $(PY) -m pytest -q tests/run/test_pipeline_gold.py tests/reports/test_gold.py

bench: setup
	$(PY) benchmarks/overhead.py

clean:
	rm -rf demo-out runs .pytest_cache
