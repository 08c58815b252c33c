"""``rocegen sim rxe``: the endpoint in Verilator against Linux's own RDMA stack, ``rdma_rxe``
(soft-RoCE), in a QEMU guest; every byte checked both ways.

1. The guest (:mod:`rocegen.sim.apps.rxe_guest`): built once into ``~/.cache/rocegen``.
2. ``rocegen sim serve --tap`` runs the endpoint (with its RC responder, pattern sink and READ
   requester) in a network namespace of its own, ``--loss-to-fpga`` / ``--loss-from-fpga``
   losing RoCEv2 frames on the way. In that namespace a bridge joins serve's TAP to the TAP of
   QEMU's virtio NIC: the guest is the host at 10.0.0.1 (with the host's MAC), the FPGA is
   10.0.0.2. Nothing changes in this machine's own network.
3. The guest adds ``rxe0`` on its NIC and plays the story (:mod:`rocegen.sim.apps.rxe_story`) with
   the host agent on pyverbs: connect ``--qps`` QPs over the connection manager (UDP 17185), the
   FPGA's traffic generator WRITEs, WRITE_IMMs, SENDs, SEND_IMMs into rxe memory and READs it,
   the FPGA's traffic generator runs atomics on a counter in rxe's memory (``rocegen-host
   atomic --direction fpga-to-host``: FETCH_ADDs, then COMPARE_SWAP chains, one run per QP in
   turn, the originals READ back from the FPGA),
   the host WRITEs, SENDs (both with and without immediate data) into the FPGA and READs it
   back, rxe issues atomics into the FPGA's memory (the contended counter of ``rocegen-host
   atomic``: FETCH_ADDs, then COMPARE_SWAP spins, every QP at once on one target; the endpoint
   is built with atomics, little-endian, as rxe keeps a 64-bit value), the QPs are closed and
   opened again and data moves once more both ways.
4. The figures: per step the bytes checked and wrong, the messages, the frames each way and
   the NAKs (rxe's counters and the FPGA's), then the whole capture by kind (ACKs, each NAK
   kind, READ requests and responses, duplicates) each way, the lossy links' counts, and the
   wall time against the simulated time. Files in ``--output``: ``serve.pcap`` (every frame
   the FPGA's port saw), ``report.json``, ``serve.log``, ``guest/`` (the job, the story's
   ``story.json``, the agent's log, the guest's console).

With ``--rdma-cm-port`` the endpoint has the standard RDMA connection manager (the IB CM), and
the story's ``cm:`` steps play librdmacm's own tools against it (:data:`rxe_story.STEPS`):
cmtime, rping, rdma_client, rdma_server (the FPGA connecting), the agent through librdmacm, a
host that vanishes under a busy connection (``cm:vanish``: the simulation's link cut both
ways, the FPGA's DREQs unanswered, its time-wait, the QP back), connections opened and closed
in a loop on every QP (``cm:loop``, ``--cm-loops``), and both connection managers' QPs open at
once (``cm:mixed``). The IB CM's timers are shortened for the co-simulation (its QPs'
retransmit timeout ``--cm-timeout``, its wait for the host's answer to a REP or DREQ, the
time-wait): docs/rxe.md says why and by how much.

Faults: ``--loss-to-fpga`` / ``--loss-from-fpga`` (lossy links), ``--recv-depth N`` (few
receive buffers on the host: the FPGA's SENDs meet RNR NAKs), ``--host-timeout 8`` (rxe
retransmits spuriously: its timer is far shorter than the simulated FPGA needs to answer).
Everything after ``--`` goes to ``rocegen sim serve`` (the endpoint's build options: ``--rq-depth``,
``--rnr-timer``, ``--resp-region``, ...).

Needs root, QEMU, debootstrap and cpio (``make qemu``); KVM when ``/dev/kvm`` works, else TCG.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from rocegen.sim.apps import rxe_guest, rxe_story
from rocegen.sim.apps.serve import check_pace, stop_server
from rocegen.sim.apps.tap import TAP_NAME
from rocegen.sim.testing.pcap import read_pcap
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc
from rocegen.wire import roce as R
from rocegen.wire.addr import parse_mac
from rocegen.wire.roce import SIMULATED_PEER_TIMEOUT
from rocegen.wire.simwire import FPGA_IP, HOST_IP, HOST_MAC

__all__ = ["add_parser", "run", "frame_kinds", "classify_pcap", "rxe_vectors", "write_vectors",
           "SIM_FPGA_TIMEOUT"]

#: The FPGA QP's retransmit timeout code in a co-simulation (4.096 us x 2^10 = 4.2 ms of the
#: FPGA's time, some 10 s of wall time at W = 64): the endpoint's default, 14 (67 ms), is minutes
#: of wall time, so a lost last ACK would stall a step far longer than the host agent waits.
SIM_FPGA_TIMEOUT = 10
#: The IB CM's time-wait in a co-simulation, in the FPGA's time (about 1 s of wall time at
#: W = 64): long enough for every DREQ sent again to meet it, short enough that the QPs are
#: free again within a step.
CM_TIME_WAIT_US = 500
#: The longest wait of the IB CM for the host's answer to its REQ, REP or DREQ in a
#: co-simulation, a CM time code (4.096 us x 2^7 = 0.52 ms of the FPGA's time, about a second of
#: wall time at W = 64, far more than rxe takes to answer): Linux's REQs ask for 20 (4.3 s, each
#: sent again 15 times), a DREQ no host answers would hold its QP for hours of wall time.
CM_RESPONSE_TIMEOUT = 7
#: The retransmit timeout code of the IB CM's QPs in a co-simulation, in the FPGA's time (4.096
#: us x 2^8 = 1 ms, one to two seconds of wall time at W = 64; the REQ's longer one is cut to
#: it): a QP whose host vanished runs out of its 7 retries in some 30 s of wall time, not the
#: 80 s of ``--fpga-timeout``'s 10.
SIM_CM_TIMEOUT = 8
#: The gateware services' quiet time in a co-simulation (``--service-idle``), in the FPGA's
#: time: a live rping client's requests are never further apart than the FPGA's retries of the
#: request it waits on (8 x 1 ms of ``SIM_CM_TIMEOUT``, then the QP fails anyway); a connection
#: whose DREQ was lost is closed 10 to 20 ms of the FPGA's time later, some 10 to 40 s of wall
#: time.
SERVICE_IDLE_US = 10_000
#: The co-simulation's pace by default: at most this many microseconds of the FPGA's time per
#: second of wall time (``rocegen sim serve --pace``). The timeouts above assume a millisecond
#: of the FPGA's time to be a second or two of wall time; a simulator waiting alone runs
#: several times faster, and would then time out the guest (QEMU without KVM, and slower still
#: when another job takes the CPU) after a fraction of a second.
SIM_PACE_US = 1000
#: ``cm:loop``'s rounds by default.
CM_LOOPS = 3
BRIDGE, QEMU_TAP = "rgbr0", "rgqemu0"
PORT_MAC = "02:00:00:00:00:fe"          # serve's TAP, once on the bridge
DEFAULT_STEPS = ("connect", "fpga:WRITE", "fpga:WRITE_IMM", "fpga:SEND", "fpga:SEND_IMM",
                 "fpga:READ", "fpga:FETCH_ADD", "fpga:COMPARE_SWAP", "host:WRITE",
                 "host:WRITE_IMM", "host:SEND", "host:SEND_IMM", "host:READ", "host:FETCH_ADD",
                 "host:COMPARE_SWAP", "close", "connect", "fpga:WRITE", "host:WRITE", "stop")
#: rxe's counters shown per step (sysfs hw_counters names)
RXE_SHOWN = ("sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
             "rcvd_seq_err", "rcvd_rnr_err", "send_rnr_err", "completer_retry_err",
             "retry_exceeded_err", "ack_deferred")
#: the FPGA's counters shown per step
FPGA_SHOWN = ("roce_tx_packets", "roce_rx_packets", "roce_rx_naks", "roce_seq_naks",
              "roce_rnr_naks", "roce_timeouts", "resp_seq_nak", "resp_rnr",
              "resp_duplicate", "rd_duplicate", "sink_bytes_checked", "sink_bytes_wrong")


def add_parser(subparsers):
    """Add the ``rxe`` sub-command to ``rocegen sim``'s sub-parsers."""
    r = subparsers.add_parser(
        "rxe", help="co-simulate the endpoint (Verilator) against Linux's soft-RoCE rdma_rxe in "
        "a QEMU guest: the host agent on pyverbs, every op both ways, every byte checked",
        description=__doc__.split("\n\n")[0])
    r.add_argument("--width", type=int, default=64, help="datapath width (default 64)")
    r.add_argument("--qps", type=int, default=2, help="QPs opened (default 2)")
    r.add_argument("--pmtu", type=int, choices=(1024, 4096), default=1024,
                   help="path MTU (default 1024; 4096 gives the guest an MTU of 9000)")
    r.add_argument("--count", type=int, default=3, help="messages per QP and step (default 3)")
    r.add_argument("--size", type=int, default=3000, help="bytes per message (default 3000)")
    r.add_argument("--steps", default=",".join(DEFAULT_STEPS),
                   help="the story's steps, comma-separated (default: all ops both ways, the "
                   "atomics both ways, close, reopen, once more both ways, stop)")
    r.add_argument("--loss-to-fpga", type=float, default=0.0, metavar="P",
                   help="probability that a RoCEv2 frame from rxe is lost (default 0)")
    r.add_argument("--loss-from-fpga", type=float, default=0.0, metavar="P",
                   help="probability that a RoCEv2 frame to rxe is lost (default 0)")
    r.add_argument("--loss-seed", type=int, default=1)
    r.add_argument("--recv-depth", type=int, default=None,
                   help="receive buffers per host QP (few: the FPGA's SENDs meet RNR NAKs)")
    r.add_argument("--host-timeout", type=int, default=SIMULATED_PEER_TIMEOUT,
                   help=f"the host QP's ACK timeout code (default {SIMULATED_PEER_TIMEOUT}: 4.3 s; "
                   f"small values make rxe retransmit spuriously)")
    r.add_argument("--fpga-timeout", type=int, default=SIM_FPGA_TIMEOUT,
                   help=f"the FPGA QP's retransmit timeout code, in the FPGA's time (default "
                   f"{SIM_FPGA_TIMEOUT}: 4.2 ms)")
    r.add_argument("--cm-timeout", type=int, default=SIM_CM_TIMEOUT, metavar="CODE",
                   help=f"the retransmit timeout code of the IB CM's QPs, in the FPGA's time "
                   f"(a REQ's longer one is cut to it; default {SIM_CM_TIMEOUT}: 1 ms)")
    r.add_argument("--rdma-cm-port", type=int, default=None, metavar="PORT",
                   help="build the endpoint with the standard RDMA connection manager listening "
                   "on TCP port PORT (IB CM over QP1, a time-wait of "
                   f"{CM_TIME_WAIT_US} us, its wait for a host's answer to its REQ, REP or DREQ cut "
                   f"to 2^{CM_RESPONSE_TIMEOUT} x 4.096 us, its services' connections closed "
                   f"once quiet for {SERVICE_IDLE_US} us), its rping server on port "
                   f"{rxe_story.RPING_PORT} and "
                   f"its SEND echo on {rxe_story.ECHO_PORT}: the steps cm:connect (the host "
                   "agent's QPs through librdmacm), cm:cmtime (librdmacm's cmtime, --qps "
                   "connections at once), cm:rping (rping -c against the FPGA), "
                   "cm:rdma_client (librdmacm's rdma_client against the echo), "
                   "cm:rdma_server (the FPGA connects to librdmacm's rdma_server in the guest, "
                   f"port {rxe_story.SERVER_PORT}), cm:rping_server (the FPGA's rping client, "
                   f"{rxe_story.CLIENT_COUNT} pings of {rxe_story.CLIENT_SIZE} bytes, against "
                   f"rping -s in the guest, port {rxe_story.CLIENT_PORT}), cm:vanish (rping's "
                   "host vanishes: the link "
                   "cut under the connection, the FPGA's DREQs unanswered, its time-wait, the "
                   "QP free again, rping again), cm:quiet (rping's DREQ lost: the FPGA "
                   "closes the quiet connection), cm:loop (cmtime on every QP of the FPGA, "
                   "--cm-loops times, every QP free after each) and cm:mixed (after connect: "
                   "rping through the IB CM while the agent's QPs of UDP 17185 are open and "
                   "WRITE, both checked)")
    r.add_argument("--pace", type=float, default=SIM_PACE_US, metavar="US",
                   help=f"at most US microseconds of the FPGA's time per second of wall time "
                   f"(default {SIM_PACE_US}: the FPGA's timeouts leave the guest at least a "
                   f"second per millisecond)")
    r.add_argument("--cm-loops", type=int, default=CM_LOOPS, metavar="N",
                   help=f"cm:loop's rounds of cmtime (default {CM_LOOPS})")
    r.add_argument("--host-retry-cnt", type=int, default=7)
    r.add_argument("--host-rnr-retry", type=int, default=7)
    r.add_argument("--output", default="build/rxe", help="folder of the run's files "
                   "(default build/rxe)")
    r.add_argument("--guest-timeout", type=float, default=1800,
                   help="seconds the guest may take for the story (default 1800)")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.add_argument("--vectors", default=None, metavar="FILE",
                   help="write one frame of each kind rxe sent (the vector format of "
                   "tests/vectors) to FILE; with --vectors-from, of those captures too")
    r.add_argument("--vectors-from", action="append", default=[], metavar="PCAP",
                   help="an earlier run's serve.pcap whose rxe frames --vectors also takes")
    r.add_argument("serve_args", nargs=argparse.REMAINDER,
                   help="after --: options of rocegen sim serve (the endpoint's build)")
    return r


def _validate(args):
    steps = [s for s in args.steps.split(",") if s]
    bad = [s for s in steps if s not in rxe_story.STEPS]
    if bad:
        raise ValueError(f"--steps: unknown {bad}; steps are {', '.join(rxe_story.STEPS)}")
    if not steps or steps[0] not in rxe_story.STARTS + rxe_story.STANDALONE:
        first = rxe_story.STARTS + rxe_story.STANDALONE
        raise ValueError(f"--steps must begin with {', '.join(first[:-1])} or {first[-1]}")
    check_pace(args.pace)
    if not 1 <= args.cm_loops <= 1000:
        raise ValueError(f"--cm-loops must be 1..1000, not {args.cm_loops}")
    if args.rdma_cm_port is None and any(s.startswith("cm:") for s in steps):
        raise ValueError("the cm: steps need --rdma-cm-port")
    if args.rdma_cm_port is not None and not 0 <= args.rdma_cm_port <= 65535:
        raise ValueError(f"--rdma-cm-port must be 0..65535, not {args.rdma_cm_port}")
    if args.rdma_cm_port in (rxe_story.RPING_PORT, rxe_story.ECHO_PORT, rxe_story.SERVER_PORT):
        raise ValueError(f"--rdma-cm-port must not be {rxe_story.RPING_PORT}, "
                         f"{rxe_story.ECHO_PORT} or {rxe_story.SERVER_PORT}, the ports of the "
                         f"FPGA's rping server and SEND echo and of rdma_server in the guest")
    if not 1 <= args.qps <= 8:
        raise ValueError(f"--qps must be 1..8, not {args.qps}")
    if not 1 <= args.count <= 4096 or not 1 <= args.size <= 65536:
        raise ValueError("--count must be 1..4096 and --size 1..65536")
    if args.recv_depth is not None and not 1 <= args.recv_depth <= 4096:
        raise ValueError(f"--recv-depth must be 1..4096, not {args.recv_depth}")
    if not 0 <= args.host_timeout <= 31:
        raise ValueError(f"--host-timeout must be 0..31, not {args.host_timeout}")
    if not 1 <= args.fpga_timeout <= 31:
        raise ValueError(f"--fpga-timeout must be 1..31, not {args.fpga_timeout}")
    if not 1 <= args.cm_timeout <= 31:
        raise ValueError(f"--cm-timeout must be 1..31, not {args.cm_timeout}")
    for option, v in (("--host-retry-cnt", args.host_retry_cnt),
                      ("--host-rnr-retry", args.host_rnr_retry)):
        if not 0 <= v <= 7:
            raise ValueError(f"{option} must be 0..7, not {v}")
    extra = list(args.serve_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    for own in ("--tap", "--netns", "--status", "--pcap", "--width", "--qps", "--host-ip",
                "--host-mac", "--ip", "--rdma-cm-port", "--rdma-cm-time-wait",
                "--service-idle", "--rping-server", "--send-echo", "--rping-client",
                "--rping-client-size", "--rping-client-count"):
        if own in extra:
            raise ValueError(f"{own} is set by rocegen sim rxe, not after --")
    return steps, extra


def _ns(netns, *cmd, check=True):
    r = subprocess.run(["ip", "netns", "exec", netns, *cmd], capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} in namespace {netns}: {r.stderr.strip()}")
    return r


def _bridge(netns, mtu):
    """serve's TAP and QEMU's TAP on one bridge in the namespace; the namespace itself keeps no
    address on the segment (the guest is the host there)."""
    _ns(netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", check=False)
    _ns(netns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1", check=False)
    _ns(netns, "ip", "addr", "flush", "dev", TAP_NAME)
    # serve gave its TAP the host's MAC, which the guest now has: a bridge port keeping it would
    # take the guest's frames for the bridge itself
    _ns(netns, "ip", "link", "set", TAP_NAME, "address", PORT_MAC)
    _ns(netns, "ip", "link", "add", BRIDGE, "type", "bridge")
    _ns(netns, "ip", "tuntap", "add", "dev", QEMU_TAP, "mode", "tap")
    for dev in (TAP_NAME, QEMU_TAP):
        _ns(netns, "ip", "link", "set", dev, "mtu", str(mtu))
        _ns(netns, "ip", "link", "set", dev, "master", BRIDGE)
        _ns(netns, "ip", "link", "set", dev, "up")
    _ns(netns, "ip", "link", "set", BRIDGE, "mtu", str(mtu))
    _ns(netns, "ip", "link", "set", BRIDGE, "up")


def _job_sh(mtu):
    return f"""set -x
export PATH=/usr/local/bin:$PATH
ip link set eth0 mtu {mtu} up
ip addr add {HOST_IP}/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
rdma link show
python3 /mnt/src/sim/apps/rxe_story.py /mnt/out/job.json
"""


def _wait_ready(status, proc, timeout=3600):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return None
        try:
            st = json.loads(status.read_text())
            if st.get("state") == "ready" or "cycles" in st:
                return st
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return None


def frame_kinds(path, host_mac=HOST_MAC):
    """``(direction, kind, frame)`` of every RoCEv2 frame of the capture, in order: direction
    ``"to_fpga"`` (sent by the host's MAC) or ``"from_fpga"``; kind the BTH opcode's name, an
    ACKNOWLEDGE by its AETH syndrome (``ACK``, ``NAK PSN sequence``, ``NAK invalid request``,
    ``NAK remote access``, ``NAK remote operation``, ``RNR NAK``), and a request whose (QP, PSN,
    opcode) came that way before as ``duplicate <opcode>``."""
    host = parse_mac(host_mac)
    seen = {"to_fpga": set(), "from_fpga": set()}
    at = H.ETH.length + H.IPV4.length + H.UDP.length
    naks = {R.NAK_PSN_SEQ: "NAK PSN sequence", R.NAK_INV_REQ: "NAK invalid request",
            R.NAK_REM_ACCESS: "NAK remote access", R.NAK_REM_OP: "NAK remote operation"}
    for _ts, frame in read_pcap(path):
        eth = H.ETH.unpack(frame[:H.ETH.length])
        if eth["ethertype"] != H.ETHERTYPE_IPV4 or len(frame) < at + H.BTH.length:
            continue
        udp = H.UDP.unpack(frame[H.ETH.length + H.IPV4.length:at])
        if udp["dst_port"] != H.UDP_PORT_ROCEV2:
            continue
        way = "to_fpga" if eth["src"] == host else "from_fpga"
        bth = H.BTH.unpack(frame[at:at + H.BTH.length])
        op = bth["opcode"]
        kind = opc.name(op)
        if op == opc.OP_RC_ACKNOWLEDGE:
            a = at + H.BTH.length
            syn = H.AETH.unpack(frame[a:a + H.AETH.length])["syndrome"]
            kind = naks.get(syn) or ("RNR NAK" if syn >> 5 == 1 else "ACK")
        elif opc.is_request(op):
            key = (bth["dest_qp"], bth["psn"], op)
            if key in seen[way]:
                kind = f"duplicate {kind}"
            seen[way].add(key)
        yield way, kind, frame


#: The IB CM's MADs by attribute ID, as :func:`classify_pcap` names them.
CM_MADS = {I.ATTR_REQ: "REQ", I.ATTR_MRA: "MRA", I.ATTR_REJ: "REJ", I.ATTR_REP: "REP",
           I.ATTR_RTU: "RTU", I.ATTR_DREQ: "DREQ", I.ATTR_DREP: "DREP"}


def cm_mad(frame):
    """The IB CM message a RoCEv2 frame carries (a UD SEND_ONLY to QP1 of the CM's class:
    ``"REQ"``, ``"DREQ"``, ... by :data:`CM_MADS`), else None."""
    at = H.ETH.length + H.IPV4.length + H.UDP.length
    bth = H.BTH.unpack(frame[at:at + H.BTH.length])
    mad = at + H.BTH.length + H.DETH.length
    if bth["opcode"] != opc.OP_UD_SEND_ONLY or bth["dest_qp"] != I.QP1 or \
            len(frame) < mad + I.MAD_HDR_LENGTH:
        return None
    hdr = I.MAD_HDR.unpack(frame[mad:mad + I.MAD_HDR_LENGTH])
    if hdr["mgmt_class"] != I.MGMT_CLASS_CM:
        return None
    return CM_MADS.get(hdr["attribute_id"])


def classify_pcap(path, host_mac=HOST_MAC):
    """``{direction: Counter of kinds}`` of the capture's RoCEv2 frames (:func:`frame_kinds`;
    duplicates also counted together as ``duplicate``, and the IB CM's MADs, UD SEND_ONLYs,
    also by message as ``CM REQ``, ``CM DREQ``, ...: :func:`cm_mad`)."""
    out = {"to_fpga": Counter(), "from_fpga": Counter()}
    for way, kind, frame in frame_kinds(path, host_mac):
        out[way][kind] += 1
        if kind.startswith("duplicate "):
            out[way]["duplicate"] += 1
        elif kind == "UD_SEND_ONLY" and (msg := cm_mad(frame)):
            out[way][f"CM {msg}"] += 1
    return out


def rxe_vectors(pcaps):
    """The first frame of each kind rxe sent in the captures ``[(pcap, run)]`` (``run``: a
    few words on the run it came from): ``[(name, frame, comment)]``."""
    out, kinds = [], set()
    for path, run in pcaps:
        for way, kind, frame in frame_kinds(path):
            if way == "to_fpga" and kind not in kinds:
                kinds.add(kind)
                name = "rxe-" + kind.lower().replace("_", "-").replace(" ", "-")
                out.append((name, frame, f"{kind}, from {run}"))
    return out


def write_vectors(path, vectors, manifest):
    """The vector file (the format of :mod:`rocegen.sim.testing.vectors`) of ``vectors``."""
    head = [f"# RoCEv2 frames sent by Linux's soft-RoCE (rdma_rxe, Debian {manifest['suite']} "
            f"kernel {manifest['kernel']}, rdma-core {manifest['packages'].get('rdma-core', '?')})",
            "# to the endpoint under Verilator in `rocegen sim rxe` runs, as the FPGA's port "
            "received them", "# (one frame of each kind; written by rocegen sim rxe --vectors).",
            "# name: a short name; hex: the whole Ethernet frame as captured, without FCS.", "#"]
    body = []
    for name, frame, comment in vectors:
        body += [f"# {comment}", f"name: {name}", f"hex: {frame.hex()}"]
    Path(path).write_text("\n".join(head + body) + "\n")


def _delta(after, before, names):
    return {n: after.get(n, 0) - before.get(n, 0) for n in names if n in after}


def report(story, final, pcap, guest_manifest):
    """The report (a dict) of a run: per step what the story saw, with rxe's and the FPGA's
    counters over it, and the whole capture by kind."""
    steps = []
    prev_rxe = story.get("counters_start", {})
    prev_fpga = {}
    for s in story.get("steps", []):
        fpga = (s.get("fpga") or {}).get("stats", {})
        tallied = [c for c in s["commands"] if "checked_by" in c]
        row = {"step": s["step"], "ok": s["ok"], "wall_s": round(s["wall_s"], 1),
               "free_at_start": s.get("free_at_start"),
               "checked_by": tallied[0]["checked_by"] if tallied else None,
               "checked": sum(c["checked"] for c in tallied),
               "wrong": sum(c["wrong"] for c in tallied),
               "messages": sum(c["messages"] for c in tallied),
               "rxe": _delta(s["counters"], prev_rxe, RXE_SHOWN),
               "fpga": _delta(fpga, prev_fpga, FPGA_SHOWN) if fpga else {},
               "atomic": next((c["atomic"] for c in s["commands"] if c.get("atomic")), None)}
        cm = next((c["json"] for c in s["commands"] if c["cmd"][0] == "cmtime"), None) \
            if s["step"] == "cm:cmtime" else None
        if cm is not None:      # librdmacm's cmtime: its table, the connections the FPGA made
            row.update(cmtime=cm["table"], fpga_established=cm["fpga_established"],
                       fpga_timewait_exits=cm["fpga_timewait_exits"])
        rp = next((c["json"] for c in s["commands"] if c["cmd"][0] == "rping"), None)
        if s["step"] == "cm:rping_server" and s["commands"]:
            # rping -s against the FPGA's rping client: its pings, the FPGA's counts
            row.update(rping_server=s["commands"][0]["json"])
        elif s["step"] == "cm:quiet" and s["commands"]:
            # rping whose DREQ was lost: the FPGA's close of the quiet connection
            row.update(quiet=s["commands"][0]["json"])
        elif rp is not None:    # rping -c: the pings it printed, those the FPGA counted
            row.update(rping=rp)
        rc = next((c["json"] for c in s["commands"] if c["cmd"][0] == "rdma_client"), None)
        if rc is not None:      # rdma_client: its output, the echoes the FPGA counted
            row.update(rdma_client=rc)
        sv = next((c["json"] for c in s["commands"] if c["cmd"][0] == "rdma_server"), None)
        if sv is not None:      # rdma_server: its output, the FPGA's connect
            row.update(rdma_server=sv)
        if s["step"] == "cm:vanish" and s["commands"]:
            row.update(vanish=s["commands"][0]["json"])
        if s["step"] == "cm:loop" and s["commands"]:
            row.update(loop=s["commands"][0]["json"])
        if s["step"] == "cm:mixed" and len(s["commands"]) > 1:
            row.update(mixed=s["commands"][1]["json"])
        prev_rxe, prev_fpga = s["counters"], fpga or prev_fpga
        steps.append(row)
    cycles = final.get("cycles", 0)
    mhz = final.get("clock_mhz", 1)
    frames = {w: dict(c) for w, c in classify_pcap(pcap).items()} if pcap.exists() else {}
    stats = final.get("stats", {})
    return {"steps": steps, "frames": frames, "loss": final.get("loss", {}),
            "rxe_counters": story.get("steps", [{}])[-1].get("counters", {}) if story.get("steps")
            else {},
            "fpga": {k: stats.get(k, 0) for k in FPGA_SHOWN},
            "framecheck": final.get("framecheck", {}), "why_stopped": final.get("why"),
            "cut": final.get("cut", {}), "qp_open": final.get("qp_open"),
            "ibcm": {k[5:]: v for k, v in stats.items() if k.startswith("ibcm_")},
            "sim_us": cycles / mhz, "wall_s": final.get("wall_s"), "cycles": cycles,
            "guest": guest_manifest,
            "ok": bool(steps) and all(r["ok"] for r in steps) and
            len(steps) == len(story["job"]["steps"]) and
            not any(r["wrong"] for r in steps) and final.get("why") != "frame check failed" and
            final.get("stats", {}).get("sink_bytes_wrong", 0) == sum(
                r["fpga"].get("sink_bytes_wrong", 0) for r in steps if r["step"] in FOREIGN)}


#: Steps whose messages into the FPGA are not the test pattern its sink checks (rdma_server's
#: reply: 16 bytes of its own; rping -s's WRITEs back into the rping client's buffer), so the
#: bytes the sink finds wrong then do not count.
FOREIGN = ("cm:rdma_server", "cm:rping_server")


def _cm_lines(r):
    """The lines under a step of ``cm:vanish``, ``cm:quiet``, ``cm:loop`` or ``cm:mixed`` in the
    table."""
    lines = []
    v = r.get("vanish")
    if v:
        f, c = v.get("fpga") or {}, v.get("cut") or {}
        again = v.get("again") or {}
        lines.append(f"  the host vanished after {v.get('fpga_pings_before_cut')} pings counted "
                     f"by the FPGA ({v['pings_before_cut']} checked by rping): the FPGA's QP "
                     f"failed ({f.get('roce_timeouts', 0)} timeouts), its IB CM disconnected "
                     f"({f.get('ibcm_disconnects', 0)} DREQ begun, {f.get('ibcm_retransmits', 0)}"
                     f" sent again, {f.get('ibcm_dreq_timeouts', 0)} unanswered), time-wait "
                     f"over ({f.get('ibcm_timewait_exits', 0)}), QPs held {v.get('qp_open_cut')}"
                     f"; the cut dropped {c.get('dropped_from_fpga', 0)} frames from the FPGA, "
                     f"{c.get('dropped_to_fpga', 0)} to it in {v.get('cut_s')} s; rping again: "
                     f"{again.get('pings')} pings")
    q = r.get("quiet")
    if q:
        f, p = q.get("fpga") or {}, q.get("rping") or {}
        lines.append(f"  rping: {p.get('pings')} pings checked, its DREQ lost "
                     f"({q.get('dreqs_dropped')} dropped); the FPGA closed the quiet connection "
                     f"{q.get('quiet_s')} s of wall time later "
                     f"({f.get('ibcm_idle_closes', 0)} closed for "
                     f"quiet, {f.get('ibcm_disconnects', 0)} DREQ begun, "
                     f"{f.get('ibcm_dreq_timeouts', 0)} unanswered, "
                     f"{f.get('ibcm_timewait_exits', 0)} time-wait over); QPs held "
                     f"{q.get('qp_open_before')} before, {q.get('qp_open_after')} after")
    lo = r.get("loop")
    if lo:
        f = lo.get("fpga") or {}
        free = sum(x["free_after"] for x in lo.get("rounds", []))
        lines.append(f"  cmtime -c {lo['qps']}, {len(lo.get('rounds', []))} of {lo['loops']} "
                     f"rounds: {f.get('ibcm_established', 0)} established, "
                     f"{f.get('ibcm_timewait_exits', 0)} time-waits over, every QP free after "
                     f"{free} rounds; QPs held at the end {lo.get('qp_open')}")
    mx = r.get("mixed")
    if mx:
        lines.append(f"  QPs held together {mx.get('qp_open_both')} (both managers: "
                     f"{mx.get('both_seen')}); rping: {mx.get('pings')} pings checked, "
                     f"{mx.get('fpga_pings')} counted by the FPGA")
    return lines


def table(rep):
    """The lines of the pass/fail table."""
    lines = [f"{'step':<19}{'ok':<6}{'wall s':>7}{'checked by':>16}{'wrong':>6}{'msgs':>6}"
             f"{'rxe tx/rx':>12}{'FPGA tx/rx':>12}  NAKs (rxe got seq/rnr, sent rnr; FPGA got "
             f"seq/rnr, sent seq/rnr), rxe retries"]
    for r in rep["steps"]:
        x, f = r["rxe"], r["fpga"]
        by = f"{r['checked']} {r['checked_by']}" if r["checked_by"] else ""
        lines.append(
            f"{r['step']:<19}{'PASS' if r['ok'] else 'FAIL':<6}{r['wall_s']:>7.1f}"
            f"{by:>16}{r['wrong']:>6}{r['messages']:>6}"
            f"{x.get('sent_pkts', 0):>6}/{x.get('rcvd_pkts', 0):<5}"
            f"{f.get('roce_tx_packets', 0):>6}/{f.get('roce_rx_packets', 0):<5}  "
            f"{x.get('rcvd_seq_err', 0)}/{x.get('rcvd_rnr_err', 0)}, {x.get('send_rnr_err', 0)}; "
            f"{f.get('roce_seq_naks', 0)}/{f.get('roce_rnr_naks', 0)}, "
            f"{f.get('resp_seq_nak', 0)}/{f.get('resp_rnr', 0)}; "
            f"{x.get('completer_retry_err', 0)}")
        lines += _cm_lines(r)
        a = r.get("atomic")
        for t in (a or {}).get("targets", []):
            final = "not READ" if t["final"] is None else f"{t['final']:#x}"
            if a.get("direction") == "fpga-to-host":
                lines.append(f"  the FPGA's atomics on rxe's counter: {a['qps']} QP"
                             f"{'s' * (a['qps'] != 1)} x {a['count']} {a['op']}s, one run after "
                             f"the other, on {t['addr']:#x}: {final} (expected "
                             f"{t['expected']:#x}), {a['ops']} atomics; {t['originals']} "
                             f"originals READ back from the FPGA, {t['distinct']} distinct"
                             + "".join(f"; {p}" for p in t["problems"] or ()))
                continue
            lines.append(f"  contended counter: {a['qps']} QP{'s' * (a['qps'] != 1)} x "
                         f"{a['count']} {a['op']}s on {t['addr']:#x}: {t['initial']:#x} -> "
                         f"{final}, {a['ops']} atomics, {t['distinct']} distinct values"
                         + (f", {t['successes']} swaps took" if t.get("successes") is not None
                            else "") + "".join(f"; {p}" for p in t["problems"] or ()))
    for way, c in rep["frames"].items():
        lines.append(f"frames {way.replace('_', ' ')}: " +
                     ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    for way, c in rep["loss"].items():
        lines.append(f"lossy link {way.replace('_', ' ')}: {c['dropped']} of {c['sent']} lost")
    if rep.get("cut", {}).get("cuts"):
        c = rep["cut"]
        lines.append(f"link cut {c['cuts']} times: {c['dropped_from_fpga']} frames from the "
                     f"FPGA dropped, {c['dropped_to_fpga']} to it")
    if rep.get("qp_open") is not None:
        lines.append(f"QPs held by the connection managers at the end: {rep['qp_open']:#x}")
    lines.append(f"simulated {rep['sim_us']:.0f} us of FPGA time in {rep['wall_s'] or 0:.0f} s "
                 f"({rep['cycles']} cycles); frame check: " +
                 ", ".join(f"{k} {v}" for k, v in sorted(rep["framecheck"].items())))
    lines.append("PASS" if rep["ok"] else "FAIL")
    return lines


def serve_command(args, extra, *, rocegen, netns, status, pcap):
    """The ``rocegen sim serve`` command of a run (``rocegen``: the command's start): the
    endpoint's build, the lossy links and the pace, then ``extra`` (serve's options after
    ``--``, which so win), then with ``--rdma-cm-port`` the IB CM's services and the defaults of
    the co-simulation that ``extra`` does not name."""
    # an endpoint of at least 2 QPs: a run of one QP shares the Verilator build of two
    serve_cmd = [*rocegen, "sim", "serve", "--tap", "--netns", netns, "--width", str(args.width),
                 "--qps", str(max(args.qps, 2)), "--status", str(status), "--pcap", str(pcap),
                 "--loss-to-fpga", str(args.loss_to_fpga), "--loss-from-fpga",
                 str(args.loss_from_fpga), "--loss-seed", str(args.loss_seed),
                 "--pace", str(args.pace), *extra]
    if args.rdma_cm_port is not None:
        serve_cmd += ["--rdma-cm-port", f"{args.rdma_cm_port},{rxe_story.RPING_PORT},"
                      f"{rxe_story.ECHO_PORT}", "--rping-server", str(rxe_story.RPING_PORT),
                      "--send-echo", str(rxe_story.ECHO_PORT), "--rdma-cm-time-wait",
                      str(CM_TIME_WAIT_US), "--service-idle", str(SERVICE_IDLE_US),
                      "--rping-client", str(rxe_story.CLIENT_PORT),
                      "--rping-client-size", str(rxe_story.CLIENT_SIZE),
                      "--rping-client-count", str(rxe_story.CLIENT_COUNT)]
        if "--pmtu" not in extra:
            # (the path MTU of the connections the FPGA opens, which its REQs state: the
            # guest's, as Linux's CM takes it from the route; a REQ of the guest states its own)
            serve_cmd += ["--pmtu", str(args.pmtu)]
        if "--timeout" not in extra:
            # (the IB CM's QPs: librdmacm's REQs ask for 2 s, in the FPGA's simulated time; the
            # agent's QPs of UDP 17185 name their own, --fpga-timeout, in their OPEN_QP)
            serve_cmd += ["--timeout", str(args.cm_timeout)]
        if "--rdma-cm-max-response-timeout" not in extra:
            serve_cmd += ["--rdma-cm-max-response-timeout", str(CM_RESPONSE_TIMEOUT)]
    return serve_cmd


def run(args):
    """``rocegen sim rxe``: returns the exit code."""
    steps, extra = _validate(args)
    why = rxe_guest.missing_tools()
    if why:
        print(f"rocegen sim rxe cannot run here: {why}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    gdir = rxe_guest.build_guest()
    manifest = json.loads((gdir / "manifest.json").read_text())
    out = Path(args.output).resolve()
    gout = out / "guest"
    gout.mkdir(parents=True, exist_ok=True)
    for old in gout.iterdir():
        old.unlink()
    status, pcap = gout / "serve.json", out / "serve.pcap"
    status.unlink(missing_ok=True)
    mtu = 9000 if args.pmtu == 4096 else 1500
    netns = f"rgrxe{os.getpid()}"
    bindir = Path(sys.executable).parent
    rocegen = [str(bindir / "rocegen")] if (bindir / "rocegen").exists() else \
        [sys.executable, "-m", "rocegen.cli"]
    serve_cmd = serve_command(args, extra, rocegen=rocegen, netns=netns, status=status,
                              pcap=pcap)
    host = ["--host-timeout", str(args.host_timeout), "--host-retry-cnt",
            str(args.host_retry_cnt), "--host-rnr-retry", str(args.host_rnr_retry)]
    if args.recv_depth is not None:
        host += ["--recv-depth", str(args.recv_depth)]
    connect = ["--timeout", str(args.fpga_timeout), *host]
    job = {"fpga_ip": FPGA_IP, "qps": args.qps, "pmtu": args.pmtu, "count": args.count,
           "size": args.size, "connect": connect, "steps": steps,
           "rdma_cm_port": args.rdma_cm_port, "loops": args.cm_loops,
           # (through the IB CM the REQ states the QPs' ACK timeouts: the host's own only)
           "cm_connect": host}
    (gout / "job.json").write_text(json.dumps(job, indent=1))
    (gout / "job.sh").write_text(_job_sh(mtu))
    print(f"$ {' '.join(serve_cmd)}", flush=True)
    log = open(out / "serve.log", "w")
    serve = subprocess.Popen(serve_cmd, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        if _wait_ready(status, serve) is None:
            raise RuntimeError("rocegen sim serve did not start:\n" +
                               (out / "serve.log").read_text()[-3000:])
        _bridge(netns, mtu)
        src = Path(__file__).resolve().parents[2]
        qemu = rxe_guest.qemu_command(gdir, src, gout, tap=QEMU_TAP, mac=HOST_MAC)
        print(f"booting the guest ({'KVM' if 'kvm' in qemu else 'TCG: no KVM here'}); "
              f"the story: {', '.join(steps)}", flush=True)
        tq = time.monotonic()
        with open(gout / "console.log", "w") as console:
            guest = subprocess.Popen(["ip", "netns", "exec", netns, *qemu],
                                     stdout=console, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                guest.wait(timeout=args.guest_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(guest.pid, signal.SIGKILL)
                guest.wait()
                print(f"the guest did not finish in {args.guest_timeout:.0f} s", file=sys.stderr)
        guest_s = time.monotonic() - tq
    finally:
        stop_server(serve)
        log.close()
    story_path = gout / "story.json"
    story = json.loads(story_path.read_text()) if story_path.exists() else \
        {"job": job, "steps": []}
    final = json.loads(status.read_text()) if status.exists() else {}
    rep = report(story, final, pcap, manifest)
    rep.update(guest_s=round(guest_s, 1), total_s=round(time.monotonic() - t0, 1),
               pcap=str(pcap), output=str(out))
    (out / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
    if args.vectors:
        runs = [(Path(p), f"an earlier run ({p})") for p in args.vectors_from]
        runs.append((pcap, "rocegen sim rxe " + " ".join(sys.argv[3:])))
        write_vectors(args.vectors, rxe_vectors(runs), manifest)
    if args.json:
        print(json.dumps(rep))
    else:
        print("\n".join(table(rep)))
        print(f"guest ran {guest_s:.0f} s (boot included), all in {rep['total_s']:.0f} s; files in "
              f"{out} (serve.pcap: every frame; guest/story.json, guest/console.log, "
              f"guest/agent.log)")
    if not rep["ok"]:
        if (gout / "job.log").exists():
            print((gout / "job.log").read_text()[-3000:], file=sys.stderr)
        # (last: how the simulated FPGA ended, e.g. stopped by the frame check)
        print("serve.log: " + (out / "serve.log").read_text()[-1200:], file=sys.stderr)
    return 0 if rep["ok"] else 1

