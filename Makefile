# Everything runs in a local virtual environment made on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# `make peers` (and so test, bench) adds the test extras and the optional peers the tests and
# benchmarks compare against (never runtime dependencies); PEERS=0 leaves out the peers
PEERS  ?= 1
BACKENDS := numba cython python

.PHONY: all install peers setup run test test-fast check bench bench-compare clean

all: test

# fastpe and what it needs at run time, nothing else (make run, make check)
$(VENV)/.installed: pyproject.toml setup.py $(wildcard csrc/*.pyx csrc/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# editable install: builds the Cython extension in place (fatal if FASTPE_REQUIRE_EXT=1)
	$(PIP) install --quiet -e .
	touch $@

# the test extras, from the installed fastpe's metadata (no second build); remade whenever
# fastpe is, so `make run` then `make test` in one clone installs them
$(VENV)/.extras: $(VENV)/.installed
	$(PIP) install --quiet 'fastpe[test]'
	touch $@

# the optional peers; a peer that fails to install makes its tests skip, saying so
$(VENV)/.peers: $(VENV)/.extras
	$(PIP) install --quiet torch==2.13.0 || echo "torch not installed: its peer tests will skip"
	$(PIP) install --quiet --no-deps positional-encodings || echo "positional-encodings not installed: its benchmarks will skip"
	$(PIP) install --quiet transformers || echo "transformers not installed: HF parity tests will skip"
	$(PIP) install --quiet diffusers || echo "diffusers not installed: its timestep parity test will skip"
	# timm's rotary helpers need torch alone; --no-deps keeps torchvision (which timm pulls in) out
	$(PIP) install --quiet --no-deps timm || echo "timm not installed: its axial RoPE parity test will skip"
	# pandas: the calendar fields and Series inputs of fastpe.time checked against its own
	$(PIP) install --quiet pandas || echo "pandas not installed: its calendar parity tests will skip"
	touch $@

install: $(VENV)/.installed

peers: $(VENV)/.extras $(if $(filter 1,$(PEERS)),$(VENV)/.peers)

# everything the tests and benchmarks use
setup: peers

run: install
	$(VENV)/bin/fastpe table --d-model 512 --max-len 2048

# The whole suite once with numba as the default, every backend crossed by the tests'
# backend fixture; then once with each other backend as the default, the fixture taking just
# that one (FASTPE_TEST_BACKENDS=default).  The install tests (marked slow) build throwaway
# environments and need running only once.  Each run spreads its test files over
# TEST_WORKERS processes (pytest-xdist; 0 or 1: one process), each file whole in one process
# and in its order (--dist loadfile: a document's blocks build on each other).  Two by
# default: much of a test's time is one Python thread (hypothesis, child processes), and
# each process imports torch and transformers, so more would mostly cost memory.
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
test: peers
	FASTPE_BACKEND=numba $(PY) -m pytest -q $(XDIST)
	for b in cython python; do \
	  FASTPE_BACKEND=$$b FASTPE_TEST_BACKENDS=default $(PY) -m pytest -q -m "not slow" $(XDIST) || exit 1; \
	done

test-fast: peers
	$(PY) -m pytest -q -m "not slow" $(XDIST)

check: install
	$(VENV)/bin/fastpe check

BENCH_DIR  ?= .benchmarks
BENCH_ARGS ?=

# bench/ is outside the default test paths.  `make bench` records a run, its Markdown table
# and the baseline, draws the scaling plot (docs/img/scaling.png and its numbers beside it),
# then rewrites the tables of docs/benchmarks.md and the summary in README.md between their
# bench:table / bench:summary markers (failing, writing neither, if a marker pair is missing);
# `make bench-compare` reruns and fails when a fastpe median is more than 10% slower than the
# baseline (recording one if there is none).
.PHONY: bench-plot
BENCH_PLOT = $(PY) bench/scaling.py -o docs/img/scaling.png
bench: peers
	mkdir -p $(BENCH_DIR)
	$(PY) -m pytest bench/ -q --benchmark-json=$(BENCH_DIR)/last.json --benchmark-autosave --benchmark-storage=$(BENCH_DIR) $(BENCH_ARGS)
	$(PY) bench/report.py $(BENCH_DIR)/last.json -q -o $(BENCH_DIR)/table.md
	cp $(BENCH_DIR)/last.json $(BENCH_DIR)/baseline.json
	$(BENCH_PLOT)
	$(PY) bench/report.py $(BENCH_DIR)/last.json -q --docs

bench-plot: peers
	$(BENCH_PLOT)

bench-compare: peers
	$(PY) bench/compare.py --run $(BENCH_DIR)/current.json --baseline $(BENCH_DIR)/baseline.json $(BENCH_ARGS)

clean:
	rm -rf build dist *.egg-info fastpe/_backends/cython/_ext*.so csrc/*.c .pytest_cache .benchmarks
	find . -name __pycache__ -prune -exec rm -rf {} +
