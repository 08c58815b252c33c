"""Latency of each layer of the network stack, in clock cycles (Amaranth simulator).

A host ARPs for the endpoint, then sends a UDP datagram to an echo service (a testbench process
that turns each datagram around as soon as it arrives) and a ping. With ``--cut`` the echo's port
is a cut-through port (``NetStack(cut_through_ports=...)``; the stack's only port, so UDP
receive has no store, as in the endpoint) and the datagram carries UDP checksum 0, as RoCEv2
packets do: it passes UDP receive without being stored; with ``--cut
--checksum`` it carries a checksum, as the connection manager's requests do, and passes the same
way, its last beat waiting for the checksum's verdict. For each internal
stream of
the stack (see ``NetStack.probes``) the cycle in which the packet's first and last beats move is
recorded; the table gives, per hop, the cycles from the previous stream's first (last) beat to
this one's. No idle cycles, no backpressure.

Run: python -m bench.bench_stack [--width 64 512] [--size N] [--cut [--checksum]]
"""

import argparse

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from rocegen.gateware.net.stack import NetStack
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.stack_drivers import echo_meta
from rocegen.wire.addr import parse_ip, parse_mac

UDP_PATH = ["mac_rx", "rx_fifo.o", "eth_rx.ipv4", "ip_rx.udp", "udp_rx.o0", "udp_tx.i0",
            "udp_tx.o", "ip_tx.o", "eth_tx.o", "mac_tx"]
ICMP_PATH = ["mac_rx", "rx_fifo.o", "eth_rx.ipv4", "ip_rx.icmp", "icmp.o", "ip_tx.o", "eth_tx.o", "mac_tx"]
ARP_PATH = ["mac_rx", "rx_fifo.o", "eth_rx.arp", "arp.o", "eth_tx.o", "mac_tx"]


def measure(width, size, cut=False, checksum=None):
    """``checksum``: the datagram carries a UDP checksum (default: unless ``cut``)."""
    if checksum is None:
        checksum = not cut
    dut = NetStack(width, (7,), cut_through_ports=(7,) if cut else ())
    probes = dut.probes()
    events = {name: [] for name in probes}      # (cycle, first, last) per moved beat
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    frames = [
        Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=HOST_MAC, psrc=HOST_IP,
                                                          pdst=FPGA_IP),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=5000, dport=7,
                                                  chksum=None if checksum else 0)
        / Raw(bytes(size)),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP() / Raw(bytes(size)),
    ]
    col = StreamCollector(dut.mac_tx, width)
    drv = StreamDriver(dut.mac_rx, width)
    windows = []

    async def watch(ctx):
        names = list(probes)
        sigs = []
        for n in names:
            s = probes[n]
            sigs += [s.valid, s.ready, s.payload.last]
        cycle = 0
        started = {n: False for n in names}
        async for values in ctx.tick().sample(*sigs):
            vals = values[2:]
            for k, n in enumerate(names):
                v, r, last = vals[3 * k:3 * k + 3]
                if v and r:
                    events[n].append((cycle, not started[n], bool(last)))
                    started[n] = not last
            cycle += 1

    async def echo(ctx):
        # a two-entry skid buffer in the testbench: one cycle from udp_rx[0] to udp_tx[0]
        rx, tx = dut.udp_rx[0], dut.udp_tx[0]
        queue = []
        rx_ready = tx_valid = False
        async for _, _, rv, payload, tr in ctx.tick().sample(rx.valid, rx.payload, tx.ready):
            if tx_valid and tr:
                queue.pop(0)
            if rv and rx_ready:
                queue.append({"data": payload.data, "keep": payload.keep,
                              "last": payload.last, "error": 0,
                              "meta": echo_meta(payload.meta)})
            rx_ready = len(queue) < 2
            tx_valid = bool(queue)
            ctx.set(rx.ready, rx_ready)
            ctx.set(tx.valid, tx_valid)
            if queue:
                ctx.set(tx.payload, queue[0])

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        for n, f in enumerate(frames):
            before = {k: len(v) for k, v in events.items()}
            await drv.send(ctx, [Packet(bytes(f))])
            while len(col.packets) < n + 1:
                await ctx.tick()
            for _ in range(5):
                await ctx.tick()
            windows.append(before)

    run_sim(dut, testbenches=[tb], processes=[col.run, watch, echo])

    def hops(index, path):
        start = windows[index]
        end = windows[index + 1] if index + 1 < len(windows) else None
        rows = []
        prev = None
        for name in path:
            evs = events[name][start[name]:(end[name] if end else None)]
            first = next(c for c, f, _ in evs if f)
            last = next(c for c, _, l in evs if l)
            if prev:
                rows.append((f"{prev[0]} -> {name}", first - prev[1], last - prev[2]))
            prev = (name, first, last)
        return rows
    return {"ARP request -> reply": hops(0, ARP_PATH),
            f"UDP {size} B -> echo": hops(1, UDP_PATH),
            f"ping {size} B -> reply": hops(2, ICMP_PATH)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--cut", action="store_true",
                    help="the echo's port cut-through, the datagram with UDP checksum 0")
    ap.add_argument("--checksum", action="store_true",
                    help="with --cut: the datagram carries a UDP checksum")
    args = ap.parse_args()
    if args.checksum and not args.cut:
        ap.error("--checksum goes with --cut (without it the datagram carries one anyway)")
    for width in args.width:
        print(f"\nW = {width} bits")
        for path, rows in measure(width, args.size, args.cut,
                                         args.cut and args.checksum or None).items():
            print(f"  {path}")
            print(f"    {'hop':<30}{'first beat':>12}{'last beat':>12}")
            for hop, f, l in rows:
                print(f"    {hop:<30}{f:>12}{l:>12}")
            tf = sum(r[1] for r in rows)
            print(f"    {'total (first-in to first-out)':<30}{tf:>12}")


if __name__ == "__main__":
    main()
