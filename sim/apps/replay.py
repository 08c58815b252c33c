"""``rocegen sim replay``: every frame of a capture file into the endpoint's receive port
(Verilator), then its receive counters as JSON.

The frames go into the MAC port (``s_axis``) of the endpoint's Verilator build
(:func:`rocegen.sim.testing.cocotb_runner.endpoint_sim_config`, shared with the tests and ``rocegen sim
demo``) one after the other, after QPs 0..N-1 (QP numbers 256..) are opened through the QP
control ports with the given peer. The frames the endpoint sends are taken as they come. The
cocotb side is :mod:`rocegen.sim.cocotb.replay`.

The capture must hold Ethernet frames (link type 1) without FCS, as pcap (microsecond or
nanosecond) or pcapng. The endpoint's addresses are those of the test top: MAC
02:00:00:00:00:01, IPv4 10.0.0.2.
"""

import json
import sys
import time
from pathlib import Path

__all__ = ["add_parser", "run", "read_frames", "DEFAULT_PEER_IP", "DEFAULT_PEER_QPN"]

DEFAULT_PEER_IP = "10.0.0.1"
DEFAULT_PEER_QPN = 0x40
#: Most QPs a replay opens (the build has max(8, N) QPs).
MAX_REPLAY_QPS = 64
LINKTYPE_ETHERNET = 1


def add_parser(subparsers):
    """Add the ``replay`` sub-command to ``rocegen sim``'s sub-parsers."""
    r = subparsers.add_parser(
        "replay", help="feed every frame of a pcap into the endpoint's receive port "
        "(Verilator) and print its receive counters as JSON")
    r.add_argument("--pcap", required=True, help="capture of Ethernet frames without FCS "
                   "(pcap or pcapng)")
    r.add_argument("--qps", type=int, default=1, help="QPs 256..256+N-1 opened before the frames "
                   f"(1..{MAX_REPLAY_QPS}, default 1)")
    r.add_argument("--peer-ip", default=DEFAULT_PEER_IP,
                   help=f"the QPs' peer IPv4 address (default {DEFAULT_PEER_IP})")
    r.add_argument("--peer-qpn", type=int, default=DEFAULT_PEER_QPN,
                   help=f"the peer QP number of QP 256; QP 256+k gets peer-qpn+k "
                   f"(default {DEFAULT_PEER_QPN:#x})")
    r.add_argument("--psn", type=int, default=0, help="the QPs' initial PSN (default 0)")
    r.add_argument("--width", type=int, default=512, help="datapath width in bits (default 512)")
    r.add_argument("-o", "--output", default="build/replay",
                   help="folder for the results file (default build/replay)")
    return r


def read_frames(path):
    """The frames of the capture file ``path``, as ``bytes``; ValueError with the reason when it
    cannot be read or does not hold Ethernet frames."""
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapReader
    path = Path(path)
    if not path.exists():
        raise ValueError(f"--pcap: {path}: no such file")
    if not path.is_file():
        raise ValueError(f"--pcap: {path}: not a file")
    try:
        reader = RawPcapReader(str(path))
    except OSError as e:
        raise ValueError(f"--pcap: {path}: cannot read it ({e.strerror or e})") from None
    except (Scapy_Exception, EOFError) as e:
        raise ValueError(f"--pcap: {path}: not a pcap or pcapng file ({e})") from None
    frames = []
    try:
        with reader:
            for n, (data, meta) in enumerate(reader):
                link = getattr(meta, "linktype", getattr(reader, "linktype", LINKTYPE_ETHERNET))
                if link != LINKTYPE_ETHERNET:
                    raise ValueError(f"--pcap: {path}: frame {n + 1} has link type {link}, not "
                                     f"Ethernet ({LINKTYPE_ETHERNET})")
                frames.append(bytes(data))
    except (Scapy_Exception, EOFError, OSError) as e:
        raise ValueError(f"--pcap: {path}: damaged after {len(frames)} frames ({e})") from None
    return frames


def _check(args):
    from rocegen.gateware.lib.stream import check_width
    from rocegen.wire.addr import parse_ip
    check_width(args.width)
    if not 1 <= args.qps <= MAX_REPLAY_QPS:
        raise ValueError(f"--qps must be 1..{MAX_REPLAY_QPS}, not {args.qps}")
    try:
        parse_ip(args.peer_ip)
    except ValueError as e:
        raise ValueError(f"--peer-ip: {e}") from None
    if not 0 <= args.peer_qpn or args.peer_qpn + args.qps > 1 << 24:
        raise ValueError(f"--peer-qpn must leave {args.qps} 24-bit QP numbers from it, not "
                         f"{args.peer_qpn}")
    if not 0 <= args.psn < 1 << 24:
        raise ValueError(f"--psn must be a 24-bit PSN (0..{(1 << 24) - 1}), not {args.psn}")


def run(args):
    """Run ``rocegen sim replay`` for parsed ``args``; prints the results as JSON on stdout
    (progress on stderr) and writes them to ``<output>/replay_w<W>.json``. Returns the exit
    status; raises ValueError for bad parameters or an unreadable capture."""
    from rocegen.sim.testing.cocotb_runner import SIM_CACHE, endpoint_sim_config, run_cocotb
    _check(args)
    pcap = Path(args.pcap).resolve()
    frames = read_frames(pcap)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    results = (out / f"replay_w{args.width}.json").resolve()
    if results.exists():
        results.unlink()
    cfg = endpoint_sim_config(args.width, num_qps=max(8, args.qps))
    print(f"replaying {len(frames)} frames of {pcap}; building the simulator if needed "
          f"(Verilator; the first build of a configuration takes a few minutes, then it is "
          f"cached under {SIM_CACHE})", file=sys.stderr)
    config = {"pcap": str(pcap), "qps": args.qps, "peer_ip": args.peer_ip,
              "peer_qpn": args.peer_qpn, "psn": args.psn, "results": str(results)}
    t0 = time.perf_counter()
    try:
        run_cocotb(cfg, "rocegen.sim.cocotb.replay", label=f"replay-{args.width}",
                   env={"REPLAY_CONFIG": json.dumps(config)})
    except AssertionError as e:
        print(e, file=sys.stderr)
        return 1
    text = results.read_text()
    print(text)
    print(f"done in {time.perf_counter() - t0:.1f} s; results in {results}", file=sys.stderr)
    return 0
