"""The connection manager's reply sender: a 64-byte reply and its UDP checksum."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import be_words, fold, sum_by_four
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.cm.cm_defs import REPLY_PORT
from rocegen.gateware.roce.layouts import CM_REPLY
from rocegen.wire.headers import CM, IP_PROTO_UDP, UDP

__all__ = ["CmReplySender"]


class CmReplySender(wiring.Component):
    """Sends one connection-manager reply at a time, with its UDP checksum worked out first.

    Parameters
    ----------
    width : int
        Data width W of ``o`` (64..512).

    Ports
    -----
    i : In(stream.Signature(CM_REPLY, always_ready=True))
        A reply to send: taken when ``busy`` is low (ignored while it is high).
    o : Out(PacketSignature(width, UDP_TX_META))
        The reply: 64 bytes (``fields`` in the byte order of the ``CM`` header, byte 0 in lane 0
        of the first beat, every lane kept), ``meta.udp``: ``dst_ip``, ``dst_port``, source port
        0x8765, length 64 (and ``checksum`` when the layout has that field).
    o_checksum : Out(16)
        The UDP checksum of the reply, for the whole packet: pseudo-header with source
        ``src_ip`` and destination ``dst_ip``, UDP header and payload; never 0.
    busy : Out(1)
        High from the cycle after a reply is taken to the cycle its last beat leaves (a register).
    sent : Out(1)
        High for one cycle when the last beat of a reply leaves.

    Behaviour
    ---------
    The checksum's 42 16-bit words (pseudo-header, UDP header, payload) are summed from
    registers by a tree of adders in three registered stages (four words, four of those sums,
    the rest: two adders deep each), then folded: if a reply is taken in cycle t, its first
    beat is offered in cycle t + 5, and ``busy`` is low again in the cycle after its last beat
    leaves. Backpressure: ``o`` may stall for any time.
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(stream.Signature(CM_REPLY, always_ready=True)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
            "o_checksum": Out(16),
            "busy": Out(1),
            "sent": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        NB = 8 * CM.length // W             # beats of a reply
        rep = Signal(CM.layout)             # the reply's fields
        lip = Signal(32)                    # its source address
        rep_ip = Signal(32)
        rep_port = Signal(16)
        cksum = Signal(16)
        obeat = Signal(range(NB))

        # the pseudo-header, UDP header and payload as big-endian words, summed by a tree of
        # adders in three registered stages (sums of up to four words, of up to four of those,
        # then all), and folded in a fourth: the registers above hold still meanwhile
        lanes = CM.to_lanes(rep)
        udp_len = Const(UDP.length + CM.length, 16)
        hdr_words = [lip[16:], lip[:16], rep_ip[16:], rep_ip[:16], Const(IP_PROTO_UDP, 16),
                     udp_len, Const(REPLY_PORT, 16), rep_port, udp_len, Const(0, 16)]
        words = be_words(lanes) + hdr_words          # 32 + 10 = 42 words
        top = (1 << 16) - 1
        sums, stages = [(w, top) for w in words], 0
        while len(sums) > 1:
            sums, stages = sum_by_four(m, sums, f"sum{stages}"), stages + 1
        ((total, bound),) = sums
        folded = fold(total, bound)
        m.d.sync += cksum.eq(Mux(folded == 0xFFFF, 0xFFFF, ~folded))
        scnt = Signal(range(stages + 1))

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.i.valid):
                    r = self.i.payload
                    m.d.sync += [rep.eq(r.fields), lip.eq(r.src_ip), rep_ip.eq(r.dst_ip),
                                 rep_port.eq(r.dst_port), scnt.eq(0), obeat.eq(0)]
                    m.next = "SUM"

            with m.State("SUM"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += scnt.eq(scnt + 1)
                with m.If(scnt == stages):
                    m.next = "SEND"

            with m.State("SEND"):
                m.d.comb += self.busy.eq(1)
                o = self.o.payload
                m.d.comb += [
                    self.o.valid.eq(1),
                    o.data.eq(lanes.word_select(obeat, W) if NB > 1 else lanes),
                    o.keep.eq((1 << (W // 8)) - 1),
                    o.last.eq(obeat == NB - 1),
                    o.meta.udp.dst_ip.eq(rep_ip),
                    o.meta.udp.src_port.eq(REPLY_PORT),
                    o.meta.udp.dst_port.eq(rep_port),
                    o.meta.udp.length.eq(CM.length),
                    self.o_checksum.eq(cksum),
                ]
                if "checksum" in UDP_TX_META.members["udp"].members:
                    m.d.comb += o.meta.udp.checksum.eq(cksum)
                with m.If(self.o.ready):
                    m.d.sync += obeat.eq(obeat + 1)
                    with m.If(obeat == NB - 1):
                        m.d.comb += self.sent.eq(1)
                        m.next = "IDLE"
        return m
