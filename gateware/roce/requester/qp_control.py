from amaranth.hdl import Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.pipe import StreamForwardRegister
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.layouts import PSN_SET, QpState, check_num_qps
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE

__all__ = ["QpControl"]


class QpControl(wiring.Component):
    """The QP table's control writes: those of the user's ports and of the connection manager
    (and of the IB CM), merged, each to both the QP table and the retry engine.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256).
    ibcm : bool
        A third writer, the IB CM's (``ibcm_ctl``, ``ibcm_psn``).

    Ports
    -----
    user_ctl, cm_ctl, ibcm_ctl : In(stream.Signature(CONTEXT_WRITE))
        QP context writes (the user's, the connection manager's, with ``ibcm`` the IB CM's).
    user_psn, cm_psn : In(stream.Signature(PSN_WRITE)); ibcm_psn : In(stream.Signature(PSN_SET))
        Initial-PSN writes (the IB CM's with the PSN its responder expects).
    table_ctl / table_psn : Out(stream.Signature(CONTEXT_WRITE / PSN_WRITE))
        To the QP table.
    table_epsn : Out(24), with ``ibcm``
        With ``table_psn``: the PSN the QP's responder expects (``table_psn``'s own but for
        the IB CM's writes, which state it).
    engine_ctl / engine_psn : Out(stream.Signature(CONTEXT_WRITE / PSN_WRITE))
        To the retry engine.
    errored : In(num_qps)
        QPs in the error state (the retry engine's, registers).
    busy : In(num_qps)
        QPs with work requests not yet completed (the scheduler's queues, from registers).

    Behaviour: per kind of write, a round-robin :class:`~rocegen.gateware.lib.stream_arbiter.
    StreamArbiter` of the writers' inputs into a forward register,
    whose write moves when both the table and a register slice in front of the engine take it,
    in the same cycle. So every write reaches both, in the order merged: the table one cycle
    after the arbiter passes it, the engine one cycle or more later (when its own arbitration
    lets it). ``table_*.valid`` and ``table_*.payload`` come from registers only (the table's
    write enable does not depend on the engine's input arbitration). Backpressure: an input
    waits while either output holds the previous write.

    A QP's old work drains before a new connection starts: a write of either kind for a QP that
    is *draining* waits at the merge (its source sees ``ready`` low). A QP is draining while it
    has work requests not completed (``busy``) and is in the error state (``errored``) or was
    just closed (a context written in RESET or ERROR passed the merge and ``errored`` has not
    risen yet). The error state flushes those requests on its own (each completes with its
    status or FLUSHED), so the wait ends; without it a set-up written at once after a close
    would clear the error state with the old requests still queued, and they would wait for
    acknowledgements of PSNs the new connection never sends. A waiting write takes no part in
    the arbitration: the other source's writes (for other QPs) pass. An input's ``ready``
    depends on its own QP number.
    """

    def __init__(self, num_qps, *, ibcm=False):
        check_num_qps(num_qps)
        if not isinstance(ibcm, bool):
            raise TypeError(f"ibcm must be a bool, not {ibcm!r}")
        self.num_qps = num_qps
        self.writers = ("user", "cm", "ibcm") if ibcm else ("user", "cm")
        super().__init__({
            **{f"{who}_ctl": In(stream.Signature(CONTEXT_WRITE)) for who in self.writers},
            **{f"{who}_psn": In(stream.Signature(PSN_SET if who == "ibcm" else PSN_WRITE))
               for who in self.writers},
            **({"table_epsn": Out(24)} if ibcm else {}),
            "table_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "table_psn": Out(stream.Signature(PSN_WRITE)),
            "engine_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "engine_psn": Out(stream.Signature(PSN_WRITE)),
            "errored": In(num_qps),
            "busy": In(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        closing = Signal(n)         # closed, the error state not yet risen
        draining = Signal(n)
        m.d.comb += draining.eq((self.errored | closing) & self.busy)
        closed = Signal(n)          # a close passing the merge in this cycle (one-hot)
        m.d.sync += closing.eq((closing | closed) & ~self.errored & self.busy)
        ibcm = "ibcm" in self.writers
        for kind, layout, out in (("ctl", CONTEXT_WRITE, CONTEXT_WRITE),
                                  ("psn", PSN_SET if ibcm else PSN_WRITE, PSN_WRITE)):
            arb = m.submodules[f"{kind}_arbiter"] = StreamArbiter(layout, len(self.writers))
            reg = m.submodules[f"{kind}_reg"] = StreamForwardRegister(layout)
            sl = m.submodules[f"{kind}_slice"] = StreamRegisterSlice(out)
            table_in = getattr(self, f"table_{kind}")
            qbits = max(1, (n - 1).bit_length())
            for k, who in enumerate(self.writers):
                src = getattr(self, f"{who}_{kind}")
                wait = Signal(name=f"{who}_{kind}_wait")
                if kind == "psn" and ibcm and who != "ibcm":
                    # (a writer of the QP's PSN alone: its responder expects the same)
                    m.d.comb += [arb.i[k].payload.qp.eq(src.payload.qp),
                                 arb.i[k].payload.psn.eq(src.payload.psn),
                                 arb.i[k].payload.epsn.eq(src.payload.psn)]
                else:
                    m.d.comb += arb.i[k].payload.eq(src.payload)
                m.d.comb += [
                    wait.eq((src.payload.qp < n) & draining.bit_select(src.payload.qp[:qbits], 1)),
                    arb.i[k].valid.eq(src.valid & ~wait),
                    src.ready.eq(arb.i[k].ready & ~wait),
                ]
            wiring.connect(m, arb.o, reg.i)
            qp = arb.o.payload.qp
            if kind == "ctl":
                state = arb.o.payload.context.state
                with m.If(reg.i.valid & reg.i.ready & (qp < n) &
                          ((state == QpState.RESET) | (state == QpState.ERROR))):
                    m.d.comb += closed.eq(Const(1, n) << qp[:qbits])
            wiring.connect(m, sl.o, wiring.flipped(getattr(self, f"engine_{kind}")))
            if kind == "psn":
                m.d.comb += [sl.i.payload.qp.eq(reg.o.payload.qp),
                             sl.i.payload.psn.eq(reg.o.payload.psn)]
            else:
                m.d.comb += sl.i.payload.eq(reg.o.payload)
            m.d.comb += [
                sl.i.valid.eq(reg.o.valid & table_in.ready),
                table_in.payload.eq(sl.i.payload), table_in.valid.eq(reg.o.valid & sl.i.ready),
                reg.o.ready.eq(sl.i.ready & table_in.ready),
            ]
            if kind == "psn" and ibcm:
                m.d.comb += self.table_epsn.eq(reg.o.payload.epsn)
        return m
