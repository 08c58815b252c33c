"""The ``rocegen`` command line."""

import argparse
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _verilog(args):
    from .emit import to_verilog
    from .top import StackTop
    t0 = time.perf_counter()
    top = StackTop(width=args.width, mac=args.mac, ip=args.ip, udp_ports=tuple(args.port))
    text = to_verilog(top, name=args.name)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({len(text) / 1e6:.2f} MB of Verilog, W={args.width}) "
          f"in {time.perf_counter() - t0:.1f} s")


def _sim_demo(args):
    import pytest
    Path("build").mkdir(exist_ok=True)
    for w in sorted({64, args.width}):
        _verilog(argparse.Namespace(width=w, mac=args.mac, ip=args.ip, port=[17185],
                                    name="rocegen_stack", output=f"build/rocegen_stack_w{w}.v"))
    print("running the header insertion/removal loop bench under Verilator "
          "(cocotbext-axi source and sink, random idle cycles and backpressure)")
    root = Path(__file__).resolve().parent.parent
    code = pytest.main(["-q", "-p", "no:cacheprovider", str(root / "tests" / "test_cocotb_framing.py")])
    print(f"framing benches: {'passed' if code == 0 else 'FAILED'}; "
          f"logs in build/cocotb/framing-*/runs/")
    return int(code)


def main(argv=None):
    p = argparse.ArgumentParser(prog="rocegen", description="FPGA RoCEv2 endpoint generator")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("verilog", help="emit the portable endpoint core as Verilog")
    v.add_argument("--width", type=int, default=512, help="datapath width in bits (64..512)")
    v.add_argument("--mac", default="02:00:00:00:00:01", help="our MAC address")
    v.add_argument("--ip", default="10.0.0.2", help="our IPv4 address")
    v.add_argument("--port", type=int, action="append", default=None,
                   help="UDP port served (repeatable; default 17185)")
    v.add_argument("--name", default="rocegen_stack", help="Verilog module name")
    v.add_argument("-o", "--output", required=True, help="output .v file")

    s = sub.add_parser("sim", help="simulation commands")
    ssub = s.add_subparsers(dest="sim_command", required=True)
    d = ssub.add_parser("demo", help="generate Verilog and run a short Verilator simulation")
    d.add_argument("--width", type=int, default=512)
    d.add_argument("--mac", default="02:00:00:00:00:01")
    d.add_argument("--ip", default="10.0.0.2")

    args = p.parse_args(argv)
    try:
        if args.command == "verilog":
            args.port = args.port or [17185]
            return _verilog(args)
        if args.command == "sim" and args.sim_command == "demo":
            return _sim_demo(args)
    except ValueError as e:
        print(f"rocegen: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
