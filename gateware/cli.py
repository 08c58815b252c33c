"""The ``rocegen`` command line."""

import argparse
import sys
import time
from pathlib import Path

__all__ = ["main"]


def _verilog(args):
    from .emit import to_verilog
    from .top import StackTop
    from .xgmii_top import XgmiiStackTop
    t0 = time.perf_counter()
    kind = XgmiiStackTop if getattr(args, "phy", "axis") == "xgmii" else StackTop
    top = kind(width=args.width, mac=args.mac, ip=args.ip, udp_ports=tuple(args.port))
    text = to_verilog(top, name=args.name)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({len(text) / 1e6:.2f} MB of Verilog, W={args.width}) "
          f"in {time.perf_counter() - t0:.1f} s")


def _sim_demo(args):
    from rocegen.sim.cocotb_runner import BUILD, SimConfig, run_cocotb

    out = Path(args.output)
    _verilog(argparse.Namespace(width=args.width, mac=args.mac, ip=args.ip, port=[17185],
                                name="rocegen_stack", output=out / f"rocegen_stack_w{args.width}.v"))
    print(f"building the simulator (Verilator; the first build of a width takes a few minutes, "
          f"then it is cached under {BUILD / 'cocotb'})")
    cfg = SimConfig("stack", "rocegen.gateware.top:StackTop", width=args.width)
    pcap = (out / f"demo_w{args.width}.pcap").resolve()
    report = (out / f"demo_w{args.width}.txt").resolve()
    try:
        run_cocotb(cfg, "rocegen.sim.demo_bench", label=f"demo-{args.width}",
                   env={"PCAP": pcap, "DEMO_REPORT": report})
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    print(report.read_text(), end="")
    print(f"every frame is in {pcap} (open it with Wireshark)")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="rocegen", description="FPGA RoCEv2 endpoint generator")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("verilog", help="emit the portable endpoint core as Verilog")
    v.add_argument("--width", type=int, default=None,
                   help="datapath width in bits (64..512; default 512, 64 with --phy xgmii)")
    v.add_argument("--phy", choices=["axis", "xgmii"], default="axis",
                   help="MAC side: a CMAC-shaped AXI-Stream port, or the built-in 10/25G XGMII MAC")
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
    d.add_argument("-o", "--output", default="build/demo", help="folder for Verilog, pcap, report")

    args = p.parse_args(argv)
    try:
        if args.command == "verilog":
            args.port = args.port or [17185]
            if args.width is None:
                args.width = 64 if args.phy == "xgmii" else 512
            return _verilog(args)
        if args.command == "sim" and args.sim_command == "demo":
            return _sim_demo(args)
    except ValueError as e:
        print(f"rocegen: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
