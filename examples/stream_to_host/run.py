"""Generate the core, build the example design with Verilator and run its cocotb test.

    python examples/stream_to_host/run.py [--width 512] [--msg-bytes 32768] [--messages 32]

Writes the generated core (``rocegen verilog --axil``) and its kit into ``build/example-W/``,
builds ``stream_to_host.sv`` around it and runs ``test_stream_to_host.py``; prints the goodput
into the host NIC model. Exit status 0 when the test passed.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CLOCKS_MHZ = {64: 156.25}           # the 10G XGMII clock at 64 bits; the CMAC's clock above
CMAC_MHZ = 322.265625

#: Verilator options: the top level's ports visible to cocotb, nothing else (faster model).
PUBLIC = """`verilator_config
public_flat_rw -module "stream_to_host" -port "*"
"""


def generate(width, out, mem_bytes):
    """``rocegen verilog --axil`` for the example into ``out``; returns the files."""
    core = out / "rocegen_endpoint.v"
    args = ["verilog", "--width", str(width), "--qps", "4", "--axil", "--mem-bytes",
            str(mem_bytes), "--name", "rocegen_endpoint", "-o", str(core)]
    stamp = out / "generated.json"
    if not (stamp.exists() and json.loads(stamp.read_text()) == args and core.exists()):
        # as a user types it: `rocegen verilog ...`
        if subprocess.run([sys.executable, "-m", "rocegen.cli", *args]).returncode != 0:
            raise SystemExit("rocegen verilog failed")
        stamp.write_text(json.dumps(args))
    return core, out / "rocegen_endpoint_pkg.sv", out / "rocegen_endpoint_regs.py"


def run(width=64, msg_bytes=8192, messages=8, pmtu=4096, out=None, results=None):
    """Build and run the example; returns the test's result figures (a dict)."""
    from cocotb_tools.runner import Verilator, get_results

    from rocegen.gateware import costlog
    from rocegen.sim.testing.verilator import verilator_on_path

    out = Path(out or ROOT / "build" / f"example-{width}")
    out.mkdir(parents=True, exist_ok=True)
    # the ring (half of the on-chip memory) holds four messages of up to 64 KiB
    mem_bytes = max(1 << 18, 1 << (8 * msg_bytes - 1).bit_length())
    core, pkg, regs_py = generate(width, out, mem_bytes)
    control = out / "public.vlt"
    control.write_text(PUBLIC)

    class Runner(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            return cmds

    # the cocotb runner hands the simulator this process's sys.path: the test module and the
    # repository must be on it
    for path in (str(ROOT), str(HERE)):
        if path not in sys.path:
            sys.path.insert(0, path)
    results = Path(results or out / "results.json")
    results.unlink(missing_ok=True)
    runner = Runner()
    with verilator_on_path():
        t0 = time.monotonic()
        runner.build(sources=[pkg, core, HERE / "stream_to_host.sv", control],
                     hdl_toplevel="stream_to_host", build_dir=out / "sim",
                     build_args=["-Wno-fatal", "-O3", "--x-assign", "fast", "--x-initial",
                                 "fast", "--noassert"],
                     timescale=("1ns", "1ps"), log_file=out / "build.log")
        # the project's build log (CI's cost table): cocotb's runner Verilates every time and
        # its make recompiles what changed
        costlog.record("verilator", f"example-{width}", "built", time.monotonic() - t0)
        xml = out / "results.xml"
        try:
            runner.test(test_module="test_stream_to_host", hdl_toplevel="stream_to_host",
                        hdl_toplevel_lang="verilog", build_dir=out / "sim", test_dir=out,
                        results_xml=str(xml), log_file=out / "sim.log",
                        extra_env={"EXAMPLE_WIDTH": str(width), "MSG_BYTES": str(msg_bytes),
                                   "MSG_COUNT": str(messages), "PMTU": str(pmtu),
                                   "CLOCK_MHZ": str(CLOCKS_MHZ.get(width, CMAC_MHZ)),
                                   "REGS_PY": str(regs_py), "EXAMPLE_RESULTS": str(results)})
        except SystemExit:
            pass
    total, failed = get_results(xml)
    if failed or not total:
        raise AssertionError(f"the example's test failed; see {out / 'sim.log'}:\n"
                             + (out / "sim.log").read_text(errors="replace")[-4000:])
    return json.loads(results.read_text())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--msg-bytes", type=int, default=32768)
    p.add_argument("--messages", type=int, default=32)
    p.add_argument("--pmtu", type=int, default=4096)
    p.add_argument("-o", "--output", default=None, help="build folder (default build/example-W)")
    args = p.parse_args(argv)
    r = run(args.width, args.msg_bytes, args.messages, args.pmtu, args.output)
    print(f"W={r['width']} at {r['clock_mhz']:.3f} MHz: {r['messages']} messages of "
          f"{r['msg_bytes']} bytes in {r['data_frames']} frames at PMTU {r['pmtu']}, "
          f"{r['cycles']} cycles: goodput {r['goodput_gbps']:.2f} Gb/s "
          f"({r['bytes_per_cycle']:.1f} bytes per cycle); host memory checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
