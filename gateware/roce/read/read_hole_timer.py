"""The READ requester's hole timer: a QP whose holes wait and that has heard nothing for a while
asks for its current hole again."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.read.read_layouts import (
    READ_EXPIRE,
    READ_STEP_BITS,
    READ_TOUCH,
    READ_WAIT_CONFIG,
)

__all__ = ["ReadHoleTimer", "STEPS", "check_wait"]

#: Steps of a hole wait: a QP expires once its stamp is more than STEPS steps old.
STEPS = 4
#: Bits of a stamp (a step count modulo 8).
_STAMP = 3
#: Cycles the scan pauses after an expiry is taken (until its touch is written).
_COOL = 4


def min_step(num_qps):
    """The shortest step of a timer of ``num_qps`` QPs: three steps must outlast a scan."""
    return num_qps + 8


def check_wait(wait, num_qps):
    """``wait`` (cycles) if it is 0 (never) or an integer of at least ``STEPS x (num_qps +
    8)`` whose step fits :data:`READ_STEP_BITS`; else ``TypeError`` or ``ValueError`` naming
    the parameter."""
    if not isinstance(wait, int) or isinstance(wait, bool):
        raise TypeError(f"wait must be an integer number of cycles, not {wait!r}")
    least = STEPS * min_step(num_qps)
    if wait and wait < least:
        raise ValueError(f"wait must be 0 or at least {least} cycles for {num_qps} QPs (a step "
                         f"of wait / {STEPS} must outlast a scan of every QP), not {wait}")
    if -(-wait // STEPS) >> READ_STEP_BITS:
        raise ValueError(f"wait must be below {STEPS << READ_STEP_BITS} cycles, not {wait}")
    return wait


class ReadHoleTimer(wiring.Component):
    """Per-QP timer of the READ requester
    (:class:`~rocegen.gateware.roce.read.read_place.ReadPlace`): a QP with a READ outstanding that has
    had no response for ``wait`` cycles expires. With a hole open, its current hole is asked for
    again: the hole's own request, or one of its responses, may be lost, nothing that comes later
    tells, and the retry engine's timer (which hears nothing of a QP with holes open) has to
    cover the line time of every READ outstanding. Without one, the QP goes back to its oldest
    missing response (a request lost at the end of a burst, or the NAK of a lost one lost).

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    wait : int
        Cycles of silence after which a busy QP expires, after reset (0: never, else at least
        ``4 x (num_qps + 8)``): the round trip and the peer's response time, with margin.

    Ports
    -----
    cfg : In(stream.Signature(READ_WAIT_CONFIG, always_ready=True))
        The step from the next cycle on: ``step`` cycles, a wait of 4 steps (0: never; a step
        below ``num_qps + 8`` counts as that). The step under way ends at the old step or the
        new one, whichever comes first.
    busy : In(num_qps)
        Bit ``q``: QP ``q`` has a READ outstanding
        (:class:`~rocegen.gateware.roce.read.read_track.ReadTrack` ``busy``).
    touch : In(stream.Signature(READ_TOUCH, always_ready=True))
        A response of QP ``qp`` came, or its expiry was taken: its wait starts again; with
        ``poke``, the QP expires now instead (later touches do not undo it; an expiry taken,
        or a scan that finds the QP not busy, does).
    expire : Out(stream.Signature(READ_EXPIRE))
        A busy QP whose wait is over (``poke``: it was poked; ``again``: it expired before
        and had no touch but that expiry's since), held until taken.

    Behaviour
    ---------
    Time goes in steps of ``ceil(wait / 4)`` cycles (``cfg``); a touch stamps the QP with the step count
    (3 bits, in distributed RAM), and so does the scan, passing a QP that is not busy, in a
    cycle without a touch (a QP that gets a READ starts from a stamp at most a scan old). A scan
    visits one QP per cycle and offers it on ``expire`` when it is busy and was poked or its
    stamp is more than 4 steps old (5..7 steps, modulo 8), so a QP expires between ``wait`` and
    ``wait x 5/4`` cycles after its last touch, plus up to a scan of every QP; a QP found
    expired is offered from the next cycle until taken (the scan stays on it; a touch meanwhile
    does not withdraw it), and the scan pauses 4 cycles after it is taken (the touch of its
    expiry, a cycle later at the user's, restamps it). A QP not scanned while its stamp is 5..7
    steps old (the scan held that long: three steps, at least ``3 x (num_qps + 8)`` cycles)
    expires 8 steps later.
    """

    def __init__(self, num_qps, wait):
        check_num_qps(num_qps)
        check_wait(wait, num_qps)
        self.num_qps, self.wait = num_qps, wait
        #: Cycles per step after reset.
        self.step = -(-wait // STEPS)
        super().__init__({
            "cfg": In(stream.Signature(READ_WAIT_CONFIG, always_ready=True)),
            "busy": In(num_qps),
            "touch": In(stream.Signature(READ_TOUCH, always_ready=True)),
            "expire": Out(stream.Signature(READ_EXPIRE)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        qw = max(1, (n - 1).bit_length())
        least = min_step(n)
        step = Signal(READ_STEP_BITS, init=self.step)
        with m.If(self.cfg.valid):
            m.d.sync += step.eq(Mux(self.cfg.payload.step == 0, 0,
                                    Mux(self.cfg.payload.step < least, least,
                                        self.cfg.payload.step)))
        div, now = Signal(READ_STEP_BITS), Signal(_STAMP)
        with m.If(div + 1 >= step):
            m.d.sync += [div.eq(0), now.eq(now + 1)]
        with m.Else():
            m.d.sync += div.eq(div + 1)

        stamps = m.submodules.stamps = Memory(shape=_STAMP, depth=n, init=[])
        wr, rd = stamps.write_port(), stamps.read_port(domain="comb")
        t = self.touch
        tq = t.payload.qp
        poked = Signal(n)                   # expire at once

        scan, cool = Signal(range(n)), Signal(range(_COOL + 1))
        pend, old = Signal(), Signal()
        pend_poke, pend_again, again = Signal(), Signal(), Signal(n)
        m.d.comb += [rd.addr.eq(scan), old.eq((now - rd.data)[:_STAMP] > STEPS),
                     self.expire.valid.eq(pend), self.expire.payload.qp.eq(scan),
                     self.expire.payload.poke.eq(pend_poke),
                     self.expire.payload.again.eq(pend_again)]
        # (a QP touched in this very cycle is passed over: its stamp is being renewed)
        def qp_vec(q, valid):
            return Mux(valid, Cat(*(q == k for k in range(n))), 0)

        is_open = self.busy.bit_select(scan, 1)
        scanning = ~pend & (cool == 0)
        found = scanning & is_open & (step != 0) & \
            (poked.bit_select(scan, 1) | old & ~(t.valid & (tq == scan)))
        taken = pend & self.expire.ready
        # (the stamp of a QP that is not busy is renewed as the scan passes it, when no touch
        # takes the write port: it starts fresh when the QP gets a READ)
        refresh = scanning & ~is_open
        tv = t.valid & (tq < n)
        m.d.comb += [wr.addr.eq(Mux(tv, tq, scan)[:qw]), wr.en.eq(tv | refresh),
                     wr.data.eq(now)]
        # (an expiry taken, or a scan that finds the QP not busy, clears the QP's poke, and a
        # poke in that cycle: it came from a decision before the expiry's)
        m.d.sync += poked.eq((poked | qp_vec(tq, t.valid & t.payload.poke)) &
                             ~qp_vec(scan, taken | refresh))
        # (an expiry taken sets ``again``; a response's touch, or a scan that finds the QP not
        # busy, clears it)
        m.d.sync += again.eq((again | qp_vec(scan, taken)) &
                             ~qp_vec(tq, t.valid & ~t.payload.expiry) & ~qp_vec(scan, refresh))
        with m.If(pend):
            with m.If(taken):
                m.d.sync += [pend.eq(0), cool.eq(_COOL)]
        with m.Elif(cool != 0):
            m.d.sync += cool.eq(cool - 1)
        with m.Elif(found):
            m.d.sync += [pend.eq(1), pend_poke.eq(poked.bit_select(scan, 1)),
                         pend_again.eq(again.bit_select(scan, 1))]
        with m.Else():
            m.d.sync += scan.eq(Mux(scan == n - 1, 0, scan + 1))
        return m
