"""Datagrams stored whole with a record each, the two kept in step: the back half of the receive
ingresses (:class:`~rocegen.gateware.roce.responder.resp_ingress.RespIngress`,
:class:`~rocegen.gateware.roce.read.read_ingress.ReadIngress`)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.wire import headers as H

__all__ = ["IngressStore", "ICRC_BYTES", "payload_length", "check_headers"]

#: Bytes of the ICRC, counted in the UDP length but removed from the datagrams the ingresses take.
ICRC_BYTES = 4


def check_headers(headers):
    """``headers`` if it is a power of two from 2 to 256; else ``ValueError`` naming it."""
    if not isinstance(headers, int) or isinstance(headers, bool) or \
            not 2 <= headers <= 256 or headers & (headers - 1):
        raise ValueError(f"headers must be a power of two from 2 to 256 records, "
                         f"not {headers!r}")
    return headers


def payload_length(m, udp_length, hdr_len, padcnt, length_bits):
    """The payload bytes of a datagram (``length_bits`` bits) and whether it is malformed:
    ``udp_length`` (the UDP header's) less the UDP header, the ICRC and the headers after the UDP
    header (``hdr_len`` bytes before the payload from the IPv4 header on) is the payload and
    pad, which must be a whole number of 4-byte words at least ``padcnt`` bytes."""
    body = Signal(18)          # bit 17: negative (a UDP length is at most 16 bits)
    m.d.comb += body.eq(udp_length - (H.UDP.length + ICRC_BYTES) -
                        (hdr_len - H.IPV4.length - H.UDP.length))
    bad = body[17] | (body[:2] != 0) | (body < padcnt)
    return (body - padcnt)[:length_bits], bad


class IngressStore(wiring.Component):
    """Datagram beats into a store-and-forward FIFO, each datagram's record into a queue in the
    cycle its last beat is committed; a datagram is dropped whole when it is marked, when one
    of its beats finds the FIFO full or when the record queue is full.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    depth : int
        Beats of the FIFO (a power of two, at least 2).
    record : data.Layout
        The record of a datagram.
    headers : int
        Records that can wait on ``hdr`` (a power of two from 2 to 256).

    Ports
    -----
    i : In(PacketSignature(width))
        The beats, always ready. A datagram whose last beat has ``error`` set is dropped
        (``error`` on other beats is stored: keep it low there).
    rec : In(record)
        The record of the datagram whose last beat is on ``i``.
    rec_only : In(1)
        With an unmarked last beat: only the record is kept (in order with the others), the
        datagram's beats are dropped.
    early : In(1)
        The record on ``rec`` in this cycle is already that of the datagram whose last beat
        comes on ``i`` in the next cycle (and ``rec`` will be the same then): it is written at
        the queue's tail now, so that, while the queue is empty, it can be offered on ``hdr`` in
        the cycle its datagram is committed. Tie to 0 where ``rec`` is known only with the last
        beat.
    o : Out(PacketSignature(width))
        The datagrams stored, in order, lanes and ``last`` untouched, ``error`` 0.
    hdr : Out(stream.Signature(record))
        Their records, in the same order (LUT RAM read combinationally at the queue's head),
        offered in the cycle after the datagram's last beat is committed, independent of
        ``o``; with ``early`` before that last beat and the queue empty, in the cycle it is
        committed.
    overflow : Out(1)
        Registered: pulses in the cycle after the FIFO dropped a datagram for want of room
        (marked or not) or a last beat found the record queue full.
    refused : Out(1)
        In the cycle an unmarked last beat is on ``i`` and its datagram is not stored (one of
        its beats found the FIFO full, or the record queue is full; with ``rec_only``: the
        record queue is full).
    level : Out(range(depth + 1))
        Beats in the FIFO.

    Behaviour
    ---------
    * Latency: the record is offered on ``hdr`` one cycle after the last beat is on ``i`` (in
      its cycle with ``early`` in the cycle before and the queue empty), the first beat on ``o``
      two cycles after, when the outputs were idle
      (:class:`~rocegen.gateware.lib.fifo.PacketFifo`, store and forward).
    * How the two stay in step: a beat is stored when the FIFO is not full, a datagram one of
      whose beats was not is dropped whole by the FIFO, which is followed here from its level;
      when the record queue is full, the last beat goes into the FIFO marked ``error`` and the
      FIFO drops the datagram.
    * Backpressure: ``o.ready`` holds the FIFO's output, ``hdr.ready`` the record queue; ``i``
      is never held.
    """

    def __init__(self, width, depth, record, *, headers=32):
        check_width(width)
        if not isinstance(record, data.Layout):
            raise TypeError(f"record must be a data.Layout, not {record!r}")
        self.width, self.record = width, record
        self.headers = check_headers(headers)
        self._fifo = PacketFifo(width, depth, store_and_forward=True, drop_errors=True,
                                overflow="drop")
        self.depth = depth
        super().__init__({
            "i": In(PacketSignature(width)),
            "rec": In(record),
            "rec_only": In(1),
            "early": In(1),
            "o": Out(PacketSignature(width)),
            "hdr": Out(stream.Signature(record)),
            "overflow": Out(1),
            "refused": Out(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        fifo = m.submodules.fifo = self._fifo
        wiring.connect(m, fifo.o, wiring.flipped(self.o))
        m.d.comb += [self.level.eq(fifo.level), self.i.ready.eq(1)]
        fi, beat = fifo.i, self.i.payload
        m.d.comb += [fi.valid.eq(self.i.valid), fi.payload.data.eq(beat.data),
                     fi.payload.keep.eq(beat.keep), fi.payload.last.eq(beat.last)]

        # the FIFO's decision on each beat, followed: a beat is stored when the FIFO is not
        # full; a datagram one of whose beats was not is dropped whole (`lost`)
        full = fifo.level == fifo.depth
        lost = Signal()
        with m.If(fi.valid):
            m.d.sync += lost.eq(~beat.last & (lost | full))
        # an unmarked last beat is committed with its record, or dropped for want of room for
        # the record (marked `error`, the FIFO drops it)
        ends = fi.valid & beat.last & ~beat.error
        whole = ends & ~lost & ~full
        alone = ends & self.rec_only            # a record without its beats
        wants = (whole & ~self.rec_only) | alone
        w_rdy = Signal()
        no_room = Signal()
        m.d.comb += [
            fi.payload.error.eq(beat.error | (beat.last & (~w_rdy | self.rec_only))),
            self.refused.eq(ends & ~(wants & w_rdy)),
        ]
        m.d.sync += no_room.eq(wants & ~w_rdy)
        m.d.comb += self.overflow.eq(fifo.drop_overflow | no_room)
        self._record_queue(m, wants, w_rdy)
        return m

    def _record_queue(self, m, wants, w_rdy):
        """The records' queue (LUT RAM, read combinationally at its head): ``wants`` a record
        written in this cycle, ``w_rdy`` there is room."""
        n = self.headers
        mem = m.submodules.headers = Memory(shape=self.record, depth=n, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        head, tail = Signal(range(n)), Signal(range(n))
        level = Signal(range(n + 1))
        write = wants & w_rdy
        # an early record, written at the tail while no record is (there is room: none is
        # written until its datagram commits); offered beside the empty queue when it commits
        early_w = self.early & ~wants & (level != n)
        early_r = Signal()
        m.d.sync += early_r.eq(early_w)
        hdr = self.hdr
        read = hdr.valid & hdr.ready
        m.d.comb += [
            w_rdy.eq(level != n),
            wp.addr.eq(tail), wp.data.eq(self.rec), wp.en.eq(write | early_w),
            rp.addr.eq(head),
            hdr.valid.eq((level != 0) | (write & early_r)), hdr.payload.eq(rp.data),
        ]
        with m.If(write):
            m.d.sync += tail.eq(tail + 1)         # (n a power of two: it wraps)
        with m.If(read):
            m.d.sync += head.eq(head + 1)
        m.d.sync += level.eq(level + write - read)
