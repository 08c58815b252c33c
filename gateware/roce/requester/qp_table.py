from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    CONTEXT_WRITE,
    MAX_QPS,
    PSN_WRITE,
    QP_CONTEXT,
    QPN_BASE,
    RKEY_WRITE,
    check_num_qps,
)

# (CONTEXT_WRITE and PSN_WRITE are defined in layouts; exported here too for existing imports)
__all__ = ["QpTable", "CONTEXT_WRITE", "PSN_WRITE", "MAX_QPS"]


class QpTable(wiring.Component):
    """The QP table: a context and a next PSN per QP, for ``num_qps`` QPs numbered from 256.

    Writes: ``ctl`` (a stream of whole contexts, always accepted), ``ctl_psn`` (the initial PSN
    set by the control side) and ``psn_w`` (the PSN the transmit side advances). A PSN write from
    the control side wins over one from the transmit side in the same cycle (the latter then
    waits: ``psn_w.ready`` is low). After reset every QP is in RESET with PSN 0.

    Reads: ``rd_qp`` -> ``rd_context`` / ``rd_psn`` one cycle later (block or distributed RAM;
    a write to the same QP in the cycle of the read is not seen by it). ``rx_qp`` ->
    ``rx_context`` is a second, independent context read port for the receive path.

    With ``info_port=True``, ``info_qp`` -> ``info_context`` / ``info_psn`` one cycle later is a
    third read port of its own (for status read-back: it never delays nor changes the others).
    With ``resp_port=True``, ``resp_qp`` -> ``resp_context`` one cycle later is one more context
    read port, for the responder. With ``read_port=True``, ``rdr_qp`` -> ``rdr_context`` one
    cycle later is one more, for the receive side of the READ requester. With
    ``resend_port=True``, ``rsd_qp`` -> ``rsd_context`` one cycle later is one more, for the READ
    requester's own READ requests.

    With ``rkey_port=True``, ``rkey_w`` writes a QP's R_Key alone (the ``rkey`` the contexts read
    on ``rd_context``, ``rsd_context`` and ``info_context`` have from the next cycle on: what the
    QP's READs and WRITEs name); a ``ctl`` write of the same cycle wins (``rkey_w.ready`` is
    low while ``ctl.valid`` is high) and sets the R_Key with the rest of its context.

    A write naming a QP outside the table changes nothing and pulses ``rejected``.

    ``lookup_qpn`` -> ``lookup_index`` / ``lookup_valid`` combinationally: the index of a
    received DestQP, valid when it names one of this table's QPs.
    """

    def __init__(self, num_qps, *, info_port=False, resp_port=False, read_port=False,
                 resend_port=False, rkey_port=False):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        self.info_port = bool(info_port)
        self.resp_port = bool(resp_port)
        self.read_port = bool(read_port)
        self.resend_port = bool(resend_port)
        self.rkey_port = bool(rkey_port)
        self._contexts = Memory(shape=QP_CONTEXT, depth=num_qps, init=[])
        self._psns = Memory(shape=24, depth=num_qps, init=[])
        members = {
            "ctl": In(stream.Signature(CONTEXT_WRITE)),
            "ctl_psn": In(stream.Signature(PSN_WRITE)),
            "psn_w": In(stream.Signature(PSN_WRITE)),
            "rd_qp": In(range(num_qps)),
            "rd_context": Out(QP_CONTEXT),
            "rd_psn": Out(24),
            "rx_qp": In(range(num_qps)),
            "rx_context": Out(QP_CONTEXT),
            "lookup_qpn": In(24),
            "lookup_index": Out(8),
            "lookup_valid": Out(1),
            "rejected": Out(1),
        }
        if self.info_port:
            members.update({"info_qp": In(range(num_qps)), "info_context": Out(QP_CONTEXT),
                            "info_psn": Out(24)})
        if self.resp_port:
            members.update({"resp_qp": In(range(num_qps)), "resp_context": Out(QP_CONTEXT)})
        if self.read_port:
            members.update({"rdr_qp": In(range(num_qps)), "rdr_context": Out(QP_CONTEXT)})
        if self.resend_port:
            members.update({"rsd_qp": In(range(num_qps)), "rsd_context": Out(QP_CONTEXT)})
        if self.rkey_port:
            members["rkey_w"] = In(stream.Signature(RKEY_WRITE))
        super().__init__(members)

    def qpn(self, index):
        """The QP number of table entry ``index``."""
        if not 0 <= index < self.num_qps:
            raise IndexError(f"QP index {index} outside 0..{self.num_qps - 1}")
        return QPN_BASE + index

    def elaborate(self, platform):
        m = Module()
        m.submodules.contexts = self._contexts
        m.submodules.psns = self._psns
        cw = self._contexts.write_port()
        cr = self._contexts.read_port()
        cr_rx = self._contexts.read_port()
        pw = self._psns.write_port()
        pr = self._psns.read_port()

        in_range = self.ctl.payload.qp < self.num_qps
        m.d.comb += [
            self.ctl.ready.eq(1),
            cw.addr.eq(self.ctl.payload.qp),
            cw.data.eq(self.ctl.payload.context),
            cw.en.eq(self.ctl.valid & in_range),
            cr.addr.eq(self.rd_qp),
            self.rd_context.eq(cr.data),
            cr_rx.addr.eq(self.rx_qp),
            self.rx_context.eq(cr_rx.data),
            pr.addr.eq(self.rd_qp),
            self.rd_psn.eq(pr.data),
        ]
        if self.info_port:
            ci = self._contexts.read_port()
            pi = self._psns.read_port()
            m.d.comb += [ci.addr.eq(self.info_qp), self.info_context.eq(ci.data),
                         pi.addr.eq(self.info_qp), self.info_psn.eq(pi.data)]
        if self.resp_port:
            cr_resp = self._contexts.read_port()
            m.d.comb += [cr_resp.addr.eq(self.resp_qp), self.resp_context.eq(cr_resp.data)]
        if self.read_port:
            cr_rdr = self._contexts.read_port()
            m.d.comb += [cr_rdr.addr.eq(self.rdr_qp), self.rdr_context.eq(cr_rdr.data)]
        if self.resend_port:
            cr_rsd = self._contexts.read_port()
            m.d.comb += [cr_rsd.addr.eq(self.rsd_qp), self.rsd_context.eq(cr_rsd.data)]
        if self.rkey_port:
            self._rkeys(m, in_range)
        m.d.comb += self.ctl_psn.ready.eq(1)
        with m.If(self.ctl_psn.valid):
            m.d.comb += [pw.addr.eq(self.ctl_psn.payload.qp), pw.data.eq(self.ctl_psn.payload.psn),
                         pw.en.eq(self.ctl_psn.payload.qp < self.num_qps)]
        with m.Else():
            m.d.comb += [self.psn_w.ready.eq(1),
                         pw.addr.eq(self.psn_w.payload.qp), pw.data.eq(self.psn_w.payload.psn),
                         pw.en.eq(self.psn_w.valid & (self.psn_w.payload.qp < self.num_qps))]

        rkey_bad = 0
        if self.rkey_port:
            rkey_bad = self.rkey_w.valid & self.rkey_w.ready & \
                (self.rkey_w.payload.qp >= self.num_qps)
        m.d.comb += self.rejected.eq(
            rkey_bad | (self.ctl.valid & ~in_range) |
            (self.ctl_psn.valid & (self.ctl_psn.payload.qp >= self.num_qps)) |
            (self.psn_w.valid & self.psn_w.ready & (self.psn_w.payload.qp >= self.num_qps)))

        index = Signal(24)
        m.d.comb += [
            index.eq(self.lookup_qpn - QPN_BASE),
            self.lookup_index.eq(index[:8]),
            self.lookup_valid.eq((self.lookup_qpn >= QPN_BASE) &
                                 (self.lookup_qpn < QPN_BASE + self.num_qps)),
        ]
        return m

    def _rkeys(self, m, in_range):
        """The R_Keys in a memory of their own, written by ``ctl`` and ``rkey_w``, read beside
        the contexts of ``rd_context``, ``rsd_context`` and ``info_context``."""
        rkeys = m.submodules.rkeys = Memory(shape=32, depth=self.num_qps, init=[])
        w, ctl, rw = rkeys.write_port(), self.ctl, self.rkey_w
        m.d.comb += rw.ready.eq(~ctl.valid)
        with m.If(ctl.valid):
            m.d.comb += [w.addr.eq(ctl.payload.qp), w.data.eq(ctl.payload.context.rkey),
                         w.en.eq(in_range)]
        with m.Else():
            m.d.comb += [w.addr.eq(rw.payload.qp), w.data.eq(rw.payload.rkey),
                         w.en.eq(rw.valid & (rw.payload.qp < self.num_qps))]
        ports = [(self.rd_qp, self.rd_context)]
        if self.resend_port:
            ports.append((self.rsd_qp, self.rsd_context))
        if self.info_port:
            ports.append((self.info_qp, self.info_context))
        for qp, context in ports:
            r = rkeys.read_port()
            m.d.comb += [r.addr.eq(qp), context.rkey.eq(r.data)]
