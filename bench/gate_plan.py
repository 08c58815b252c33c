"""Which tests the gate (``make test``) leaves to the full tier (``make test-full``) to stay within
its budget: writes ``tests/full_tier.txt``, the list ``tests/conftest.py`` marks ``full``, from
the measured seconds of a gate run.

The rule, per test function (all the cases of one parametrized test):

* the gate keeps its cheapest case, and every other case under :data:`SMALL` seconds;
* a function whose cheapest case takes more than :data:`LIMIT` seconds goes to the full tier
  whole, unless its name holds one of :data:`KEEP_NAMES` (the parameter checks: its cheapest
  case stays);
* the tests of :data:`PROOFS` stay in the gate whatever they cost: the proofs against real
  peers, of the defect of one QP stopping others, of the benchmark suite, of the fuzzers, of the
  whole endpoint (every opcode, a lossy link) and of a board's build folder;
* a test the file does not name stays in the gate; cases already marked ``full`` in their test
  file stay there.

The seconds come from the run's JUnit report (``make test`` writes ``build/bench/pytest.xml``),
less the builds the run made (the build log of :mod:`rocegen.gateware.costlog`,
``build/bench/builds.jsonl``: elaborations and Verilator compiles belong to a cold run, not to
the test). The tests the list names already are not in a later gate's report: they stay in
the list, and the tests the report measured are planned again. To reconsider a listed test,
delete its line and plan from the next gate run's report (a report of ``make test-full`` would
not do: it holds the cases marked ``full`` in their files too, which the plan cannot tell
apart):

    .venv/bin/python -m bench.gate_plan --junitxml build/bench/pytest.xml \\
        --builds build/bench/builds.jsonl [--write]

Prints the plan (the gate's measured seconds summed over tests, before and after) and, with
``--write``, writes ``tests/full_tier.txt``.
"""

import argparse
from collections import defaultdict
from pathlib import Path

from bench.bench_test_time import parse_junit
from bench.ci_time import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "tests" / "full_tier.txt"
#: seconds: a case under this stays in the gate beside its function's cheapest one
SMALL = 1.0
#: seconds: a function whose cheapest case takes longer goes to the full tier (but PROOFS)
LIMIT = 6.0
#: test functions that keep all their gate cases, whatever they cost
PROOFS = (
    "tests/test_rxe.py::",                        # Linux's RDMA stack as the peer
    "tests/test_interop.py::",                    # Wireshark decodes every frame
    "tests/test_cocotb_isolation.py::",           # one QP's error never stops the others
    "tests/test_host_agent.py::test_qp_error_leaves_the_other_qps_working",
    "tests/test_host_agent.py::test_open_traffic_check_close_reopen",
    "tests/test_bench_quick.py::",                # the benchmark suite and its report
    "tests/test_cocotb_roce_faults.py::test_endpoint_faults[onchip-64-receive_fuzz]",
    "tests/unit/sim/test_fuzz.py::test_safety_rule",
    # the endpoint's every opcode, length and PMTU, and its recovery over a lossy link
    "tests/test_cocotb_roce.py::test_endpoint[onchip-64-every_opcode_length_and_pmtu]",
    "tests/test_cocotb_roce_faults.py::test_endpoint_faults[onchip-64-lossy_link]",
    # a board's build folder and its lint with the vendor IP stubs (the folder is kept warm)
    "tests/test_board_lint.py::test_build_folder[vcu118]",
    "tests/test_board_lint.py::test_verilator_lint[vcu118]",
    # the 10/25G stack (XGMII MAC) with a host conversation
    "tests/test_cocotb_xgmii_stack.py::test_xgmii_stack_host_conversation[1]",
    # the architecture: the gateware and the wire constants import downwards only (a second
    # or so each)
    "tests/unit/test_layers.py::test_layers_import_downwards_only[gateware]",
    "tests/unit/test_layers.py::test_layers_import_downwards_only[wire]",
    # the stack's cut-through paths, one case each: receive against the model (at 256 bits,
    # where UDP receive passes one-beat datagrams in their cycle), receive without a store (the
    # endpoint's), and the transmit path's invariant (steady sources never starve the MAC)
    "tests/unit/net/test_stack_cut_through.py::test_cut_through_port_against_model[no-store-256]",
    "tests/unit/net/test_stack_cut_through.py::"
    "test_without_a_store_nothing_waits_for_a_dropped_datagram[64]",
    "tests/unit/net/test_stack_tx_cut.py::test_steady_sources_never_starve_the_mac[cut-64]",
)
#: test functions whose name holds one of these keep their cheapest case whatever it costs: the
#: checks of every parameter's precise error
KEEP_NAMES = ("parameter",)


def full_tier(path=LIST):
    """The node ids of the list ``path``: one per line, ``#`` starts a comment line."""
    return {line.strip() for line in Path(path).read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


def _function(nodeid):
    return nodeid.split("[", 1)[0]


def build_seconds(path):
    """Seconds of builds per test (node id) in a build log."""
    out = defaultdict(float)
    for entry in read_jsonl(path) if path else []:
        if entry.get("test"):
            out[entry["test"]] += entry.get("seconds", 0) + entry.get("wait_seconds", 0)
    return out


def is_proof(nodeid):
    """``nodeid`` is one of :data:`PROOFS` (a file's test, a function's case, or a case)."""
    return any(nodeid == p or (p.endswith("::") and nodeid.startswith(p))
               or nodeid.startswith(p + "[") for p in PROOFS)


def plan(seconds):
    """``(moved, kept)``: the node ids the gate leaves to the full tier, and the seconds of
    each test it keeps, from ``seconds`` (node id -> measured seconds)."""
    by_function = defaultdict(dict)
    for nodeid, s in seconds.items():
        by_function[_function(nodeid)][nodeid] = s
    moved, kept = [], {}
    for cases in by_function.values():
        keep = {n for n in cases if is_proof(n)}
        rest = {n: s for n, s in cases.items() if n not in keep}
        if rest and not keep:
            cheapest = min(rest, key=lambda n: (rest[n], n))
            named = any(k in _function(cheapest).rsplit("::", 1)[-1] for k in KEEP_NAMES)
            if rest[cheapest] <= LIMIT or named:
                keep.add(cheapest)
        keep |= {n for n, s in rest.items() if s < SMALL}
        for n, s in cases.items():
            if n in keep:
                kept[n] = s
            else:
                moved.append(n)
    return sorted(moved), kept


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--junitxml", required=True, help="JUnit report of a gate run")
    ap.add_argument("--builds", help="build log of the same run (builds.jsonl)")
    ap.add_argument("--write", action="store_true", help="write the list (tests/full_tier.txt)")
    args = ap.parse_args(argv)
    tests, _ = parse_junit(args.junitxml)
    builds = build_seconds(args.builds)
    seconds = {n: max(0.0, s - builds.get(n, 0.0)) for n, s in tests.items()}
    moved, kept = plan(seconds)
    print(f"gate before: {len(seconds)} tests, {sum(seconds.values()):.0f} s summed over tests")
    print(f"gate after:  {len(kept)} tests, {sum(kept.values()):.0f} s; "
          f"{len(moved)} tests ({sum(seconds[n] for n in moved):.0f} s) to the full tier")
    for n, s in sorted(kept.items(), key=lambda x: -x[1])[:15]:
        print(f"  {s:7.1f} s  {n}")
    if args.write:
        earlier = full_tier(LIST) if LIST.exists() else set()
        moved = sorted(set(moved) | {n for n in earlier if n not in seconds})
        LIST.write_text(
            "# Tests the gate (make test) leaves to the full tier (make test-full): written by\n"
            "# bench/gate_plan.py from the measured seconds of a gate run (see its rule);\n"
            "# tests/conftest.py marks each `full`. One pytest node id per line.\n"
            + "".join(n + "\n" for n in moved))
        print(f"wrote {LIST}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
