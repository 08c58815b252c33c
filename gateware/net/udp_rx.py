from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checked_fifo import ChecksumCheckedFifo
from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
from rocegen.gateware.lib.demux import PacketDemux
from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.fifo import fifo_depth
from rocegen.gateware.lib.pipe import ForwardRegister
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.net.layouts import IP_RX_META, UDP_RX_META
from rocegen.wire.headers import IP_PROTO_UDP, IPV4, UDP

__all__ = ["UdpRx"]


class UdpRx(wiring.Component):
    """UDP receive: checksum verification, header removal and dispatch by destination port.

    ``i`` carries UDP datagrams (IPv4 payloads). Each (but those for ``cut_ports``, below) is
    stored whole while its checksum over the pseudo-header and datagram is computed; a datagram
    with a non-zero checksum field that does not verify pulses ``drop_checksum`` (checksum 0
    means "none" and is accepted). Then the header is removed and the datagram leaves on
    ``o[k]`` where ``ports[k]`` is its destination port, with ``meta.eth``/``meta.ipv4``/
    ``meta.udp``. Drops: ``runt`` (shorter than 8 bytes), ``drop_length`` (UDP length disagrees
    with the IP payload length), ``drop_port`` (no such port), ``drop_error`` (damaged on the
    way in, or longer than the store).

    ``cut_ports`` (a subset of ``ports``) names the ports whose consumers drop a datagram marked
    ``error`` themselves. A datagram for one of them passes the store cut-through: it leaves as
    it comes, and one damaged on the way in leaves with ``error`` on its last beat (not counted
    here). Its checksum, when it has one, is verified as it passes: its last beat waits at the
    dispatch for the verdict, and one whose checksum is wrong leaves with ``error`` on its last
    beat and pulses ``drop_checksum`` (as a stored one would; one that is dropped for its length
    is counted as ``drop_length`` only). RoCEv2 (whose senders send checksum 0 and whose ICRC
    check drops damaged packets) and the connection manager (whose host tools send a checksum,
    and whose requests are acted on after their last beat) are the cases for it.

    Latency: store-and-forward, the datagram starts leaving a few cycles after its last beat
    (the length and port checks go with it through a
    :class:`~rocegen.gateware.lib.pipe.ForwardRegister` before the dispatch, one of those cycles;
    the store has a forward register at its input, another); a cut-through datagram's first
    beat leaves :attr:`CUT_LATENCY` (4) cycles after it enters when the store is empty (it
    passes beside the store: the store's input register and output slice, the depacketizer's
    cycle and the forward register's), and 2 cycles later behind datagrams still in the store.
    The last beat of one with a checksum leaves ``PacketChecksum.latency`` cycles after it
    entered (5 at 256 and 512 bits, 4 below) when it finds the store empty, where one with
    checksum 0 leaves 3 cycles after it entered.
    Backpressure: from the addressed port (``ready`` of the ports passes the forward register
    and the depacketizer and ends in the store's output register slice); the input is held
    while the store is full.
    """

    #: Cycles from a cut-through datagram's first beat in to its first beat out, when it
    #: finds the store empty.
    CUT_LATENCY = 4

    def __init__(self, width, ports, *, mtu=1500, cut_ports=()):
        check_width(width)
        ports = tuple(ports)
        cut_ports = tuple(cut_ports)
        if not ports:
            raise ValueError("UDP receive needs at least one port")
        for p in ports:
            if not isinstance(p, int) or not 1 <= p <= 0xFFFF:
                raise ValueError(f"UDP port must be 1..65535, not {p!r}")
        if len(set(ports)) != len(ports):
            raise ValueError(f"UDP ports must be distinct, got {ports}")
        for p in cut_ports:
            if p not in ports:
                raise ValueError(f"cut-through port {p!r} is not one of the ports {ports}")
        self.width = width
        self.ports = ports
        self.cut_ports = cut_ports
        self.depth = fifo_depth(mtu - IPV4.length, width)
        super().__init__({
            "i": In(PacketSignature(width, IP_RX_META)),
            "o": Out(PacketSignature(width, UDP_RX_META)).array(len(ports)),
            "runt": Out(1),
            "drop_checksum": Out(1),
            "drop_length": Out(1),
            "drop_port": Out(1),
            "drop_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        store = m.submodules.store = ChecksumCheckedFifo(W, self.depth, IP_RX_META,
                                                         cut_input=bool(self.cut_ports))
        wiring.connect(m, wiring.flipped(self.i), store.i)
        ip = self.i.payload.meta.ipv4
        pseudo = be_words(IPV4.to_lanes(ip))[6:10]            # source and destination address
        first_hdr = UDP.from_lanes(self.i.payload.data[:8 * UDP.length])
        # protocol + UDP length = protocol + total length - 20: the constants are summed here
        # (subtracting 20 is adding its one's complement, 0xFFEB; 17 + 0xFFEB = 0xFFFC)
        const = (IP_PROTO_UDP + (0xFFFF ^ IPV4.length)) % 0xFFFF
        m.d.comb += [
            store.seed.eq(ones_complement_sum(pseudo + [ip.total_length, const])),
            store.skip.eq(first_hdr.checksum == 0),
            self.drop_error.eq(store.drop_error | store.drop_overflow),
        ]
        if self.cut_ports:
            # the first beat holds the whole header (keep's 8th byte): a runt is stored, so that
            # the depacketizer sees it whole and counts it
            to_cut = first_hdr.dst_port == self.cut_ports[0]
            for p in self.cut_ports[1:]:
                to_cut = to_cut | (first_hdr.dst_port == p)
            m.d.comb += store.cut.eq(self.i.payload.keep[UDP.length - 1] & to_cut)

        dp = m.submodules.depacketizer = Depacketizer(UDP, W, IP_RX_META)
        wiring.connect(m, store.o, dp.i)
        m.d.comb += self.runt.eq(dp.runt)
        n = len(self.ports)
        # the checks travel with the datagram through a forward register, so the dispatch's
        # routing depends on registers only (the ports' ready reaches the depacketizer and the
        # store's output slice through it)
        verdict = data.StructLayout({"length_ok": 1, "known": 1, "port": range(n), "checked": 1})
        inner = data.StructLayout({**UDP_RX_META.members, "verdict": verdict})
        fr = m.submodules.register = ForwardRegister(W, inner)
        src, fi = dp.o.payload, fr.i.payload
        meta = src.meta
        hits = [meta.udp.dst_port == p for p in self.ports]
        known = hits[0]
        for h in hits[1:]:
            known = known | h
        port = Signal(range(n))
        for k in reversed(range(n)):
            with m.If(hits[k]):
                m.d.comb += port.eq(k)
        m.d.comb += [
            fr.i.valid.eq(dp.o.valid), dp.o.ready.eq(fr.i.ready),
            fi.data.eq(src.data), fi.keep.eq(src.keep), fi.last.eq(src.last),
            fi.error.eq(src.error), fi.meta.eth.eq(meta.eth), fi.meta.ipv4.eq(meta.ipv4),
            fi.meta.udp.eq(meta.udp),
            fi.meta.verdict.length_ok.eq(meta.udp.length == meta.ipv4.total_length - IPV4.length),
            fi.meta.verdict.known.eq(known),
            fi.meta.verdict.port.eq(port),
        ]
        # a cut-through datagram with a checksum (every datagram for a cut-through port that
        # passes the depacketizer went cut-through: only runts are stored, and they stop there)
        cut_hits = [h for p, h in zip(self.ports, hits, strict=True) if p in self.cut_ports]
        if cut_hits:
            m.d.comb += fi.meta.verdict.checked.eq(Cat(*cut_hits).any()
                                                   & (meta.udp.checksum != 0))
        dm = m.submodules.demux = PacketDemux(W, UDP_RX_META, n)
        fo = fr.o.payload
        v = fo.meta.verdict
        # the last beat of a cut-through datagram with a checksum waits here for its verdict
        # and carries ``error`` when the checksum is wrong
        wait = Signal()
        bad = Signal()
        if self.cut_ports:
            cv = store.cut_verdict
            hold = v.checked & fo.last
            m.d.comb += [
                wait.eq(hold & ~cv.valid),
                bad.eq(hold & ~cv.payload),
                cv.ready.eq(fr.o.valid & hold & dm.i.ready),
            ]
        m.d.comb += [
            dm.i.valid.eq(fr.o.valid & ~wait), fr.o.ready.eq(dm.i.ready & ~wait),
            dm.i.payload.data.eq(fo.data), dm.i.payload.keep.eq(fo.keep),
            dm.i.payload.last.eq(fo.last), dm.i.payload.error.eq(fo.error | bad),
            dm.i.payload.meta.eth.eq(fo.meta.eth), dm.i.payload.meta.ipv4.eq(fo.meta.ipv4),
            dm.i.payload.meta.udp.eq(fo.meta.udp),
        ]
        length_ok, known = v.length_ok, v.known
        m.d.comb += [dm.select.eq(v.port), dm.drop.eq(~length_ok | ~known)]
        # (a dropped packet's first beat is always taken: the strobes need no ``ready``)
        first = dm.i.valid & first_beat(m, dm.i)
        m.d.comb += [self.drop_length.eq(first & ~length_ok),
                     self.drop_port.eq(first & length_ok & ~known),
                     # a stored datagram dropped, or a cut-through one delivered marked
                     self.drop_checksum.eq(store.drop_checksum | fr.o.valid & fr.o.ready & bad
                                           & ~fo.error & length_ok)]
        for k in range(n):
            wiring.connect(m, dm.o[k], wiring.flipped(self.o[k]))
        return m
