"""Byte-accurate per-QP rate limiter: one token bucket per QP (``docs/dcqcn-design.md``)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.cc.dcqcn_layouts import RATE_BITS, RATE_FRAC, RATE_WRITE, SENT_BYTES
from rocegen.gateware.roce.layouts import check_num_qps

__all__ = ["RateLimiter", "TOKEN_BITS", "MAX_BURST"]

#: Bits of a QP's credit and debit (bytes in Q.20, wrapping; their difference is exact while it
#: stays within +-2^25 bytes).
TOKEN_BITS = 26 + RATE_FRAC
#: Largest burst allowance in bytes.
MAX_BURST = 1 << 24


class RateLimiter(wiring.Component):
    """Per-QP rate limiter: a token bucket per QP, refilled at the QP's rate, that says which
    QPs may start a packet now.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    width : int
        Data width W of the packets' path (64..512): the highest useful rate is W/8 bytes per
        cycle.
    burst : int
        Burst allowance: the most bytes a QP may send at once beyond its rate (after an idle
        time) is ``burst`` plus one packet. At least W/8 * P bytes, where P is ``num_qps``
        rounded up to a power of two (a refill at the highest rate must fit), at most
        :data:`MAX_BURST`; default ``max(8192, W/8 * P)``.
    init_rate : int
        Every QP's rate after reset (bytes per cycle, Q7.20, 0..W/8 bytes per cycle); default
        W/8 bytes per cycle. Joined to a :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine`, its
        line rate.

    Ports
    -----
    rate : In(stream.Signature(RATE_WRITE, always_ready=True))
        A QP's new rate (bytes per cycle, Q7.20: the rates of
        :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine`'s ``rate_w``). From the next cycle
        the QP may not start a packet until its next refill, which uses the new rate and keeps
        no tokens beyond that one refill (those saved at the old rate are dropped; a debt is
        kept). Rates of QPs outside the table are ignored.
    sent : In(stream.Signature(SENT_BYTES, always_ready=True))
        QP ``qp`` sent a packet of ``bytes`` bytes (counted as the rates count them: wire bytes
        for wire rates).
    allowed : Out(num_qps)
        Bit ``q``: QP ``q`` may start a packet now (of any length up to 65,535 bytes). From
        registers only (and ``bypass``).
    bypass : In(1)
        Every QP may send (``allowed`` all ones); the buckets go on counting.

    Behaviour
    ---------
    * Tokens: per QP a credit and a debit in bytes Q.20; ``allowed[q]`` is ``credit >= debit``
      (a deficit bucket: a QP with any tokens left may send a whole packet, and then owes
      what it overdrew, so every byte is counted and the long-run rate is exact).
    * Refill: the QPs are visited one per cycle in turn, QP ``k`` in cycles ``t = k (mod P)``;
      a visit adds ``rate * P`` (a shift) to the credit, clamped to ``debit + burst``.
      A packet of a backlogged QP thus waits at most P cycles past the moment its tokens
      suffice: over a window of D cycles its bytes are ``rate * D`` within one refill and one
      packet.
    * A new rate is in force from the cycle after it is written: the refill of a visit credits
      the P cycles before it, at the rate read in the visit, and the QP waits for that refill.
      So after a CNP the QP sends no more than the new rate allows from the rate's write on
      (plus the packets already started), whatever it had saved.
    * Latency: a visit or a ``sent`` report in cycle t changes ``allowed`` in t + 2; a rate
      written in cycle t clears the QP's bit in t + 1 and counts from a visit in t on. A
      scheduler that issues a packet in cycle t from ``allowed`` seen in t, and reports it in
      t, never sends more than the packets it issues in t and t + 1 beyond its tokens (they
      are owed, not lost).
    * The model is :class:`rocegen.sim.models.cc.dcqcn.RateLimiterModel`.
    """

    def __init__(self, num_qps, width, *, burst=None, init_rate=None):
        check_num_qps(num_qps)
        check_width(width)
        self.period = 1 << (num_qps - 1).bit_length()
        least = width // 8 * self.period
        if burst is None:
            burst = max(8192, least)
        if not isinstance(burst, int) or isinstance(burst, bool):
            raise TypeError(f"burst must be an integer number of bytes, not {burst!r}")
        if not least <= burst <= MAX_BURST:
            raise ValueError(f"burst must be {least}..{MAX_BURST} bytes (at least one refill at "
                             f"W/8 bytes per cycle, {width // 8} x {self.period} cycles), not "
                             f"{burst}")
        top = width // 8 << RATE_FRAC
        if init_rate is None:
            init_rate = top
        if not isinstance(init_rate, int) or isinstance(init_rate, bool) \
                or not 0 <= init_rate <= top:
            raise ValueError(f"init_rate must be an integer rate 0..{top} (W/8 bytes per cycle "
                             f"in Q7.20), not {init_rate!r}")
        self.num_qps, self.width, self.burst, self.init_rate = num_qps, width, burst, init_rate
        super().__init__({
            "rate": In(stream.Signature(RATE_WRITE, always_ready=True)),
            "sent": In(stream.Signature(SENT_BYTES, always_ready=True)),
            "allowed": Out(num_qps),
            "bypass": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, shift = self.num_qps, (self.period - 1).bit_length()
        rate_mem = m.submodules.rate = Memory(shape=RATE_BITS, depth=n, init=[self.init_rate] * n)
        cr_mem = m.submodules.credit = Memory(shape=TOKEN_BITS, depth=n, init=[])
        db_mem = m.submodules.debit = Memory(shape=TOKEN_BITS, depth=n, init=[])
        rate_w, cr_w, db_w = rate_mem.write_port(), cr_mem.write_port(), db_mem.write_port()
        rate_r = rate_mem.read_port(transparent_for=(rate_w,))
        cr_v, cr_s = (cr_mem.read_port(transparent_for=(cr_w,)) for _ in range(2))
        db_v, db_s = (db_mem.read_port(transparent_for=(db_w,)) for _ in range(2))
        m.d.comb += [rate_w.en.eq(self.rate.valid & (self.rate.payload.qp < n)),
                     rate_w.addr.eq(self.rate.payload.qp), rate_w.data.eq(self.rate.payload.rate)]

        # read: the visit of QP ptr (and whether its rate is new), and the report taken
        ptr = Signal(range(self.period))
        m.d.sync += ptr.eq(ptr + 1)
        m.d.comb += [rate_r.addr.eq(ptr), cr_v.addr.eq(ptr), db_v.addr.eq(ptr),
                     cr_s.addr.eq(self.sent.payload.qp), db_s.addr.eq(self.sent.payload.qp)]
        fresh = Signal(n)               # a rate was written: no send until the next refill
        v_ok, v_q, v_fresh = Signal(), Signal(8), Signal()
        s_ok, s_q, s_n = Signal(), Signal(8), Signal.like(self.sent.payload.bytes)
        m.d.sync += [v_ok.eq(ptr < n), v_q.eq(ptr),
                     v_fresh.eq(fresh.bit_select(ptr, 1) & ~(v_ok & (v_q == ptr))
                                | rate_w.en & (rate_w.addr == ptr)),
                     s_ok.eq(self.sent.valid & (self.sent.payload.qp < n)),
                     s_q.eq(self.sent.payload.qp), s_n.eq(self.sent.payload.bytes)]

        # update: the debit first, then the refill (tokens = credit - debit) clamped to the
        # burst, or to the refill itself for a fresh rate; both sums for the newest debit
        same = v_ok & s_ok & (v_q == s_q)
        sent_tokens = s_n << RATE_FRAC
        debit_new, fill = Signal(TOKEN_BITS), Signal(TOKEN_BITS)
        refill = rate_r.data << shift
        limit = Mux(v_fresh, refill, self.burst << RATE_FRAC)
        m.d.comb += [debit_new.eq(db_s.data + sent_tokens), fill.eq(cr_v.data + refill)]
        tok, top = Signal(TOKEN_BITS), Signal(TOKEN_BITS)    # fill - debit; debit + limit
        m.d.comb += [tok.eq(Mux(same, fill - debit_new, fill - db_v.data)),
                     top.eq(Mux(same, debit_new + limit, db_v.data + limit))]
        credit_new = Mux((tok - limit)[TOKEN_BITS - 1], fill, top)
        m.d.comb += [cr_w.en.eq(v_ok), cr_w.addr.eq(v_q), cr_w.data.eq(credit_new),
                     db_w.en.eq(s_ok), db_w.addr.eq(s_q), db_w.data.eq(debit_new)]
        ok = Signal(n, init=(1 << n) - 1)
        ok_s = ~tok[TOKEN_BITS - 1]     # tokens after the refill: min(tok, limit), limit >= 0
        ok_d = Mux(same, ok_s, ~(cr_s.data - debit_new)[TOKEN_BITS - 1])
        with m.If(v_ok):
            m.d.sync += [ok.bit_select(v_q, 1).eq(ok_s), fresh.bit_select(v_q, 1).eq(0)]
        with m.If(s_ok):
            m.d.sync += ok.bit_select(s_q, 1).eq(ok_d)
        with m.If(rate_w.en):
            m.d.sync += fresh.bit_select(self.rate.payload.qp, 1).eq(1)
        m.d.comb += self.allowed.eq(ok & ~fresh | self.bypass.replicate(n))
        return m
