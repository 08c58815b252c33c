"""The ``rocegen`` command line: the application layer above the generator (gateware, boards),
the simulations and the benchmarks. Nothing imports it but its entry points."""

import argparse
import json
import re
import sys
import time
from pathlib import Path

from rocegen.boards import BOARDS, get_board, write_build
from rocegen.gateware.core import CoreTop
from rocegen.gateware.emit import to_verilog
from rocegen.gateware.integration import write_kit
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.endpoint.config import MEMORIES, markdown_table
from rocegen.gateware.roce.endpoint.config import params as endpoint_fields
from rocegen.gateware.roce.layouts import MAX_QPS
from rocegen.gateware.top import StackTop
from rocegen.gateware.xgmii_top import XgmiiStackTop
from rocegen.sim.apps import bench, incast, replay, rxe, serve
from rocegen.sim.apps import demo as system_demo
from rocegen.sim.apps.options import ENDPOINT_OPTIONS, add_endpoint_options, endpoint_params, option_error
from rocegen.sim.testing.cocotb_runner import (
    SIM_CACHE,
    SimConfig,
    endpoint_sim_config,
    kept_verilog,
    run_cocotb,
)
from rocegen.sim.testing.roce_env import board_clock_mhz
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.atomics import ATOMIC_VERBS
from rocegen.wire.roce import PMTUS
from rocegen.wire.verbs import VERBS

__all__ = ["main", "readme_with_params", "README_TABLE"]

#: What ``rocegen verilog`` emits: the RoCEv2 endpoint core, or the network stack alone.
CORES = ("endpoint", "stack")


def _verilog(args):
    if getattr(args, "core", "stack") == "endpoint":
        return _verilog_endpoint(args)
    t0 = time.perf_counter()
    kind = XgmiiStackTop if getattr(args, "phy", "axis") == "xgmii" else StackTop
    top = kind(width=args.width, mac=args.mac, ip=args.ip, udp_ports=tuple(args.port))
    text = to_verilog(top, name=args.name)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out} ({len(text) / 1e6:.2f} MB of Verilog, W={args.width}) "
          f"in {time.perf_counter() - t0:.1f} s")


def _check_address(option, parse, text):
    try:
        parse(text)
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None


def _check_name(name):
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", name):
        raise ValueError(f"--name must be a Verilog identifier, not {name!r}")


def _check_verilog_args(args):
    """Validate ``rocegen verilog``'s parameters before anything is built; fills defaults."""
    check_width(args.width)
    if args.phy == "xgmii" and args.width != 64:
        raise ValueError(f"--width must be 64 with --phy xgmii (the XGMII word), not {args.width}")
    _check_address("--ip", parse_ip, args.ip)
    _check_address("--mac", parse_mac, args.mac)
    if args.core == "stack":
        if args.axil:
            raise ValueError("--axil applies to --core endpoint only, not to the network stack")
        for option, value in (("--qps", args.qps), ("--memory", args.memory),
                              ("--mem-bytes", args.mem_bytes), ("--cm-port", args.cm_port),
                              ("--clk-mhz", args.clk_mhz),
                              *((o, getattr(args, o[2:].replace("-", "_")))
                                for o in ENDPOINT_OPTIONS)):
            if value is not None:
                raise ValueError(f"{option} applies to --core endpoint only, not to the network "
                                 f"stack")
        args.port = args.port or [17185]
        for port in args.port:
            if not 1 <= port <= 65535:
                raise ValueError(f"--port must be a UDP port 1..65535, not {port}")
        args.name = args.name or "rocegen_stack"
    else:
        if args.port:
            raise ValueError("--port applies to --core stack only (the endpoint serves RoCEv2 "
                             "on UDP port 4791)")
        args.qps = 8 if args.qps is None else args.qps
        if not 1 <= args.qps <= MAX_QPS:
            raise ValueError(f"--qps must be 1..{MAX_QPS}, not {args.qps}")
        args.memory = args.memory or "onchip"
        if args.memory not in MEMORIES:
            raise ValueError(f"--memory must be one of {', '.join(MEMORIES)}, not "
                             f"{args.memory!r}")
        if args.mem_bytes is not None and (args.mem_bytes <= 0
                                           or args.mem_bytes & (args.mem_bytes - 1)):
            raise ValueError(f"--mem-bytes must be a power of two, not {args.mem_bytes}")
        args.name = args.name or "rocegen_endpoint"
    _check_name(args.name)


def _verilog_endpoint(args):

    t0 = time.perf_counter()
    params = {} if args.mem_bytes is None else {"mem_bytes": args.mem_bytes}
    params.update(endpoint_params(args))
    if args.vlan is not None:
        params["vlan"] = args.vlan
    elif "pcp" in params:
        raise ValueError("--pcp needs --vlan")
    if args.clk_mhz is not None:
        if not 0 < args.clk_mhz <= 1000:
            raise ValueError(f"--clk-mhz must be a clock frequency 0..1000 MHz, not {args.clk_mhz}")
        params["clk_hz"] = args.clk_mhz * 1e6
    try:
        top = CoreTop(args.width, args.qps, memory=args.memory, phy=args.phy, mac=args.mac,
                      ip=args.ip, axil=args.axil, **params)
    except (ValueError, TypeError) as e:
        raise ValueError(option_error(str(e))) from None
    text = to_verilog(top, name=args.name)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    kit = write_kit(top, args.name, out.parent)
    print(f"wrote {out} ({len(text) / 1e6:.2f} MB of Verilog): endpoint core {args.name}, "
          f"W={args.width}, {args.qps} QPs, {args.memory} memory of {top.endpoint.mem_bytes} "
          f"bytes, MAC side {args.phy}{', AXI4-Lite registers' if args.axil else ''}, in "
          f"{time.perf_counter() - t0:.1f} s")
    print(f"beside it: {', '.join(p.name for p in kit.values())} (ports, types, template"
          f"{', register map' if args.axil else ''})")


def _build(args):
    board = get_board(args.board)
    params = {"num_qps": args.qps, "mac": args.mac, "ip": args.ip,
              "retransmit_memory": args.retransmit_memory, "width": args.width,
              "mem_bytes": args.mem_bytes, "top_name": args.name,
              "endpoint": endpoint_params(args, "--port"), "axil": args.axil}
    try:
        files = write_build(board, args.output, **params)
    except (ValueError, TypeError) as e:
        raise ValueError(option_error(str(e), "--port")) from None
    print(f"build it with: cd {files['tcl'].parent} && vivado -mode batch -source build.tcl "
          f"(see BUILD.md)")
    return 0


#: The markers around the generated parameter table in README.md.
README_TABLE = ("<!-- endpoint parameters: generated by `rocegen params --readme README.md` -->",
                "<!-- end of endpoint parameters -->")


def readme_with_params(text):
    """``text`` (README.md) with the table between :data:`README_TABLE`'s markers made anew
    from :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig`'s fields."""
    begin, end = README_TABLE
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"README.md must hold the markers {begin!r} and {end!r} once each")
    head, rest = text.split(begin)
    _, tail = rest.split(end)
    return f"{head}{begin}\n{markdown_table()}{end}{tail}"


def _params(args):
    """``rocegen params``: the endpoint's generator parameters."""
    if args.readme:
        path = Path(args.readme)
        path.write_text(readme_with_params(path.read_text()))
        print(f"rewrote the parameter table of {path}")
    elif args.markdown:
        print(markdown_table(), end="")
    else:
        for name, (default, p) in endpoint_fields().items():
            print(f"{name:16} {default!r:12} {p.cli or '':16} {p.help}")
    return 0


def _boards(args):
    rows = [b.summary() for b in BOARDS.values()]
    cols = ["board", "mac", "line", "width", "core clock", "part", "clocks"]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in cols).rstrip())
    return 0


#: ``rocegen sim demo``'s message size when ``--size`` is not given (with ``--peer-op``: at most
#: the QP's share of the responder's region)
DEMO_SIZE = 65536
#: What the demo says after the time it took to write the core's Verilog: elaborated, or the
#: Verilog kept from an earlier run of the same configuration (no design source changed since;
#: ``~/.cache/rocegen/sim/verilog/``).
DEMO_VERILOG_HOW = {"elaborated": "", "kept": " (kept from an earlier run: no source changed)"}


def _sim_demo(args):
    if args.width is None:
        args.width = 64 if args.phy == "xgmii" else 512
    check_width(args.width)
    if args.phy == "xgmii" and args.width != 64:
        raise ValueError(f"--width must be 64 with --phy xgmii (the XGMII word), not {args.width}")
    if args.vlan is not None and not 1 <= args.vlan <= 4094:
        raise ValueError(f"--vlan must be a VLAN ID 1..4094, not {args.vlan}")
    if args.pmtu not in PMTUS:
        raise ValueError(f"--pmtu must be one of {', '.join(map(str, PMTUS))}, not {args.pmtu}")
    if not 1 <= args.qps <= MAX_QPS:
        raise ValueError(f"--qps must be 1..{MAX_QPS}, not {args.qps}")
    if args.phy == "xgmii" and args.line_gbps not in (None, 10):
        raise ValueError("--line-gbps does not apply to --phy xgmii: the XGMII line carries one "
                         "64-bit word per cycle (10 Gb/s at 156.25 MHz)")
    if args.line_gbps is not None and not 0 <= args.line_gbps <= 1000:
        raise ValueError(f"--line-gbps must be a line rate 0..1000 Gb/s (0: unthrottled), not "
                         f"{args.line_gbps:g}")
    _demo_link_checks(args)
    if args.peer_op or args.opcode in ("READ", *ATOMIC_VERBS):
        return _sim_demo_peer(args)
    args.opcode = args.opcode or "WRITE"
    args.size = DEMO_SIZE if args.size is None else args.size
    if args.bytes < 0 or args.size < 0 or args.size > 65536:
        raise ValueError("--bytes must be >= 0 and --size 0..65536 (the demo's local buffer)")
    xgmii = args.phy == "xgmii"
    line = args.line_gbps if args.line_gbps is not None else (100 if args.width >= 128 else 10)
    if xgmii:
        line = 0            # the XGMII MAC and line set the pace themselves
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    num_qps = max(8, args.qps)
    extra = {} if args.vlan is None else {"vlan": args.vlan}
    t0 = time.perf_counter()
    tag = f"w{args.width}" + ("_xgmii" if xgmii else "") + \
        (f"_vlan{args.vlan}" if args.vlan is not None else "")
    core = out / f"rocegen_endpoint_{tag}.v"
    if xgmii:
        text, how = kept_verilog("rocegen.gateware.core:CoreTop", "rocegen_endpoint",
                                 width=args.width, num_qps=num_qps, phy="xgmii", **extra)
    else:
        text, how = kept_verilog("rocegen.gateware.roce.endpoint.endpoint:RoceEndpoint", "rocegen_endpoint",
                                 width=args.width, num_qps=num_qps, **extra)
    core.write_text(text)
    print(f"wrote {core} in {time.perf_counter() - t0:.1f} s{DEMO_VERILOG_HOW[how]}")
    print(f"building the simulator (Verilator; the first build of a configuration takes a few "
          f"minutes, then it is cached under {SIM_CACHE})")
    cfg = endpoint_sim_config(args.width, num_qps, **extra, **({"phy": "xgmii"} if xgmii else {}))
    pcap = Path(args.pcap or out / f"roce_{tag}.pcap").resolve()
    results = (out / f"roce_{tag}.json").resolve()
    run = demo_run(args, line)
    try:
        run_cocotb(cfg, "rocegen.sim.cocotb.roce_demo", label=f"demo-{args.width}",
                   env={"PCAP": pcap, "ROCE_RUNS": json.dumps([run]), "ROCE_RESULTS": results})
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    r = json.loads(results.read_text())[0]
    mac_side = "XGMII MAC, 10 Gb/s line" if xgmii else f"MAC line {line} Gb/s"
    vlan = f", VLAN {args.vlan}" if args.vlan is not None else ""
    print(f"W={args.width} at {board_clock_mhz(args.width):.3f} MHz, {mac_side}{vlan}, "
          f"PMTU {args.pmtu}, {args.opcode} messages of {args.size} bytes")
    per_qp = sorted(r["per_qp"].items(), key=lambda kv: int(kv[0]))
    for k, q in per_qp if len(per_qp) <= 16 else ():
        print(f"  QP {256 + int(k)}: {q['bytes']} bytes in {q['packets']} packets")
    if len(per_qp) > 16:
        packets = [q["packets"] for _, q in per_qp]
        print(f"  {len(per_qp)} QPs: {per_qp[0][1]['bytes']} bytes each in {min(packets)} to "
              f"{max(packets)} packets")
    if xgmii:
        x = r["xgmii"]
        print(f"XGMII line: {x['line_frames_checked']} frames from the endpoint checked "
              f"(preamble, FCS, padding to 64 octets, start lane, gap >= 12 octets), "
              f"{x['mac_rx_frames']} frames into its MAC, no MAC error counted")
    if r["fairness"]:
        f = r["fairness"]
        print(f"fairness while all {args.qps} QPs were busy ({f['window_cycles']} cycles): "
              f"{f['min_bytes']} to {f['max_bytes']} payload bytes per QP, max/min "
              f"{f['ratio']:.4f}")
    us = r["line_cycles"] / board_clock_mhz(args.width)
    faults = [f"{f} {run[f]:g}" for f in ("loss", "dup", "reorder", "corrupt") if run[f]]
    if faults or run["rtt_us"]:
        print(f"link: {', '.join(faults) or 'no faults'}, round trip {run['rtt_us']:g} us, seed "
              f"{run['seed']}, QP retransmit timeout code {r['timeout']}")
        for key, name in (("link_to_nic", "to NIC"), ("link_from_nic", "from NIC")):
            c = r[key]
            if c is None:
                continue
            print(f"  {name:8}: {c['sent']} frames sent, {c['delivered']} "
                  f"delivered, {c['dropped']} dropped, {c['duplicated']} duplicated, "
                  f"{c['reordered']} reordered, {c['corrupted']} corrupted")
    print(f"retransmitted {r['retransmitted']} of {r['roce_frames']} RoCE data frames")
    print(f"goodput {r['goodput_gbps']:.2f} Gb/s ({args.bytes * args.qps} bytes in {us:.1f} us on "
          f"the {'line' if xgmii else 'MAC'}); the host's memory holds exactly the data sent "
          f"({r['checked_bytes']} bytes compared)")
    print(f"every frame is in {pcap} (Wireshark decodes UDP port 4791 as RoCE)")
    return 0


DEMO_DESCRIPTION = """\
The endpoint core (Verilator) behind its MAC, the host NIC model on the other side of the line.
Without --peer-op the endpoint RDMA-WRITEs or SENDs (--op) into the host's memory, or with --op
READ RDMA-READs the host's memory into its own, or with --op FETCH_ADD or COMPARE_SWAP its
traffic generator runs atomics on a counter in the host's memory; with --peer-op the host
WRITEs, SENDs or READs into / from the endpoint, or runs the contended counter on it with
atomics (FETCH_ADD, COMPARE_SWAP). READs in either direction, atomics either way and anything
the host sends need the endpoint's RC responder, which those runs are built with (atomics on,
little-endian). The data is checked either way; the goodput (the atomics' rate) is reported and
every frame written to a pcap file."""

DEMO_EXAMPLES = "\n".join([
    "examples:",
    "  rocegen sim demo --width 64 --bytes 65536 --size 4096",
    "      the endpoint WRITEs 64 KiB on each of 2 QPs into the host at W = 64 (10 Gb/s line)",
    "  rocegen sim demo --peer-op SEND_IMM --width 64 --bytes 32768 --size 1000 --loss 0.02 "
    "--dup 0.01 --reorder 0.01",
    "      the host SENDs with immediate into the endpoint over a link that loses, duplicates "
    "and",
    "      reorders frames",
    "  rocegen sim demo --peer-op WRITE --bytes 1048576",
    "      the host WRITEs 1 MiB on each of 2 QPs into the endpoint at W = 512 (100 Gb/s line)",
    "  rocegen sim demo --peer-op READ --width 64 --bytes 65536 --size 8192",
    "      the host WRITEs 64 KiB on each of 2 QPs into the endpoint, then READs it back",
    "  rocegen sim demo --op READ --width 64 --bytes 65536 --size 8192",
    "      the endpoint READs 64 KiB on each of 2 QPs from the host's memory into its own",
    "  rocegen sim demo --peer-op FETCH_ADD --width 64 --qps 4 --count 32",
    "      the contended counter: 4 host QPs at once FETCH_ADD 1 on one 8-byte counter of the",
    "      endpoint, 32 times each",
    "  rocegen sim demo --op FETCH_ADD --width 64 --qps 2 --count 8",
    "      the other way: the endpoint's traffic generator FETCH_ADDs 1 on one 8-byte counter of",
    "      the host's memory, 8 times from each of 2 QPs, one run after the other"])


def _demo_link_checks(args):
    for option in ("loss", "dup", "reorder", "corrupt"):
        p = getattr(args, option)
        if not 0 <= p < 1:
            raise ValueError(f"--{option} must be a probability in [0, 1), not {p}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, not {args.seed}")
    if not 0 <= args.rtt_us < float("inf"):
        raise ValueError(f"--rtt-us must be a number of microseconds >= 0, not {args.rtt_us}")


def _print_link(run, r):
    """The link's faults and counters of a ``sim demo`` run (``run`` as asked, ``r`` as done),
    when it had faults or a round trip."""
    faults = [f"{f} {run[f]:g}" for f in ("loss", "dup", "reorder", "corrupt") if run[f]]
    if faults or run["rtt_us"]:
        print(f"link: {', '.join(faults) or 'no faults'}, round trip {run['rtt_us']:g} us, seed "
              f"{run['seed']}, retransmit timeout code {r['timeout']}")
        for key, name in (("link_to_nic", "to NIC"), ("link_from_nic", "from NIC")):
            c = r[key]
            if c is not None:
                print(f"  {name:8}: {c['sent']} frames sent, {c['delivered']} delivered, "
                      f"{c['dropped']} dropped, {c['duplicated']} duplicated, {c['reordered']} "
                      f"reordered, {c['corrupted']} corrupted")


def _sim_demo_peer(args):
    """``rocegen sim demo --peer-op`` (the host NIC model WRITEs, SENDs or READs into / from the
    endpoint, or runs atomics on it), ``--op READ`` (the endpoint READs the host) and ``--op
    FETCH_ADD|COMPARE_SWAP`` (the endpoint's traffic generator runs atomics on the host's
    memory), on the endpoint built with its RC responder (:mod:`rocegen.sim.cocotb.roce_resp_runs`,
    :mod:`rocegen.sim.cocotb.roce_demo_read`)."""
    from rocegen.sim.testing.cocotb_runner import responder_share, responder_sim_config
    option = "--peer-op" if args.peer_op else f"--op {args.opcode}"
    if args.phy != "axis" or args.vlan is not None:
        raise ValueError(f"{option} runs on the AXI-Stream MAC port, untagged: leave out --phy "
                         f"xgmii and --vlan")
    if args.peer_op and args.opcode is not None:
        raise ValueError("--opcode is what the endpoint sends; with --peer-op the host sends "
                         "(give one of them)")
    gen_atomic = not args.peer_op and args.opcode in ATOMIC_VERBS
    reads = "peer_read" if args.peer_op == "READ" else \
        "read" if not args.peer_op and not gen_atomic else None
    atomic = args.peer_op in ATOMIC_VERBS
    num_qps = max(8, args.qps)
    cfg = responder_sim_config(args.width, num_qps)
    share = responder_share(cfg.params, args.qps)
    if atomic or gen_atomic:
        if not 1 <= args.count <= 1 << 16:
            raise ValueError(f"--count must be 1..65536 with {option}, not {args.count}")
        if gen_atomic and args.outstanding is not None:
            raise ValueError(f"--outstanding is the host's (--peer-op); with {option} the "
                             f"endpoint keeps as many atomics outstanding as its READ limit")
        args.outstanding = 16 if args.outstanding is None else args.outstanding
        if not 1 <= args.outstanding <= 16:
            raise ValueError(f"--outstanding must be 1..16 (the host QP's max_rd_atomic), not "
                             f"{args.outstanding}")
        if gen_atomic and args.size not in (None, 8):
            raise ValueError(f"--size must be 8 with {option} (each message is one 8-byte "
                             f"atomic), not {args.size}")
    elif args.size is None:
        args.size = min(DEMO_SIZE, share)
    if not (atomic or gen_atomic) and not 1 <= args.size <= share:
        raise ValueError(f"--size must be 1..{share} with {option} (each QP's share of the "
                         f"responder's region with {args.qps} QPs at W = {args.width}), not "
                         f"{args.size}")
    if args.bytes < 1:
        raise ValueError(f"--bytes must be >= 1 with {option}, not {args.bytes}")
    line = args.line_gbps if args.line_gbps is not None else (100 if args.width >= 128 else 10)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tag = f"w{args.width}_responder"
    core = out / f"rocegen_endpoint_{tag}.v"
    text, how = kept_verilog("rocegen.gateware.roce.endpoint.endpoint:RoceEndpoint", "rocegen_endpoint",
                             **cfg.params)
    core.write_text(text)
    print(f"wrote {core} in {time.perf_counter() - t0:.1f} s{DEMO_VERILOG_HOW[how]}")
    print(f"building the simulator (Verilator; the first build of a configuration takes a few "
          f"minutes, then it is cached under {SIM_CACHE})")
    pcap = Path(args.pcap or out / f"roce_{tag}.pcap").resolve()
    results = (out / f"roce_{tag}.json").resolve()
    kind = reads or ("atomic" if atomic else "gen_atomic" if gen_atomic else "responder")
    run = {**demo_run(args, line), "kind": kind, "opcode": args.peer_op or args.opcode}
    if atomic:
        run.update(count=args.count, outstanding=args.outstanding)
    if gen_atomic:
        run.update(count=args.count, size=8)
    module = "rocegen.sim.cocotb.roce_demo_read" if reads else "rocegen.sim.cocotb.roce_resp_runs"
    try:
        run_cocotb(cfg, module, "runs", label=f"demo-{'read' if reads else 'peer'}-{args.width}",
                   env={"PCAP": pcap, "ROCE_RUNS": json.dumps([run]), "ROCE_RESULTS": results})
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    r = json.loads(results.read_text())[0]
    mhz = board_clock_mhz(args.width)
    if reads:
        return _demo_read_report(args, run, r, line, mhz, pcap)
    if atomic:
        return _demo_atomic_report(args, run, r, line, mhz, pcap)
    if gen_atomic:
        return _demo_gen_atomic_report(args, run, r, line, mhz, pcap)
    print(f"W={args.width} at {mhz:.3f} MHz, line {line:g} Gb/s{' (unthrottled)' if not line else ''}"
          f", PMTU {args.pmtu}: the host sends {args.peer_op} messages of {args.size} bytes to "
          f"the endpoint's responder, {args.bytes} bytes on each of {args.qps} QP"
          f"{'s' if args.qps > 1 else ''}")
    _print_link(run, r)
    rounds = r["rounds"]
    print(f"{r['messages']} messages in {r['packets']} packets ({r['host_frames']} frames sent by "
          f"the host, {r['retransmitted']} resent, {r['rnr_naks']} RNR NAKs, {r['seq_naks']} "
          f"sequence NAKs)" + (f"; in {rounds} rounds: each fills the QPs' shares of the "
                               f"responder's region and is read back before the next"
                               if rounds > 1 else ""))
    print(f"goodput {r['goodput_gbps']:.2f} Gb/s ({args.bytes * args.qps} bytes in "
          f"{r['line_cycles'] / mhz:.1f} us from the first request on the line to the last ACK"
          f"{', summed over the rounds' if rounds > 1 else ''}); every host work request "
          f"completed OK, every receive completion matched, and the endpoint's memory, written "
          f"back to the host by its own RDMA WRITEs, holds exactly the data sent "
          f"({r['checked_bytes']} bytes compared)")
    print(f"every frame is in {pcap} (Wireshark decodes UDP port 4791 as RoCE)")
    return 0


def _demo_read_report(args, run, r, line, mhz, pcap):
    """What ``rocegen sim demo --peer-op READ`` / ``--op READ`` prints of its result ``r``."""
    host = r["kind"] == "peer_read"
    who, whom = ("the host", "the endpoint's responder") if host else \
        ("the endpoint", "the host's memory")
    print(f"W={args.width} at {mhz:.3f} MHz, line {line:g} Gb/s{' (unthrottled)' if not line else ''}"
          f", PMTU {args.pmtu}: {who} READs messages of {args.size} bytes from {whom}, "
          f"{args.bytes} bytes on each of {args.qps} QP{'s' if args.qps > 1 else ''}"
          + (" (the host WRITEs them into the endpoint first)" if host else ""))
    _print_link(run, r)
    rounds = r["rounds"]
    extra = f", {r['read_retries']} READs reissued by the host" if host else \
        f", {r['host_reads_executed']} READs executed by the host"
    print(f"{r['messages']} READs in {r['packets']} response packets{extra}"
          + (f"; in {rounds} rounds, each filling the QPs' shares of the responder's region"
             if rounds > 1 else ""))
    span = ("from the first READ request on the host's line to the last beat of the endpoint's "
            "last READ response") if host else ("from the endpoint's first READ request to the "
                                                "end of the host's last READ response on the line")
    check = ("every READ completed OK at the host with exactly the bytes the endpoint's memory "
             "holds there") if host else (
        "every READ work request completed OK, in order, and the endpoint's memory, written "
        "back to the host by its own RDMA WRITEs, holds exactly the bytes read")
    print(f"goodput {r['goodput_gbps']:.2f} Gb/s ({args.bytes * args.qps} bytes in "
          f"{r['line_cycles'] / mhz:.1f} us {span}{', summed over the rounds' if rounds > 1 else ''}"
          f"); {check} ({r['checked_bytes']} bytes compared)")
    print(f"every frame is in {pcap} (Wireshark decodes UDP port 4791 as RoCE)")
    return 0


def _demo_atomic_report(args, run, r, line, mhz, pcap):
    """What ``rocegen sim demo --peer-op FETCH_ADD`` / ``COMPARE_SWAP`` prints of its result
    ``r``."""
    cas = args.peer_op == "COMPARE_SWAP"
    qps = f"{args.qps} QP{'s' if args.qps > 1 else ''}"
    what = "COMPARE_SWAP spins (compare k, swap k + 1) until" if cas else "FETCH_ADDs of 1:"
    print(f"W={args.width} at {mhz:.3f} MHz, line {line:g} Gb/s{' (unthrottled)' if not line else ''}"
          f": the contended counter, {qps} at once, {what} {args.count} per QP"
          f"{' took' if cas else ''}, on the endpoint's 8 bytes at {r['counter']:#x} (up to "
          f"{args.outstanding} outstanding per QP)")
    _print_link(run, r)
    total = args.qps * args.count
    print(f"ops: {r['ops']} atomics executed" + (f", {r['successes']} swaps took" if cas else "")
          + f" ({r['atomic_acks']} ATOMIC_ACKNOWLEDGEs, {r['packets']} requests on the host's "
          f"line)")
    print(f"counter: {r['initial']:#x} -> {r['final']:#x} (final value {r['final']}; "
          f"expected {(r['initial'] + total) % 2**64}), {r['distinct']} distinct values "
          f"{'found by the swaps that took' if cas else 'returned'}, consecutive from "
          f"{r['initial']:#x}")
    us = r["line_cycles"] / mhz
    print(f"cycles: {r['line_cycles']:.0f} ({us:.1f} us) from the first atomic on the host's line to "
          f"the endpoint's last ATOMIC_ACKNOWLEDGE; {r['ops_per_s'] / 1e6:.2f} M atomics/s at "
          f"the build's {mhz:.3f} MHz clock")
    print(f"every frame is in {pcap} (Wireshark decodes UDP port 4791 as RoCE)")
    return 0


def _demo_gen_atomic_report(args, run, r, line, mhz, pcap):
    """What ``rocegen sim demo --op FETCH_ADD`` / ``COMPARE_SWAP`` prints of its result ``r``."""
    cas = args.opcode == "COMPARE_SWAP"
    qps = f"{args.qps} QP{'s' if args.qps > 1 else ''}"
    what = ("a COMPARE_SWAP chain (message s swaps in s + 1 where it finds s; the counter zeroed "
            "before each run)" if cas else "FETCH_ADDs of 1")
    print(f"W={args.width} at {mhz:.3f} MHz, line {line:g} Gb/s{' (unthrottled)' if not line else ''}"
          f": the endpoint's traffic generator runs {what}, {args.count} per QP on {qps} one run "
          f"after the other, on one 8-byte counter of the host's memory at {r['counter']:#x}")
    _print_link(run, r)
    print(f"ops: {r['ops']} atomics executed by the host ({r['atomic_acks']} "
          f"ATOMIC_ACKNOWLEDGEs, {r['packets']} atomic requests on the endpoint's line)")
    how = f"each run counts it up to {args.count}" if cas else \
        f"{args.qps} x {args.count} FETCH_ADDs"
    print(f"counter: {r['initial']:#x} -> {r['final']:#x} (final value {r['final']}; expected "
          f"{r['expected']}: {how}); originals: {r['originals_checked']} read back from the "
          f"endpoint's memory, each as the model says, {r['distinct']} distinct")
    us = r["gen_cycles"] / mhz
    print(f"cycles: {r['gen_cycles']} ({us:.1f} us) from each run's first work request to its "
          f"last completion, summed; {r['ops_per_s'] / 1e6:.2f} M atomics/s at the build's "
          f"{mhz:.3f} MHz clock")
    print(f"every frame is in {pcap} (Wireshark decodes UDP port 4791 as RoCE)")
    return 0


def demo_run(args, line_gbps):
    """The run of ``rocegen sim demo`` (see :mod:`rocegen.sim.cocotb.roce_demo`) from its options."""
    return {"qps": args.qps, "pmtu": args.pmtu, "bytes": args.bytes, "size": args.size,
            "opcode": args.opcode, "source": "memory", "line_gbps": line_gbps,
            "loss": args.loss, "dup": args.dup, "reorder": args.reorder, "corrupt": args.corrupt,
            "seed": args.seed, "rtt_us": args.rtt_us}


def _sim_ping(args):

    out = Path(args.output)
    _verilog(argparse.Namespace(width=args.width, mac=args.mac, ip=args.ip, port=[17185],
                                name="rocegen_stack", output=out / f"rocegen_stack_w{args.width}.v"))
    print(f"building the simulator (Verilator; the first build of a width takes a few minutes, "
          f"then it is cached under {SIM_CACHE})")
    cfg = SimConfig("stack", "rocegen.gateware.top:StackTop", width=args.width)
    pcap = (out / f"demo_w{args.width}.pcap").resolve()
    report = (out / f"demo_w{args.width}.txt").resolve()
    try:
        run_cocotb(cfg, "rocegen.sim.cocotb.ping", label=f"ping-{args.width}",
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

    v = sub.add_parser("verilog", help="emit the portable endpoint core (or the network stack "
                       "alone) as Verilog")
    v.add_argument("--core", choices=CORES, default="endpoint",
                   help="endpoint: the RoCEv2 endpoint core with flat ports (default); stack: "
                   "the network stack with a UDP echo service")
    v.add_argument("--width", type=int, default=None,
                   help="datapath width in bits (64..512; default 512, 64 with --phy xgmii)")
    v.add_argument("--phy", choices=["axis", "xgmii"], default="axis",
                   help="MAC side: a CMAC-shaped AXI-Stream port, or the built-in 10/25G XGMII MAC")
    v.add_argument("--qps", type=int, default=None, help="QPs of the endpoint (1..256, default 8)")
    v.add_argument("--memory", default=None,
                   help="payload memory of the endpoint: onchip (default) or axi4 (m_axi_* port)")
    v.add_argument("--mem-bytes", type=int, default=None,
                   help="payload memory size in bytes, a power of two (default 256 KiB on chip, "
                   "4 GiB of AXI4 address space)")
    v.add_argument("--mac", default="02:00:00:00:00:01", help="our MAC address")
    v.add_argument("--ip", default="10.0.0.2", help="our IPv4 address")
    v.add_argument("--port", type=int, action="append", default=None,
                   help="UDP port served by --core stack (repeatable; default 17185)")
    add_endpoint_options(v, "--cm-port")
    v.add_argument("--vlan", type=int, default=None, metavar="ID",
                   help="tag every frame 802.1Q with this VLAN (1..4094) and take only frames "
                   "of it (default untagged)")
    v.add_argument("--clk-mhz", type=float, default=None,
                   help="the core clock the retransmit timers count (default 322.265625 MHz, "
                   "156.25 MHz at W = 64)")
    v.add_argument("--axil", action="store_true",
                   help="add the AXI4-Lite control and status slave s_axil_* (addresses, "
                   "settings, QP table, every counter; register map written beside the Verilog)")
    v.add_argument("--name", default=None,
                   help="Verilog module name (default rocegen_endpoint / rocegen_stack)")
    v.add_argument("-o", "--output", required=True, help="output .v file")

    b = sub.add_parser("build", help="write a board's Vivado build: top-level Verilog, "
                       "constraints, batch Tcl script, instructions")
    b.add_argument("--board", required=True, help="board target (see `rocegen boards`)")
    b.add_argument("--ip", default="10.0.0.2", help="the board's IPv4 address")
    b.add_argument("--mac", default="02:00:00:00:00:01", help="the board's MAC address")
    b.add_argument("--qps", type=int, default=8, help="QPs of the endpoint (1..256)")
    b.add_argument("--retransmit-memory", default="bram",
                   help="where payloads are kept: bram (default), uram, or ddr4 (the board's "
                        "DDR4 through its memory controller IP)")
    b.add_argument("--mem-bytes", type=int, default=None,
                   help="payload memory size in bytes (default 256 KiB bram, 1 MiB uram, "
                        "the whole DDR4 with ddr4)")
    b.add_argument("--width", type=int, default=None,
                   help="datapath width; must be the board MAC's (checked, else implied)")
    add_endpoint_options(b, "--port")
    b.add_argument("--no-axil", dest="axil", action="store_false",
                   help="leave out the core's AXI4-Lite register block and its JTAG-to-AXI master "
                        "(by default the registers are readable from Vivado's hardware manager)")
    b.add_argument("--name", default=None, help="top-level module name (default per board)")
    b.add_argument("-o", "--output", required=True, help="output folder")

    sub.add_parser("boards", help="list the board targets")
    pp = sub.add_parser("params", help="list the endpoint's generator parameters (default, "
                        "option, meaning)")
    pp.add_argument("--markdown", action="store_true", help="as the README's Markdown table")
    pp.add_argument("--readme", metavar="FILE", default=None,
                    help="rewrite the parameter table of this README.md in place")
    system_demo.add_parser(sub)

    s = sub.add_parser("sim", help="simulation commands")
    ssub = s.add_subparsers(dest="sim_command", required=True)
    d = ssub.add_parser("demo", help="the endpoint writes into (or READs) a simulated host NIC's "
                        "memory, or with --peer-op the host writes into (or READs) the "
                        "endpoint's (Verilator); data checked, goodput reported",
                        description=DEMO_DESCRIPTION,
                        epilog=DEMO_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--width", type=int, default=None,
                   help="datapath width in bits (default 512, 64 with --phy xgmii)")
    d.add_argument("--phy", choices=["axis", "xgmii"], default="axis",
                   help="MAC side: the CMAC-shaped AXI-Stream port (default), or the built-in "
                   "10G XGMII MAC with cocotbext-eth's XGMII source and sink on the line (W = 64)")
    d.add_argument("--vlan", type=int, default=None, metavar="ID",
                   help="802.1Q VLAN ID of every frame, both ways (default: untagged)")
    d.add_argument("--qps", type=int, default=2, help="QPs sending at once (round robin, 1..256)")
    d.add_argument("--pmtu", type=int, default=4096, help="path MTU (256..4096)")
    d.add_argument("--bytes", type=int, default=1 << 20, help="bytes per QP (default 1 MiB)")
    d.add_argument("--size", type=int, default=None,
                   help="message size in bytes (default 64 KiB): at most 64 KiB, the demo's "
                   "local buffer; with --peer-op or --op READ 1 up to each QP's share of the "
                   "responder's region (the lower half of the endpoint's memory, 2 MiB at W = "
                   "512 and 256 KiB at the other widths, split between the --qps QPs)")
    d.add_argument("--op", "--opcode", dest="opcode", choices=(*VERBS, *ATOMIC_VERBS),
                   default=None,
                   help="what the endpoint does: WRITE, WRITE_IMM, SEND or SEND_IMM into the "
                   "host (default WRITE); FETCH_ADD or COMPARE_SWAP (built with its RC responder, "
                   "READs and atomics): its traffic generator's atomic runs, one per QP in turn, "
                   "--count messages each, on one 8-byte counter of the host's memory (FETCH_ADD "
                   "adds 1; COMPARE_SWAP message s swaps in s + 1 where it finds s, the counter "
                   "zeroed before each run), checked after each run against a model: the "
                   "counter, and the original values read back from the endpoint's memory; "
                   "figures: atomics/s over the generator's cycles; or READ: with its RC "
                   "responder and READ requester, "
                   "the endpoint RDMA-READs --bytes per QP of random host memory in --size "
                   "messages (work requests on its wr port) into each QP's share of the "
                   "responder's region (a run larger than the share goes in rounds). Checked: "
                   "every READ completes OK, in order, and the endpoint's memory, written back "
                   "to the host by its own RDMA WRITEs, holds the bytes read. Not with --peer-op")
    d.add_argument("--peer-op", choices=(*VERBS, *ATOMIC_VERBS), default=None, metavar="OP",
                   help="the other direction: the host NIC model's requester sends --bytes per "
                   "QP in --size messages of OP (WRITE, WRITE_IMM, SEND, SEND_IMM or READ) to "
                   "the endpoint built with its RC responder; WRITEs land one after the other in "
                   "each QP's share of the responder's region, SENDs in receive buffers posted "
                   "there (a run larger than the share goes in rounds); the line and link "
                   "options apply to both directions. Checked: every host work request "
                   "completes OK, every receive completion matches, and the endpoint's memory, "
                   "written back to the host by its own RDMA WRITEs, holds the data sent. "
                   "Goodput: the payload over the time from the first request on the host's "
                   "line to the endpoint's last ACK. READ: the host WRITEs random bytes there "
                   "first, then READs every message back; checked: each READ completes OK with "
                   "exactly what the endpoint's memory holds; goodput over the time from the "
                   "first READ request to the endpoint's last READ response. FETCH_ADD or "
                   "COMPARE_SWAP: the contended counter on the endpoint built with atomics: "
                   "every QP at once, --count FETCH_ADDs of 1 (or COMPARE_SWAP spins until "
                   "--count swaps took) on one 8-byte counter, --outstanding per QP; checked: "
                   "the counter rose by QPs x count and the values returned are that many "
                   "distinct consecutive numbers; figures: atomics, cycles, atomics/s at the "
                   "build's clock, final value, distinct values")
    d.add_argument("--count", type=int, default=64,
                   help="with --peer-op FETCH_ADD or COMPARE_SWAP: atomics (swaps that took) per "
                   "QP; with --op FETCH_ADD or COMPARE_SWAP: messages of each QP's run (default "
                   "64)")
    d.add_argument("--outstanding", type=int, default=None,
                   help="with --peer-op FETCH_ADD or COMPARE_SWAP: atomics each QP keeps in "
                   "flight, 1..16 (default 16)")
    d.add_argument("--line-gbps", type=float, default=None,
                   help="MAC line rate (default 100 at W >= 128, 10 at W = 64; 0: unthrottled)")
    d.add_argument("--loss", type=float, default=0.0, metavar="P",
                   help="chance that the link loses a frame (each direction; 0 <= P < 1)")
    d.add_argument("--dup", type=float, default=0.0, metavar="P",
                   help="chance that the link delivers a frame twice")
    d.add_argument("--reorder", type=float, default=0.0, metavar="P",
                   help="chance that the link holds a frame back behind up to 4 later ones")
    d.add_argument("--corrupt", type=float, default=0.0, metavar="P",
                   help="chance that the link flips a bit of an IPv4 frame after its Ethernet "
                   "header (the receiver's checksum or ICRC rejects it)")
    d.add_argument("--seed", type=int, default=0, help="seed of the link's faults")
    d.add_argument("--rtt-us", type=float, default=0.0, metavar="US",
                   help="round trip of the link in microseconds (half of it each way)")
    d.add_argument("--pcap", default=None, help="pcap file of every frame (default in -o)")
    d.add_argument("-o", "--output", default="build/demo", help="folder for Verilog, pcap, results")
    pg = ssub.add_parser("ping", help="a scapy host ARPs, pings and exchanges UDP datagrams with "
                         "the network stack (Verilator)")
    pg.add_argument("--width", type=int, default=512)
    pg.add_argument("--mac", default="02:00:00:00:00:01")
    pg.add_argument("--ip", default="10.0.0.2")
    pg.add_argument("-o", "--output", default="build/demo", help="folder for Verilog, pcap, report")
    replay.add_parser(ssub)
    serve.add_parser(ssub)
    rxe.add_parser(ssub)
    incast.add_parser(ssub)
    bench.add_parser(sub)

    args = p.parse_args(argv)
    try:
        if args.command == "verilog":
            if args.width is None:
                args.width = 64 if args.phy == "xgmii" else 512
            _check_verilog_args(args)
            _verilog(args)
            return 0
        if args.command == "build":
            return _build(args)
        if args.command == "params":
            return _params(args)
        if args.command == "boards":
            return _boards(args)
        if args.command == "demo":
            try:
                return system_demo.run(args)
            except RuntimeError as e:
                print(f"rocegen: demo failed: {e}", file=sys.stderr)
                return 1
        if args.command == "sim" and args.sim_command == "demo":
            return _sim_demo(args)
        if args.command == "sim" and args.sim_command == "ping":
            return _sim_ping(args)
        if args.command == "sim" and args.sim_command == "replay":
            return replay.run(args)
        if args.command == "sim" and args.sim_command == "serve":
            return serve.run(args)
        if args.command == "sim" and args.sim_command == "rxe":
            try:
                return rxe.run(args)
            except RuntimeError as e:
                print(f"rocegen: sim rxe failed: {e}", file=sys.stderr)
                return 1
        if args.command == "sim" and args.sim_command == "incast":
            return incast.run(args)
        if args.command == "bench":
            return bench.run(args)
    except ValueError as e:
        print(f"rocegen: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
