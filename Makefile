# Everything a newcomer needs: `make demo` and `make test` set up .venv on first use.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all zoo bench fuzz lint clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "needs $(PYTHON) (torch==2.13.0 ships CPU wheels for Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(PY) -m dycl_iree demo

# One pytest worker per core; a test file runs whole on one worker, so its module fixtures export once.
# `make test` (and CI) leave out the tests marked slow (README names them: the early-exit ResNet-50's
# and the RNN-T beam search's exports among them), minutes with a cold compile cache. `make test-all`
# runs them too.
test: setup
	$(PY) -m pytest -q -n auto --dist loadfile -m "not slow"

test-all: setup
	$(PY) -m pytest -q -n auto --dist loadfile

zoo: setup
	DYCL_ZOO=full $(PY) -m pytest -q tests/test_zoo_export.py tests/test_tacotron2.py tests/test_rnnt_beam_search.py
	$(PY) benchmarks/zoo_table.py

# The zoo, then the deployment-size models (models/imagenet.py) with one thread and with two.
bench: setup
	$(PY) -m dycl_iree bench --out bench-out $(if $(DEVICE),--device $(DEVICE))
	$(PY) -m dycl_iree bench --models realistic --threads 1 --out bench-out/realistic-1-thread $(if $(DEVICE),--device $(DEVICE))
	$(PY) -m dycl_iree bench --models realistic --threads 2 --out bench-out/realistic-2-threads $(if $(DEVICE),--device $(DEVICE))

# The differential fuzzer: N random dynamic programs from seed SEED, both hosts against PyTorch.
N ?= 100
SEED ?= 0
fuzz: setup
	nice -n 10 $(PY) -m tests.fuzz run --count $(N) --seed $(SEED) --out fuzz-out

lint: setup
	$(PY) -m ruff check dycl_iree host_runtime models tests

clean:
	rm -rf $(VENV) bench-out .pytest_cache
