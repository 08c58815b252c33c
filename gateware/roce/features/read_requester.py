"""The READ requester: the table of outstanding READs, the responses' ingress and placement,
the selective reissue and the hole timer."""

from amaranth.hdl import Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In

from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.read.read_flush import ReadFlush
from rocegen.gateware.roce.read.read_hole_timer import ReadHoleTimer
from rocegen.gateware.roce.read.read_ingress import ReadIngress
from rocegen.gateware.roce.read.read_layouts import READ_WAIT_CONFIG
from rocegen.gateware.roce.read.read_place import ReadPlace
from rocegen.gateware.roce.read.read_resend import ReadResend
from rocegen.gateware.roce.read.read_track import ReadTrack
from rocegen.wire.opcodes import OP_RC_ACKNOWLEDGE

__all__ = ["ReadRequesterFeature"]


class ReadRequesterFeature(Feature):
    """The READ requester's receive side: :class:`~rocegen.gateware.roce.read.read_track.ReadTrack`,
    :class:`~rocegen.gateware.roce.read.read_ingress.ReadIngress`,
    :class:`~rocegen.gateware.roce.read.read_place.ReadPlace`,
    :class:`~rocegen.gateware.roce.read.read_resend.ReadResend`,
    :class:`~rocegen.gateware.roce.read.read_hole_timer.ReadHoleTimer` and
    :class:`~rocegen.gateware.roce.read.read_flush.ReadFlush`.

    Parameters
    ----------
    cfg : EndpointConfig
        ``width``, ``num_qps``, ``max_rd_atomic``, ``memory`` (AXI4: writes acknowledged),
        ``rd_hole_wait`` (in cycles of ``clk_hz``).
    word_addr_bits : int
        Bits of a word address of local memory.

    Ports
    -----
    ``rd_wait_cfg``: the hole timer's step in cycles (a wait of 4 steps), always taken.

    Behaviour
    ---------
    READ responses from the receive path are checked against the QP table and the QP's
    outstanding READs and written into local memory; every acknowledgement passes through the
    placement on its way to the retry engine, so a READ response acknowledges the requests
    before it. A lost response is asked for again by a READ of its own; a QP that hears nothing
    for the hole wait asks again; a QP with ``max_rd_atomic`` READs outstanding starts no work
    request.
    """

    def __init__(self, cfg, word_addr_bits):
        super().__init__(cfg)
        n = cfg.num_qps
        self.track = ReadTrack(n, cfg.max_rd_atomic)
        self.place = ReadPlace(cfg.width, word_addr_bits, acked_writes=cfg.memory == "axi4",
                               atomics=cfg.atomics)
        self.ingress = ReadIngress(cfg.width, n, atomics=cfg.atomics is not None)
        self.resend = ReadResend(n, depth=16)
        wait = round(cfg.rd_hole_wait * 1e-6 * cfg.clk_hz)
        try:
            self.timer = ReadHoleTimer(n, wait)
        except ValueError as exc:
            raise ValueError(f"rd_hole_wait of {cfg.rd_hole_wait} us is {wait} cycles at "
                             f"{cfg.clk_hz / 1e6:g} MHz: {exc}") from None

    def members(self):
        return {"rd_wait_cfg": In(stream.Signature(READ_WAIT_CONFIG))}

    def connect(self, m, ep):
        """The READ requester's receive side: READ responses from the receive path into their
        ingress (headers checked against the QP table), placed into local memory against the
        table of outstanding READs (which the scheduler fills as it sends READ requests and
        which forgets a QP that fails or is set up again); every acknowledgement of the
        receive path passes through the placement on its way to the retry engine, taken from
        the ingress in its order with the responses."""
        f = ep.features
        rx, qps, mem, sched = f.requester.rx, f.connection.qps, f.memory.mem, f.requester.sched
        retry = f.requester.retry
        track = m.submodules.read_track = self.track
        place = m.submodules.read_place = self.place
        ing = m.submodules.read_ingress = self.ingress
        flush = m.submodules.read_flush = ReadFlush(self.cfg.num_qps)
        # (the receive path's datagrams reach the responder and this ingress alike; both are
        # always ready)
        m.d.comb += [ing.i.valid.eq(rx.req.valid), ing.i.payload.eq(rx.req.payload),
                     qps.rdr_qp.eq(ing.ctx_qp), ing.ctx.eq(qps.rdr_context)]
        wiring.connect(m, ing.o, place.i)
        # (the acknowledgements come from the ingress too, in their order with the responses:
        # its records are offered one at a time, to the placement's header or acknowledgement
        # input by kind; the receive path's own events are only counted)
        h = ing.hdr.payload
        ack = h.opcode == OP_RC_ACKNOWLEDGE
        m.d.comb += [
            place.hdr.valid.eq(ing.hdr.valid & ~ack), place.hdr.payload.eq(h),
            place.ack_in.valid.eq(ing.hdr.valid & ack),
            place.ack_in.payload.qp.eq(h.qp), place.ack_in.payload.syndrome.eq(h.syndrome),
            place.ack_in.payload.psn.eq(h.psn), place.ack_in.payload.msn.eq(h.msn),
            ing.hdr.ready.eq(Mux(ack, place.ack_in.ready, place.hdr.ready)),
            rx.ack.ready.eq(1),
        ]
        wiring.connect(m, place.ack, f.requester.ack_slice.i)
        # (a selective reissue: the placement goes on past a lost response and the rest of
        # its READ is asked for again by a request of its own, not by a rewind of the QP)
        resend = m.submodules.read_resend = self.resend
        wiring.connect(m, place.reissue, resend.i)
        # (a QP with READs outstanding that hears nothing for the hole wait asks again; the
        # wait at run time through rd_wait_cfg)
        timer = m.submodules.read_hole_timer = self.timer
        m.d.comb += [timer.busy.eq(track.busy), timer.cfg.valid.eq(ep.rd_wait_cfg.valid),
                     timer.cfg.payload.eq(ep.rd_wait_cfg.payload),
                     ep.rd_wait_cfg.ready.eq(1)]
        wiring.connect(m, place.touch, timer.touch)
        wiring.connect(m, timer.expire, place.timer)
        m.d.comb += [qps.rsd_qp.eq(resend.ctx_qp), resend.ctx.eq(qps.rsd_context)]
        gen = f.requester.gen
        if gen.atomics:
            # (a reissued atomic of the generator gets its operands made again from its imm)
            m.d.comb += resend.gen_imm.eq(gen.run_imm)
        wiring.connect(m, place.lookup, track.lookup)
        wiring.connect(m, sched.rd_issue, track.issue)
        # (a QP with as many READs outstanding as its limit starts no work request; it still
        # resends after a rewind, which is how its READs get answered)
        m.d.comb += sched.full.eq(f.requester.completer.full | track.full)
        self._connect_limits(m, f, track)
        m.d.comb += [flush.errored.eq(retry.errored),
                     flush.sched.valid.eq(retry.sched.valid),
                     flush.sched.payload.eq(retry.sched.payload)]
        wiring.connect(m, flush.o, track.flush)
        wiring.connect(m, place.o, mem.read_w)
        if place.acked_writes:
            m.d.comb += place.mem_durable.eq(mem.read_durable)

    @staticmethod
    def _connect_limits(m, f, track):
        """The QPs' READ limits: the UDP connection manager's (always ready), and the IB CM's
        in the cycles the other sets none."""
        cm_limit = f.connection.cm.rd_limit
        if f.ibcm is None:
            wiring.connect(m, cm_limit, track.limit)
            return
        ib = f.ibcm.qps.rd_limit
        m.d.comb += [track.limit.valid.eq(cm_limit.valid | ib.valid),
                     track.limit.payload.eq(Mux(cm_limit.valid, cm_limit.payload, ib.payload)),
                     ib.ready.eq(~cm_limit.valid)]
