"""The example user design (examples/stream_to_host) at W = 64: generated core, package and
template, a data source into the streaming front end, status through AXI4-Lite, host memory
checked (its cocotb test runs under Verilator against the host NIC model)."""

import importlib.util
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "examples" / "stream_to_host" / "run.py"


def test_stream_to_host_w64():
    spec = importlib.util.spec_from_file_location("example_run", RUN)
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    r = run.run(width=64, msg_bytes=6000, messages=6, pmtu=1024)
    assert r["messages"] == 6 and r["data_frames"] == 6 * 6
    assert r["bytes_per_cycle"] > 0
