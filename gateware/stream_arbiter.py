from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamArbiter"]


class StreamArbiter(wiring.Component):
    """Round-robin merge of ``n`` record streams (one transfer = one record, no packets).

    Parameters
    ----------
    shape : shape-castable
        Payload of every input and of the output.
    n : int
        Number of inputs (1..32).

    Behaviour
    ---------
    * Latency 0: ``o`` is a combinational selection of the granted input.
    * Grant: the first valid input at or after the one following the last input served, so each
      of several busy inputs gets one transfer in turn. The grant depends only on ``valid`` and
      the pointer, never on ``o.ready``, so ``o.valid`` does not wait for ``o.ready``.
    * Backpressure: only the granted input sees ``ready`` (= ``o.ready``).
    """

    def __init__(self, shape, n):
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 32:
            raise ValueError(f"number of inputs must be an integer 1..32, not {n!r}")
        self.n = n
        super().__init__({
            "i": In(stream.Signature(shape)).array(n),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n
        last = Signal(range(n))          # input served most recently
        grant = Signal(range(n))
        # scan from last+1 round to last: the first valid one wins
        for start in range(n):
            with m.If(last == start):
                order = [(start + 1 + k) % n for k in range(n)]
                for k in reversed(order):
                    with m.If(self.i[k].valid):
                        m.d.comb += grant.eq(k)
        for k in range(n):
            with m.If(grant == k):
                m.d.comb += [self.o.payload.eq(self.i[k].payload),
                             self.i[k].ready.eq(self.o.ready)]
        m.d.comb += self.o.valid.eq(Cat(self.i[k].valid for k in range(n)).any())
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += last.eq(grant)
        return m
