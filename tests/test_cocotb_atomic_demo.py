"""``rocegen sim demo --peer-op FETCH_ADD`` (the host NIC model's contended counter on the
endpoint built with atomics, in Verilator) and ``--op FETCH_ADD`` (the endpoint's traffic
generator's atomics on a counter in the host NIC model's memory), at W = 64 on the responder's
build that :mod:`tests.test_cocotb_responder` uses: the examples of the help, as typed."""

import json
import re

import pytest

from rocegen.cli import main
from tests.test_cocotb_read_demo import example


def test_atomic_demo(tmp_path, capsys):
    argv = example(capsys, "rocegen sim demo --peer-op FETCH_ADD")
    assert argv[argv.index("--qps") + 1] == "4" and argv[argv.index("--count") + 1] == "32"
    assert main([*argv, "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    r = json.loads((tmp_path / "roce_w64_responder.json").read_text())[0]
    assert r["kind"] == "atomic" and r["opcode"] == "FETCH_ADD"
    # 4 QPs x 32 FETCH_ADDs of 1, each executed once, each answered once (a perfect link)
    assert (r["ops"], r["atomic_acks"], r["packets"]) == (128, 128, 128), r
    assert (r["final"] - r["initial"]) % 2**64 == 128 and r["distinct"] == 128, r
    # the requests' time on the 10 Gb/s line: at least 86-byte frames plus 24 bytes of
    # preamble, FCS and gap each, 13.75 cycles of 156.25 MHz
    assert r["line_cycles"] >= 128 * 13.75 and r["ops_per_s"] == \
        pytest.approx(128 / (r["line_cycles"] / (r["clock_mhz"] * 1e6)))
    assert "ops: 128 atomics executed (128 ATOMIC_ACKNOWLEDGEs" in text, text
    assert re.search(r"counter: 0x0 -> 0x80 \(final value 128; expected 128\), 128 distinct "
                     r"values returned, consecutive from 0x0", text), text
    assert re.search(r"cycles: \d+ \([\d.]+ us\) .* [\d.]+ M atomics/s at the build's "
                     r"156\.250 MHz clock", text), text
    assert (tmp_path / "roce_w64_responder.pcap").stat().st_size > 0


def test_fpga_atomic_demo(tmp_path, capsys):
    """The endpoint's generator: 2 QPs' runs of 8 FETCH_ADDs, one after the other, on one counter
    of the host's memory: it ends at 16, each run's originals (read back from the endpoint's
    memory) are the model's, the 16 of them distinct; each atomic went on the line once and
    was answered once (a perfect link). Then the same over a lossy link."""
    argv = example(capsys, "rocegen sim demo --op FETCH_ADD")
    assert argv[argv.index("--qps") + 1] == "2" and argv[argv.index("--count") + 1] == "8"
    assert main([*argv, "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    r = json.loads((tmp_path / "roce_w64_responder.json").read_text())[0]
    assert r["kind"] == "gen_atomic" and r["opcode"] == "FETCH_ADD"
    assert (r["ops"], r["atomic_acks"], r["packets"]) == (16, 16, 16), r
    assert (r["initial"], r["final"], r["expected"]) == (0, 16, 16), r
    assert (r["originals_checked"], r["distinct"]) == (16, 16), r
    # the generator's cycles: each request at least 13.75 cycles of the 10 Gb/s line
    assert r["gen_cycles"] >= 16 * 13.75 and r["ops_per_s"] == \
        pytest.approx(16 / (r["gen_cycles"] / (r["clock_mhz"] * 1e6)))
    assert "ops: 16 atomics executed by the host (16 ATOMIC_ACKNOWLEDGEs, 16 atomic requests" \
        in text, text
    assert re.search(r"counter: 0x0 -> 0x10 \(final value 16; expected 16: 2 x 8 FETCH_ADDs\); "
                     r"originals: 16 read back from the endpoint's memory, each as the model "
                     r"says, 16 distinct", text), text
    assert re.search(r"cycles: \d+ \([\d.]+ us\) from each run's first work request .* "
                     r"[\d.]+ M atomics/s at the build's 156\.250 MHz clock", text), text
    # over a link that loses a fifth of the frames each way: the answers lost are asked for again
    # (by rewinds and by the READ requester's own requests for holes), each the same request as
    # the first time, answered by the host from its results, never executed twice
    lossy = tmp_path / "lossy"
    assert main([*argv, "--loss", "0.2", "--seed", "2", "-o", str(lossy)]) == 0
    r = json.loads((lossy / "roce_w64_responder.json").read_text())[0]
    assert (r["final"], r["originals_checked"], r["distinct"]) == (16, 16, 16), r
    assert r["host_executed"] == 16 and r["host_duplicates"] >= 1, r
    assert r["counters"]["rd_hole"] >= 1 and r["link_from_nic"]["dropped"] >= 1, r
