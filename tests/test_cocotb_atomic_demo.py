"""``rocegen sim demo --peer-op FETCH_ADD`` (the host NIC model's contended counter on the
endpoint built with atomics, in Verilator), at W = 64 on the responder's build that
:mod:`tests.test_cocotb_responder` uses: the example of the help, as typed."""

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
