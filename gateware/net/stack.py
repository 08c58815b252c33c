from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.arbiter import PacketArbiter
from rocegen.gateware.lib.buffer import RegisterSlice
from rocegen.gateware.lib.fifo import PacketFifo, fifo_depth
from rocegen.gateware.lib.pipe import ForwardRegister
from rocegen.gateware.lib.stats import StatsBlock
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.net.arp import Arp
from rocegen.gateware.net.eth_rx import EthRx
from rocegen.gateware.net.eth_tx import EthTx
from rocegen.gateware.net.icmp import IcmpEcho
from rocegen.gateware.net.icrc_tx import IcrcTx
from rocegen.gateware.net.ipv4_rx import Ipv4Rx
from rocegen.gateware.net.ipv4_tx import Ipv4Tx
from rocegen.gateware.net.layouts import ARP_PEEK, ETH_META, IP_OUT_META, IP_TX, UDP_RX_META
from rocegen.gateware.net.udp_rx import UdpRx
from rocegen.gateware.net.udp_tx import UDP_TX_META, UdpTx

__all__ = ["NetStack", "STATS"]

#: Ethernet header with one 802.1Q tag, in bytes (the FCS is not in the stack's frames).
MAX_L2_HEADER = 18

#: Counter names of the statistics block, in address order.
STATS = [
    "rx_frames", "rx_bad_frame", "rx_overflow",
    "eth_runt", "eth_drop_addr", "eth_drop_ethertype",
    "arp_drop_bad", "arp_rx_request", "arp_rx_reply", "arp_tx_reply", "arp_tx_request",
    "arp_resolve_failed",
    "ip_runt", "ip_truncated", "ip_drop_header", "ip_drop_options", "ip_drop_fragment",
    "ip_drop_addr", "ip_drop_protocol", "ip_tx_unresolved",
    "icmp_echo_reply", "icmp_drop_type", "icmp_drop_checksum", "icmp_drop_error",
    "udp_runt", "udp_drop_checksum", "udp_drop_length", "udp_drop_port", "udp_drop_error",
    "udp_tx_length_mismatch", "tx_frames",
]


class NetStack(wiring.Component):
    """Ethernet / ARP / IPv4 / ICMP echo / UDP endpoint with ``len(udp_ports)`` UDP ports.

    Parameters
    ----------
    width : int
        Data width W of every stream (64..512).
    udp_ports : sequence of int
        Local UDP port numbers; port ``udp_ports[k]`` is ``udp_rx[k]`` / ``udp_tx[k]``.
    mtu : int
        Largest IPv4 packet taken or sent (576..9000).
    vlan : int or None
        802.1Q VLAN ID to send and accept (untagged when None).
    pcp : int
        802.1Q priority (PCP, 0..7) of the frames sent when ``vlan`` is set, after reset (input
        ``pcp`` changes it at run time; received frames are taken whatever their priority and
        DEI).
    rx_fifo_beats : int or None
        Depth of the receive FIFO behind the MAC (a power of two; default: two maximum frames).
        Its fill level in beats is output ``rx_level`` (for PFC's XOFF).
    cut_through_ports : sequence of int
        Ports of ``udp_ports`` whose consumers drop a datagram marked ``error`` themselves: their
        datagrams pass UDP receive cut-through, those damaged on the way in or with a wrong UDP
        checksum marked (the checksum is verified as the datagram passes, and its last beat
        waits for the verdict; :class:`~rocegen.gateware.net.udp_rx.UdpRx`). When they are all
        of ``udp_ports``, UDP receive has no store at all (only a small FIFO, passed beside
        while it is empty, for the datagrams behind one whose last beat waits for its verdict).
    arp_entries, arp_retry_cycles, arp_retries
        ARP cache size, request repeat interval in cycles and number of repeats.
    tx_cut_through : bool
        ``False`` (default): the transmit FIFO stores each frame whole before its first beat
        leaves. ``True``: there is no transmit FIFO, and beats pass to the MAC as they come
        from the Ethernet transmitter's forward register (cut-through), which saves a beat of
        latency per beat of the frame and the FIFO's two cycles; the MAC's ``ready`` then
        reaches the transmitter through that register. Only for a stack whose every transmit source is
        *steady*: once a frame's first beat is offered, its next beat is offered in every
        cycle the path takes one, until the last (no idle cycle inside a frame). The stack's
        own sources are (ARP, the ICMP store, the header stages, the ICRC stage), so the
        condition is on ``udp_tx``: a UDP port whose frames can pause inside (a payload read
        from a memory with a variable latency, a user's stream) needs ``False``, because the
        MAC must see no gap inside a frame.
    ip_out : bool
        ``True``: a transmit fast path for complete IPv4 datagrams, ports ``ip_out``,
        ``arp_peek`` and ``tx_idle`` (below). ``False`` (default): none of them, and none of
        their logic.
    ip_in : bool
        ``True``: port ``ip_in`` (below), every IPv4 datagram as the Ethernet layer hands it on,
        for a receiver that reads its datagrams with their headers in place. ``False``
        (default): no such port, and no logic for it.

    Ports
    -----
    ``local_mac``, ``local_ip``: our addresses (tie to constants or registers).
    ``mac_rx``: frames from the MAC without FCS, ``error`` set on a frame with a bad FCS; the
    stack never stalls it (``ready`` is always 1); its ``keep`` must be a thermometer code (as
    every MAC's is). The receive FIFO passes frames cut-through, and while it is empty a beat
    goes on to the Ethernet receiver in the cycle it comes (its bypass, no cycle of latency;
    beats queue in the FIFO from the first one the receiver does not take until it is empty):
    a frame marked ``error`` is counted (``rx_bad_frame``) and goes on with its mark, and the
    layer that would act on it drops it and counts it too (ARP's ``arp_drop_bad``, ICMP's and
    UDP's ``*_drop_error``, a cut-through port's consumer), after any header check that drops it
    first. A frame that meets a full FIFO is counted (``rx_overflow``) and dropped whole, or, if
    it had started, cut short and marked ``error`` (then dropped and counted as above).
    ``mac_tx``: frames to the MAC without FCS, padded to 60 bytes; ``valid`` never drops inside
    a frame (the CMAC and the XGMII MAC both require this): each frame is sent whole from a
    store-and-forward FIFO, or with ``tx_cut_through`` as its beats come from steady sources
    (from a forward register; ``ready`` passes combinationally to the transmitter's);
    ``error`` on the last beat asks the MAC to abort the frame.
    ``udp_rx[k]``: datagram payloads with ``meta.eth``, ``meta.ipv4`` and ``meta.udp``.
    ``udp_tx[k]``: datagram payloads with ``meta.udp`` (:data:`~rocegen.gateware.net.layouts.UDP_TX`).
    ``ip_out`` (with ``ip_out``): complete IPv4 datagrams (the header with its checksum, the
    payload and, for RoCEv2, the ICRC), with ``meta.eth`` the Ethernet header to build (dst, src,
    ethertype): a third input of the Ethernet arbiter, beside ARP and the ICRC stage. They pass
    neither UDP nor IPv4 transmit nor the ICRC stage (no ICRC is appended): the Ethernet
    transmitter adds the header (and the 802.1Q tag with ``vlan``) and pads the frame to 60
    bytes, the datagram's bytes unchanged. Like ``udp_tx``, a steady source with
    ``tx_cut_through`` (its frame's beats back to back once its first is offered).
    ``arp_peek`` (with ``ip_out``): the ARP cache's entry for an address
    (:data:`~rocegen.gateware.net.layouts.ARP_PEEK`: ``ip`` -> ``hit`` / ``mac``
    combinationally; a miss asks nothing), for the source of ``ip_out`` to address its frames.
    ``tx_idle`` (with ``ip_out``): high while no packet is inside the transmit path before the
    Ethernet arbiter (UDP transmit, the IPv4 arbiter, IPv4 transmit, the ICRC stage and the
    slice before it), from a register: a packet counts from the cycle after its first beat is
    taken on ``udp_tx[k]`` or from the ICMP responder, until the cycle after its last beat
    leaves the ICRC stage into the Ethernet arbiter, or after IPv4 transmit drops it
    (``ip_tx_unresolved``; the rest of that packet is discarded and never leaves). Frames on
    ``ip_out`` are not counted. A frame whose first beat is offered on ``ip_out`` in a cycle
    ``tx_idle`` is high (and held, as the stream rule requires) leaves behind every packet whose
    first beat was taken on ``udp_tx`` (or from the ICMP responder) before that cycle; a packet
    taken in that very cycle or later may go before or after it. So a source that builds whole
    datagrams (such as a RoCEv2 responder's acknowledgements) may send on ``ip_out`` while
    ``tx_idle`` is high, and its frame never overtakes a packet it sent earlier through
    ``udp_tx``.
    ``ip_in`` (with ``ip_in``): every datagram the Ethernet receiver hands to IPv4 receive,
    beside it: the IPv4 header first in lane 0, Ethernet padding included, ``meta.eth``, and
    ``error`` on the last beat of a damaged frame; no IPv4 or UDP check has been made. A beat
    moves on ``ip_in`` and into IPv4 receive in the same cycle: ``ip_in.valid`` waits for IPv4
    receive's ``ready`` and IPv4 receive's input for ``ip_in.ready``, so ``ip_in.ready`` low
    holds the stack's receive side (as a UDP port's consumer does). The datagrams go on through
    IPv4 and UDP receive as well and are counted there: a receiver that takes a UDP port's
    datagrams from ``ip_in`` (a RoCEv2 receive path, whose ICRC covers the headers) leaves that
    port's ``udp_rx`` always ready.
    ``stats_addr`` / ``stats_data``: read port of the counters named in :data:`STATS` (an event
    is counted one cycle after its pulse: the pulses are registered before the counters).
    """

    def __init__(self, width, udp_ports=(17185,), *, mtu=1500, vlan=None, pcp=0,
                 rx_fifo_beats=None, arp_entries=4, arp_retry_cycles=100_000, arp_retries=3,
                 cut_through_ports=(), tx_cut_through=False, ip_out=False, ip_in=False):
        check_width(width)
        if not isinstance(ip_in, bool):
            raise TypeError(f"ip_in must be a bool, not {ip_in!r}")
        self.ip_in_port = ip_in
        if not isinstance(tx_cut_through, bool):
            raise TypeError(f"tx_cut_through must be a bool, not {tx_cut_through!r}")
        if not isinstance(ip_out, bool):
            raise TypeError(f"ip_out must be a bool, not {ip_out!r}")
        self.tx_cut_through = tx_cut_through
        self.ip_out_port = ip_out
        if rx_fifo_beats is None:
            rx_fifo_beats = fifo_depth(mtu + MAX_L2_HEADER, width, packets=2)
        self.width = width
        self.udp_ports = tuple(udp_ports)
        self.mtu = mtu
        self.vlan = vlan
        self.rx_fifo_beats = rx_fifo_beats
        # transmit FIFO: two maximum frames, so one can fill while the other leaves
        self.tx_fifo_beats = fifo_depth(mtu + MAX_L2_HEADER, width, packets=2)
        self.arp_args = dict(entries=arp_entries, retry_cycles=arp_retry_cycles,
                             retries=arp_retries)
        # validate here so that errors name the stack's parameters
        self._udp_rx = UdpRx(width, self.udp_ports, mtu=mtu, cut_ports=cut_through_ports)
        self._ip_rx = Ipv4Rx(width, mtu=mtu)
        self._arp = Arp(width, **self.arp_args, peek=ip_out)
        self._eth_rx = EthRx(width, vlan=vlan)
        self._eth_tx = EthTx(width, vlan=vlan, pcp=pcp)
        self._stats = StatsBlock(STATS)
        n = len(self.udp_ports)
        option_ports = {
            "ip_out": In(PacketSignature(width, ETH_META)),
            "arp_peek": In(ARP_PEEK),
            "tx_idle": Out(1),
        } if ip_out else {}
        if ip_in:
            option_ports["ip_in"] = Out(PacketSignature(width, ETH_META))
        # cut-through: a frame goes on before its FCS verdict (its last beat's ``error``)
        # (and while it is empty, a beat passes beside it in the cycle it comes: the bypass)
        self._rx_fifo = PacketFifo(width, rx_fifo_beats, store_and_forward=False,
                                   drop_errors=False, overflow="drop", bypass=True)
        # (cut-through needs no FIFO: a steady source's frame goes on as it comes)
        self._tx_fifo = None if tx_cut_through else PacketFifo(
            width, self.tx_fifo_beats, store_and_forward=True, drop_errors=False,
            overflow="wait")
        self._icmp = IcmpEcho(width, mtu=mtu)
        self._udp_tx = UdpTx(width, n)
        self._ip_tx = Ipv4Tx(width)
        self._icrc_tx = IcrcTx(width)
        super().__init__({
            "local_mac": In(48),
            "local_ip": In(32),
            "mac_rx": In(PacketSignature(width)),
            "mac_tx": Out(PacketSignature(width)),
            "udp_rx": Out(PacketSignature(width, UDP_RX_META)).array(n),
            "udp_tx": In(PacketSignature(width, UDP_TX_META)).array(n),
            "stats_addr": In(range(len(STATS))),
            "stats_data": Out(32),
            "pcp": In(3, init=pcp),
            "rx_level": Out(range(rx_fifo_beats + 1)),
            **option_ports,
        })

    def probes(self):
        """The internal streams between the layers, by name, in receive then transmit order:
        for benches and tests that observe the stack (read-only use)."""
        ip_out = {"ip_out": self.ip_out} if self.ip_out_port else {}
        ip_in = {"ip_in": self.ip_in} if self.ip_in_port else {}
        return {
            "mac_rx": self.mac_rx,
            "rx_fifo.o": self._rx_fifo.o,
            "eth_rx.ipv4": self._eth_rx.ipv4,
            "eth_rx.arp": self._eth_rx.arp,
            **ip_in,
            "ip_rx.udp": self._ip_rx.udp,
            "ip_rx.icmp": self._ip_rx.icmp,
            **{f"udp_rx.o{k}": o for k, o in enumerate(self._udp_rx.o)},
            "udp_tx.i0": self._udp_tx.i[0],
            "udp_tx.o": self._udp_tx.o,
            "icmp.o": self._icmp.o,
            "ip_tx.o": self._ip_tx.o,
            "icrc_tx.o": self._icrc_tx.o,
            "arp.o": self._arp.o,
            **ip_out,
            "eth_tx.o": self._eth_tx.o,
            "mac_tx": self.mac_tx,
        }

    def _tx_idle(self, m, udp_tx, ip_arb, ip_tx, icrc_tx):
        """``tx_idle``: a count of the packets inside the transmit path before the Ethernet
        arbiter, up by those whose first beat is taken on a ``udp_tx`` port or from the ICMP
        responder, down by those whose last beat leaves the ICRC stage and by those IPv4
        transmit drops (``drop_unresolved`` pulses once per packet, with the packet's first
        beat, which it takes with the rest and hands on to nothing)."""
        starts = []
        for k in range(len(self.udp_ports)):
            s = self.udp_tx[k]
            starts.append(s.valid & s.ready & first_beat(m, s))
        s = ip_arb.i[0]
        starts.append(s.valid & s.ready & first_beat(m, s))
        o = icrc_tx.o
        ends = [o.valid & o.ready & o.payload.last, ip_tx.drop_unresolved]
        # 8 bits never wrap: every packet counted but one (passing through as it comes) has a
        # beat of its own in the path's registers (UDP transmit's trimmer, IPv4 transmit's
        # slice, the ICRC slice, the ICRC stage's pipeline and its 16-beat queue), a few dozen
        # beats in all
        count = Signal(8)
        m.d.sync += count.eq(count + sum(starts) - sum(ends))
        m.d.comb += self.tx_idle.eq(count == 0)

    def _elaborate_receive(self, m, ev):
        """The receive side: FIFO, Ethernet, ARP, IPv4 (and ``ip_in``), ICMP, UDP; their events
        into ``ev``."""
        n = len(self.udp_ports)
        rx_fifo = m.submodules.rx_fifo = self._rx_fifo
        wiring.connect(m, wiring.flipped(self.mac_rx), rx_fifo.i)
        m.d.comb += self.rx_level.eq(rx_fifo.level)
        ev["rx_frames"] = self.mac_rx.valid & self.mac_rx.ready & self.mac_rx.payload.last
        ev["rx_bad_frame"] = (self.mac_rx.valid & self.mac_rx.ready & self.mac_rx.payload.last
                              & self.mac_rx.payload.error)
        ev["rx_overflow"] = rx_fifo.drop_overflow

        eth_rx = m.submodules.eth_rx = self._eth_rx
        wiring.connect(m, rx_fifo.o, eth_rx.i)
        m.d.comb += eth_rx.local_mac.eq(self.local_mac)
        ev.update(eth_runt=eth_rx.runt, eth_drop_addr=eth_rx.drop_addr,
                  eth_drop_ethertype=eth_rx.drop_ethertype)

        arp = m.submodules.arp = self._arp
        m.d.comb += [arp.local_mac.eq(self.local_mac), arp.local_ip.eq(self.local_ip)]
        wiring.connect(m, eth_rx.arp, arp.i)
        ev.update(arp_drop_bad=arp.drop_bad, arp_rx_request=arp.rx_request,
                  arp_rx_reply=arp.rx_reply, arp_tx_reply=arp.tx_reply,
                  arp_tx_request=arp.tx_request, arp_resolve_failed=arp.lookup.failed)

        ip_rx = m.submodules.ip_rx = self._ip_rx
        m.d.comb += ip_rx.local_ip.eq(self.local_ip)
        if self.ip_in_port:
            # every datagram both ways: a beat moves on both in one cycle
            src, tap = eth_rx.ipv4, self.ip_in
            m.d.comb += [
                ip_rx.i.valid.eq(src.valid & tap.ready), ip_rx.i.payload.eq(src.payload),
                tap.valid.eq(src.valid & ip_rx.i.ready), tap.payload.eq(src.payload),
                src.ready.eq(ip_rx.i.ready & tap.ready),
            ]
        else:
            wiring.connect(m, eth_rx.ipv4, ip_rx.i)
        ev.update(ip_runt=ip_rx.runt, ip_truncated=ip_rx.truncated,
                  ip_drop_header=ip_rx.drop_header, ip_drop_options=ip_rx.drop_options,
                  ip_drop_fragment=ip_rx.drop_fragment, ip_drop_addr=ip_rx.drop_addr,
                  ip_drop_protocol=ip_rx.drop_protocol)

        icmp = m.submodules.icmp = self._icmp
        wiring.connect(m, ip_rx.icmp, icmp.i)
        ev.update(icmp_echo_reply=icmp.reply, icmp_drop_type=icmp.drop_type,
                  icmp_drop_checksum=icmp.drop_checksum, icmp_drop_error=icmp.drop_error)

        udp_rx = m.submodules.udp_rx = self._udp_rx
        wiring.connect(m, ip_rx.udp, udp_rx.i)
        for k in range(n):
            wiring.connect(m, udp_rx.o[k], wiring.flipped(self.udp_rx[k]))
        ev.update(udp_runt=udp_rx.runt, udp_drop_checksum=udp_rx.drop_checksum,
                  udp_drop_length=udp_rx.drop_length, udp_drop_port=udp_rx.drop_port,
                  udp_drop_error=udp_rx.drop_error)

    def elaborate(self, platform):
        m = Module()
        W = self.width
        n = len(self.udp_ports)
        ev = {}

        self._elaborate_receive(m, ev)
        arp, icmp = self._arp, self._icmp

        # ---- transmit ----
        udp_tx = m.submodules.udp_tx = self._udp_tx
        for k in range(n):
            wiring.connect(m, wiring.flipped(self.udp_tx[k]), udp_tx.i[k])
        ev["udp_tx_length_mismatch"] = udp_tx.length_mismatch

        ip_meta = data.StructLayout({"ip": IP_TX})
        ip_arb = m.submodules.ip_arbiter = PacketArbiter(W, ip_meta, 2)
        # registers where the transmit path's chains would grow too long: a register slice in
        # front of the ICRC stage, whose ``ready`` is a register (it splits the ready chain from
        # the transmit FIFO or the MAC) and which passes a beat on in the cycle it comes while it
        # is empty (into the ICRC stage's input registers or, for a packet without an ICRC,
        # through the merge into the forward register behind the Ethernet transmitter), and that
        # forward register (whose ready is the FIFO's registered "full" or the MAC's). (The ICMP
        # reply comes from the ICMP store's output register through the in-place header
        # rewrite alone, and the arbiter's registered grant keeps its ready short.)
        wiring.connect(m, icmp.o, ip_arb.i[0])
        wiring.connect(m, udp_tx.o, ip_arb.i[1])
        ip_tx = m.submodules.ip_tx = self._ip_tx
        wiring.connect(m, ip_arb.o, ip_tx.i)
        m.d.comb += [ip_tx.local_mac.eq(self.local_mac), ip_tx.local_ip.eq(self.local_ip)]
        wiring.connect(m, ip_tx.lookup, arp.lookup)
        ev["ip_tx_unresolved"] = ip_tx.drop_unresolved

        eth_arb = m.submodules.eth_arbiter = PacketArbiter(W, ETH_META,
                                                           3 if self.ip_out_port else 2)
        wiring.connect(m, arp.o, eth_arb.i[0])
        icrc_tx = m.submodules.icrc_tx = self._icrc_tx
        icrc_slice = m.submodules.icrc_slice = RegisterSlice(W, IP_OUT_META, bypass=True)
        wiring.connect(m, ip_tx.o, icrc_slice.i)
        wiring.connect(m, icrc_slice.o, icrc_tx.i)
        wiring.connect(m, icrc_tx.o, eth_arb.i[1])
        if self.ip_out_port:
            # complete datagrams: straight to the Ethernet arbiter
            wiring.connect(m, wiring.flipped(self.ip_out), eth_arb.i[2])
            wiring.connect(m, wiring.flipped(self.arp_peek), arp.peek)
            self._tx_idle(m, udp_tx, ip_arb, ip_tx, icrc_tx)
        eth_tx = m.submodules.eth_tx = self._eth_tx
        # the ARP and ICRC stages' outputs go through the arbiter (its grant a register) and the
        # combinational transmitter into the forward register behind it
        wiring.connect(m, eth_arb.o, eth_tx.i)
        m.d.comb += eth_tx.pcp.eq(self.pcp)
        # a forward register behind the transmitter: the frame leaves from registers, into the
        # store-and-forward FIFO (whose "full" keeps the ready short) or, cut-through, to the
        # MAC (whose ready is an input)
        fifo_slice = m.submodules.fifo_slice = ForwardRegister(W)
        wiring.connect(m, eth_tx.o, fifo_slice.i)
        if self._tx_fifo is None:
            wiring.connect(m, fifo_slice.o, wiring.flipped(self.mac_tx))
        else:
            tx_fifo = m.submodules.tx_fifo = self._tx_fifo
            wiring.connect(m, fifo_slice.o, tx_fifo.i)
            wiring.connect(m, tx_fifo.o, wiring.flipped(self.mac_tx))
        ev["tx_frames"] = self.mac_tx.valid & self.mac_tx.ready & self.mac_tx.payload.last

        # ---- statistics ----
        stats = m.submodules.stats = self._stats
        missing = set(STATS) ^ set(ev)
        assert not missing, f"statistics and events disagree: {sorted(missing)}"
        # the event pulses are registered before the counters (each counts one cycle later),
        # so that no event's logic reaches a counter's enable
        inc = Signal(len(STATS))
        m.d.sync += inc.eq(Cat(*(ev[name] for name in STATS)))
        m.d.comb += [stats.inc.eq(inc),
                     stats.addr.eq(self.stats_addr), self.stats_data.eq(stats.data)]
        return m
