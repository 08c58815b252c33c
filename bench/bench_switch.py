"""Incast through the switch model (:mod:`rocegen.sim.models.fabric.switch`), PFC off and on.

Several senders (:class:`~rocegen.sim.models.fabric.switch.PacedSender`) at the full 100 Gb/s each
send the same number of RoCEv2 RDMA WRITE MIDDLE frames (path MTU 1024: 1082 bytes, DSCP 26,
ECT(0), valid ICRC) to one host behind one 100G port, over cables of ``--cable-ns`` each way.
The switch classifies by DSCP (26 is priority 3), marks ECN with the DCQCN paper's RED
settings (Kmin 5 KB, Kmax 200 KB, Pmax 1 %) and has ``--buffer`` bytes of shared buffer; with
PFC, priority 3 is lossless with ``--xoff`` / ``--xon`` thresholds per ingress and the headroom
:func:`~rocegen.sim.models.fabric.switch.pfc_headroom` gives for the cable.

Figures per run: utilization of the egress line (busy time over the time from its first frame
to its last), goodput of the frames delivered over that time, frames delivered and dropped,
XOFF and XON frames sent, ECN marks, the deepest egress queue and shared buffer, the share of
the sender most and least served (frames delivered, max / min) and the time the senders spent
paused. The senders send the same frames in both runs, so without PFC what does not fit in the
buffer is lost, and with PFC the senders are held back and everything arrives (later).

Run: python -m bench.bench_switch [--senders N] [--us T] [--buffer B] [--cable-ns C]
"""

import argparse
import time

from rocegen.sim.models import icrc
from rocegen.sim.models.fabric.switch import PacedSender, Switch, line_ns, pfc_headroom, run
from rocegen.sim.models.net.checksum import internet_checksum
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

NIC_MAC = 0x02_00_00_00_00_10
NIC_IP = 0x0A_00_00_64
LINE_GBPS = 100
DSCP = 26
PRIORITY = 3


def write_middle(sender, psn, payload):
    """An RDMA WRITE MIDDLE frame from host ``sender`` to the NIC (valid IPv4 checksum and
    ICRC)."""
    udp_len = H.UDP.length + H.BTH.length + payload + icrc.ICRC_LEN
    fields = dict(version=4, ihl=5, dscp=DSCP, ecn=2, total_length=H.IPV4.length + udp_len,
                  identification=psn & 0xFFFF or 1, df=1, ttl=64, protocol=H.IP_PROTO_UDP,
                  src=0x0A_00_00_00 + sender + 1, dst=NIC_IP)
    ip = H.IPV4.pack(**fields)
    ip = H.IPV4.pack(**fields, checksum=internet_checksum(ip))
    frame = (H.ETH.pack(dst=NIC_MAC, src=0x02_00_00_00_00_01 + sender,
                        ethertype=H.ETHERTYPE_IPV4) + ip
             + H.UDP.pack(src_port=0xC000 + sender, dst_port=H.UDP_PORT_ROCEV2, length=udp_len)
             + H.BTH.pack(opcode=opc.OP_RC_RDMA_WRITE_MIDDLE, pkey=0xFFFF, dest_qp=0x100 + sender,
                          psn=psn)
             + bytes(payload))
    return icrc.append(frame)


def incast(*, pfc, senders=4, us=100.0, payload=1024, buffer=1 << 20, cable_ns=100, xoff=40_000,
           xon=20_000, seed=1):
    """One run: the figures as a dict."""
    frame_len = len(write_middle(0, 0, payload))
    count = int(us * 1000 / line_ns(frame_len, LINE_GBPS))
    egress = senders
    kw = dict(pfc=(PRIORITY,), xoff=xoff, xon=xon,
              headroom=pfc_headroom(LINE_GBPS, frame_len, cable_ns=cable_ns)) if pfc else {}
    sw = Switch([LINE_GBPS] * (senders + 1), route={NIC_MAC: egress}, classify="dscp",
                buffer=buffer, seed=seed, **kw)
    sources = {p: PacedSender(lambda k, p=p: write_middle(p, k, payload), rate_gbps=LINE_GBPS,
                              line_gbps=LINE_GBPS, priority=PRIORITY, count=count)
               for p in range(senders)}
    t0 = time.perf_counter()
    out = [d for _, d in run(sw, sources, cable_ns=cable_ns)[egress]]
    wall = time.perf_counter() - t0
    span = out[-1].end - out[0].start
    per_sender = [sum(1 for d in out if d.ingress == p) for p in range(senders)]
    return {
        "pfc": pfc, "frame": frame_len, "sent": count * senders, "delivered": len(out),
        "dropped": sw.total("drops") + sw.total("headroom_drops"),
        "utilization": sw.counters["busy_ns"][egress] / span,
        "goodput_gbps": sum(len(d.frame) for d in out) * 8 / span,
        "xoff": sw.total("xoff_sent"), "xon": sw.total("xon_sent"), "marks": sw.total("marks"),
        "max_queue": sw.counters["max_depth"][egress][PRIORITY],
        "max_buffer": sw.counters["max_buffer"],
        "share": max(per_sender) / max(1, min(per_sender)),
        "paused_us": sum(s.paused_ns for s in sources.values()) / senders / 1000,
        "span_us": span / 1000, "wall_s": wall,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--senders", type=int, default=4, help="100G senders into one port (2..32)")
    p.add_argument("--us", type=float, default=100.0,
                   help="microseconds of traffic each sender sends at line rate")
    p.add_argument("--buffer", type=int, default=1 << 20, help="shared buffer in bytes")
    p.add_argument("--cable-ns", type=float, default=100.0, help="cable delay each way")
    p.add_argument("--xoff", type=int, default=40_000, help="XOFF threshold per ingress, bytes")
    p.add_argument("--xon", type=int, default=20_000, help="XON threshold per ingress, bytes")
    args = p.parse_args(argv)
    if not 2 <= args.senders <= 32:
        p.error(f"--senders must be 2..32, not {args.senders}")
    if not args.us > 0:
        p.error("--us must be positive")
    runs = [incast(pfc=pfc, senders=args.senders, us=args.us, buffer=args.buffer,
                   cable_ns=args.cable_ns, xoff=args.xoff, xon=args.xon) for pfc in (False, True)]
    r0 = runs[0]
    print(f"{args.senders} x {LINE_GBPS}G senders -> 1 x {LINE_GBPS}G port, {r0['frame']}-byte "
          f"frames (PMTU 1024), {args.us:g} us of traffic each ({r0['sent']} frames), "
          f"buffer {args.buffer} B, cable {args.cable_ns:g} ns")
    print(f"{'PFC':<5}{'util':>8}{'goodput':>12}{'delivered':>11}{'dropped':>9}{'XOFF':>6}"
          f"{'XON':>6}{'marks':>7}{'max queue':>11}{'max buffer':>12}{'max/min':>9}"
          f"{'paused':>11}{'span':>11}{'wall':>8}")
    for r in runs:
        print(f"{'on' if r['pfc'] else 'off':<5}{r['utilization']:>8.2%}"
              f"{r['goodput_gbps']:>7.2f} Gb/s{r['delivered']:>11}{r['dropped']:>9}{r['xoff']:>6}"
              f"{r['xon']:>6}{r['marks']:>7}{r['max_queue']:>9} B{r['max_buffer']:>10} B"
              f"{r['share']:>9.3f}{r['paused_us']:>8.1f} us{r['span_us']:>8.1f} us"
              f"{r['wall_s']:>6.2f} s")
    return runs


if __name__ == "__main__":
    main()
