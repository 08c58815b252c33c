"""The responder's ingress: request datagrams parsed and stored whole before they are acted on."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.fifo import fifo_depth
from rocegen.gateware.lib.stream import PacketSignature, check_width, leading_lanes
from rocegen.gateware.roce.ingress_store import ICRC_BYTES, IngressStore, payload_length
from rocegen.gateware.roce.responder.resp_layouts import (
    LENGTH_BITS,
    REQ_HDR_ATOMIC,
    REQ_HDR_MAX,
    REQ_HDR_MIN,
    RESP_HEADER,
)
from rocegen.gateware.roce.responder.resp_precheck import RESP_REQUEST, RespPrecheck, has_imm
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import ATOMIC_BYTES

__all__ = ["RespIngress", "is_request", "has_reth", "has_imm", "ICRC_BYTES"]

_UDP_AT = 8 * H.IPV4.length
_BTH_AT = 8 * (H.IPV4.length + H.UDP.length)
_EXT_AT = 8 * REQ_HDR_MIN


def is_request(opcode):
    """The BTH ``opcode`` is one a responder answers: an RC request (SEND, WRITE, READ, atomic
    or a reserved RC code, which it refuses), not a response, an ACKNOWLEDGE or another
    transport (:func:`rocegen.wire.opcodes.is_request`)."""
    return (opc.transport(opcode) == opc.TRANSPORT_RC) & ~opc.matches(opcode, opc.RESPONSES)


def has_reth(opcode):
    """The request ``opcode`` carries a RETH (WRITE FIRST, WRITE ONLY with or without immediate,
    READ)."""
    return opc.matches(opcode, opc.codes(has_reth=True, supported=True))


class RespIngress(wiring.Component):
    """Request datagrams in, parsed and stored whole; out once complete: the beats on one
    stream, the headers of each on another, ahead of its beats.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    depth : int or None
        Beats of the store-and-forward FIFO (a power of two; default: two datagrams of the
        largest IP packet the endpoint takes, 4160 bytes).
    headers : int
        Requests whose headers can wait on ``hdr`` (a power of two from 2 to 256; default 32).
    atomics : bool
        Atomic requests are parsed (their AtomicETH: the VA and R_Key as a RETH's with a DMA
        length of 8, the operands in ``atomic``) and their facts worked out (default False:
        they are requests like any other the responder refuses).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram from the ICRC check, IPv4 header first, ICRC removed, ``error`` on
        the last beat when the ICRC was bad. Always ready.
    o : Out(PacketSignature(width))
        The request datagrams (BTH opcode :func:`is_request`) that are well formed, whole, the
        same bytes as taken (``error`` 0).
    hdr : Out(stream.Signature(RESP_REQUEST))
        One record per datagram of ``o``, in the same order: its headers parsed
        (:data:`~rocegen.gateware.roce.responder.resp_layouts.RESP_HEADER`; RETH and ImmDt fields zero
        where the opcode has none) and their facts
        (:class:`~rocegen.gateware.roce.responder.resp_precheck.RespPrecheck`, worked out between the
        register stage and the queue). Independent of ``o``: a record is offered as soon as
        its datagram is whole in the FIFO, while the datagrams before it may still be
        leaving.
    malformed : Out(1)
        Pulses for a request with a good ICRC and a whole BTH dropped because the datagram is
        shorter than its extension headers, or its payload and pad are not a whole number of
        4-byte words, or PadCnt is more than they hold.
    overflow : Out(1)
        Pulses for a request dropped because the FIFO had no room for its beats or ``headers``
        records were waiting (the requester resends it).
    level : Out(range(depth + 1))
        Beats in the FIFO (for PFC's XOFF).

    Behaviour
    ---------
    * Datagrams with a bad ICRC and those that are not requests (ACKNOWLEDGE, CNP, responses:
      other blocks count them) are dropped silently; nothing is ever stalled.
    * Byte order: lanes untouched (byte 0 of the IPv4 header in lane 0 of the first beat).
    * Latency: one register stage, then an
      :class:`~rocegen.gateware.roce.ingress_store.IngressStore` (a store-and-forward
      :class:`~rocegen.gateware.lib.fifo.PacketFifo` and the record queue): a datagram's record
      is offered on ``hdr`` 2 cycles after its last beat is taken (in the cycle after the
      datagram is committed to the FIFO), its first beat on ``o`` 3 cycles after, when the
      outputs were idle. A datagram longer than the beats its headers' lanes take has its
      record offered a cycle sooner while no record waits: its record, worked out from the
      headers as they were at the beat before, is written into the queue as its last beat is
      taken (``IngressStore.early``). Those lanes are ``ceil(REQ_HDR_MAX / (W/8))`` beats, 64
      bytes from the IPv4 header on at every width, for every request but an atomic (with
      ``atomics`` too: the AtomicETH's bytes beyond them are only read for an atomic): a WRITE
      or SEND of more than 4 bytes of payload, not a READ request. An atomic request (68
      bytes) is never longer than its lanes.
    * Throughput: one beat per cycle in and out; one record per cycle on ``hdr``.
    * Backpressure: ``o.ready`` low holds the FIFO's output, ``hdr.ready`` low the queue of
      records (LUT RAM read combinationally at its head); the input is never held (a datagram
      that does not fit is dropped and counted).
    * How the two stay in step: a datagram enters the record queue in the cycle its last beat
      is committed to the FIFO, which the register stage knows from the FIFO's level (a beat
      is stored when the FIFO is not full, a datagram one of whose beats was not is dropped
      whole); when the record queue is full, the last beat goes into the FIFO marked
      ``error``, and the FIFO drops the datagram.
    """

    def __init__(self, width, depth=None, *, headers=32, atomics=False):
        check_width(width)
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        self.atomics = atomics
        if depth is None:
            depth = fifo_depth(4160, width, packets=2)
        self.width = width
        self._store = IngressStore(width, depth, RESP_REQUEST, headers=headers)
        self.depth, self.headers = depth, headers
        super().__init__({
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width)),
            "hdr": Out(stream.Signature(RESP_REQUEST)),
            "malformed": Out(1),
            "overflow": Out(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        store = m.submodules.store = self._store
        wiring.connect(m, store.o, wiring.flipped(self.o))
        wiring.connect(m, store.hdr, wiring.flipped(self.hdr))
        m.d.comb += [self.level.eq(store.level), self.i.ready.eq(1)]

        # the first REQ_HDR_MAX bytes of each datagram (REQ_HDR_ATOMIC with atomics), captured
        # beat by beat
        beat = self.i.payload
        take = self.i.valid
        hdr_bytes = max(REQ_HDR_MAX, REQ_HDR_ATOMIC) if self.atomics else REQ_HDR_MAX
        lanes, idx = leading_lanes(m, beat, take, W, hdr_bytes)
        # the headers were whole at the beat before this one: a beat at index
        # ceil(bytes / (W/8)) or later (``idx`` stays at ceil(hdr_bytes / (W/8)))
        def after(n):
            return idx >= -(-n // (W // 8))

        # the headers, read at the last beat (fields beyond a short datagram are don't-cares:
        # such a datagram is malformed)
        ip = H.IPV4.from_lanes(lanes[:_UDP_AT])
        udp = H.UDP.from_lanes(lanes[_UDP_AT:_BTH_AT])
        bth = H.BTH.from_lanes(lanes[_BTH_AT:_EXT_AT])
        reth = H.RETH.from_lanes(lanes[_EXT_AT:_EXT_AT + 8 * H.RETH.length])
        op = bth.opcode
        r, i = has_reth(op), has_imm(op)
        atomic = 0
        if self.atomics:
            aeth = H.ATOMIC_ETH.from_lanes(lanes[_EXT_AT:_EXT_AT + 8 * H.ATOMIC_ETH.length])
            atomic = (op == opc.OP_RC_COMPARE_SWAP) | (op == opc.OP_RC_FETCH_ADD)
        imm_at = _EXT_AT + 8 * H.RETH.length
        imm = Mux(r, H.IMMDT.from_lanes(lanes[imm_at:imm_at + 32]).imm,
                  H.IMMDT.from_lanes(lanes[_EXT_AT:_EXT_AT + 32]).imm)
        hdr_len = Signal(7)
        m.d.comb += hdr_len.eq(REQ_HDR_MIN + Mux(r, H.RETH.length, 0) + Mux(i, H.IMMDT.length, 0) +
                               Mux(atomic, H.ATOMIC_ETH.length, 0))
        # payload and pad: the UDP payload less BTH, extension headers and ICRC
        length, bad = payload_length(m, udp.length, hdr_len, bth.padcnt, LENGTH_BITS)

        # (a datagram without a whole BTH has no opcode to go by: RoceRx counts it as short)
        whole_bth = udp.length >= H.UDP.length + H.BTH.length + ICRC_BYTES

        # one register stage in front of the FIFO, with the verdict and the headers on the
        # last beat
        fi = store.i
        req = is_request(op)
        hd = Signal(RESP_HEADER)
        err = Signal()                      # the last beat: not a good request
        with m.If(take):
            m.d.sync += [
                fi.payload.data.eq(beat.data), fi.payload.keep.eq(beat.keep),
                fi.payload.last.eq(beat.last),
                err.eq(beat.last & (beat.error | ~req | bad)),
                hd.src_ip.eq(ip.src), hd.src_port.eq(udp.src_port),
                hd.ecn.eq(ip.ecn), hd.bth.eq(bth),
                hd.reth.eq(Mux(r, reth.as_value(), 0)),
                *([hd.reth.va.eq(Mux(r, reth.va, Mux(atomic, aeth.va, 0))),
                   hd.reth.rkey.eq(Mux(r, reth.rkey, Mux(atomic, aeth.rkey, 0))),
                   hd.reth.dma_len.eq(Mux(r, reth.dma_len, Mux(atomic, ATOMIC_BYTES, 0))),
                   hd.atomic.swap_add.eq(Mux(atomic, aeth.swap_add, 0)),
                   hd.atomic.compare.eq(Mux(atomic, aeth.compare, 0))] if self.atomics else []),
                hd.imm.eq(Mux(i, imm, 0)),
                hd.hdr_len.eq(hdr_len),
                hd.length.eq(length),
            ]
        m.d.sync += [fi.valid.eq(take),
                     self.malformed.eq(take & beat.last & ~beat.error & req & bad & whole_bth)]

        # the store commits a good request with its record, or drops it for want of room
        pre = m.submodules.precheck = RespPrecheck(atomics=self.atomics)
        m.d.comb += [pre.h.eq(hd), store.rec.h.eq(hd), store.rec.f.eq(pre.facts),
                     fi.payload.error.eq(err), self.overflow.eq(store.overflow)]
        # a last beat after the headers: the record in the register stage now (the headers of
        # the beat before, the same) is already its record. A request other than an atomic
        # has every field in its first REQ_HDR_MAX bytes (the AtomicETH's lanes beyond feed
        # only an atomic's fields; ``atomic`` is known from the BTH by then)
        after_headers = Mux(atomic, after(hdr_bytes), after(REQ_HDR_MAX)) if self.atomics \
            else after(hdr_bytes)
        m.d.comb += store.early.eq(take & beat.last & after_headers)
        return m
