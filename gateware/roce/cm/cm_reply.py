"""The connection manager's reply sender: a 64-byte reply and its UDP checksum."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
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
    The checksum is summed two 16-bit words per cycle from registers (21 cycles), then folded:
    if a reply is taken in cycle t, its first beat is offered in cycle t + 23, and ``busy`` is low
    again in the cycle after its last beat leaves. Backpressure: ``o`` may stall for any time.
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

        # the pseudo-header, UDP header and payload as big-endian words, summed two per cycle:
        # pairs 0 and 1 straight from the registers, the others from a copy shifted down by a
        # pair per cycle (zeros behind them); what is read in one cycle is summed, and
        # accumulated in the next: after npairs cycles the accumulator has it all
        lanes = CM.to_lanes(rep)
        udp_len = Const(UDP.length + CM.length, 16)
        hdr_words = [lip[16:], lip[:16], rep_ip[16:], rep_ip[:16], Const(IP_PROTO_UDP, 16),
                     udp_len, Const(REPLY_PORT, 16), rep_port, udp_len, Const(0, 16)]
        words = be_words(lanes) + hdr_words          # 32 + 10 = 42 words
        npairs = len(words) // 2
        pairs = Cat(*words)
        scnt = Signal(range(npairs))
        acc = Signal(22)
        psum = Signal(18)                   # the words read in the previous cycle, summed
        sum_first = Signal()                # the first cycle of SUM
        rest = Signal(len(pairs) - 64)      # the pairs after the ones read now

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.i.valid):
                    r = self.i.payload
                    m.d.sync += [rep.eq(r.fields), lip.eq(r.src_ip), rep_ip.eq(r.dst_ip),
                                 rep_port.eq(r.dst_port), acc.eq(0), psum.eq(0), scnt.eq(0),
                                 obeat.eq(0), sum_first.eq(1)]
                    m.next = "SUM"

            with m.State("SUM"):
                m.d.comb += self.busy.eq(1)
                w = [pairs[16 * k:16 * (k + 1)] for k in range(4)]
                m.d.sync += [psum.eq(Mux(sum_first, (w[0] + w[1]) + (w[2] + w[3]),
                                         rest[:16] + rest[16:32])),
                             acc.eq(acc + psum), scnt.eq(scnt + 1), sum_first.eq(0),
                             rest.eq(Mux(sum_first, pairs[64:], rest[32:]))]
                with m.If(scnt == npairs - 1):
                    m.next = "FOLD"

            with m.State("FOLD"):
                m.d.comb += self.busy.eq(1)
                total = ones_complement_sum([acc[:16], acc[16:]])
                m.d.sync += cksum.eq(Mux(total == 0xFFFF, 0xFFFF, ~total))
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
