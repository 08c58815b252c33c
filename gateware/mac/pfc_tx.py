"""PFC (IEEE 802.1Qbb) frames from per-priority XOFF requests, merged into the transmit stream."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.mac.pause_time import quanta_elapsed, quantum_ratio
from rocegen.wire import headers as H
from rocegen.wire import pfc as P
from rocegen.wire.roce import ETH_MIN_FRAME

__all__ = ["PauseTx"]


class PauseTx(wiring.Component):
    """Tell the link partner which priorities to pause, in PFC frames put between the frames
    of ``i`` on their way to ``o`` (the MAC).

    The partner has been told a level per priority. A priority is due when ``xoff`` differs
    from what it was told (a rise: XOFF, time ``quanta``; a fall: XON, time 0), or when its
    XOFF stands and a refresh tick has come twice since its last frame (ticks every quarter of
    ``quanta``, counted exactly, with ``quanta >= 4``: a standing XOFF is refreshed a quarter
    to a half of its time after the last one, every half in a steady state). At the next
    frame boundary one PFC frame carries every due priority: enable bit set, time ``quanta``
    if ``xoff`` is high, else 0; the others have enable bit and time 0. It is 60 bytes:
    destination 01:80:C2:00:00:01, source ``local_mac``, EtherType 0x8808, opcode 0x0101, the
    fields of :data:`rocegen.wire.pfc.PFC`, zeros; both MACs of rocegen add the FCS (the XGMII
    MAC would also pad).

    Parameters
    ----------
    width : int
        Data width W (64..512, power of two).
    clk_hz, line_gbps : number
        Clock and line rate, for the refresh time (pause quanta of 512 bit times).

    Ports
    -----
    ``i`` : In(PacketSignature(width)); ``o`` : Out(PacketSignature(width))
        Frames without FCS, byte 0 in the low lane of the first beat; the frames of ``i``
        leave unchanged and in order.
    ``xoff`` : In(8)
        Request level per priority (bit ``n``: priority ``n``).
    ``local_mac`` : In(48)
        Source address of the PFC frames (first byte on the wire most significant).
    ``quanta`` : In(16), reset value 0xFFFF
        Pause time of the XOFFs.
    ``pfc_sent`` : Out(1)
        One-cycle pulse per PFC frame, in the cycle its first beat is first offered on ``o``.

    Behaviour
    ---------
    * A due priority is served at the first frame boundary: the cycle the block decides (when
      no frame of ``i`` has been offered on ``o`` and not ended) it takes ``xoff`` and holds
      ``i`` back; the PFC frame's first beat is offered in the next cycle and its
      ``ceil(60 / (W/8))`` beats leave back to back as ``o.ready`` allows. A frame of ``i``
      whose first beat has been offered always goes on to its end first.
    * Data path of ``i``: combinational to ``o`` (latency 0); ``i.ready`` follows ``o.ready``
      except while a PFC frame is decided or sent.
    """

    def __init__(self, width, clk_hz, line_gbps):
        check_width(width)
        self.width = width
        self.a, self.b = quantum_ratio(clk_hz, line_gbps)
        super().__init__({
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width)),
            "xoff": In(P.NUM_PRIORITIES),
            "local_mac": In(48),
            "quanta": In(16, init=P.MAX_QUANTA),
            "pfc_sent": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, N = self.width, P.NUM_PRIORITIES
        B, i, o, xoff = W // 8, self.i, self.o, self.xoff
        beats = -(-ETH_MIN_FRAME // B)

        # what the partner was told, the refresh ticks every quarter of quanta, due priorities
        told = Signal(N)
        ticked = Signal(N)              # a tick has passed since the priority's last frame
        stale = Signal(N)               # two have: its XOFF needs a refresh
        due = Signal(N)
        m.d.comb += due.eq((xoff ^ told) | (xoff & told & stale))
        quarter, count, tick = self.quanta[2:], Signal(16), Signal()
        step = quanta_elapsed(m, self.a, self.b, name="refresh")
        m.d.comb += tick.eq((quarter != 0) & (count >= quarter))
        m.d.sync += count.eq(Mux(tick, count + step - quarter,
                                 Mux(count + step > 0xFFFF, 0xFFFF, count + step)))

        busy = Signal()                 # a frame of i has been offered on o and not ended
        gen = Signal()                  # the PFC frame is on o
        start = Signal()
        m.d.comb += start.eq(~busy & ~gen & due.any())
        m.d.sync += self.pfc_sent.eq(start)
        enable, level, quanta, mac = (Signal(N), Signal(N), Signal(16), Signal(48))
        with m.If(start):
            m.d.sync += [gen.eq(1), enable.eq(due), level.eq(xoff), quanta.eq(self.quanta),
                         mac.eq(self.local_mac), told.eq(xoff)]
        sent = Mux(start, due, 0)
        with m.If(tick):
            m.d.sync += [ticked.eq(~sent), stale.eq((stale | ticked) & ~sent)]
        with m.Else():
            m.d.sync += [ticked.eq(ticked & ~sent), stale.eq(stale & ~sent)]

        # the PFC frame, from the header tables
        eth, pfc = Signal(H.ETH.layout), Signal(P.PFC.layout)
        m.d.comb += [eth.dst.eq(P.PAUSE_DST), eth.src.eq(mac),
                     eth.ethertype.eq(P.ETHERTYPE_MAC_CONTROL),
                     pfc.opcode.eq(P.OPCODE_PFC), pfc.enable.eq(enable)]
        m.d.comb += [getattr(pfc, f"time{n}").eq(Mux(enable[n] & level[n], quanta, 0))
                     for n in range(N)]
        frame = Cat(H.ETH.to_lanes(eth), P.PFC.to_lanes(pfc),
                    Const(0, beats * W - 8 * (H.ETH.length + P.PFC.length)))
        beat = Signal(range(beats))
        with m.If(gen):
            m.d.comb += [o.valid.eq(1), o.payload.last.eq(beat == beats - 1),
                         o.payload.data.eq(frame if beats == 1 else frame.word_select(beat, W)),
                         o.payload.keep.eq(Mux(beat == beats - 1,
                                               keep_mask(ETH_MIN_FRAME - (beats - 1) * B, B),
                                               keep_mask(B, B)))]
            with m.If(o.ready):
                m.d.sync += beat.eq(Mux(beat == beats - 1, 0, beat + 1))
                m.d.sync += gen.eq(beat != beats - 1)
        with m.Else():
            go = busy | ~due.any()
            m.d.comb += [o.payload.eq(i.payload), o.valid.eq(i.valid & go),
                         i.ready.eq(o.ready & go)]
            with m.If(o.valid & o.ready & o.payload.last):
                m.d.sync += busy.eq(0)
            with m.Elif(o.valid):
                m.d.sync += busy.eq(1)
        return m
