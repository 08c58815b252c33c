"""Received PFC (IEEE 802.1Qbb) and PAUSE (IEEE 802.3x) frames -> per-priority pause levels."""

from functools import partial

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.mac.pause_time import quanta_elapsed, quantum_ratio
from rocegen.wire import headers as H
from rocegen.wire import pfc as P

__all__ = ["PauseRx"]


class PauseRx(wiring.Component):
    """Watch the received frames for MAC control frames and keep a pause timer per priority.

    A frame acts when it has EtherType 0x8808, is addressed to 01:80:C2:00:00:01 or to
    ``local_mac``, ends without ``error`` and is a well-formed PFC (opcode 0x0101: each priority
    whose enable bit is set takes its time) or PAUSE (opcode 0x0001: every priority takes the
    one time). A time replaces the priority's timer; time 0 ends its pause at once. Fields
    come from the header tables (:data:`rocegen.wire.headers.ETH`,
    :data:`rocegen.wire.pfc.PFC`, :data:`rocegen.wire.pfc.PAUSE`).

    Parameters
    ----------
    width : int
        Data width W of the watched stream (64..512, power of two).
    clk_hz : number
        Clock frequency.
    line_gbps : number
        Line rate: a pause quantum is 512 bit times of it.

    Ports
    -----
    ``valid``, ``ready``, ``data``, ``keep``, ``last``, ``error`` : In
        The received frame stream, observed only (a beat counts when ``valid`` and ``ready``
        are high); frames without FCS, byte 0 in the low lane of the first beat, as
        :func:`~rocegen.gateware.lib.stream.PacketSignature`. ``error`` (last beat: a bad
        frame, which is ignored) may be left at 0.
    ``local_mac`` : In(48)
        Our address, the first byte on the wire most significant.
    ``paused`` : Out(8)
        Bit ``n`` is high while priority ``n`` is paused.
    ``pause_frame``, ``bad_frame``, ``ignored_frame`` : Out(1)
        One-cycle pulses (from registers through a few LUTs) in the cycle after a frame's last
        beat: a pause frame that acted; a MAC control frame too short for its opcode's fields
        or with another opcode (it does nothing); a well-formed pause frame addressed to
        neither address (it does nothing).

    Behaviour
    ---------
    * Latency: ``paused`` changes two cycles after the cycle in which the frame's last beat
      moves, and stays high for exactly ``ceil(time * a / b)`` cycles, one quantum being
      ``a / b`` cycles (:func:`~rocegen.gateware.mac.pause_time.quantum_ratio`), so the time is
      exact over any span. Frames may end in consecutive cycles.
    * Structure: the address, EtherType and opcode are compared as their beat passes, the
      times kept in registers, and at the last beat whether the frame reaches each field; in
      the cycle after it the verdict, from those registers, loads the timers (8 x 16 bits,
      each with a phase of ``a`` steps).
    * Backpressure: none; the block never drives ``ready``.
    * Byte order: multi-byte fields are big-endian on the wire (the header tables').
    """

    #: Cycles from the cycle of a pause frame's last beat to the first cycle ``paused`` shows it.
    LATENCY = 2

    def __init__(self, width, clk_hz, line_gbps):
        check_width(width)
        self.width = width
        self.a, self.b = quantum_ratio(clk_hz, line_gbps)
        self.clk_hz, self.line_gbps = clk_hz, line_gbps
        super().__init__({
            "valid": In(1), "ready": In(1), "data": In(width), "keep": In(width // 8),
            "last": In(1), "error": In(1), "local_mac": In(48),
            "paused": Out(P.NUM_PRIORITIES),
            "pause_frame": Out(1), "bad_frame": Out(1), "ignored_frame": Out(1),
        })

    def _field(self, m, take, idx, header, base, field, match):
        """A register set, when the beat holding ``field`` of ``header`` (which starts at byte
        ``base`` of the frame) moves, to ``match(value of the field)``."""
        B = self.width // 8
        off, bits = header.offset(field)
        k = (base + off) // B
        assert (base + off + bits // 8 - 1) // B == k       # each field lies in one beat
        lanes = Cat(Const(0, 8 * k * B), self.data, Const(0, 8 * (base + header.length)))
        flag = Signal(name=f"{header.name}_{field}_ok")
        with m.If(take & (idx == k)):
            m.d.sync += flag.eq(match(getattr(header.from_lanes(
                lanes[8 * base:8 * (base + header.length)]), field)))
        return flag

    def elaborate(self, platform):
        m = Module()
        B, N, W = self.width // 8, P.NUM_PRIORITIES, self.width
        eth_len, ctl_len = H.ETH.length, H.ETH.length + P.MAC_CONTROL.length
        pfc_len, pause_len = H.ETH.length + P.PFC.length, H.ETH.length + P.PAUSE.length
        beats = -(-pfc_len // B)

        # stage 1, beat by beat: the header fields compared as they pass, the times kept, and
        # at the last beat whether the frame reaches each field
        take = self.valid & self.ready
        idx = Signal(range(beats + 1))          # beat of the frame, stays at `beats`
        cap = Signal(beats * W)
        ended = Signal()                        # a frame without error ended the cycle before
        has = {n: Signal(name=f"has{n}") for n in (eth_len, ctl_len, pause_len, pfc_len)}
        field = partial(self._field, m, take, idx)
        mcast = field(H.ETH, 0, "dst", lambda v: v == P.PAUSE_DST)
        local = field(H.ETH, 0, "dst", lambda v: v == self.local_mac)
        ctl = field(H.ETH, 0, "ethertype", lambda v: v == P.ETHERTYPE_MAC_CONTROL)
        op_pfc = field(P.MAC_CONTROL, eth_len, "opcode", lambda v: v == P.OPCODE_PFC)
        op_pause = field(P.MAC_CONTROL, eth_len, "opcode", lambda v: v == P.OPCODE_PAUSE)
        m.d.sync += ended.eq(0)
        with m.If(take):
            for k in range(beats):
                with m.If(idx == k):
                    m.d.sync += cap[k * W:(k + 1) * W].eq(self.data)
            with m.If(self.last):
                m.d.sync += [idx.eq(0), ended.eq(~self.error)]
                for n, flag in has.items():
                    k, j = divmod(n - 1, B)
                    m.d.sync += flag.eq((idx > k) | ((idx == k) & self.keep[j]))
            with m.Elif(idx != beats):
                m.d.sync += idx.eq(idx + 1)

        # stage 2, the cycle after the last beat: the verdict loads the timers
        body = cap[8 * eth_len:8 * pfc_len]
        pfc, pause = P.PFC.from_lanes(body), P.PAUSE.from_lanes(body)
        control = ended & has[eth_len] & ctl
        is_pfc = control & has[ctl_len] & op_pfc & has[pfc_len]
        is_pause = control & has[ctl_len] & op_pause & has[pause_len]
        ours = mcast | local
        m.d.comb += [self.pause_frame.eq((is_pfc | is_pause) & ours),
                     self.ignored_frame.eq((is_pfc | is_pause) & ~ours),
                     self.bad_frame.eq(control & ~is_pfc & ~is_pause)]
        load = Signal(N)
        m.d.comb += load.eq(Mux(is_pfc & ours, pfc.enable, 0) | (is_pause & ours).replicate(N))

        # the timers, in whole quanta with an exact fraction of one in each phase
        for n in range(N):
            left = Signal(16, name=f"left{n}")
            step = quanta_elapsed(m, self.a, self.b, restart=load[n], name=f"prio{n}")
            with m.If(load[n]):
                m.d.sync += left.eq(Mux(op_pfc, getattr(pfc, f"time{n}"), pause.time))
            with m.Elif(left > step):
                m.d.sync += left.eq(left - step)
            with m.Else():
                m.d.sync += left.eq(0)
            m.d.comb += self.paused[n].eq(left != 0)
        return m
