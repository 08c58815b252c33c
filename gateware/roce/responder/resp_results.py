"""The responder's store of atomic results: what a duplicate atomic is answered with."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import ATOMIC_RESULT, check_num_qps
from rocegen.gateware.roce.responder.resp_read_queue import check_rd_depth

__all__ = ["RespResults", "RESULT_ENTRY"]

#: One kept result: the PSN of the atomic and the value its target held before.
RESULT_ENTRY = data.StructLayout({"valid": 1, "psn": 24, "orig": 64})


class RespResults(wiring.Component):
    """The last results of each QP's atomics, by PSN: IBTA requires a duplicate atomic to be
    answered with its original result, never executed again.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    depth : int
        Results kept per QP (the READ queue's depth, :func:`check_rd_depth`: a QP has at most
        that many atomics outstanding, as many as its requester may have unanswered).

    Ports
    -----
    put : In(stream.Signature(ATOMIC_RESULT, always_ready=True))
        An atomic executed (its QP, PSN and original value), as the payload reader reports it.
        QPs outside the table are ignored.
    qp, psn : In(range(num_qps)), In(24)
        The lookup: a QP and the PSN of a request.
    hit, orig : Out(1), Out(64)
        One cycle after ``qp``/``psn``: the QP keeps a result for that PSN, and its value.

    Behaviour
    ---------
    * A result goes into slot ``psn mod depth`` of its QP (one memory of ``num_qps * depth``
      entries of 89 bits, written by ``put``, read by the lookup), replacing what was there.
      Two atomics of a QP whose PSNs differ by a multiple of ``depth`` share a slot: the older
      one's duplicate then finds no result and is dropped (its requester asks again and, if
      the result is still missing, its retries run out). An atomic in every ``depth`` PSNs, as
      a requester keeping ``depth`` atomics outstanding sends them, never loses its result.
    * A result put in the cycle of a lookup of its slot is seen from the next cycle on (the
      entry read is the one before the write); the caller holds ``qp``/``psn`` while it needs
      the answer, and the answer follows the memory.
    * Results are not cleared when a QP is set up again: a duplicate of the new connection
      would have to carry the PSN of an old atomic in the same slot to be answered with it.
    """

    def __init__(self, num_qps, depth=16):
        check_num_qps(num_qps)
        check_rd_depth(depth)
        self.num_qps, self.depth = num_qps, depth
        super().__init__({
            "put": In(stream.Signature(ATOMIC_RESULT, always_ready=True)),
            "qp": In(range(num_qps)), "psn": In(24),
            "hit": Out(1), "orig": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        n, D = self.num_qps, self.depth
        sb, qb = (D - 1).bit_length(), max(1, (n - 1).bit_length())
        mem = m.submodules.results = Memory(shape=RESULT_ENTRY, depth=n * D, init=[])
        w, r = mem.write_port(), mem.read_port()
        p = self.put.payload
        m.d.comb += [w.addr.eq(Cat(p.psn[:sb], p.qp[:qb])),
                     w.data.valid.eq(1), w.data.psn.eq(p.psn), w.data.orig.eq(p.orig),
                     w.en.eq(self.put.valid & (p.qp < n)),
                     r.addr.eq(Cat(self.psn[:sb], self.qp[:qb]))]
        psn = Signal(24)
        m.d.sync += psn.eq(self.psn)
        e = RESULT_ENTRY(r.data)
        m.d.comb += [self.hit.eq(e.valid & (e.psn == psn)), self.orig.eq(e.orig)]
        return m
