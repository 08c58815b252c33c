from amaranth.hdl import Array, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps

__all__ = ["QpCounters"]


class QpCounters(wiring.Component):
    """A bank of event counters per QP, in block RAM.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    names : sequence of str
        The counters of each QP, in read-address order (1..32 distinct names).
    bits : int
        Bits per counter (1..64); counters wrap.
    step_bits : int
        Bits of each counter's increment (1..``bits``): 1 for event counters, more for counters
        that may gain several in a cycle.

    Ports
    -----
    qp : In(range(num_qps))
        The QP the events of this cycle belong to.
    inc : In(len(names)), or In(data.ArrayLayout(step_bits, len(names)))
        One bit per counter (``step_bits`` 1): each set bit adds one to that counter of ``qp``
        (any number of bits in the same cycle; one QP per cycle); with ``step_bits`` > 1, the
        amount each counter gains.
    rd_qp / rd_sel / rd_data
        Read of counter ``names[rd_sel]`` of QP ``rd_qp``; ``rd_data`` one cycle after the
        address. An increment in cycle t is visible to a read addressed in cycle t + 2.

    Behaviour: ``qp`` addresses a synchronous read of the QP's row (transparent for the write
    port, so a row written in that cycle is read as written) and ``inc`` is registered beside
    it; in the next cycle the row is written back with the increments: one read-modify-write per
    cycle, so events on the same QP in consecutive cycles all count. No backpressure: every event
    of every cycle is counted. ``qp`` should come from a register (it drives the memory's
    address).
    """

    def __init__(self, num_qps, names, bits=32, step_bits=1):
        check_num_qps(num_qps)
        names = tuple(names)
        if not 1 <= len(names) <= 32 or len(set(names)) != len(names) or \
                not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"names must be 1..32 distinct non-empty strings, not {names!r}")
        if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 64:
            raise ValueError(f"bits must be an integer 1..64, not {bits!r}")
        if not isinstance(step_bits, int) or isinstance(step_bits, bool) or \
                not 1 <= step_bits <= bits:
            raise ValueError(f"step_bits must be an integer 1..{bits}, not {step_bits!r}")
        self.num_qps = num_qps
        self.names = names
        self.bits = bits
        self.step_bits = step_bits
        super().__init__({
            "qp": In(range(num_qps)),
            "inc": In(len(names) if step_bits == 1 else data.ArrayLayout(step_bits, len(names))),
            "rd_qp": In(range(num_qps)),
            "rd_sel": In(range(len(names))),
            "rd_data": Out(bits),
        })

    def elaborate(self, platform):
        m = Module()
        nc = len(self.names)
        mem = m.submodules.mem = Memory(shape=data.ArrayLayout(self.bits, nc),
                                        depth=self.num_qps, init=[],
                                        attrs={"ram_style": "block"})
        wp = mem.write_port()
        rmw = mem.read_port(domain="sync", transparent_for=(wp,))
        rd = mem.read_port()
        qp = Signal.like(self.qp)           # the events of the previous cycle
        inc = Signal(nc * self.step_bits)
        m.d.sync += [qp.eq(self.qp), inc.eq(self.inc)]
        m.d.comb += [rmw.addr.eq(self.qp), wp.addr.eq(qp), wp.en.eq(inc != 0)]
        sb = self.step_bits
        for k in range(nc):
            m.d.comb += wp.data[k].eq(rmw.data[k] + inc[k * sb:(k + 1) * sb])
        sel = Signal(range(nc))
        m.d.sync += sel.eq(self.rd_sel)
        m.d.comb += [rd.addr.eq(self.rd_qp),
                     self.rd_data.eq(Array(rd.data[k] for k in range(nc))[sel])]
        return m
