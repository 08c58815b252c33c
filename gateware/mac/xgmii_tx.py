"""Transmit half of the 10G/25G Ethernet MAC: packet stream in, 64-bit XGMII out."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, keep_count
from rocegen.gateware.mac.xgmii import (
    ERROR,
    FCS_BYTES,
    IDLE,
    IDLE_CTRL,
    IDLE_WORD,
    LANES,
    MIN_DATA,
    START_CTRL,
    START_WORD,
    TERMINATE,
    Crc32,
)

__all__ = ["XgmiiTx"]

MIN_IFG = 12


def _gap_after(end_pos, ifg):
    """Cycles to wait between loading the word whose 16-lane assembly puts the end control
    character at lane ``end_pos`` and the next start, so that at least ``ifg`` octets (the end
    character included) separate the frames and the next /S/ lands in lane 0."""
    word, lane = divmod(end_pos, LANES)
    rest = LANES - lane                          # end character and idles in its own word
    idle_words = -(-max(ifg - rest, 0) // LANES)
    return word + 1 + idle_words


class XgmiiTx(wiring.Component):
    """Ethernet transmit MAC for a 64-bit single-data-rate XGMII (10GBASE-R, 25GBASE-R).

    Takes frames *without* FCS on ``i`` and sends each as: the start word (/S/ in lane 0, six
    preamble octets, SFD), the frame, zero padding up to 60 octets when shorter, the FCS (IEEE
    802.3 CRC-32, least significant octet first), /T/, then idles.

    Parameters
    ----------
    ifg : int
        Minimum inter-frame gap in octets, counted from the /T/ (included) to the next /S/
        (excluded). At least 12 (the IEEE 802.3 value), at most 1024.

    Members
    -------
    i : ``In(PacketSignature(64))``
        Frames, byte 0 in lane 0 of the first beat. ``error`` on the last beat asks for the frame
        to be sent as bad.
    txd, txc : ``Out(64)``, ``Out(8)``
        XGMII transmit data and control, registered. Lane 0 (``txd[0:8]``) is sent first. Idle
        (all /I/) out of reset.
    tx_frame : ``Out(1)``
        One-cycle strobe per frame put on the line (good, errored or aborted), in the cycle
        ``txd`` holds the frame's /T/ or /E/.
    tx_underrun : ``Out(1)``
        One-cycle strobe, in the cycle ``txd`` holds the /E/ of a frame aborted by an underrun.

    Behaviour
    ---------
    * Byte order: lane ``j`` of a beat is octet ``8*k + j`` of the frame; the start word is
      always aligned to lane 0, so beat ``k`` of the frame leaves as ``txd`` word ``k + 1`` after
      the start word. The FCS follows the last octet (of the padding, if padded) in the next
      lanes and may spill into one extra word.
    * Latency: the first beat of a frame is accepted in the cycle the MAC decides to start it;
      the start word is on ``txd`` the next cycle and the beat itself the cycle after. Every
      beat is on ``txd`` two cycles after it is accepted; the /T/ is on ``txd`` two cycles after
      the last beat (of the padding, if padded) when that beat has 1..3 octets, else three.
    * Backpressure: ``i.ready`` is high while the MAC waits for a frame with the inter-frame gap
      elapsed, and from a frame's first beat to its last one (one beat per cycle); it is low
      while the MAC sends padding, the FCS and the inter-frame gap. It does not depend on
      ``i.valid``. The preamble costs no input cycle: it goes out while the first beat is
      taken.
    * Underrun: once the first beat of a frame has been accepted the input must deliver every
      further beat of that frame on consecutive cycles (use a store-and-forward FIFO in front
      when the source may stall). If ``i.valid`` is low in a cycle where the next beat is due,
      the MAC ends the frame on the line at once with a word of /E/ followed by idles (a receiver
      sees a code error), pulses ``tx_underrun``, then accepts and discards the remaining beats
      of that frame up to its last beat before it starts the next frame.
    * Errors: when the last beat has ``error == 1`` the frame is sent with the bitwise inverse of
      its FCS and /E/ in place of /T/, so a receiver flags it both as a code error and, if it
      ignores control characters, as an FCS error.
    * Contract: every beat but the last is taken as 8 octets whatever its ``keep``; the last
      beat's ``keep`` must be a thermometer code. Data in lanes beyond ``keep`` is ignored (it
      is replaced by zero padding or by the FCS).
    * Throughput and inter-frame gap: with the input always valid, the first beat of a frame is
      accepted 4 cycles after the last beat (or last padding beat) of the previous frame when
      ``ifg=12``, so a frame of ``F`` octets (FCS included, ``F >= 64``) takes
      ``ceil((F + 20) / 8)`` cycles and the gaps are 12 to 19 octets; a larger ``ifg`` waits the
      least whole number of cycles that leaves at least ``ifg`` octets between /T/ and the next
      /S/ in lane 0.
    * No deficit idle count: DIC reaches line rate exactly by shortening some gaps (to no less
      than 9 octets) so that /S/ can move to the next 4-octet boundary, which on a 64-bit
      interface means starting frames in lane 4 -- excluded by this MAC's lane-0 start. With
      starts on 8-octet boundaries only, line rate would need gaps as short as 5 octets, below
      the 802.3 transmit minimum. So each frame costs ``(-(F + 20)) mod 8`` octet times more
      than at line rate: nothing for 1500-octet frames, 4 octet times (4.5 %) for 64-octet
      frames. ``bench/bench_xgmii.py`` prints the figures.
    """

    def __init__(self, *, ifg=MIN_IFG):
        if not isinstance(ifg, int) or isinstance(ifg, bool):
            raise TypeError(f"ifg must be an integer number of octets, not {ifg!r}")
        if not MIN_IFG <= ifg <= 1024:
            raise ValueError(f"ifg must be from {MIN_IFG} to 1024 octets, not {ifg}")
        self.ifg = ifg
        super().__init__({
            "i": In(PacketSignature(64)),
            "txd": Out(64, init=IDLE_WORD),
            "txc": Out(8, init=IDLE_CTRL),
            "tx_frame": Out(1),
            "tx_underrun": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        i = self.i
        pay = i.payload

        # Gap (cycles during which no frame may start) after the last beat, by octet count of
        # the last word (0..8); and after an underrun abort (/E/ in lane 0).
        gaps = [_gap_after(n + FCS_BYTES, self.ifg) for n in range(LANES + 1)]
        abort_gap = _gap_after(0, self.ifg)
        gap = Signal(range(max(gaps + [abort_gap]) + 1))
        gap_of = Array(Const(g, gap.shape()) for g in gaps)
        with m.If(gap != 0):
            m.d.sync += gap.eq(gap - 1)

        # Stage p: the beat (input or padding) whose word is assembled next cycle.
        p_valid = Signal()
        p_abort = Signal()
        p_last = Signal()
        p_err = Signal()
        p_data = Signal(64)
        p_count = Signal(range(LANES + 1))
        m.d.sync += p_valid.eq(0)

        crc = Signal(32, init=Crc32.INIT)     # CRC state over the words already on the line
        tail_valid = Signal()                 # a second word holding the FCS end and /T/
        tail_d = Signal(64)
        tail_c = Signal(8)
        beat = Signal(range(LANES + 1))       # frame beats loaded so far, saturating at 8
        pad_err = Signal()

        start = Signal()
        n_in = keep_count(pay.keep)
        byte_mask = Cat(*(pay.keep[j].replicate(8) for j in range(LANES)))
        pad_beats = MIN_DATA // LANES         # beats 0..6 are full in a minimum frame
        pad_last = MIN_DATA % LANES           # octets of beat 7 in a minimum frame

        def finish(count, err):
            m.d.sync += [p_last.eq(1), p_count.eq(count), p_err.eq(err), gap.eq(gap_of[count]),
                         beat.eq(0)]

        def take():
            """Accept the beat on ``i`` (when valid) into stage p."""
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                m.d.sync += [p_valid.eq(1), p_abort.eq(0), p_last.eq(0), p_count.eq(LANES),
                             beat.eq(Mux(beat == LANES, LANES, beat + 1))]
                with m.If(~pay.last):
                    m.d.sync += p_data.eq(pay.data)
                    m.next = "DATA"
                with m.Else():
                    m.d.sync += p_data.eq(pay.data & byte_mask)
                    with m.If(beat < pad_beats):
                        m.d.sync += pad_err.eq(pay.error)
                        m.next = "PAD"
                    with m.Elif(beat == pad_beats):
                        finish(Mux(n_in < pad_last, pad_last, n_in), pay.error)
                        m.next = "IDLE"
                    with m.Else():
                        finish(n_in, pay.error)
                        m.next = "IDLE"

        with m.FSM():
            with m.State("IDLE"):
                with m.If(gap == 0):
                    take()
                    with m.If(i.valid):
                        m.d.comb += start.eq(1)
                        m.d.sync += crc.eq(Crc32.INIT)
            with m.State("DATA"):
                take()
                with m.If(~i.valid):
                    m.d.sync += [p_valid.eq(1), p_abort.eq(1), gap.eq(abort_gap), beat.eq(0)]
                    m.next = "DROP"
            with m.State("PAD"):
                m.d.sync += [p_valid.eq(1), p_abort.eq(0), p_data.eq(0), beat.eq(beat + 1)]
                with m.If(beat == pad_beats):
                    finish(pad_last, pad_err)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [p_last.eq(0), p_count.eq(LANES)]
            with m.State("DROP"):
                m.d.comb += i.ready.eq(1)
                with m.If(i.valid & pay.last):
                    m.next = "IDLE"

        return self._elaborate_fsm(m, crc, p_abort, p_count, p_data, p_err, p_last, p_valid, start,
                                   tail_c, tail_d, tail_valid)

    def _elaborate_fsm(self, m, crc, p_abort, p_count, p_data, p_err, p_last, p_valid, start, tail_c,
                       tail_d, tail_valid):
        """Word assembly (the last word of a frame built as 16 lanes: data, FCS, end character,
        idles) and the words sent."""
        # Word assembly: the last word of a frame is built as 16 lanes (data, FCS, end
        # character, idles); lanes 8..15 become the tail word when the FCS does not fit.
        fcs = Signal(32)
        with m.Switch(p_count):
            for n in range(LANES + 1):
                with m.Case(n):
                    m.d.comb += fcs.eq(~Crc32.step(crc, p_data, n) ^ p_err.replicate(32))
        end_char = Mux(p_err, ERROR, TERMINATE)
        last_d = Signal(16 * 8)
        last_c = Signal(16)
        with m.Switch(p_count):
            for n in range(LANES + 1):
                with m.Case(n):
                    lanes, ctrl = [], []
                    for j in range(16):
                        if j < n:
                            lanes.append(p_data[8 * j: 8 * j + 8])
                        elif j < n + FCS_BYTES:
                            lanes.append(fcs[8 * (j - n): 8 * (j - n) + 8])
                        elif j == n + FCS_BYTES:
                            lanes.append(end_char)
                        else:
                            lanes.append(Const(IDLE, 8))
                        ctrl.append(int(j >= n + FCS_BYTES) << j)
                    m.d.comb += [last_d.eq(Cat(*lanes)), last_c.eq(sum(ctrl))]

        txd_n = Signal(64)
        txc_n = Signal(8)
        frame_end = Signal()
        underrun = Signal()
        with m.If(start):
            m.d.comb += [txd_n.eq(START_WORD), txc_n.eq(START_CTRL)]
        with m.Elif(p_valid & p_abort):
            m.d.comb += [txd_n.eq(Cat(Const(ERROR, 8), Const(IDLE_WORD >> 8, 56))),
                         txc_n.eq(IDLE_CTRL), frame_end.eq(1), underrun.eq(1)]
        with m.Elif(p_valid & ~p_last):
            m.d.comb += [txd_n.eq(p_data), txc_n.eq(0)]
            m.d.sync += crc.eq(Crc32.step(crc, p_data, LANES))
        with m.Elif(p_valid):
            m.d.comb += [txd_n.eq(last_d[:64]), txc_n.eq(last_c[:8]),
                         frame_end.eq(p_count < LANES - FCS_BYTES)]
            m.d.sync += [tail_valid.eq(p_count >= LANES - FCS_BYTES),
                         tail_d.eq(last_d[64:]), tail_c.eq(last_c[8:])]
        with m.Elif(tail_valid):
            m.d.comb += [txd_n.eq(tail_d), txc_n.eq(tail_c), frame_end.eq(1)]
            m.d.sync += tail_valid.eq(0)
        with m.Else():
            m.d.comb += [txd_n.eq(IDLE_WORD), txc_n.eq(IDLE_CTRL)]

        m.d.sync += [self.txd.eq(txd_n), self.txc.eq(txc_n),
                     self.tx_frame.eq(frame_end), self.tx_underrun.eq(underrun)]
        return m
