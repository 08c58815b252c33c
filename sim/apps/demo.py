"""``rocegen demo`` (``make demo``): the whole story on one machine, as a bench user would type it.

1. ``rocegen build --board vcu118``: the Vivado build directory of the VCU118 at 100G;
2. ``rocegen sim serve``: the same endpoint core (W = 512, 8 QPs), with the RC responder, its
   pattern sink and its READ requester added, in Verilator as a network peer of this machine
   (connection manager through a UDP tunnel on 127.0.0.1, RoCE frames on a TCP wire);
3. ``rocegen-host connect --sim``: the host agent opens QPs with the simulated FPGA over UDP
   17185 (the simulated ConnectX NIC is the project's RNIC model on the wire); the replies name
   each QP's memory region on the FPGA;
4. ``rocegen-host traffic`` / ``recv``: the FPGA's traffic generator RDMA-WRITEs N MiB per QP and
   then SENDs messages with immediate data; the agent checks every message;
5. ``rocegen-host write`` / ``send`` / ``read``: the other way, the host RDMA-WRITEs the test
   pattern into the FPGA's region and SENDs it into the receive buffers the FPGA posted; the
   FPGA's pattern sink checks every byte and its verdict comes back over the connection
   manager; then the host RDMA-READs what it wrote back and checks every byte itself;
6. ``rocegen-host traffic --op READ`` / ``recv``: the FPGA's traffic generator RDMA-READs a
   host buffer the agent filled with the test pattern, and its pattern sink checks every byte
   the READ responses bring (the verdict over the connection manager);
7. ``rocegen-host close``, then the simulated FPGA is stopped and its figures printed.

Every command is printed before it runs, with its output. Nothing here is specific to the
simulation but the ``--sim`` of step 3: against a board, the same host commands run without it.
"""

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from rocegen.sim.apps.serve import stop_server

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    d = subparsers.add_parser(
        "demo", help="the whole story: VCU118 build, the endpoint in Verilator as a network peer, "
        "the host agent opening QPs and checking RDMA WRITEs, SENDs and READs both ways")
    d.add_argument("--mib", type=int, default=8, help="MiB of WRITEs per QP (default 8)")
    d.add_argument("--qps", type=int, default=2, help="QPs the host opens (1..8, default 2)")
    d.add_argument("--sends", type=int, default=64,
                   help="SEND-with-immediate messages of 4 KiB per QP (default 64)")
    d.add_argument("--host-writes", type=int, default=16,
                   help="64 KiB RDMA WRITEs per QP from the host into the FPGA (default 16)")
    d.add_argument("--host-sends", type=int, default=16,
                   help="4 KiB SENDs with immediate data per QP from the host to the FPGA "
                   "(default 16)")
    d.add_argument("--host-reads", type=int, default=16,
                   help="64 KiB RDMA READs per QP by the host of what its WRITEs left in the "
                   "FPGA (at most --host-writes; default 16)")
    d.add_argument("--fpga-reads", type=int, default=16,
                   help="64 KiB RDMA READs per QP by the FPGA's traffic generator of a host "
                   "buffer (default 16)")
    d.add_argument("-o", "--output", default="build/demo", help="folder for everything written")
    return d


def _free(port, kind):
    s = socket.socket(socket.AF_INET, kind)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _show(cmd):
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)


def _run(cmd, env):
    _show(cmd)
    r = subprocess.run(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print(r.stdout, end="", flush=True)
    if r.returncode:
        raise RuntimeError(f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''} failed ({r.returncode})")
    return r.stdout


def run(args):
    if not 1 <= args.qps <= 8:
        raise ValueError(f"--qps must be 1..8 (the demo FPGA has 8), not {args.qps}")
    if not 1 <= args.mib <= 64:
        raise ValueError(f"--mib must be 1..64, not {args.mib}")
    for option, value in (("--sends", args.sends), ("--host-writes", args.host_writes),
                          ("--host-sends", args.host_sends), ("--host-reads", args.host_reads),
                          ("--fpga-reads", args.fpga_reads)):
        if not 0 <= value <= 4096:
            raise ValueError(f"{option} must be 0..4096, not {value}")
    if args.host_reads > args.host_writes:
        raise ValueError(f"--host-reads ({args.host_reads}) must be at most --host-writes "
                         f"({args.host_writes}): the host reads back what it wrote")
    t0 = time.monotonic()
    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    bindir = Path(sys.executable).parent
    rocegen = [str(bindir / "rocegen")] if (bindir / "rocegen").exists() else \
        [sys.executable, "-m", "rocegen.cli"]
    host = [str(bindir / "rocegen-host")] if (bindir / "rocegen-host").exists() else \
        [sys.executable, "-m", "rocegen.host.cli"]
    env = {**os.environ, "ROCEGEN_HOST_STATE": str(out / "host-agent")}
    figures = {}

    print("== 1. the Vivado build directory of the VCU118 (100G CMAC, W = 512)", flush=True)
    t = time.monotonic()
    _run([*rocegen, "build", "--board", "vcu118", "-o", str(out / "vcu118")], env)
    figures["build_s"] = time.monotonic() - t

    print("\n== 2. the endpoint core of that build, with the RC responder, its pattern sink and "
          "its READ requester, in Verilator, as a peer of this machine", flush=True)
    status, pcap = out / "serve.json", out / "serve.pcap"
    status.unlink(missing_ok=True)
    ports = []
    if not (_free(17185, socket.SOCK_DGRAM) and _free(17186, socket.SOCK_STREAM)):
        ports = ["--tunnel-port", "0", "--wire-port", "0"]      # someone uses the defaults
    serve_cmd = [*rocegen, "sim", "serve", "--status", str(status), "--pcap", str(pcap), *ports]
    _show(serve_cmd + ["&"])
    log = open(out / "serve.log", "w")
    serve = subprocess.Popen(serve_cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        t = time.monotonic()
        while not status.exists():
            if serve.poll() is not None:
                raise RuntimeError("rocegen sim serve exited:\n" +
                                   (out / "serve.log").read_text()[-3000:])
            time.sleep(0.2)
        st = json.loads(status.read_text())
        figures["serve_start_s"] = time.monotonic() - t
        print(f"simulated FPGA {st['fpga_ip']} up in {figures['serve_start_s']:.1f} s: connection "
              f"manager tunnel udp 127.0.0.1:{st['cm_port']}, wire tcp 127.0.0.1:{st['wire_port']} "
              f"(log: {out / 'serve.log'})", flush=True)
        sim = ["--sim"]
        if ports:
            sim += ["--device", f"sim:127.0.0.1:{st['wire_port']}", "--cm-port", str(st["cm_port"])]

        print("\n== 3. the host agent opens QPs with the FPGA over UDP 17185", flush=True)
        size = 65536
        count = args.mib * (1 << 20) // size
        window = 1 << max(16, (args.mib * (1 << 20) - 1).bit_length())
        _run([*host, "connect", *sim, "--qps", str(args.qps), "--window", str(window)], env)

        print(f"\n== 4. the FPGA writes {args.mib} MiB per QP, then sends {args.sends} messages with "
              f"immediate data; every message checked (the rates the host prints are those of "
              f"the simulation on this machine's clock)", flush=True)
        t = time.monotonic()
        _run([*host, "traffic", "--op", "WRITE", "--count", str(count), "--size", str(size)], env)
        _run([*host, "recv", "--no-progress"], env)
        figures["write_s"] = time.monotonic() - t
        if args.sends:
            _run([*host, "traffic", "--op", "SEND_IMM", "--count", str(args.sends), "--size",
                  "4096"], env)
            _run([*host, "recv", "--no-progress"], env)
        _run([*host, "status"], env)

        print(f"\n== 5. the host writes {args.host_writes} x 64 KiB per QP into the FPGA's "
              f"memory and sends it {args.host_sends} x 4 KiB with immediate data; the FPGA "
              f"checks every byte against the test pattern of its address", flush=True)
        t = time.monotonic()
        if args.host_writes:
            _run([*host, "write", "--count", str(args.host_writes), "--size", "65536"], env)
        if args.host_sends:
            _run([*host, "send", "--count", str(args.host_sends), "--size", "4096", "--imm"],
                 env)
        figures["host_s"] = time.monotonic() - t
        if args.host_reads:
            print(f"\nthe host reads {args.host_reads} x 64 KiB per QP back from the FPGA's "
                  f"memory and checks every byte against the test pattern of its FPGA address",
                  flush=True)
            t = time.monotonic()
            _run([*host, "read", "--count", str(args.host_reads), "--size", "65536"], env)
            figures["host_read_s"] = time.monotonic() - t
        _run([*host, "status"], env)

        if args.fpga_reads:
            print(f"\n== 6. the FPGA reads {args.fpga_reads} x 64 KiB per QP from a host buffer "
                  f"the agent filled with the test pattern of the FPGA addresses the bytes land "
                  f"at; the FPGA's pattern sink checks every byte", flush=True)
            t = time.monotonic()
            _run([*host, "traffic", "--op", "READ", "--count", str(args.fpga_reads), "--size",
                  "65536"], env)
            _run([*host, "recv", "--no-progress"], env)
            figures["fpga_read_s"] = time.monotonic() - t

        print("\n== 7. close the QPs and stop the simulated FPGA", flush=True)
        _run([*host, "close"], env)
    finally:
        stop_server(serve)
        log.close()
    final = json.loads(status.read_text())
    if final.get("state") != "stopped":
        raise RuntimeError("the simulated FPGA did not stop cleanly")
    from rocegen.sim.apps.serve import summary
    print(summary(final))
    mhz = final["clock_mhz"]
    s = final["stats"]
    print(f"\nthe FPGA sent {s['roce_tx_packets']} RoCE packets ({final['bytes']} bytes of frames) in "
          f"{final['cycles']} cycles = {final['cycles'] / mhz:.1f} us at {mhz:.3f} MHz; "
          f"{s['roce_cpl_ok']} work requests completed OK, {s['roce_cpl_error']} with an error")
    print(f"every frame is in {pcap} (Wireshark decodes UDP 4791 as RoCE); the VCU118 build is in "
          f"{out / 'vcu118'}")
    print(f"demo done in {time.monotonic() - t0:.1f} s")
    return 0
