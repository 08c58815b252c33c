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


PMTUS = (256, 512, 1024, 2048, 4096)
OPCODES = ("WRITE", "WRITE_IMM", "SEND", "SEND_IMM")


def endpoint_sim_config(width, num_qps=8, **params):
    """The Verilator build of the endpoint test top shared by the demo, the benchmark and the
    tests."""
    from rocegen.sim.cocotb_runner import SimConfig
    return SimConfig("endpoint", "rocegen.sim.roce_tops:EndpointTop", width=width,
                     num_qps=num_qps, **params)


def _sim_demo(args):
    import json

    from rocegen.sim.cocotb_runner import BUILD, run_cocotb
    from rocegen.sim.roce_bench import board_clock_mhz

    from .emit import to_verilog
    from .roce.endpoint import RoceEndpoint
    from .stream import check_width
    check_width(args.width)
    if args.pmtu not in PMTUS:
        raise ValueError(f"--pmtu must be one of {', '.join(map(str, PMTUS))}, not {args.pmtu}")
    if not 1 <= args.qps <= 64:
        raise ValueError(f"--qps must be 1..64, not {args.qps}")
    if args.bytes < 0 or args.size < 0 or args.size > 65536:
        raise ValueError("--bytes must be >= 0 and --size 0..65536 (the demo's local buffer)")
    line = args.line_gbps if args.line_gbps is not None else (100 if args.width >= 128 else 10)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    num_qps = max(8, args.qps)
    t0 = time.perf_counter()
    core = out / f"rocegen_endpoint_w{args.width}.v"
    core.write_text(to_verilog(RoceEndpoint(args.width, num_qps), name="rocegen_endpoint"))
    print(f"wrote {core} in {time.perf_counter() - t0:.1f} s")
    print(f"building the simulator (Verilator; the first build of a configuration takes a few "
          f"minutes, then it is cached under {BUILD / 'cocotb'})")
    cfg = endpoint_sim_config(args.width, num_qps)
    pcap = Path(args.pcap or out / f"roce_w{args.width}.pcap").resolve()
    results = (out / f"roce_w{args.width}.json").resolve()
    run = {"qps": args.qps, "pmtu": args.pmtu, "bytes": args.bytes, "size": args.size,
           "opcode": args.opcode, "source": "memory", "line_gbps": line}
    try:
        run_cocotb(cfg, "rocegen.sim.roce_demo", label=f"demo-{args.width}",
                   env={"PCAP": pcap, "ROCE_RUNS": json.dumps([run]), "ROCE_RESULTS": results})
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    r = json.loads(results.read_text())[0]
    print(f"W={args.width} at {board_clock_mhz(args.width):.3f} MHz, MAC line {line} Gb/s, "
          f"PMTU {args.pmtu}, {args.opcode} messages of {args.size} bytes")
    for k, q in sorted(r["per_qp"].items(), key=lambda kv: int(kv[0])):
        print(f"  QP {256 + int(k)}: {q['bytes']} bytes in {q['packets']} packets")
    us = r["line_cycles"] / board_clock_mhz(args.width)
    print(f"goodput {r['goodput_gbps']:.2f} Gb/s ({args.bytes * args.qps} bytes in {us:.1f} us on "
          f"the MAC); the host's memory holds exactly the data sent")
    print(f"every frame is in {pcap} (Wireshark decodes UDP port 4791 as RoCE)")
    return 0


def _sim_ping(args):
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
        run_cocotb(cfg, "rocegen.sim.demo_bench", label=f"ping-{args.width}",
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
    d = ssub.add_parser("demo", help="the endpoint writes into a simulated host NIC's memory "
                        "(Verilator); data checked, goodput reported")
    d.add_argument("--width", type=int, default=512, help="datapath width in bits")
    d.add_argument("--qps", type=int, default=2, help="QPs sending at once (round robin)")
    d.add_argument("--pmtu", type=int, default=4096, help="path MTU (256..4096)")
    d.add_argument("--bytes", type=int, default=1 << 20, help="bytes per QP")
    d.add_argument("--size", type=int, default=65536, help="message size in bytes (<= 64 KiB)")
    d.add_argument("--opcode", choices=OPCODES, default="WRITE")
    d.add_argument("--line-gbps", type=float, default=None,
                   help="MAC line rate (default 100 at W >= 128, 10 at W = 64; 0: unthrottled)")
    d.add_argument("--pcap", default=None, help="pcap file of every frame (default in -o)")
    d.add_argument("-o", "--output", default="build/demo", help="folder for Verilog, pcap, results")
    pg = ssub.add_parser("ping", help="a scapy host ARPs, pings and exchanges UDP datagrams with "
                         "the network stack (Verilator)")
    pg.add_argument("--width", type=int, default=512)
    pg.add_argument("--mac", default="02:00:00:00:00:01")
    pg.add_argument("--ip", default="10.0.0.2")
    pg.add_argument("-o", "--output", default="build/demo", help="folder for Verilog, pcap, report")

    args = p.parse_args(argv)
    try:
        if args.command == "verilog":
            args.port = args.port or [17185]
            if args.width is None:
                args.width = 64 if args.phy == "xgmii" else 512
            return _verilog(args)
        if args.command == "sim" and args.sim_command == "demo":
            return _sim_demo(args)
        if args.command == "sim" and args.sim_command == "ping":
            return _sim_ping(args)
    except ValueError as e:
        print(f"rocegen: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
