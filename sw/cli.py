"""``rocegen-host``: bring up QPs between this host's RDMA NIC and a rocegen FPGA, start its
traffic generator and check what arrives.

::

    rocegen-host connect --fpga 10.0.0.2 [--device mlx5_0]     # a ConnectX NIC (pyverbs)
    rocegen-host connect --sim                                 # rocegen sim serve on this machine
    rocegen-host connect --fpga 10.0.0.2 --rdma-cm             # through the IB CM (librdmacm)
    rocegen-host traffic --op WRITE --count 64 --size 65536
    rocegen-host recv                                          # live progress, then the table
    rocegen-host write --count 64 --size 65536 [--imm]         # into the FPGA's memory
    rocegen-host read --count 64 --size 65536                  # and back from it
    rocegen-host send --count 64 --size 4096 [--imm]           # into its receive buffers
    rocegen-host traffic --op READ --count 64 --size 65536     # the FPGA reads the host
    rocegen-host atomic --op FETCH_ADD --count 64              # the contended counter
    rocegen-host traffic --op FETCH_ADD --count 64             # the FPGA's atomics on the host
    rocegen-host atomic --direction fpga-to-host --count 64    # their contended counter
    rocegen-host status
    rocegen-host close

``write`` and ``send`` need an FPGA with the RC responder: the host sends the test pattern of the
FPGA addresses it writes, and the FPGA's pattern sink checks every byte; the verdict (bytes
checked, bytes wrong) comes back over the connection manager (QUERY). ``read`` RDMA-READs the
addresses ``write`` writes and checks every byte against the test pattern of its FPGA address
(so write first). ``traffic --op READ`` (an FPGA with the READ requester): the FPGA READs the
host's memory, which the agent has filled with the test pattern of the FPGA addresses the bytes
land at; its pattern sink checks them and ``recv`` shows its verdict.

``atomic`` (an FPGA built with ``--atomics``): the contended counter, on every QP at once (or
``--qp``), ``--count`` FETCH_ADDs of 1 or COMPARE_SWAP loops (compare k, swap k + 1, tried
again from the value found until ``--count`` swaps took) on one 8-byte target of the FPGA's
region (``--offset``), up to 16 outstanding per QP; the target RDMA-READ before and after.
Checked: the target rose by N x M (N QPs, M each), the values returned are N x M distinct
consecutive numbers (COMPARE_SWAP: the swaps that took are as many as the rise, none on a value
another took).

The other way (an FPGA built with ``--atomics``): ``traffic --op FETCH_ADD|COMPARE_SWAP`` (size
8) has the FPGA's traffic generator run atomics on ``--targets`` zeroed 8-byte words of the
host's memory, and ``recv`` reports when they hold what a model of the run says; ``atomic
--direction fpga-to-host`` is the contended counter of the FPGA's QPs, one run per QP in turn on
one counter of the host's, whose final value is checked, then the original values of the last
run READ back from the FPGA's memory and checked.

``connect`` starts the host agent (:mod:`rocegen.host.agent`) in the background, holding the QPs
and their memory; the other commands talk to it. It opens each QP with OPEN_QP over UDP 17185,
or with ``--rdma-cm`` through the InfiniBand CM on the FPGA's QP1 as librdmacm's
``rdma_connect`` does (to TCP port ``--rdma-cm-port``, default 7174, rping's); ``status`` says
which CM opened each QP. Exit status: 0 done, 1 refused / failed / data wrong, 2 bad usage.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rocegen.host.agent import ATOMIC_DEPTH, DIRECTIONS, request
from rocegen.host.nic import SIM_FPGA_IP, SIM_HOST_IP, SIM_PEER_TIMEOUT, SIM_TIMEOUT, VERBS_TIMEOUT
from rocegen.wire.atomics import ATOMIC_VERBS, BYTE_ORDERS
from rocegen.wire.cm import CM_PORT
from rocegen.wire.ibcm import RPING_PORT
from rocegen.wire.verbs import VERBS

__all__ = ["main", "state_dir", "rate_clock", "atomic_lines"]



def state_dir(args_dir=None):
    """Where the agent's socket lives: ``--state-dir``, ``$ROCEGEN_HOST_STATE``,
    ``$XDG_RUNTIME_DIR/rocegen-host``, else ``~/.cache/rocegen/host``."""
    if args_dir:
        return Path(args_dir)
    if os.environ.get("ROCEGEN_HOST_STATE"):
        return Path(os.environ["ROCEGEN_HOST_STATE"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "rocegen-host"
    return Path.home() / ".cache" / "rocegen" / "host"


class Fail(Exception):
    """A command that did not succeed: ``code`` is the exit status."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def _call(args, req, **kw):
    sock = state_dir(args.state_dir) / "agent.sock"
    try:
        reply = request(sock, req, **kw)
    except ConnectionError:
        raise Fail(f"no host agent is running (socket {sock}): rocegen-host connect first") from None
    if not reply.get("ok"):
        raise Fail(reply.get("error", "the agent refused"), 2 if reply.get("kind") == "usage" else 1)
    return reply["result"]


def _cm_name(q):
    """What opened the QP ``q`` (a :meth:`HostQp.info`): ``UDP`` (OPEN_QP to the connection
    manager) or ``RDMA CM:PORT`` (the InfiniBand CM, to that TCP port)."""
    return f"RDMA CM:{q['cm_port']}" if q.get("cm") == "rdma_cm" else "UDP"


def _print_qps(qps):
    print(f"{'FPGA QP':>8} {'host QP':>8} {'PSN':>8} {'PMTU':>5} {'state':>6} {'messages':>9} "
          f"{'bytes':>12}  CM")
    for q in qps:
        print(f"{q['fpga_qpn']:>8} {q['qpn']:>#8x} {q['psn']:>#8x} {q['pmtu']:>5} "
              f"{q['state']:>6} {q['messages']:>9} {q['bytes']:>12}  {_cm_name(q)}")
    for q in qps:
        rkey, base, length = q.get("fpga_region") or (0, 0, 0)
        if length:
            print(f"  FPGA QP {q['fpga_qpn']}: memory region [{base:#x}, +{length:#x}) with "
                  f"R_Key {rkey:#010x}" + (f"; {q['sent']} messages ({q['sent_bytes']} bytes) "
                                           f"sent into it or read" if q.get("sent") else "")
                  + (f"; READs: {q['rd_atomic']} of ours outstanding at most, "
                     f"{q['rd_depth']} of the FPGA's accepted" if "rd_atomic" in q else "")
                  + (f"; this NIC's atomics: {q['atomics']}" if q.get("atomics") else ""))


def _connect(args):
    sdir = state_dir(args.state_dir)
    sock = sdir / "agent.sock"
    opts = {"pmtu": args.pmtu, "timeout": args.timeout, "retry_cnt": args.retry_cnt,
            "rnr_retry": args.rnr_retry, "host_timeout": args.host_timeout,
            "host_retry_cnt": args.host_retry_cnt, "host_rnr_retry": args.host_rnr_retry,
            "rdma_cm": (RPING_PORT if args.rdma_cm_port is None else args.rdma_cm_port)
            if args.rdma_cm else None}
    if sock.exists():
        try:
            opened = request(sock, {"cmd": "open", "n": args.qps, **opts})
        except ConnectionError:
            sock.unlink()          # an agent that died left its socket behind
        else:
            if not opened.get("ok"):
                raise Fail(opened["error"], 2 if opened.get("kind") == "usage" else 1)
            _report_open(args, opened["result"], "the running agent")
            return 0
    sdir.mkdir(parents=True, exist_ok=True)
    sim = args.sim or (args.device or "").startswith(("sim", "packet:"))
    device = args.device or ("sim" if args.sim else None)
    fpga = args.fpga or (SIM_FPGA_IP if sim else None)
    if fpga is None:
        raise Fail("--fpga A.B.C.D is needed (the FPGA's IPv4 address)", 2)
    config = {"device": device, "fpga_ip": fpga,
              "cm_host": args.cm_host or ("127.0.0.1" if args.sim else fpga),
              "cm_port": args.cm_port, "listen_port": args.listen_port,
              "local_ip": args.local_ip or (SIM_HOST_IP if sim else None),
              "port": args.ib_port, "gid_index": args.gid_index, "qps": args.qps,
              "window": args.window, "recv_depth": args.recv_depth, "recv_size": args.recv_size,
              "reply_timeout": args.reply_timeout, "retries": args.retries,
              "socket": str(sock), "keep": args.keep, **opts}
    # the agent outlives this command: it must hold none of the caller's pipes (its errors go
    # to agent.log beside its socket)
    with open(sdir / "agent.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "rocegen.host.agent", "--config",
                                 json.dumps(config)], stdout=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, stderr=log, start_new_session=True)
    line = proc.stdout.readline()
    proc.stdout.close()
    if not line:
        proc.wait()
        raise Fail(f"the host agent exited at start (status {proc.returncode})")
    reply = json.loads(line)
    if not reply["ok"]:
        proc.wait()
        raise Fail(reply["error"], 2 if reply.get("kind") == "usage" else 1)
    for _ in range(100):            # the socket appears once the agent serves
        if sock.exists():
            break
        time.sleep(0.02)
    _report_open(args, reply["result"], f"agent {reply['pid']}")
    return 0


def _report_open(args, qps, who):
    if args.json:
        print(json.dumps(qps))
        return
    print(f"opened {len(qps)} QP{'s' * (len(qps) != 1)} with the FPGA ({who} holds them):")
    _print_qps(qps)


def _status(args):
    st = _call(args, {"cmd": "status"})
    if args.json:
        print(json.dumps(st))
        return 0
    print(f"agent {st['pid']}: NIC {st['nic']} at {st['local_ip']}, FPGA {st['fpga_ip']} "
          f"(connection manager {st['cm'][0]}:{st['cm'][1]})")
    if st["fatal"]:
        print(f"NIC problem: {st['fatal']}")
    _print_qps(st["qps"])
    for q in st["qps"]:
        if q["run"]:
            r = q["run"]
            print(f"  QP {q['fpga_qpn']}: last run {r['op']} {r['count']} x {r['size']} B: "
                  f"{r['verified']} checked, {r['bad']} bad, {'done' if r['done'] else 'running'}")
    if st["nic_counters"]:
        print("NIC counters: " + ", ".join(f"{k} {v}" for k, v in sorted(st["nic_counters"].items())))
    return 0


def _traffic(args):
    req = {"cmd": "traffic", "fpga_qpn": args.qp, "op": args.op, "size": args.size,
           "count": args.count, "spacing": args.spacing}
    if args.op in ATOMIC_VERBS:
        req.update(targets=1 if args.targets is None else args.targets, stall=args.stall)
    elif args.targets is not None:
        raise Fail("--targets applies to the atomics (--op FETCH_ADD or COMPARE_SWAP)", 2)
    runs = _call(args, req)
    if args.json:
        print(json.dumps(runs))
    else:
        for r in runs:
            if r["op"] in ATOMIC_VERBS:
                n = r["targets"]
                print(f"QP {r['fpga_qpn']}: {r['count']} x {r['op']} started on {n} 8-byte "
                      f"target{'s' * (n != 1)} of the host's memory from {r['target_addr']:#x}, "
                      f"zeroed (spacing {r['spacing']} cycles)")
            else:
                print(f"QP {r['fpga_qpn']}: {r['count']} x {r['op']} of {r['size']} bytes "
                      f"started (spacing {r['spacing']} cycles, window {r['window']} bytes)")
    return 0


def _host_run(args, cmd):
    req = {"cmd": cmd, "fpga_qpn": args.qp, "size": args.size, "count": args.count,
           "stall": args.stall}
    if cmd != "read":
        req["imm"] = args.imm
    if cmd == "send":
        req["at"] = args.at
    elif args.rkey is not None:
        req["rkey"] = args.rkey
    r = _call(args, req)
    if args.json:
        print(json.dumps(r))
    else:
        for q in r["qps"]:
            print(f"QP {q['fpga_qpn']}: {q['messages']} of {r['count']} x {r['op']} of "
                  f"{r['size']} bytes completed (from FPGA address {q['first_addr']:#x})")
            for e in q["errors"]:
                print(f"  QP {q['fpga_qpn']}: {e}")
        print(f"{r['bytes']} bytes in {r['seconds']:.3f} s, {r['gbps']:.3f} Gb/s (wall clock)")
        if cmd == "read":
            print(f"host check: {r['checked']} bytes read compared with the test pattern of "
                  f"their FPGA addresses, {r['wrong']} wrong")
        elif r["checked"] is None:
            print("no verdict: the FPGA does not answer QUERY (built without the pattern sink)")
        else:
            note = ""
            if r["checked"] != r["bytes"]:
                why = "other writes counted too" if r["checked"] > r["bytes"] else \
                    "some never reached its memory"
                note = f" (sent {r['bytes']}: {why})"
            print(f"FPGA verdict: {r['checked']} bytes checked{note}, {r['wrong']} wrong")
    if not r["ok"]:
        if cmd == "read" and r["wrong"]:
            raise Fail("bytes read differ from the test pattern (were they written first? "
                       "rocegen-host write --count N --size S)")
        raise Fail("bytes wrong in the FPGA's memory" if r["wrong"] else "the run failed")
    return 0


def _atomic(args):
    req = {"cmd": "atomic", "fpga_qpn": args.qp, "op": args.op, "count": args.count,
           "byte_order": args.byte_order, "stall": args.stall, "direction": args.direction}
    if args.direction == "fpga-to-host":
        for option, value in (("--offset", args.offset), ("--outstanding", args.outstanding)):
            if value is not None:
                raise Fail(f"{option} applies to the host's atomics (--direction host-to-fpga): "
                           f"the FPGA's work on the first word of the first QP's memory, as "
                           f"many outstanding as its READ limit", 2)
    else:
        req.update(offset=args.offset, depth=args.outstanding)
    r = _call(args, req)
    if args.json:
        print(json.dumps(r))
    else:
        for line in atomic_lines(r):
            print(line)
    if not r["ok"]:
        if r.get("direction") == "fpga-to-host":
            raise Fail("the FPGA's atomics on the host's counter failed their checks")
        raise Fail("the contended counter's checks failed" if any(
            t["problems"] for t in r["targets"]) else "atomics failed")
    return 0


def atomic_lines(r):
    """What ``rocegen-host atomic`` prints of the agent's result ``r``."""
    if r.get("direction") == "fpga-to-host":
        return fpga_atomic_lines(r)
    cas = r["op"] == "COMPARE_SWAP"
    lines = []
    for q in r["qps"]:
        what = (f"{q['done']} of {r['count']} COMPARE_SWAPs took (compare k, swap k + 1), "
                f"{q['attempts']} tried" if cas else
                f"{q['done']} of {r['count']} FETCH_ADDs of 1 completed")
        lines.append(f"QP {q['fpga_qpn']}: {what} on FPGA address {q['target']:#x}")
        lines += [f"  QP {q['fpga_qpn']}: {e}" for e in q["errors"]]
    for t in r["targets"]:
        qps = len(t["fpga_qpns"])
        head = f"target {t['addr']:#x} ({qps} QP{'s' * (qps != 1)}): "
        if t["final"] is None:
            lines.append(head + f"{t['initial']:#x} before, not READ after")
        else:
            lines.append(head + f"{t['initial']:#x} -> {t['final']:#x} (expected "
                         f"{t['expected']:#x}: {qps} x {r['count']} increments); " + (
                             f"{t['successes']} swaps took, {t['distinct']} distinct values"
                             if cas else f"{t['ops']} values returned, {t['distinct']} distinct")
                         + (", consecutive from the initial value" if t["consecutive"] else ""))
        lines += [f"  target {t['addr']:#x}: {p}" for p in t["problems"]]
    lines.append(f"{r['ops']} atomics in {r['seconds']:.3f} s, {r['ops_per_s']:.0f} atomics/s "
                 f"(wall clock; up to {r['depth']} outstanding per QP)")
    lines.append("every check holds" if r["ok"] else "FAILED")
    return lines


def fpga_atomic_lines(r):
    """What ``rocegen-host atomic --direction fpga-to-host`` prints of the agent's result
    ``r``."""
    cas = r["op"] == "COMPARE_SWAP"
    c = r["counter"]
    what = "COMPARE_SWAPs (message s swaps in s + 1 where it finds s)" if cas else \
        "FETCH_ADDs of 1"
    lines = []
    for q in r["runs"]:
        final = "?" if q["final"] is None else f"{q['final']:#x}"
        lines.append(f"FPGA QP {q['fpga_qpn']}: {r['count']} {what} on host address "
                     f"{c['addr']:#x}: {q['initial']:#x} -> {final} (expected "
                     f"{q['expected']:#x})" + ("" if q["ok"] else ": FAILED"))
        lines += [f"  FPGA QP {q['fpga_qpn']}: {e}" for e in q["errors"]]
    n = len(c["fpga_qpns"])
    final = "?" if c["final"] is None else f"{c['final']:#x}"
    how = (f"zeroed before each run, counted up to {r['count']} by each" if cas else
           f"{n} x {r['count']} FETCH_ADDs")
    lines.append(f"counter {c['addr']:#x} ({n} FPGA QP{'s' * (n != 1)}, one run after the "
                 f"other): {final} (expected {c['expected']:#x}: {how})")
    lines += [f"  counter: {p}" for p in c["problems"]]
    o = r["originals"]
    if "skipped" in o:
        lines.append(f"originals not READ: {o['skipped']}")
    else:
        last = o["first"] + o["slots"] - 1
        lines.append(f"originals of FPGA QP {r['runs'][-1]['fpga_qpn']}'s messages "
                     f"{o['first']}..{last}, READ back from the FPGA's memory at "
                     f"{o['fpga_addr']:#x}..{o['fpga_addr'] + 64 * o['slots'] - 1:#x} (QP "
                     f"{o['fpga_qpn']}): {o['distinct']} distinct"
                     + ("" if o["problems"] else ", each as the model says"))
        lines += [f"  originals: {p}" for p in o["problems"]]
    line = (f"{r['ops']} atomics in {r['seconds']:.3f} s, {r['ops_per_s']:.0f} atomics/s (wall "
            f"clock)")
    if r.get("fpga_ops_per_s"):
        line += (f"; {r['fpga_ops_per_s'] / 1e6:.2f} M atomics/s in the FPGA's time "
                 f"({r['fpga_cycles']} cycles at {r['fpga_clock_mhz']:.2f} MHz, from each run's "
                 f"first atomic on its MAC port to its last)")
    lines.append(line)
    lines.append("every check holds" if r["ok"] else "FAILED")
    return lines


def _write(args):
    return _host_run(args, "write")


def _send(args):
    return _host_run(args, "send")


def _read(args):
    return _host_run(args, "read")


def rate_clock(rows):
    """Which clock the rates of ``rows`` (run summaries) are in: ``"FPGA time, 322.27 MHz core
    clock"`` when the NIC knows the FPGA's time (simulation), else ``"wall clock"``."""
    mhz = next((r["fpga_clock_mhz"] for r in rows if r.get("fpga_clock_mhz")), None)
    return f"FPGA time, {mhz:.2f} MHz core clock" if mhz else "wall clock"


def _bar(rows, width=30):
    total = sum(r.get("count", 0) for r in rows) or 1
    done = sum(r.get("verified", 0) for r in rows)
    fpga = rate_clock(rows) != "wall clock"
    gbps = sum((r.get("fpga_gbps") if fpga else r.get("gbps")) or 0 for r in rows)
    mm = sum((r.get("fpga_mmsgs") if fpga else r.get("mmsgs")) or 0 for r in rows)
    fill = int(width * done / total)
    return (f"[{'#' * fill}{'.' * (width - fill)}] {done}/{total} messages  {gbps:7.3f} Gb/s  "
            f"{mm * 1e3:8.2f} kmsg/s ({rate_clock(rows)})")


def _table(rows):
    """The lines of ``recv``'s table, each rate labelled with its clock: in simulation the
    FPGA's time first, then this machine's wall clock (how fast it simulates)."""
    runs = [r for r in rows if "op" in r]
    fpga = rate_clock(runs) != "wall clock"
    head = f"{'FPGA QP':>8} {'op':>12} {'size':>8} {'messages':>9} {'checked':>8} {'bad':>4}"
    if fpga:
        head += f" {'cycles':>10} {'FPGA us':>10} {'FPGA Gb/s':>10} {'FPGA kmsg/s':>11}"
    lines = [head + f" {'wall s':>8} {'wall Gb/s':>10} {'wall kmsg/s':>11}"]
    for r in runs:
        line = (f"{r['fpga_qpn']:>8} {r['op']:>12} {r['size']:>8} {r['count']:>9} "
                f"{r['verified']:>8} {r['bad']:>4}")
        if fpga and r.get("fpga_cycles") is not None:
            line += (f" {r['fpga_cycles']:>10} {r['fpga_seconds'] * 1e6:>10.1f} "
                     f"{r['fpga_gbps']:>10.3f} {r['fpga_mmsgs'] * 1e3:>11.2f}")
        elif fpga:
            line += f" {'-':>10} {'-':>10} {'-':>10} {'-':>11}"
        line += f" {r['seconds']:>8.3f} {r['gbps']:>10.3f} {r['mmsgs'] * 1e3:>11.2f}"
        lines.append(line)
        if r.get("checked") is not None:
            lines.append(f"  QP {r['fpga_qpn']}: FPGA verdict of the READs: {r['checked']} bytes "
                         f"checked, {r['wrong']} wrong")
        if r.get("targets") is not None:
            n = r["targets"]
            lines.append(f"  QP {r['fpga_qpn']}: {r['targets_right']} of {n} target"
                         f"{'s' * (n != 1)} in the host's memory from {r['target_addr']:#x} "
                         f"hold{'s' * (n == 1)} what the run leaves ("
                         + ("+1 per FETCH_ADD" if r["op"] == "FETCH_ADD" else
                            "message s swaps in s + 1 where it finds s") + ")")
        lines += [f"  QP {r['fpga_qpn']}: {e}" for e in r["errors"]]
    if fpga:
        lines.append(f"FPGA: Gb/s ({rate_clock(runs)}), the simulated cycles from the first beat "
                     f"of the run's first data frame on the FPGA's MAC port to the last beat of "
                     f"its last")
    lines.append("wall: Gb/s (wall clock) of this machine, from the request to the last message "
                 "checked" + (" (in simulation: how fast it simulates)" if fpga else ""))
    return lines


def _recv(args):
    tty = sys.stdout.isatty() and not args.json and not args.no_progress
    last_print = [0.0]

    def on_line(msg):
        if "progress" not in msg or args.json or args.no_progress:
            return
        now = time.monotonic()
        if tty:
            print("\r" + _bar(msg["progress"]), end="", flush=True)
        elif now - last_print[0] >= 1.0:
            last_print[0] = now
            print(_bar(msg["progress"]), flush=True)

    sock = state_dir(args.state_dir) / "agent.sock"
    try:
        reply = request(sock, {"cmd": "recv", "fpga_qpn": args.qp, "stall": args.stall},
                        on_line=on_line)
    except ConnectionError:
        raise Fail(f"no host agent is running (socket {sock}): rocegen-host connect first") from None
    if tty:
        print()
    rows = reply.get("result") or []
    if args.json:
        print(json.dumps(reply))
    else:
        print("\n".join(_table(rows)))
    if not reply.get("ok"):
        raise Fail(reply.get("error", "receive failed"))
    if any("op" in r and not r["ok"] for r in rows):
        raise Fail("data check failed")
    return 0


def _close(args):
    closed = _call(args, {"cmd": "close", "fpga_qpn": args.qp})
    if args.json:
        print(json.dumps(closed))
    for c in closed:
        if not args.json:
            note = f" (the FPGA answered: {c['error']})" if c["error"] else ""
            print(f"closed QP {c['fpga_qpn']} (host QP {c['qpn']:#x}){note}")
    return 1 if any(c["error"] for c in closed) else 0


def _stop(args):
    closed = _call(args, {"cmd": "shutdown"})
    for c in closed:
        note = f" (the FPGA answered: {c['error']})" if c["error"] else ""
        print(f"closed QP {c['fpga_qpn']} (host QP {c['qpn']:#x}){note}")
    print("host agent stopped")
    # as `close`: a QP the FPGA did not confirm closed may still be open there
    return 1 if any(c["error"] for c in closed) else 0


def _check_rdma_cm(parser, args):
    """``connect``'s RDMA CM options: an argparse error (exit status 2) for ``--rdma-cm-port``
    without ``--rdma-cm`` or out of range, and for ``--rdma-cm`` with an option only OPEN_QP
    carries."""
    if not args.rdma_cm:
        if args.rdma_cm_port is not None:
            parser.error("--rdma-cm-port applies to --rdma-cm")
        return
    if args.rdma_cm_port is not None and not 0 <= args.rdma_cm_port <= 0xFFFF:
        parser.error(f"--rdma-cm-port must be 0..65535, not {args.rdma_cm_port}")
    for option, value, why in (("--pmtu", args.pmtu, "the REQ states the route's path MTU"),
                               ("--timeout", args.timeout, "the REQ states librdmacm's local "
                                "ACK timeout")):
        if value is not None:
            parser.error(f"argument {option}: not allowed with --rdma-cm ({option} goes in "
                         f"OPEN_QP; {why})")


def main(argv=None):
    p = argparse.ArgumentParser(prog="rocegen-host", description="host agent for rocegen FPGAs: "
                                "QP set-up over UDP 17185 or the RDMA CM, test traffic, checks")
    p.add_argument("--state-dir", default=None,
                   help="where the agent's socket lives (default $XDG_RUNTIME_DIR/rocegen-host or "
                   "~/.cache/rocegen/host)")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("connect", help="open QPs with the FPGA (starts the agent that holds them)")
    c.add_argument("--fpga", default=None, help="the FPGA's IPv4 address (default with --sim: "
                   f"{SIM_FPGA_IP})")
    c.add_argument("--sim", action="store_true",
                   help="the simulated NIC on `rocegen sim serve`'s wire (127.0.0.1:17186); the "
                   "connection manager through its tunnel on 127.0.0.1")
    c.add_argument("--device", default=None,
                   help="RDMA device (default: the first), or sim / sim:HOST:PORT (the simulated "
                   "NIC on rocegen sim serve's wire) / packet:IFACE (the simulated NIC on a network "
                   "interface, e.g. serve --tap's)")
    c.add_argument("--ib-port", type=int, default=1, help="port of the RDMA device (default 1)")
    c.add_argument("--gid-index", type=int, default=None,
                   help="GID index (default: the first RoCEv2 GID with an IPv4 address)")
    c.add_argument("--local-ip", default=None,
                   help="our RoCE address as told to the FPGA (default: the GID's; 10.0.0.1 with "
                   "--sim)")
    c.add_argument("--cm-host", default=None,
                   help="where the connection manager is reached (default: the FPGA; 127.0.0.1 "
                   "with --sim)")
    c.add_argument("--cm-port", type=int, default=CM_PORT, help=f"its UDP port (default {CM_PORT})")
    c.add_argument("--listen-port", type=int, default=0,
                   help="UDP port for the FPGA's replies (default: any free port)")
    c.add_argument("--qps", type=int, default=1, help="QPs to open (default 1)")
    c.add_argument("--pmtu", type=int, default=None,
                   help="path MTU 256..4096, told to the FPGA in OPEN_QP (default 4096; not "
                   "with --rdma-cm, whose REQ states the route's)")
    c.add_argument("--timeout", type=int, default=None,
                   help="the FPGA QP's retransmit timeout code 1..31 (4.096 us x 2^code), in "
                   "OPEN_QP (not with --rdma-cm, whose REQ states librdmacm's)")
    c.add_argument("--retry-cnt", type=int, default=None,
                   help="the FPGA QP's retry count 0..7 (in OPEN_QP when given; with --rdma-cm "
                   "in the REQ, default 7)")
    c.add_argument("--rnr-retry", type=int, default=None,
                   help="the FPGA QP's RNR retry count 0..7 (7 = forever; in OPEN_QP when "
                   "given; with --rdma-cm in the REQ, default 7)")
    c.add_argument("--rdma-cm", action="store_true",
                   help="open the QPs through the InfiniBand CM on the FPGA's QP1, as "
                   "librdmacm's rdma_connect does (a REQ for TCP port --rdma-cm-port, service ID "
                   "0x0106 << 16 | port; the FPGA's memory region from its REP's private data), "
                   "not with OPEN_QP; on an RDMA device through librdmacm (pyverbs' CMID), on the "
                   "simulated NIC through its model of the CM. The connection manager on UDP "
                   "(--cm-host, --cm-port) still answers QUERY for the FPGA's verdict of write "
                   "and send; the FPGA's traffic generator needs QPs opened with OPEN_QP")
    c.add_argument("--rdma-cm-port", type=int, default=None, metavar="PORT",
                   help=f"with --rdma-cm: the TCP port the FPGA's InfiniBand CM listens on, "
                   f"0..65535 (default {RPING_PORT}, rping's)")
    c.add_argument("--host-timeout", type=int, default=None,
                   help="this host's QP's local ACK timeout code 0..31 (4.096 us x 2^code, 0 = "
                   f"infinite; default {VERBS_TIMEOUT} = 67 ms on an RDMA device, {SIM_TIMEOUT} "
                   f"on the simulated NIC); use {SIM_PEER_TIMEOUT} against `rocegen sim serve` "
                   "from an RDMA device, e.g. soft-RoCE on its TAP (4.3 s: the simulated FPGA is "
                   "about 10^4 times slower than a real one)")
    c.add_argument("--host-retry-cnt", type=int, default=None,
                   help="this host's QP's retry count 0..7 (default 7)")
    c.add_argument("--host-rnr-retry", type=int, default=None,
                   help="this host's QP's RNR retry count 0..7 (7 = forever; default 7)")
    c.add_argument("--window", type=int, default=4 << 20,
                   help="bytes of host memory the WRITEs of a run cycle through (power of two, "
                   "default 4 MiB)")
    c.add_argument("--recv-depth", type=int, default=64, help="receive buffers per QP")
    c.add_argument("--recv-size", type=int, default=65536, help="bytes per receive buffer")
    c.add_argument("--reply-timeout", type=float, default=0.5,
                   help="seconds to wait for each connection-manager reply (default 0.5)")
    c.add_argument("--retries", type=int, default=4, help="requests sent again without a reply")
    c.add_argument("--keep", action="store_true",
                   help="keep the agent running after its last QP is closed")
    c.add_argument("--json", action="store_true")

    s = sub.add_parser("status", help="the agent's QPs, runs and NIC counters")
    s.add_argument("--json", action="store_true")

    t = sub.add_parser("traffic", help="start the FPGA's traffic generator on a QP (or all)")
    t.add_argument("--qp", type=int, default=None, help="the FPGA's QP number (default: all)")
    t.add_argument("--op", choices=VERBS + ATOMIC_VERBS, default="WRITE",
                   help="what the FPGA does: WRITE, WRITE_IMM, SEND, SEND_IMM into the host, "
                   "READ the host's memory (filled first with the test pattern; checked by the "
                   "FPGA's pattern sink), or RDMA atomics on it (an FPGA built with --atomics): "
                   "FETCH_ADD (message s adds 1 to its target) or COMPARE_SWAP (message s swaps "
                   "in s + 1 where it finds s), on --targets zeroed 8-byte targets, checked "
                   "against a model of the run; default WRITE")
    t.add_argument("--count", type=int, default=64, help="messages (default 64)")
    t.add_argument("--size", type=int, default=None,
                   help="bytes per message (default 64 KiB; 8, and only 8, for the atomics)")
    t.add_argument("--spacing", type=int, default=0,
                   help="FPGA clock cycles between messages (default 0: back to back)")
    t.add_argument("--targets", type=int, default=None, metavar="N",
                   help="atomics only: the 8-byte targets the run steps through, a power of "
                   "two: message s works on target s mod N, from the start of the QP's memory "
                   "(default 1: one counter, which a FETCH_ADD run counts up to --count and a "
                   "COMPARE_SWAP chain too)")
    t.add_argument("--stall", type=float, default=30.0,
                   help="atomics only: give up the run when its targets have not changed for "
                   "this many seconds (default 30)")
    t.add_argument("--json", action="store_true")

    for name, what, size in (("write", "RDMA WRITE the test pattern into the FPGA's memory "
                              "region (an FPGA with the responder), then ask its verdict", 65536),
                             ("send", "SEND the test pattern into the FPGA's receive buffers (an "
                              "FPGA with the responder), then ask its verdict", 4096),
                             ("read", "RDMA READ the FPGA's memory region where write writes "
                              "(an FPGA with the responder) and check every byte against the "
                              "test pattern of its FPGA address", 65536)):
        h = sub.add_parser(name, help=what)
        h.add_argument("--qp", type=int, default=None, help="the FPGA's QP number (default: all)")
        h.add_argument("--count", type=int, default=64, help="messages per QP (default 64)")
        h.add_argument("--size", type=int, default=size,
                       help=f"bytes per message (default {size})")
        if name != "read":
            h.add_argument("--imm", action="store_true",
                           help="with immediate data (the message number)")
        if name == "send":
            h.add_argument("--at", type=lambda t: int(t, 0), default=None, metavar="ADDR",
                           help="FPGA address where its receive buffers start, whose pattern "
                           "the messages carry (default: the QP's region base, where rocegen "
                           "sim serve posts them)")
        else:
            h.add_argument("--rkey", type=lambda t: int(t, 0), default=None, metavar="KEY",
                           help="for fault testing: the R_Key the requests carry instead of the "
                           "one the FPGA named for the QP's region; another makes the FPGA NAK "
                           "them (remote access error) and put its QP in the error state")
        h.add_argument("--stall", type=float, default=30.0,
                       help="give up after this many seconds without a completion (default 30)")
        h.add_argument("--json", action="store_true")

    a = sub.add_parser("atomic", help="the contended counter: RDMA atomics (FETCH_ADD or "
                       "COMPARE_SWAP loops) from every QP at once on one 8-byte target of the "
                       "FPGA's region (an FPGA with --atomics), READ before and after, checked; "
                       "or with --direction fpga-to-host the FPGA's atomics on a counter in the "
                       "host's memory")
    a.add_argument("--direction", choices=DIRECTIONS, default="host-to-fpga",
                   help="host-to-fpga (default): the host's atomics on the FPGA's memory; "
                   "fpga-to-host: the FPGA's traffic generator's, one run per QP in turn on one "
                   "counter in the host's memory (the first QP's first word; the other QPs "
                   "pointed at it with SEND_QP_INFO, and back after), checked after each run "
                   "against a model, then the originals of the last run READ back from the "
                   "FPGA's memory and checked")
    a.add_argument("--op", choices=ATOMIC_VERBS, default="FETCH_ADD",
                   help="FETCH_ADD: add 1, --count times per QP (default); COMPARE_SWAP: compare "
                   "k, swap k + 1, tried again from the value found until --count swaps took "
                   "(fpga-to-host: a chain per QP, the counter zeroed before each run, message "
                   "s swapping in s + 1 where it finds s)")
    a.add_argument("--qp", type=int, default=None, help="the FPGA's QP number (default: all)")
    a.add_argument("--count", type=int, default=64,
                   help="FETCH_ADDs, or COMPARE_SWAPs that take, per QP (default 64)")
    a.add_argument("--offset", type=lambda t: int(t, 0), default=None, metavar="BYTES",
                   help="host-to-fpga: the target's offset in the QP's FPGA region, at an "
                   "8-byte aligned FPGA address (default: the region's last 8-byte word)")
    a.add_argument("--outstanding", type=int, default=None, metavar="N",
                   help=f"host-to-fpga: atomics outstanding per QP, 1..{ATOMIC_DEPTH} (default "
                   f"{ATOMIC_DEPTH})")
    a.add_argument("--byte-order", choices=BYTE_ORDERS, default="little",
                   help="the order of a 64-bit value in the FPGA's memory, as its --atomics "
                   "(default little): of the target read before and after (host-to-fpga), of "
                   "the originals READ back (fpga-to-host)")
    a.add_argument("--stall", type=float, default=30.0,
                   help="give up after this many seconds without a completion (fpga-to-host: "
                   "without a change of the counter; default 30)")
    a.add_argument("--json", action="store_true")

    r = sub.add_parser("recv", help="wait for the runs, checking every message; live progress, "
                       "then rates labelled with their clock (in simulation the FPGA's time)")
    r.add_argument("--qp", type=int, default=None)
    r.add_argument("--stall", type=float, default=30.0,
                   help="give up after this many seconds without progress (default 30)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--json", action="store_true")

    cl = sub.add_parser("close", help="close a QP (or all) with the FPGA")
    cl.add_argument("--qp", type=int, default=None)
    cl.add_argument("--json", action="store_true")

    sub.add_parser("stop", help="close every QP and stop the agent (exit status 1 when the "
                   "FPGA did not confirm a close)")

    args = p.parse_args(argv)
    try:
        if args.command == "connect":
            _check_rdma_cm(c, args)
            for name in ("qps", "recv_depth", "recv_size"):
                if getattr(args, name) < 1:
                    raise Fail(f"--{name.replace('_', '-')} must be >= 1", 2)
            for name, top, what in (("host_timeout", 31, "local ACK timeout code: 4.096 us x "
                                     "2^code, 0 = infinite"),
                                    ("host_retry_cnt", 7, "retry count"),
                                    ("host_rnr_retry", 7, "RNR retry count, 7 = forever")):
                value = getattr(args, name)
                if value is not None and not 0 <= value <= top:
                    raise Fail(f"--{name.replace('_', '-')} must be 0..{top} (this host's QP's "
                               f"{what}), not {value}", 2)
            return _connect(args)
        return {"status": _status, "traffic": _traffic, "recv": _recv, "close": _close,
                "stop": _stop, "write": _write, "send": _send, "read": _read,
                "atomic": _atomic}[args.command](args)
    except Fail as e:
        print(f"rocegen-host: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
