"""The connection manager's traffic generator port: runs started by test-traffic requests."""

from amaranth.hdl import Const, Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import CM_RUN, WrOpcode
from rocegen.wire.cm import TX_ATOMIC

__all__ = ["CmTraffic"]


class CmTraffic(wiring.Component):
    """Turns an accepted test-traffic request into a traffic generator run and offers it until
    the generator takes it.

    Ports
    -----
    i : In(stream.Signature(CM_RUN, always_ready=True))
        A run to start on QP ``qp``, described by the request ``req``. Taken when ``gen`` is
        free (``gen.valid`` low); ignored (dropped) while a run is still offered.
    gen : Out(stream.Signature(GEN_CONFIG))
        The run, from registers from the cycle after it was taken: ``qp``; ``opcode``
        FETCH_ADD (``tx_atomic`` 1) or COMPARE_SWAP (2) (:data:`rocegen.wire.cm.TX_ATOMIC`;
        ``tx_atomic`` 3 is read as 0), else READ (``tx_read``), else WRITE (``tx_type`` 1)
        or SEND, with immediate when ``is_imm`` (an
        endpoint built without READs, or atomics, refuses each of such a run's requests with
        UNSUPPORTED, and the run counts them as errors); ``length`` = ``dma_length`` (its low
        31 bits); ``count`` = ``n_transfers``; ``spacing`` = ``frequency``; ``imm`` =
        ``rem_qpn``, but 1 in a FETCH_ADD run (the generator's atomics add ``imm``) and 0 in a
        COMPARE_SWAP run (message ``s`` swaps ``imm + s + 1`` for ``imm + s``); ``window`` =
        2^``window_log2`` (0 when the code is 0; codes above 31 are the sender's to refuse).

    Behaviour: one run held at a time; ``gen`` may stall for any time without holding up ``i``.
    """

    def __init__(self):
        super().__init__({
            "i": In(stream.Signature(CM_RUN, always_ready=True)),
            "gen": Out(stream.Signature(GEN_CONFIG)),
        })

    def elaborate(self, platform):
        m = Module()
        req, g = self.i.payload.req, self.gen.payload
        with m.If(self.gen.ready):
            m.d.sync += self.gen.valid.eq(0)
        with m.If(self.i.valid & ~self.gen.valid):
            opcode = Mux(req.tx_read, WrOpcode.READ.value,
                         Mux(req.tx_type,
                             Mux(req.is_imm, WrOpcode.WRITE_IMM.value, WrOpcode.WRITE.value),
                             Mux(req.is_imm, WrOpcode.SEND_IMM.value, WrOpcode.SEND.value)))
            fetch_add = req.tx_atomic == TX_ATOMIC["FETCH_ADD"]
            compare_swap = req.tx_atomic == TX_ATOMIC["COMPARE_SWAP"]
            opcode = Mux(fetch_add, WrOpcode.FETCH_ADD.value,
                         Mux(compare_swap, WrOpcode.COMPARE_SWAP.value, opcode))
            imm = Mux(fetch_add, 1, Mux(compare_swap, 0, req.rem_qpn))
            m.d.sync += [self.gen.valid.eq(1),
                         g.qp.eq(self.i.payload.qp), g.opcode.eq(opcode),
                         g.length.eq(req.dma_length[:31]), g.count.eq(req.n_transfers),
                         g.spacing.eq(req.frequency), g.imm.eq(imm),
                         g.window.eq(Mux(req.window_log2 == 0, 0,
                                         Const(1, 32) << req.window_log2[:5]))]
        return m
