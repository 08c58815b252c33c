"""What the RC responder's checks need of a request's headers alone, worked out a cycle ahead."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.responder.resp_layouts import LENGTH_BITS, READ_MAX, RESP_HEADER, RespKind
from rocegen.wire import opcodes as opc

__all__ = ["RespPrecheck", "RESP_FACTS", "RESP_REQUEST", "PMTU_CODES", "has_imm", "kind_of"]


def has_imm(opcode):
    """The *_WITH_IMMEDIATE opcodes carry an ImmDt (after the RETH, if any)."""
    return opc.matches(opcode, opc.codes(has_imm=True, supported=True))


_SEND = opc.codes(verb=opc.Verb.SEND, supported=True)
_WRITE = opc.codes(verb=opc.Verb.RDMA_WRITE, supported=True)


def _place(codes):
    """Position -> the offsets of its opcodes from the verb's first (same for every verb)."""
    return {p: tuple(c - codes[0] for c in codes if opc.row(c).position is p) for p in opc.Position}


# A request's place in its message, from its offset from the first opcode of its verb: SEND and
# RDMA WRITE lay out their positions alike, and SEND's codes start at 0.
_PLACE = _place(_SEND)
if _place(_WRITE) != _PLACE or _SEND[0] != 0:
    raise AssertionError("SEND and RDMA WRITE opcodes are not laid out alike from 0")


#: Values of a QP context's ``pmtu_log2`` field (4 bits) the facts cover: all of them.
PMTU_CODES = 16

#: A request's facts: its opcode's kind and place in the message, and the checks that need
#: nothing but its headers.
RESP_FACTS = data.StructLayout({
    "send": 1,                 # a SEND (with or without immediate)
    "write": 1,                # an RDMA WRITE (with or without immediate)
    "read": 1,                 # an RDMA READ request (none of first .. only)
    "atomic": 1,               # an atomic request (none of first .. only), when the responder
                               # executes them
    "cas": 1,                  # the atomic is a COMPARE_SWAP (else FETCH_ADD)
    "unaligned": 1,            # the RETH VA is not a multiple of 8 (an atomic's target)
    "first": 1, "middle": 1, "last": 1, "only": 1,
    "imm": 1,                  # carries an ImmDt
    "needs_rq": 1,             # takes a receive buffer: SEND FIRST/ONLY, WRITE with immediate
    "pkey_ok": 1,              # the P_Key's low 15 bits all ones (the default partition)
    "seg_ok": PMTU_CODES,      # bit j: length and PadCnt right for a PMTU of (2^j mod 2^13)
    "va_end": 65,              # RETH VA + DMA length
    "dma_zero": 1,             # RETH DMA length 0
    "write_len_bad": 1,        # a WRITE FIRST/ONLY's length against its DMA length is wrong
    "read_len_bad": 1,         # a READ or atomic carries payload or pad, or a DMA length over
                               # READ_MAX
})

#: A request as the responder's ingress hands it to the engine: its headers and their facts.
RESP_REQUEST = data.StructLayout({"h": RESP_HEADER, "f": RESP_FACTS})


class RespPrecheck(wiring.Component):
    """The facts of a request's headers the responder's checks use
    (:class:`~rocegen.gateware.roce.responder.resp_check.RespCheck`,
    :class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide`), worked out by the ingress before
    the request is queued, so that the checks themselves are shallower.

    Ports
    -----
    h : In(RESP_HEADER)
        The request's headers.
    facts : Out(RESP_FACTS)
        Its facts (:data:`RESP_FACTS`). ``seg_ok`` bit j: for a PMTU of 2^j (the 13-bit value,
        0 from j = 13 up), a FIRST or MIDDLE carries exactly the PMTU with no pad, a LAST 1 to
        PMTU bytes, an ONLY 0 to PMTU bytes, and PadCnt is what the length needs.
        ``write_len_bad``: a WRITE FIRST/ONLY carries as many bytes as its DMA length or more
        (FIRST), or other than its DMA length (ONLY). ``read``: an RDMA READ request (it is
        none of ``first`` .. ``only``); ``read_len_bad``: it carries payload or pad, or asks
        for more than :data:`~rocegen.gateware.roce.responder.resp_layouts.READ_MAX` bytes
        (an atomic: payload or pad). ``atomic`` (with the parameter only): COMPARE_SWAP or
        FETCH_ADD (``cas``: the former); ``unaligned``: the RETH VA (an atomic's target) is
        not a multiple of 8.

    Parameters
    ----------
    atomics : bool
        The responder executes atomics (default False: ``atomic`` is 0, and an atomic request
        is refused as any opcode it does not execute).

    Behaviour
    ---------
    Combinational (latency 0, no state, no handshakes).
    """

    def __init__(self, *, atomics=False):
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        self.atomics = atomics
        super().__init__({"h": In(RESP_HEADER), "facts": Out(RESP_FACTS)})

    def elaborate(self, platform):
        m = Module()
        h, f = self.h, self.facts
        bth, reth, n = h.bth, h.reth, h.length
        op = bth.opcode
        send = opc.matches(op, _SEND)
        write = opc.matches(op, _WRITE)
        sub = Signal(3)                                 # 0 F, 1 M, 2-3 L, 4-5 O
        m.d.comb += sub.eq(Mux(send, op, op - _WRITE[0]))
        P = opc.Position
        # (positions of SENDs and WRITEs only: another opcode's offset means nothing)
        sw = send | write
        first, middle = (sw & opc.matches(sub, _PLACE[P.FIRST]),
                         sw & opc.matches(sub, _PLACE[P.MIDDLE]))
        last, only = sw & opc.matches(sub, _PLACE[P.LAST]), sw & opc.matches(sub, _PLACE[P.ONLY])
        imm = has_imm(op)
        if self.atomics:
            cas = op == opc.OP_RC_COMPARE_SWAP
            m.d.comb += [f.atomic.eq(cas | (op == opc.OP_RC_FETCH_ADD)), f.cas.eq(cas)]
        m.d.comb += [
            f.unaligned.eq(reth.va[:3] != 0),
            f.read.eq(op == opc.OP_RC_RDMA_READ_REQUEST),
            f.read_len_bad.eq((n != 0) | (bth.padcnt != 0) | (reth.dma_len > READ_MAX)),
            f.send.eq(send), f.write.eq(write), f.first.eq(first), f.middle.eq(middle),
            f.last.eq(last), f.only.eq(only), f.imm.eq(imm),
            f.needs_rq.eq((send & (first | only)) | (write & imm)),
            f.pkey_ok.eq(bth.pkey[:15] == 0x7FFF),
            f.va_end.eq(reth.va + reth.dma_len), f.dma_zero.eq(reth.dma_len == 0),
            f.write_len_bad.eq(Mux(only, n != reth.dma_len, n >= reth.dma_len)),
        ]
        pad_ok = bth.padcnt == (-n)[:2]
        seg = []
        for j in range(PMTU_CODES):
            pmtu = (1 << j) & ((1 << LENGTH_BITS) - 1)
            seg.append(Mux(first | middle, (bth.padcnt == 0) & (n == pmtu),
                           Mux(last, (n != 0) & (n <= pmtu), n <= pmtu)) & pad_ok)
        m.d.comb += f.seg_ok.eq(Cat(*seg))
        return m


def kind_of(facts):
    """The :class:`RespKind` value of the message a request with these facts belongs to."""
    return Mux(facts.send, RespKind.SEND.value, RespKind.WRITE.value)
