from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.pipe import StreamForwardRegister
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.qp_table import CONTEXT_WRITE, PSN_WRITE

__all__ = ["QpControl"]


class QpControl(wiring.Component):
    """The QP table's control writes: those of the user's ports and of the connection manager,
    merged, each to both the QP table and the retry engine.

    Ports
    -----
    user_ctl, cm_ctl : In(stream.Signature(CONTEXT_WRITE))
        QP context writes (the user's, the connection manager's).
    user_psn, cm_psn : In(stream.Signature(PSN_WRITE))
        Initial-PSN writes.
    table_ctl / table_psn : Out(stream.Signature(CONTEXT_WRITE / PSN_WRITE))
        To the QP table.
    engine_ctl / engine_psn : Out(stream.Signature(CONTEXT_WRITE / PSN_WRITE))
        To the retry engine.

    Behaviour: per kind of write, a round-robin :class:`~rocegen.gateware.lib.stream_arbiter.
    StreamArbiter` of the user's and the connection manager's input into a forward register,
    whose write moves when both the table and a register slice in front of the engine take it,
    in the same cycle. So every write reaches both, in the order merged: the table one cycle
    after the arbiter passes it, the engine one cycle or more later (when its own arbitration
    lets it). ``table_*.valid`` and ``table_*.payload`` come from registers only (the table's
    write enable does not depend on the engine's input arbitration). Backpressure: an input
    waits while either output holds the previous write.
    """

    def __init__(self):
        super().__init__({
            "user_ctl": In(stream.Signature(CONTEXT_WRITE)),
            "cm_ctl": In(stream.Signature(CONTEXT_WRITE)),
            "user_psn": In(stream.Signature(PSN_WRITE)),
            "cm_psn": In(stream.Signature(PSN_WRITE)),
            "table_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "table_psn": Out(stream.Signature(PSN_WRITE)),
            "engine_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "engine_psn": Out(stream.Signature(PSN_WRITE)),
        })

    def elaborate(self, platform):
        m = Module()
        for kind, layout in (("ctl", CONTEXT_WRITE), ("psn", PSN_WRITE)):
            arb = m.submodules[f"{kind}_arbiter"] = StreamArbiter(layout, 2)
            reg = m.submodules[f"{kind}_reg"] = StreamForwardRegister(layout)
            sl = m.submodules[f"{kind}_slice"] = StreamRegisterSlice(layout)
            table_in = getattr(self, f"table_{kind}")
            wiring.connect(m, wiring.flipped(getattr(self, f"user_{kind}")), arb.i[0])
            wiring.connect(m, wiring.flipped(getattr(self, f"cm_{kind}")), arb.i[1])
            wiring.connect(m, arb.o, reg.i)
            wiring.connect(m, sl.o, wiring.flipped(getattr(self, f"engine_{kind}")))
            m.d.comb += [
                sl.i.payload.eq(reg.o.payload), sl.i.valid.eq(reg.o.valid & table_in.ready),
                table_in.payload.eq(reg.o.payload), table_in.valid.eq(reg.o.valid & sl.i.ready),
                reg.o.ready.eq(sl.i.ready & table_in.ready),
            ]
        return m
