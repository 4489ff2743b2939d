# The two commands a new user needs: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: setup demo test bench clean

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

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/overhead.py

clean:
	rm -rf demo-out runs .pytest_cache
