from amaranth.hdl import Module, Signal
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
    * Grant: a register naming one input (input 1 after reset, input 0 when ``n`` is 1). After a
      transfer it passes to the first input with ``valid`` high after the one just served (in
      the order ``g+1, .., n-1, 0, .., g``), so each of several busy inputs gets one transfer in
      turn and a lone busy input one every cycle; while the granted input offers nothing, the
      grant moves the same way in the next cycle (an input offering while another idle one holds
      the grant waits one cycle). ``o.valid`` does not wait for ``o.ready``.
    * Backpressure: only the granted input sees ``ready`` (= ``o.ready``). The grant is a
      register, so no ``ready`` depends on any ``valid``.
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
        grant = Signal(range(n), init=1 % n)   # input served now
        pick = Signal(range(n))                 # the one after it, among those offering
        m.d.comb += pick.eq(grant)
        for start in range(n):
            with m.If(grant == start):
                order = [(start + 1 + k) % n for k in range(n - 1)]
                for k in reversed(order):
                    with m.If(self.i[k].valid):
                        m.d.comb += pick.eq(k)
        for k in range(n):
            with m.If(grant == k):
                m.d.comb += [self.o.valid.eq(self.i[k].valid),
                             self.o.payload.eq(self.i[k].payload),
                             self.i[k].ready.eq(self.o.ready)]
        with m.If(~self.o.valid | self.o.ready):
            m.d.sync += grant.eq(pick)
        return m
