"""``rocegen sim serve``: the endpoint in Verilator as a network peer of this machine, until
stopped.

The simulated FPGA's Ethernet port is joined to real sockets (:mod:`rocegen.sim.apps.bridge`):

* a UDP tunnel on ``--listen``:``--cm-port`` (default 127.0.0.1:17185) that carries a host
  tool's connection-manager datagrams to the FPGA and delivers the FPGA's replies to
  ``--listen`` at the port the request named (from port 0x8765 when it is free), so a tool
  pointed at 127.0.0.1 talks to the FPGA with ordinary UDP sockets;
* a TCP "wire" on ``--listen``:``--wire-port`` (default 17186) carrying raw Ethernet frames
  (4-byte length, then the frame) for the host's simulated RDMA NIC (``rocegen-host --sim``)
  and any other simulated host on the segment;
* with ``--tap``, a TAP interface inside a network namespace that the command creates and
  removes itself (:mod:`rocegen.sim.apps.tap`): tools run in it with ``ip netns exec`` and reach the
  FPGA at its own IP address. Every frame of the FPGA takes the TAP, RoCEv2 included, so a RoCE
  peer using the host's own sockets there gets it (``rocegen-host --device packet:rgtap0``, or
  a soft-RoCE device on the interface); ``--roce-to wire`` sends the RoCEv2 frames to the wire
  instead.

The endpoint has the RC responder and its pattern sink unless ``--no-responder``: the host
WRITEs and SENDs into the FPGA's memory and READs it (``rocegen-host write`` / ``send`` /
``read``), and with the responder comes the READ requester: the FPGA's traffic generator READs
the host's memory (``rocegen-host traffic --op READ``), its pattern sink checking the bytes.
With the READs come the atomics (``--atomics``, default little, ``off`` to refuse them): the
host's FETCH_ADDs and COMPARE_SWAPs on the FPGA's regions (``rocegen-host atomic``), and the
FPGA's traffic generator's on the host's memory (``rocegen-host traffic --op FETCH_ADD``,
``rocegen-host atomic --direction fpga-to-host``).
The testbench plays the user logic that posts receive buffers: each QP keeps ``--rq-depth`` buffers
posted, each its whole region from the region's base, and posts one again for every receive
completion (:mod:`rocegen.sim.cocotb.serve`).

With ``--vlan ID`` the endpoint is built to tag its frames 802.1Q with that VLAN and to take only
frames of it; the host side is an untagged access port of the VLAN (:mod:`rocegen.sim.apps.bridge`):
the tunnel, the TAP and the wire see untagged frames, the FPGA tagged ones (the pcap holds them
as the FPGA's port sees them).

Beside the status file (``--status``), the run looks about once a second at three files named
after it: ``STATUS.stop`` (it stops), ``STATUS.connect`` (with the IB CM: ``PORT`` or ``PORT
SEQ``, the FPGA connects to the host's TCP port, again each time the file holds something
new) and ``STATUS.cut`` (while it exists the link is cut both ways, every frame dropped from the
FPGA's next request on: a host that vanishes; or, when its first word is ``dreq``, only the
CM's DREQs to the FPGA are dropped, the lossy links losing nothing meanwhile: a host whose one
DREQ is lost; the status file counts them in ``cut``).

The cocotb side is :mod:`rocegen.sim.cocotb.serve`; the design is the endpoint's Verilator build
shared with the tests and ``rocegen sim demo``
(:func:`rocegen.sim.testing.cocotb_runner.endpoint_sim_config`).
"""

import ipaddress
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocegen.wire.simwire import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC, WIRE_PORT

__all__ = ["add_parser", "run", "serve_config", "stop_server", "DEFAULT_WIRE_PORT"]

DEFAULT_WIRE_PORT = WIRE_PORT


def add_parser(subparsers):
    """Add the ``serve`` sub-command to ``rocegen sim``'s sub-parsers."""
    from rocegen.sim.apps.options import add_endpoint_options
    s = subparsers.add_parser(
        "serve", help="run the endpoint in Verilator as a network peer of this machine (UDP "
        "tunnel for the connection manager, TCP wire for RoCE frames, or a TAP in a namespace) "
        "until stopped")
    s.add_argument("--width", type=int, default=512, help="datapath width in bits (default 512)")
    s.add_argument("--qps", type=int, default=8, help="QPs of the endpoint (default 8)")
    s.add_argument("--ip", default=FPGA_IP, help=f"the FPGA's IPv4 address (default {FPGA_IP})")
    s.add_argument("--mac", default=FPGA_MAC, help=f"the FPGA's MAC address (default {FPGA_MAC})")
    s.add_argument("--host-ip", default=HOST_IP,
                   help=f"the host's IPv4 address as the FPGA sees it: tunnelled datagrams come "
                   f"from it (default {HOST_IP})")
    s.add_argument("--host-mac", default=HOST_MAC, help=f"the host's MAC (default {HOST_MAC})")
    s.add_argument("--listen", default="127.0.0.1",
                   help="loopback address the tunnel and the wire bind to (default 127.0.0.1)")
    s.add_argument("--wire-port", type=int, default=DEFAULT_WIRE_PORT,
                   help=f"TCP port of the wire (default {DEFAULT_WIRE_PORT}; 0: any free port)")
    s.add_argument("--tunnel-port", type=int, default=None,
                   help="UDP port of the tunnel (default: the connection manager's port, "
                   "17185; 0: any free port)")
    add_endpoint_options(s, "--cm-port", responder=True)
    s.add_argument("--line-gbps", type=float, default=None,
                   help="MAC line rate (default 100 at W >= 128, 10 at W = 64; 0: unthrottled)")
    s.add_argument("--tap", action="store_true",
                   help="instead of the tunnel, a TAP interface in a network namespace made for "
                   "the purpose (root; see --netns)")
    s.add_argument("--roce-to", choices=("tap", "wire"), default="tap",
                   help="with --tap, where the FPGA's RoCEv2 frames go: the TAP (default; a RoCE "
                   "peer on the interface takes them) or the wire")
    s.add_argument("--vlan", type=int, default=None, metavar="ID",
                   help="802.1Q VLAN ID of the FPGA's port (its frames are tagged, the host side "
                   "is an untagged port of the VLAN; default: untagged)")
    s.add_argument("--netns", default="rocegen",
                   help="name of the namespace --tap creates (default rocegen)")
    s.add_argument("--loss-to-fpga", type=float, default=0.0, metavar="P",
                   help="probability that a RoCEv2 frame to the FPGA is lost (default 0)")
    s.add_argument("--loss-from-fpga", type=float, default=0.0, metavar="P",
                   help="probability that a RoCEv2 frame from the FPGA is lost (default 0)")
    s.add_argument("--loss-seed", type=int, default=1,
                   help="seed of the lossy links (default 1)")
    s.add_argument("--pcap", default=None, help="write every frame both ways to this file")
    s.add_argument("--status", default=None,
                   help="JSON file rewritten with the ports once ready, counters while running "
                   "and the final figures (STATUS.stop, STATUS.connect and STATUS.cut beside it "
                   "stop the run, make the FPGA connect to a host's port, cut the link)")
    s.add_argument("--max-cycles", type=int, default=None,
                   help="stop after this many simulated cycles (default: run until stopped)")
    s.add_argument("--pace", type=float, default=None, metavar="US",
                   help="at most US microseconds of the FPGA's time per second of wall time, "
                   "so that the FPGA's timers leave a slow host (a virtual machine) that much "
                   "wall time to answer (default: as fast as the simulator runs)")
    return s


def check_pace(pace):
    """``--pace`` (``rocegen sim serve``'s, and ``sim rxe``'s, which passes it on): microseconds
    of the FPGA's time per second of wall time, 1..1000000; else ValueError."""
    if not 1 <= pace <= 1e6:
        raise ValueError(f"--pace must be 1..1000000 microseconds per second, not {pace}")


def _loopback(text):
    try:
        addr = ipaddress.IPv4Address(text)
    except ValueError:
        raise ValueError(f"--listen must be an IPv4 address, not {text!r}") from None
    if not addr.is_loopback:
        raise ValueError(f"--listen must be a loopback address (127.0.0.0/8): the simulated "
                         f"FPGA is reachable from this machine only, not {text}")
    return str(addr)


def serve_config(args):
    """``(SimConfig, ROCEGEN_SERVE dict)`` of the options (validated)."""
    from rocegen.gateware.lib.stream import check_width
    from rocegen.gateware.roce.layouts import MAX_QPS
    from rocegen.sim.apps.options import endpoint_params, serve_atomics
    from rocegen.sim.testing.cocotb_runner import endpoint_sim_config
    from rocegen.sim.testing.roce_env import board_clock_mhz
    from rocegen.wire.addr import parse_ip, parse_mac
    check_width(args.width)
    if args.width not in (64, 128, 256, 512):
        raise ValueError(f"--width must be 64, 128, 256 or 512 (a board clock is known for "
                         f"those), not {args.width}")
    if not 1 <= args.qps <= MAX_QPS:
        raise ValueError(f"--qps must be 1..{MAX_QPS}, not {args.qps}")
    for option, parse, value in (("--ip", parse_ip, args.ip), ("--host-ip", parse_ip, args.host_ip),
                                 ("--mac", parse_mac, args.mac),
                                 ("--host-mac", parse_mac, args.host_mac)):
        try:
            parse(value)
        except ValueError as e:
            raise ValueError(f"{option}: {e}") from None
    if parse_ip(args.ip) == parse_ip(args.host_ip):
        raise ValueError("--ip and --host-ip must differ")
    listen = _loopback(args.listen)
    for option, port in (("--wire-port", args.wire_port), ("--tunnel-port", args.tunnel_port)):
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"{option} must be a TCP/UDP port 0..65535, not {port}")
    if args.line_gbps is not None and not 0 <= args.line_gbps <= 1000:
        raise ValueError(f"--line-gbps must be 0..1000, not {args.line_gbps}")
    if args.max_cycles is not None and args.max_cycles <= 0:
        raise ValueError(f"--max-cycles must be > 0, not {args.max_cycles}")
    if args.pace is not None:
        check_pace(args.pace)
    if args.roce_to != "tap" and not args.tap:
        raise ValueError("--roce-to applies to --tap only (without a TAP, RoCEv2 frames take "
                         "the wire)")
    if args.vlan is not None and not 1 <= args.vlan <= 4094:
        raise ValueError(f"--vlan must be a VLAN ID 1..4094, not {args.vlan}")
    for option, p in (("--loss-to-fpga", args.loss_to_fpga),
                      ("--loss-from-fpga", args.loss_from_fpga)):
        if not 0 <= p <= 0.5:
            raise ValueError(f"{option} must be a probability 0..0.5, not {p}")
    params = serve_atomics(args, endpoint_params(args))
    if args.vlan is not None:
        params["vlan"] = args.vlan
    if args.mac.lower() != FPGA_MAC:
        params["mac"] = args.mac
    if args.ip != FPGA_IP:
        params["ip"] = args.ip
    cfg = endpoint_sim_config(args.width, args.qps, **params)
    resp = responder_conf(args.width, args.qps, params)
    fpga_cm_port = params.get("cm_port", 17185)
    line = args.line_gbps if args.line_gbps is not None else (100 if args.width >= 128 else 10)
    conf = {"listen": listen, "cm_port": fpga_cm_port if args.tunnel_port is None
            else args.tunnel_port, "wire_port": args.wire_port, "host_mac": args.host_mac,
            "host_ip": args.host_ip, "fpga_mac": args.mac, "fpga_ip": args.ip,
            "fpga_cm_port": fpga_cm_port, "line_gbps": line, "parent": os.getpid(),
            "pcap": str(Path(args.pcap).resolve()) if args.pcap else None,
            "max_cycles": args.max_cycles, "pace_us": args.pace,
            "clock_mhz": board_clock_mhz(args.width),
            "roce_to": args.roce_to, "vlan": args.vlan, "responder": resp,
            "rping_client_port": params.get("rping_client_port"),
            "loss": {"to_fpga": args.loss_to_fpga, "from_fpga": args.loss_from_fpga,
                     "seed": args.loss_seed}}
    return cfg, conf


def responder_conf(width, num_qps, params):
    """What the testbench needs of the responder of the endpoint ``params`` describe: ``regions``
    (each QP's ``[rkey, base, length]`` after reset), ``rq_depth``, ``pattern_sink`` and
    ``reads`` (None without the READ requester, else the READ depths its connection manager
    states: ``{"max_rd_atomic", "rd_depth"}``); None without the responder. Raises ValueError
    for parameters the endpoint refuses (named by their option)."""
    if not params.get("responder"):
        return None
    import gc
    import warnings

    from amaranth.hdl import UnusedElaboratable

    from rocegen.gateware.roce.responder.responder import default_config
    from rocegen.sim.apps.options import option_error
    from rocegen.sim.testing.roce_tops import EndpointTop
    # (built for its configuration only, never elaborated: no warnings about that)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            c = EndpointTop(width, num_qps, **params).endpoint.config
        except (ValueError, TypeError) as e:
            raise ValueError(option_error(str(e))) from None
        finally:
            gc.collect()
    regions = [[e["mr"]["rkey"], e["mr"]["base"], e["mr"]["length"]]
               for e in default_config(num_qps, *c["resp_region"], rkey_seed=c["rkey_seed"],
                                       rnr_timer=c["rnr_timer"])]
    reads = {"max_rd_atomic": c["max_rd_atomic"], "rd_depth": c["rd_depth"]} \
        if c.get("reads") else None
    return {"regions": regions, "rq_depth": c["rq_depth"], "pattern_sink": c["pattern_sink"],
            "reads": reads}


def run(args):
    """``rocegen sim serve``: returns the exit code."""
    cfg, conf = serve_config(args)
    if args.tap:
        from rocegen.sim.apps import tap
        return tap.run_in_namespace(args, cfg, conf, lambda c: _simulate(args, cfg, c))
    return _simulate(args, cfg, conf)


def _simulate(args, cfg, conf):
    from rocegen.sim.apps.options import option_error
    from rocegen.sim.testing.cocotb_runner import SIM_CACHE, run_cocotb
    status = Path(args.status).resolve() if args.status else \
        Path(tempfile.mkdtemp(prefix="rocegen-serve-")) / "status.json"
    conf["status"] = str(status)
    conf["stop_file"] = str(status) + ".stop"
    conf["connect_file"] = str(status) + ".connect"
    conf["cut_file"] = str(status) + ".cut"
    for name in ("stop_file", "connect_file", "cut_file"):
        Path(conf[name]).unlink(missing_ok=True)
    status.unlink(missing_ok=True)
    print(f"building the simulator (Verilator; the first build of a configuration takes a few "
          f"minutes, then it is cached under {SIM_CACHE})", flush=True)
    t0 = time.perf_counter()
    try:
        cfg.build()
    except (ValueError, TypeError) as e:
        raise ValueError(option_error(str(e))) from None
    print(f"simulator ready in {time.perf_counter() - t0:.1f} s; starting (stop with Ctrl-C)",
          flush=True)

    def on_signal(signum, frame):
        Path(conf["stop_file"]).touch()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_cocotb(cfg, "rocegen.sim.cocotb.serve", label=f"serve-{os.getpid()}",
                   env={"ROCEGEN_SERVE": json.dumps(conf), "COCOTB_LOG_LEVEL": "WARNING",
                        "GPI_LOG_LEVEL": "WARNING",
                        "PYTHONWARNINGS": "ignore::DeprecationWarning"},
                   console=True)
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    final = json.loads(status.read_text())
    print(summary(final))
    return 0


def stop_server(proc, timeout=120):
    """Stop a ``rocegen sim serve`` started in a session of its own (``start_new_session``):
    SIGTERM to its process group (the testbench stops and writes its final status), SIGKILL after
    ``timeout`` seconds. Nothing when it has already exited."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def summary(final):
    """The lines ``rocegen sim serve`` prints when it stops."""
    stats = final.get("stats", {})
    cm = {k: v for k, v in stats.items() if k.startswith("cm_") and v}
    lines = [f"simulated {final['cycles']} cycles ({final['sim_us']:.1f} us of FPGA time) in "
             f"{final['wall_s']:.1f} s ({final['cycles_per_s'] / 1e3:.1f} k cycles/s)",
             f"frames: {final['frames']} from the FPGA ({final['bytes']} bytes), "
             f"{final['rx_frames']} to it; tunnel {final['tunnel_rx']} requests in, "
             f"{final['tunnel_tx']} replies out; wire {final['wire_tx']} frames out, "
             f"{final['wire_rx']} in, {final['wire_no_peer']} with nobody connected",
             "connection manager: " + (", ".join(f"{k[3:]} {v}" for k, v in sorted(cm.items()))
                                       or "no requests")]
    for way, c in (final.get("loss") or {}).items():
        lines.append(f"lossy link {way.replace('_', ' ')}: {c['dropped']} of {c['sent']} RoCEv2 "
                     f"frames lost")
    if final.get("responder"):
        lines.append(f"responder: {stats.get('resp_executed', 0)} requests executed, "
                     f"{final.get('recv_completions', 0)} receive completions "
                     f"({final.get('recv_errors', 0)} not OK, "
                     f"{final.get('recv_flushed', 0)} of them flushed)")
        if final["responder"].get("pattern_sink"):
            lines.append(f"pattern sink: {stats.get('sink_bytes_checked', 0)} bytes checked, "
                         f"{stats.get('sink_bytes_wrong', 0)} wrong")
    return "\n".join(lines)
