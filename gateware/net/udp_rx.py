from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checked_fifo import ChecksumCheckedFifo
from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
from rocegen.gateware.lib.checksum_verdicts import ChecksumVerdicts
from rocegen.gateware.lib.demux import PacketDemux
from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.fifo import PacketFifo, fifo_depth
from rocegen.gateware.lib.pipe import ForwardRegister
from rocegen.gateware.lib.stats import merge_events
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

    When every port is cut-through (``cut_ports`` is all of ``ports``) there is no store: every
    datagram's checksum is summed as it passes, and a datagram for no port is dropped at the
    dispatch and counted on its last beat (once its verdict is in) as the store would have
    counted it: ``drop_error`` if damaged, else ``drop_checksum`` if its checksum is wrong, else
    ``drop_length``, else ``drop_port``; a damaged runt counts ``drop_error``. The datagrams
    then pass a cut-through :class:`~rocegen.gateware.lib.fifo.PacketFifo` of
    :attr:`BYPASS_BEATS` beats, beside it while it is empty: while a last beat waits at the
    dispatch for its verdict, the datagrams behind it come in and are summed, so under a flood
    of datagrams with a checksum the verdicts keep pace and the input is not held.

    Latency: store-and-forward, the datagram starts leaving a few cycles after its last beat
    (the length and port checks go with it through a
    :class:`~rocegen.gateware.lib.pipe.ForwardRegister` before the dispatch, one of those cycles;
    the store has a forward register at its input, another); a cut-through datagram's first
    beat leaves :attr:`CUT_LATENCY` (4) cycles after it enters when the store is empty (it
    passes beside the store: the store's input register and output slice, the depacketizer's
    cycle and the forward register's), and 2 cycles later behind datagrams still in the store.
    The last beat of one with a checksum leaves ``PacketChecksum.latency`` cycles after it
    entered (5 at 256 and 512 bits, 4 below) when it finds the store empty, where one with
    checksum 0 leaves 3 cycles after it entered. Without a store, a datagram's first beat
    leaves :attr:`NO_STORE_LATENCY` (2) cycles after it enters (the depacketizer's register and
    the forward register) when it finds the FIFO empty, its last beat 1 or 2 cycles after it
    entered (2 when the header's removal leaves a beat to finish), and the last beat of one
    with a checksum ``PacketChecksum.latency`` cycles after it entered; a datagram that finds
    beats in the FIFO leaves behind them.
    Backpressure: from the addressed port (``ready`` of the ports passes the forward register
    and the depacketizer and ends in the store's output register slice, or without a store in
    the FIFO's read side); the input is held while the store (or the FIFO) is full.
    """

    #: Cycles from a cut-through datagram's first beat in to its first beat out, when it
    #: finds the store empty.
    CUT_LATENCY = 4
    #: The same without a store (every port cut-through).
    NO_STORE_LATENCY = 2
    #: Without a store, the beats of the FIFO between the checksum's tap and the dispatch: more
    #: than the cycles a last beat can wait there for its verdict, so that the input goes on.
    BYPASS_BEATS = 8

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
        #: whether datagrams are stored: not when every port is cut-through
        self.stored = set(cut_ports) != set(ports)
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
        into, verdicts, front_drops = self._front(m)
        # (from 256 bits an ACK's datagram, 28 bytes, is one beat: it leaves in its cycle)
        dp = m.submodules.depacketizer = Depacketizer(UDP, W, IP_RX_META, pass_short=W >= 256)
        wiring.connect(m, into, dp.i)
        n = len(self.ports)
        # the checks travel with the datagram through a forward register, so the dispatch's
        # routing depends on registers only (the ports' ready reaches the depacketizer and the
        # store's output slice, or without a store the input, through it)
        verdict = data.StructLayout({"length_ok": 1, "known": 1, "port": range(n), "checked": 1,
                                     "drop": 1, "waits": 1})
        inner = data.StructLayout({**UDP_RX_META.members, "verdict": verdict})
        fr = m.submodules.register = ForwardRegister(W, inner)
        src, fi = dp.o.payload, fr.i.payload
        meta = src.meta
        hits = [meta.udp.dst_port == p for p in self.ports]
        known = Cat(*hits).any()
        length_ok = meta.udp.length == meta.ipv4.total_length - IPV4.length
        port = Signal(range(n))
        for k in reversed(range(n)):
            with m.If(hits[k]):
                m.d.comb += port.eq(k)
        m.d.comb += [
            fr.i.valid.eq(dp.o.valid), dp.o.ready.eq(fr.i.ready),
            fi.data.eq(src.data), fi.keep.eq(src.keep), fi.last.eq(src.last),
            fi.error.eq(src.error), fi.meta.eth.eq(meta.eth), fi.meta.ipv4.eq(meta.ipv4),
            fi.meta.udp.eq(meta.udp),
            fi.meta.verdict.length_ok.eq(length_ok), fi.meta.verdict.known.eq(known),
            fi.meta.verdict.port.eq(port), fi.meta.verdict.drop.eq(~length_ok | ~known),
        ]
        # a datagram with a verdict to wait for: with a store, one for a cut-through port with
        # a checksum (every datagram for such a port that passes the depacketizer went
        # cut-through: only runts are stored, and they stop there); without, every one with a
        # checksum (only runts, which have no verdict, stop at the depacketizer)
        if not self.stored:
            # (``waits``: the last beat of one delivered with a checksum, which waits)
            checked = meta.udp.checksum != 0
            m.d.comb += [fi.meta.verdict.checked.eq(checked),
                         fi.meta.verdict.waits.eq(checked & length_ok & known & src.last)]
        elif self.cut_ports:
            cut = [h for p, h in zip(self.ports, hits, strict=True) if p in self.cut_ports]
            m.d.comb += fi.meta.verdict.checked.eq(Cat(*cut).any() & (meta.udp.checksum != 0))
        self._dispatch(m, fr, verdicts, dp, front_drops)
        return m

    def _front(self, m):
        """The store (or, with every port cut-through, only the checksum's verdicts) in front of
        the depacketizer: ``(stream into the depacketizer, the store's verdict stream for the
        cut-through datagrams or None (without a store, the verdicts' block), (stored datagrams
        dropped for their checksum, dropped damaged or too long))``."""
        W = self.width
        ip = self.i.payload.meta.ipv4
        pseudo = be_words(IPV4.to_lanes(ip))[6:10]            # source and destination address
        first_hdr = UDP.from_lanes(self.i.payload.data[:8 * UDP.length])
        # protocol + UDP length = protocol + total length - 20: the constants are summed here
        # (subtracting 20 is adding its one's complement, 0xFFEB; 17 + 0xFFEB = 0xFFFC)
        const = (IP_PROTO_UDP + (0xFFFF ^ IPV4.length)) % 0xFFFF
        seed = ones_complement_sum(pseudo + [ip.total_length, const])
        skip = first_hdr.checksum == 0
        # the first beat holds the whole header (keep's 8th byte): not a runt
        whole = self.i.payload.keep[UDP.length - 1]
        if not self.stored:
            # every datagram's checksum is summed as it comes in, and every one with a checksum
            # (but a runt, which the depacketizer drops) has its verdict queued for the
            # dispatch. The datagrams then go through a small cut-through FIFO, passed beside
            # while it is empty: while a last beat waits at the dispatch for its verdict, the
            # datagrams behind it come in and are summed, so the verdicts are pipelined under
            # a flood and a datagram that finds the path idle loses no cycle. Queued verdicts
            # at most: one per datagram between the input and the dispatch, the FIFO's beats
            # and the depacketizer's and forward registers'
            byp = m.submodules.bypass = PacketFifo(
                W, self.BYPASS_BEATS, IP_RX_META, store_and_forward=False, drop_errors=False,
                overflow="wait", bypass=True)
            wiring.connect(m, wiring.flipped(self.i), byp.i)
            cv = m.submodules.checksum = ChecksumVerdicts(W, IP_RX_META,
                                                          depth=self.BYPASS_BEATS + 4)
            m.d.comb += [*cv.observe(self.i), cv.seed.eq(seed), cv.skip.eq(skip),
                         cv.select.eq(whole)]
            return byp.o, cv, (0, 0)
        store = m.submodules.store = ChecksumCheckedFifo(W, self.depth, IP_RX_META,
                                                         cut_input=bool(self.cut_ports))
        wiring.connect(m, wiring.flipped(self.i), store.i)
        m.d.comb += [store.seed.eq(seed), store.skip.eq(skip)]
        if not self.cut_ports:
            return store.o, None, (store.drop_checksum, store.drop_error | store.drop_overflow)
        # a runt is stored, so that the depacketizer sees it whole and counts it
        to_cut = first_hdr.dst_port == self.cut_ports[0]
        for p in self.cut_ports[1:]:
            to_cut = to_cut | (first_hdr.dst_port == p)
        m.d.comb += store.cut.eq(whole & to_cut)
        return (store.o, store.cut_verdict,
                (store.drop_checksum, store.drop_error | store.drop_overflow))

    def _dispatch(self, m, fr, cut_verdict, dp, front_drops):
        """The dispatch behind the forward register ``fr``, and the drop strobes. ``cut_verdict``:
        with a store, its verdict stream for the cut-through datagrams (or None); without, the
        :class:`~rocegen.gateware.lib.checksum_verdicts.ChecksumVerdicts` of every datagram."""
        W, n = self.width, len(self.ports)
        dm = m.submodules.demux = PacketDemux(W, UDP_RX_META, n)
        fo = fr.o.payload
        v = fo.meta.verdict
        length_ok, known = v.length_ok, v.known
        # the last beat of a datagram with a verdict to wait for waits here for it and carries
        # ``error`` when the checksum is wrong
        wait = Signal()
        bad = Signal()
        resolved = None
        if self.stored and cut_verdict is not None:
            hold = v.checked & fo.last
            m.d.comb += [
                wait.eq(hold & ~cut_verdict.valid),
                bad.eq(hold & ~cut_verdict.payload),
                cut_verdict.ready.eq(fr.o.valid & hold & dm.i.ready),
            ]
        elif not self.stored:
            resolved = self._pending(m, fr, cut_verdict, wait, bad)
        m.d.comb += [
            dm.i.valid.eq(fr.o.valid & ~wait), fr.o.ready.eq(dm.i.ready & ~wait),
            dm.i.payload.data.eq(fo.data), dm.i.payload.keep.eq(fo.keep),
            dm.i.payload.last.eq(fo.last), dm.i.payload.error.eq(fo.error | bad),
            dm.i.payload.meta.eth.eq(fo.meta.eth), dm.i.payload.meta.ipv4.eq(fo.meta.ipv4),
            dm.i.payload.meta.udp.eq(fo.meta.udp),
        ]
        m.d.comb += [dm.select.eq(v.port), dm.drop.eq(v.drop)]
        # (a dropped packet's first beat is always taken: the strobes need no ``ready``)
        first = dm.i.valid & first_beat(m, dm.i)
        for k in range(n):
            wiring.connect(m, dm.o[k], wiring.flipped(self.o[k]))
        moves = fr.o.valid & fr.o.ready
        # a datagram for a port is delivered, marked if its checksum is wrong (counted), or
        # dropped on its first beat for its length
        marked = moves & known & bad & ~fo.error & length_ok
        too_long = first & known & ~length_ok
        if self.stored:
            stored_checksum, stored_error = front_drops
            # a stored datagram for no port (its checksum and damage checked by the store) is
            # dropped on its first beat. (A stored datagram's drop and a cut-through one's mark
            # can come in one cycle; one of them is counted a cycle later: at most the
            # datagrams between the store's output and the dispatch, 3, are owed)
            m.d.comb += [
                self.runt.eq(dp.runt),
                self.drop_error.eq(stored_error),
                self.drop_checksum.eq(merge_events(m, [stored_checksum, marked], backlog=4)),
                self.drop_length.eq(first & ~length_ok),
                self.drop_port.eq(first & length_ok & ~known),
            ]
            return
        # without a store, a datagram for no port is counted once its verdict is known (as it
        # leaves, or later from the pending queue), as the store would have counted it; so is
        # a runt (the depacketizer drops it on its only beat). Events of one counter can come
        # together from the three points; the owed ones are bounded by the datagrams between
        # the input and the verdicts' point, at most the bypass FIFO's beats and 4
        runt_damaged = dp.i.payload.error
        events = {"drop_error": [dp.runt & runt_damaged], "drop_checksum": [marked],
                  "drop_length": [too_long], "drop_port": []}
        for strobes in resolved:
            for name, strobe in strobes.items():
                events[name].append(strobe)
        m.d.comb += self.runt.eq(dp.runt & ~runt_damaged)
        for name, strobes in events.items():
            m.d.comb += getattr(self, name).eq(merge_events(m, strobes,
                                                               backlog=self.BYPASS_BEATS + 4))

    def _pending(self, m, fr, checksum, wait, bad):
        """Without a store: the verdicts' use at the dispatch. A datagram for a port waits with
        its last beat for its verdict; one that is dropped does not: its verdict is taken as it
        leaves, or, when it is not there yet, later from a queue of the dropped datagrams
        (``pending``), which takes the verdicts before any datagram behind them. Returns the
        drop strobes of the datagrams for no port, as they leave and as they are resolved."""
        verdicts, verdicts_valid_next = checksum.verdict, checksum.valid_next
        fo = fr.o.payload
        v = fo.meta.verdict
        entry = data.StructLayout({"unknown": 1, "error": 1, "length_ok": 1})
        # Queued at most: the dropped datagrams whose verdict is not out yet, those that ended at
        # the input in the checksum's last ``latency`` (5) cycles (a verdict that is out is
        # taken at once), so the queue never fills
        pending = m.submodules.pending = fifo.SyncFIFO(width=entry.size, depth=8)
        head = entry(pending.r_data)
        count = Signal(range(9))
        queued = Signal()                        # ``pending`` is not empty (a register)
        # ``queued | ~verdicts.valid``, a register of its own (from both's next values), so
        # that the dispatch's ``valid`` is a LUT of three registers
        blocked = Signal(init=1)
        hold = fr.o.valid & v.checked & fo.last
        now = hold & ~queued & verdicts.valid    # the verdict is there as the beat leaves
        push = hold & ~(v.length_ok & v.known) & ~now
        resolve = queued & verdicts.valid
        m.d.comb += [
            wait.eq(v.waits & blocked),
            bad.eq(now & ~verdicts.payload),
            verdicts.ready.eq(Mux(queued, 1, now & fr.o.ready)),
            pending.r_en.eq(resolve),
            pending.w_en.eq(push),
            pending.w_data.eq(Cat(~v.known, fo.error, v.length_ok)),
        ]
        nxt = count + push - resolve
        m.d.sync += [count.eq(nxt), queued.eq(nxt != 0),
                     blocked.eq((nxt != 0) | ~verdicts_valid_next)]

        def counts(unknown, error, wrong, length_ok):
            return {"drop_error": unknown & error,
                    "drop_checksum": unknown & ~error & wrong,
                    "drop_length": unknown & ~error & ~wrong & ~length_ok,
                    "drop_port": unknown & ~error & ~wrong & length_ok}

        leaves = fr.o.valid & fr.o.ready & fo.last & ~v.known & ~push
        return [counts(leaves, fo.error, bad, v.length_ok),
                counts(resolve & head.unknown, head.error, ~verdicts.payload, head.length_ok)]
