# The two commands a new user needs: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: setup demo test bench clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PIP) install -q torch==2.13.0

setup: $(PY)
	$(PIP) install -q -e '.[test]'

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/overhead.py

clean:
	rm -rf demo-out runs .pytest_cache
