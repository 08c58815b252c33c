"""The connection manager's records: owner and context of every QP, and the pool of free QPs."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_defs import int_param
from rocegen.gateware.roce.layouts import CM_RECORD_WRITE, MAX_QPS, QP_CONTEXT, QPN_BASE, QpState

__all__ = ["CmRecords", "LOOKUP", "first_zero"]

#: The look-up of a QP, as the asking side sees it: ``qpn`` and ``src_ip`` out, the answers in.
LOOKUP = wiring.Signature({
    "qpn": Out(24),
    "src_ip": Out(32),
    "is_open": In(1),
    "owner_ok": In(1),
    "state": In(QpState),
    "context": In(QP_CONTEXT),
    "any_free": In(1),
    "free_idx": In(8),
})

#: What is kept per QP besides the in-use bit.
_RECORD = data.StructLayout({"owner": 32, "context": QP_CONTEXT})


def first_zero(bits, n):
    """Index of the lowest zero among ``bits[0:n]`` by a balanced tree (depth log2 n):
    ``(found, index)``."""
    nodes = [(~bits[k], Const(0, 0)) for k in range(n)]
    while len(nodes) > 1:
        if len(nodes) % 2:
            nodes.append((Const(0, 1), Const(0, len(nodes[0][1]))))
        nodes = [(fa | fb, Mux(fa, Cat(ia, Const(0, 1)), Cat(ib, Const(1, 1))))
                 for (fa, ia), (fb, ib) in zip(nodes[0::2], nodes[1::2])]
    return nodes[0]


class CmRecords(wiring.Component):
    """What the connection manager knows of each QP: whether it is in use, its owner (the IPv4
    address that opened it) and the context last written to the QP table.

    Parameters
    ----------
    num_qps : int
        QPs (1..256), numbered from QPN 256.

    Ports
    -----
    lookup : In(LOOKUP)
        The QP named by ``qpn`` (a QPN): ``is_open`` (a QPN of the table and in use),
        ``owner_ok`` (its owner is ``src_ip``), ``context`` and ``state`` (ERROR while its bit
        of ``errored`` is set, else the context's state); and the lowest free QP: ``any_free``,
        ``free_idx``. Every answer is registered: it describes ``qpn`` / ``src_ip`` and the
        records as they were in the cycle before (the pool: two cycles before).
    write : In(stream.Signature(CM_RECORD_WRITE, always_ready=True))
        Writes QP ``qp``'s owner and context; ``take`` marks the QP in use, ``release`` free.
        Always accepted; seen by look-ups from the next cycle (the pool's answers from the
        cycle after).
    errored : In(num_qps)
        Bit k: QP k was put in the error state by the transmit side.
    reserved : In(num_qps)
        Bit k: QP k is held elsewhere (the IB CM's): never the free QP.
    qp_open : Out(num_qps)
        Bit k: QP k is in use (a register).
    """

    def __init__(self, num_qps):
        int_param("num_qps", num_qps, 1, MAX_QPS)
        self.num_qps = num_qps
        super().__init__({
            "lookup": In(LOOKUP),
            "write": In(stream.Signature(CM_RECORD_WRITE, always_ready=True)),
            "errored": In(num_qps),
            "reserved": In(num_qps),
            "qp_open": Out(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        abits = (n - 1).bit_length()
        lk = self.lookup
        mem = m.submodules.records = Memory(shape=_RECORD, depth=n, init=[])
        rd = mem.read_port(domain="comb")
        wr = mem.write_port()

        in_use = Signal(n)                  # bit k: QP k is open
        m.d.comb += self.qp_open.eq(in_use)
        found, first = first_zero(in_use | self.reserved, n)
        m.d.sync += [lk.any_free.eq(found), lk.free_idx.eq(first)]

        # the QP named by qpn: its record read and checked, registered
        target = Signal(24)
        m.d.comb += target.eq(lk.qpn - QPN_BASE)
        idx = Signal(range(n))
        m.d.comb += [idx.eq(target[:abits]), rd.addr.eq(idx)]
        in_range = (lk.qpn >= QPN_BASE) & (lk.qpn < QPN_BASE + n)
        m.d.sync += [
            lk.is_open.eq(in_range & in_use.bit_select(idx, 1)),
            lk.context.eq(rd.data.context),
            lk.owner_ok.eq(rd.data.owner == lk.src_ip),
            lk.state.eq(Mux(self.errored.bit_select(idx, 1), QpState.ERROR, rd.data.context.state)),
        ]

        w = self.write
        qp = Signal(range(n))
        m.d.comb += [qp.eq(w.payload.qp), wr.en.eq(w.valid), wr.addr.eq(w.payload.qp),
                     wr.data.owner.eq(w.payload.owner), wr.data.context.eq(w.payload.context)]
        with m.If(w.valid & w.payload.take):
            m.d.sync += in_use.bit_select(qp, 1).eq(1)
        with m.If(w.valid & w.payload.release):
            m.d.sync += in_use.bit_select(qp, 1).eq(0)
        return m
