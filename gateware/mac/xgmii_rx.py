"""Receive half of the 10G/25G Ethernet MAC: 64-bit XGMII in, packet stream out."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, keep_mask
from rocegen.gateware.mac.xgmii import (
    FCS_BYTES,
    IDLE_CTRL,
    IDLE_WORD,
    LANES,
    MIN_FRAME,
    START,
    START_CTRL,
    START_WORD,
    TERMINATE,
    Crc32,
)

__all__ = ["XgmiiRx"]

MAX_FRAME_LIMIT = 65535


class XgmiiRx(wiring.Component):
    """Ethernet receive MAC for a 64-bit single-data-rate XGMII (10GBASE-R, 25GBASE-R).

    Finds frames on ``rxd``/``rxc``, checks and strips the preamble and the FCS and delivers the
    frame (destination address first, FCS removed) on ``o``.

    Parameters
    ----------
    max_frame : int
        Longest frame accepted, in octets from the destination address to the end of the FCS.
        The default, 1522, is the longest VLAN-tagged frame; use for instance 9022 (or more) for
        jumbo frames. From 64 to 65535.

    Members
    -------
    rxd, rxc : ``In(64)``, ``In(8)``
        XGMII receive data and control (lane 0, ``rxd[0:8]``, first on the wire). Registered
        inside before use.
    o : ``Out(PacketSignature(64, always_ready=True))``
        Received frames. There is no backpressure: a PHY cannot be stalled, so the consumer
        must take every beat (put a FIFO behind the MAC). ``o.valid``, the payload and the strobes
        are registered. Within a frame beats come on consecutive cycles, at most one per cycle.
    rx_frame : ``Out(1)``
        One-cycle strobe per frame delivered on ``o`` (good or errored), in the cycle of its last
        beat.
    rx_fcs_error, rx_runt, rx_too_long, rx_bad_code : ``Out(1)``
        One-cycle strobes in the cycle of the last beat of an errored frame, at most one per
        frame, by priority: ``rx_bad_code`` (the frame ended with a control character other than
        /T/, e.g. /E/, or a /S/ or /I/ where data was due), ``rx_too_long`` (more than
        ``max_frame`` octets), ``rx_runt`` (fewer than 64 octets), ``rx_fcs_error``.
    rx_bad_preamble : ``Out(1)``
        One-cycle strobe when a /S/ was found whose 8-octet start word is not /S/, six 0x55 and
        0xD5 (all as data). Such a frame is discarded: nothing of it appears on ``o``.

    Behaviour
    ---------
    * Alignment: /S/ is recognised in lane 0 or lane 4. A frame starting in lane 4 is realigned
      so that the octet after the SFD is in lane 0 of the first beat, as for one in lane 0. The
      receiver reads the line as *realigned words*, 8 octets from the /S/ on; a frame ends at the
      first control character after its start word. The rest of the realigned word holding
      that character is skipped, and the search for the next /S/ resumes at the next lane 0 or
      lane 4 boundary. Any gap of 5 octets or more (the IEEE 802.3 receive minimum) between the
      end character and the next /S/ is thus handled; a /S/ closer than that is missed (the
      frame is lost, not damaged).
    * Output: the first beat holds octets 0..7 after the SFD, etc.; the last 4 octets before the
      end character (the FCS) are removed, so a frame of ``n`` octets is delivered as ``n - 4``
      octets, or as an empty packet (one beat, ``keep == 0``) when ``n <= 4``. Lanes of the last
      beat beyond ``keep`` hold undefined data.
    * Errors: ``error`` is set on the last beat of a frame with a bad FCS, an end character
      other than /T/, fewer than 64 or more than ``max_frame`` octets (FCS included). A frame
      found too long while still arriving is ended on ``o`` at once: it carries its first
      ``8 * (max_frame // 8)`` octets, the last beat flagged; the rest of it is skipped up to
      its first control character. Frames with a bad start word produce nothing. Whatever the
      input -- random octets and control characters -- the receiver only produces well-formed
      packets, errored unless they pass every check, and it never stops looking for /S/.
    * Latency, in cycles from the cycle ``rxd`` holds an octet to the cycle ``o.valid`` is high
      with the beat that carries it: each realigned word is processed in the cycle after ``rxd``
      held its last lane and one data word is held back until the next shows where the FCS is,
      so the first beat (frame octets 0..7) comes 3 cycles after ``rxd`` holds octet 7, and so
      on for every full beat. The last beat comes 2 cycles after ``rxd`` holds /T/ when /T/ is
      in ``rxd`` lanes 0..4 (frame started in lane 0) or lane 0 (frame started in lane 4), and
      3 cycles after otherwise: the FCS then splits the realigned word into two beats, or, for
      a lane-4 frame with /T/ in lanes 4..7, the realigned word ends in the next ``rxd`` word.
    """

    def __init__(self, *, max_frame=1522):
        if not isinstance(max_frame, int) or isinstance(max_frame, bool):
            raise TypeError(f"max_frame must be an integer number of octets, not {max_frame!r}")
        if not MIN_FRAME <= max_frame <= MAX_FRAME_LIMIT:
            raise ValueError(f"max_frame must be from {MIN_FRAME} to {MAX_FRAME_LIMIT} octets "
                             f"(FCS included), not {max_frame}")
        self.max_frame = max_frame
        super().__init__({
            "rxd": In(64),
            "rxc": In(8),
            "o": Out(PacketSignature(64, always_ready=True)),
            "rx_frame": Out(1),
            "rx_fcs_error": Out(1),
            "rx_runt": Out(1),
            "rx_too_long": Out(1),
            "rx_bad_code": Out(1),
            "rx_bad_preamble": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        o = self.o
        max_frame = self.max_frame

        # Input registers: d1/c1 holds the word received in the previous cycle, d2/c2 the one
        # before it.
        d1 = Signal(64, init=IDLE_WORD)
        c1 = Signal(8, init=IDLE_CTRL)
        d2 = Signal(64, init=IDLE_WORD)
        c2 = Signal(8, init=IDLE_CTRL)
        m.d.sync += [d1.eq(self.rxd), c1.eq(self.rxc), d2.eq(d1), c2.eq(c1)]

        # Realigned word: a lane-0 frame reads d1, a lane-4 frame the upper half of d2 and the
        # lower half of d1. Either way a realigned word is processed in the cycle after rxd held
        # its last lane.
        mode4 = Signal()                      # the current frame started in lane 4
        skip4 = Signal()                      # d2 was wholly part of the previous frame
        w0_d, w0_c = d1, c1
        w4_d, w4_c = Cat(d2[32:], d1[:32]), Cat(c2[4:], c1[:4])
        rd = Signal(64)
        rc = Signal(8)
        m.d.comb += [rd.eq(Mux(mode4, w4_d, w0_d)), rc.eq(Mux(mode4, w4_c, w0_c))]

        # /S/ in lane 4 of d2 comes before /S/ in lane 0 of d1 on the wire.
        s4 = ~skip4 & c2[4] & (d2[32:40] == START)
        s0 = c1[0] & (d1[0:8] == START)
        good0 = (w0_d == START_WORD) & (w0_c == START_CTRL)
        good4 = (w4_d == START_WORD) & (w4_c == START_CTRL)

        return self._elaborate_frame(m, good0, good4, max_frame, mode4, o, rc, rd, s0, s4, skip4)

    def _elaborate_frame(self, m, good0, good4, max_frame, mode4, o, rc, rd, s0, s4, skip4):
        """The frame state: words assembled from the two start positions, the FCS checked, errors
        and lengths counted."""
        # Frame state.
        count = Signal(range(max_frame + LANES + 1))   # frame octets in the words taken so far
        crc = Signal(32, init=Crc32.INIT)             # CRC state over those octets
        held = Signal(64)                             # last full word, not yet delivered
        held_valid = Signal()

        # Second beat of a frame whose FCS splits its last word.
        x_valid = Signal()
        x_data = Signal(64)
        x_keep = Signal(LANES)
        x_flags = Signal(5)                           # error, fcs, runt, too_long, bad_code

        # Output registers, cleared unless written this cycle.
        m.d.sync += [o.valid.eq(0), self.rx_frame.eq(0), self.rx_fcs_error.eq(0),
                     self.rx_runt.eq(0), self.rx_too_long.eq(0), self.rx_bad_code.eq(0),
                     self.rx_bad_preamble.eq(0), x_valid.eq(0)]

        def emit(data, keep, last=0, flags=None):
            m.d.sync += [o.valid.eq(1), o.payload.data.eq(data), o.payload.keep.eq(keep),
                         o.payload.last.eq(last), o.payload.error.eq(0)]
            if flags is not None:
                err, fcs_bad, runt, too_long, bad_code = (flags[k] for k in range(5))
                m.d.sync += [o.payload.error.eq(err), self.rx_frame.eq(1),
                             self.rx_fcs_error.eq(fcs_bad), self.rx_runt.eq(runt),
                             self.rx_too_long.eq(too_long), self.rx_bad_code.eq(bad_code)]

        with m.If(x_valid):
            emit(x_data, x_keep, 1, x_flags)

        # End of frame: position of the first control character of the realigned word.
        end = Signal(range(LANES + 1))
        m.d.comb += end.eq(LANES)
        for j in reversed(range(LANES)):
            with m.If(rc[j]):
                m.d.comb += end.eq(j)
        end_char = Signal(8)
        with m.Switch(end):
            for j in range(LANES):
                with m.Case(j):
                    m.d.comb += end_char.eq(rd[8 * j: 8 * j + 8])
        fcs_ok = Signal()
        with m.Switch(end):
            for j in range(LANES):
                with m.Case(j):
                    m.d.comb += fcs_ok.eq(Crc32.step(crc, rd, j) == Crc32.RESIDUE)
        length = count + end
        bad_code = end_char != TERMINATE
        too_long = ~bad_code & (length > max_frame)
        runt = ~bad_code & ~too_long & (length < MIN_FRAME)
        fcs_bad = ~bad_code & ~too_long & ~runt & ~fcs_ok
        flags = Signal(5)
        m.d.comb += flags.eq(Cat(bad_code | too_long | runt | fcs_bad, fcs_bad, runt, too_long,
                                 bad_code))

        def frame_done():
            m.d.sync += skip4.eq(~mode4)
            m.next = "SCAN"

        with m.FSM():
            with m.State("SCAN"):
                m.d.sync += skip4.eq(0)
                with m.If(s4):
                    m.d.sync += mode4.eq(1)
                    with m.If(good4):
                        m.next = "FRAME"
                    with m.Else():
                        m.d.sync += self.rx_bad_preamble.eq(1)
                with m.Elif(s0):
                    m.d.sync += mode4.eq(0)
                    with m.If(good0):
                        m.next = "FRAME"
                    with m.Else():
                        m.d.sync += [self.rx_bad_preamble.eq(1), skip4.eq(1)]
                m.d.sync += [count.eq(0), crc.eq(Crc32.INIT), held_valid.eq(0)]
            with m.State("FRAME"):
                with m.If(end == LANES):
                    with m.If(count > max_frame - LANES):
                        # Too long: end the delivered frame now, skip the rest of it.
                        emit(held, Const((1 << LANES) - 1, LANES), 1, Const(0b01001, 5))
                        m.next = "DISCARD"
                    with m.Else():
                        m.d.sync += [count.eq(count + LANES), crc.eq(Crc32.step(crc, rd, LANES)),
                                     held.eq(rd), held_valid.eq(1)]
                        with m.If(held_valid):
                            emit(held, Const((1 << LANES) - 1, LANES))
                with m.Else():
                    frame_done()
                    with m.If(held_valid):
                        with m.If(end > FCS_BYTES):
                            emit(held, Const((1 << LANES) - 1, LANES))
                            m.d.sync += [x_valid.eq(1), x_data.eq(rd),
                                         x_keep.eq(keep_mask(end - FCS_BYTES, LANES)),
                                         x_flags.eq(flags)]
                        with m.Else():
                            emit(held, keep_mask(end + LANES - FCS_BYTES, LANES), 1, flags)
                    with m.Elif(end > FCS_BYTES):
                        emit(rd, keep_mask(end - FCS_BYTES, LANES), 1, flags)
                    with m.Else():
                        emit(0, 0, 1, flags)
            with m.State("DISCARD"):
                with m.If(rc.any()):
                    frame_done()
        return m
