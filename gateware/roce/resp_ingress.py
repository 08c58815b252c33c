"""The responder's ingress: request datagrams parsed and stored whole before they are acted on."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.fifo import PacketFifo, fifo_depth
from rocegen.gateware.lib.stream import PacketSignature, check_width, leading_lanes
from rocegen.gateware.roce.resp_layouts import LENGTH_BITS, REQ_HDR_MAX, REQ_HDR_MIN, RESP_HEADER
from rocegen.wire import headers as H

__all__ = ["RespIngress", "is_request", "has_reth", "has_imm", "ICRC_BYTES"]

#: Bytes of the ICRC, counted in the UDP length but removed from the datagrams taken here.
ICRC_BYTES = 4
_UDP_AT = 8 * H.IPV4.length
_BTH_AT = 8 * (H.IPV4.length + H.UDP.length)
_EXT_AT = 8 * REQ_HDR_MIN


def is_request(opcode):
    """The BTH ``opcode`` is one a responder answers: an RC request (SEND, WRITE, READ, atomic
    or a reserved RC code, which it refuses), not a response, an ACKNOWLEDGE or another
    transport."""
    return (opcode[5:8] == 0) & ~((opcode >= H.OP_RC_RDMA_READ_REQUEST + 1) &
                                  (opcode <= H.OP_RC_ACKNOWLEDGE + 1))


def has_reth(opcode):
    """WRITE FIRST, WRITE ONLY (with or without immediate) and READ carry a RETH."""
    return ((opcode == H.OP_RC_RDMA_WRITE_FIRST) | (opcode == H.OP_RC_RDMA_WRITE_ONLY) |
            (opcode == H.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE) |
            (opcode == H.OP_RC_RDMA_READ_REQUEST))


def has_imm(opcode):
    """The *_WITH_IMMEDIATE opcodes carry an ImmDt (after the RETH, if any)."""
    return ((opcode == H.OP_RC_SEND_LAST_WITH_IMMEDIATE) |
            (opcode == H.OP_RC_SEND_ONLY_WITH_IMMEDIATE) |
            (opcode == H.OP_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE) |
            (opcode == H.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE))


class RespIngress(wiring.Component):
    """Request datagrams in, parsed and stored whole; out once complete, headers in ``meta``.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    depth : int or None
        Beats of the store-and-forward FIFO (a power of two; default: two datagrams of the
        largest IP packet the endpoint takes, 4160 bytes).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram from the ICRC check, IPv4 header first, ICRC removed, ``error`` on
        the last beat when the ICRC was bad. Always ready.
    o : Out(PacketSignature(width, RESP_HEADER))
        The request datagrams (BTH opcode :func:`is_request`) that are well formed, whole, the
        same bytes as taken, with their headers parsed into ``meta``
        (:data:`~rocegen.gateware.roce.resp_layouts.RESP_HEADER`; RETH and ImmDt fields zero
        where the opcode has none) from the first beat on.
    malformed : Out(1)
        Pulses for a request with a good ICRC and a whole BTH dropped because the datagram is
        shorter than its extension headers, or its payload and pad are not a whole number of
        4-byte words, or PadCnt is more than they hold.
    overflow : Out(1)
        Pulses for a request dropped because the FIFO had no room (the requester resends it).

    Behaviour
    ---------
    * Datagrams with a bad ICRC and those that are not requests (ACKNOWLEDGE, CNP, responses:
      other blocks count them) are dropped silently; nothing is ever stalled.
    * Byte order: lanes untouched (byte 0 of the IPv4 header in lane 0 of the first beat).
    * Latency: one register stage, then :class:`~rocegen.gateware.lib.fifo.PacketFifo` (store and
      forward): a datagram's first beat is offered 3 cycles after its last beat is taken, when
      ``o`` was idle.
    * Throughput: one beat per cycle in and out.
    * Backpressure: ``o.ready`` low holds the FIFO's output; the input is never held (a datagram
      that does not fit is dropped and counted).
    """

    def __init__(self, width, depth=None):
        check_width(width)
        if depth is None:
            depth = fifo_depth(4160, width, packets=2)
        self.width = width
        self._fifo = PacketFifo(width, depth, RESP_HEADER, store_and_forward=True,
                                drop_errors=True, overflow="drop")
        self.depth = depth
        super().__init__({
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width, RESP_HEADER)),
            "malformed": Out(1),
            "overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        fifo = m.submodules.fifo = self._fifo
        wiring.connect(m, fifo.o, wiring.flipped(self.o))
        m.d.comb += [self.i.ready.eq(1), self.overflow.eq(fifo.drop_overflow)]

        # the first REQ_HDR_MAX bytes of each datagram, captured beat by beat
        beat = self.i.payload
        take = self.i.valid
        lanes, _ = leading_lanes(m, beat, take, W, REQ_HDR_MAX)

        # the headers, read at the last beat (fields beyond a short datagram are don't-cares:
        # such a datagram is malformed)
        ip = H.IPV4.from_lanes(lanes[:_UDP_AT])
        udp = H.UDP.from_lanes(lanes[_UDP_AT:_BTH_AT])
        bth = H.BTH.from_lanes(lanes[_BTH_AT:_EXT_AT])
        reth = H.RETH.from_lanes(lanes[_EXT_AT:_EXT_AT + 8 * H.RETH.length])
        op = bth.opcode
        r, i = has_reth(op), has_imm(op)
        imm_at = _EXT_AT + 8 * H.RETH.length
        imm = Mux(r, H.IMMDT.from_lanes(lanes[imm_at:imm_at + 32]).imm,
                  H.IMMDT.from_lanes(lanes[_EXT_AT:_EXT_AT + 32]).imm)
        hdr_len = Signal(7)
        m.d.comb += hdr_len.eq(REQ_HDR_MIN + Mux(r, H.RETH.length, 0) + Mux(i, H.IMMDT.length, 0))
        # payload and pad: the UDP payload less BTH, extension headers and ICRC
        body = Signal(18)          # bit 17: negative (a UDP length is at most 16 bits)
        m.d.comb += body.eq(udp.length - (H.UDP.length + ICRC_BYTES) - (hdr_len - 28))
        bad = (body[17] | (body[:2] != 0) | (body < bth.padcnt))

        # (a datagram without a whole BTH has no opcode to go by: RoceRx counts it as short)
        whole_bth = udp.length >= H.UDP.length + H.BTH.length + ICRC_BYTES

        # one register stage in front of the FIFO, with the verdict and the headers on the
        # last beat (where the FIFO samples its metadata)
        fi = fifo.i
        req = is_request(op)
        with m.If(take):
            m.d.sync += [
                fi.payload.data.eq(beat.data), fi.payload.keep.eq(beat.keep),
                fi.payload.last.eq(beat.last),
                fi.payload.error.eq(beat.last & (beat.error | ~req | bad)),
                fi.payload.meta.src_ip.eq(ip.src), fi.payload.meta.src_port.eq(udp.src_port),
                fi.payload.meta.ecn.eq(ip.ecn), fi.payload.meta.bth.eq(bth),
                fi.payload.meta.reth.eq(Mux(r, reth.as_value(), 0)),
                fi.payload.meta.imm.eq(Mux(i, imm, 0)),
                fi.payload.meta.hdr_len.eq(hdr_len),
                fi.payload.meta.length.eq((body - bth.padcnt)[:LENGTH_BITS]),
            ]
        m.d.sync += [fi.valid.eq(take),
                     self.malformed.eq(take & beat.last & ~beat.error & req & bad & whole_bth)]
        return m
