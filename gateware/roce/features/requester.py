"""The requester path: work-request sources, scheduler, packet builder, receive path,
reliability and completions."""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.arbiter import PacketArbiter
from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.pipe import ForwardRegister, StreamForwardRegister
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.features.pfc import IP_MTU
from rocegen.gateware.roce.frontend.cpl_dispatch import CplDispatch
from rocegen.gateware.roce.frontend.stream_in import STREAM_META, StreamFrontEnd
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG, TrafficGen
from rocegen.gateware.roce.frontend.wr_merge import WrMerge
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST
from rocegen.gateware.roce.requester.builder import RocePacketBuilder
from rocegen.gateware.roce.requester.completer import Completer
from rocegen.gateware.roce.requester.retry import RetryEngine
from rocegen.gateware.roce.requester.scheduler import Scheduler
from rocegen.gateware.roce.rx import RoceRx

__all__ = ["RequesterFeature"]


class RequesterFeature(Feature):
    """The requester: :class:`~rocegen.gateware.roce.requester.scheduler.Scheduler`,
    :class:`~rocegen.gateware.roce.requester.completer.Completer`,
    :class:`~rocegen.gateware.roce.requester.retry.RetryEngine`,
    :class:`~rocegen.gateware.roce.requester.builder.RocePacketBuilder`,
    :class:`~rocegen.gateware.roce.rx.RoceRx`, and the work-request sources
    (:class:`~rocegen.gateware.roce.frontend.wr_merge.WrMerge` of the user's port,
    :class:`~rocegen.gateware.roce.frontend.stream_in.StreamFrontEnd` and
    :class:`~rocegen.gateware.roce.frontend.traffic_gen.TrafficGen`).

    Parameters
    ----------
    cfg : EndpointConfig
        ``width``, ``num_qps``, ``mem_bytes``, ``wr_depth``, ``window``, ``clk_hz``, ``reads``,
        and the front end's ``ring_base``, ``ring_bytes``, ``max_message``, ``max_inflight``.
    word_addr_bits : int
        Bits of a word address of local memory.

    Ports
    -----
    ``wr``: work requests, ``cpl``: their completions; ``wr_room`` (bit per QP): the QP's
    queue has room. ``gen``: traffic generator runs with ``gen_busy``, ``gen_posted``,
    ``gen_ok``, ``gen_err``, ``gen_cycles``. ``msg``: the streaming front end's input.

    Behaviour
    ---------
    Work requests of the three sources are merged into the scheduler; its descriptors go
    through the payload reader to the builder and out on UDP port 4791 (taking turns with the
    responder's packets); acknowledgements from the receive path drive the retry engine
    (rewinds, timers, errors) and the completion tracker, whose completions go back to the
    source that posted the work request.
    """

    def __init__(self, cfg, word_addr_bits):
        super().__init__(cfg)
        w, n = cfg.width, cfg.num_qps
        self.sched = Scheduler(n, w, cfg.mem_bytes, depth=cfg.wr_depth, window=cfg.window,
                               reads=cfg.reads, atomics=cfg.atomics is not None)
        self.completer = Completer(n, depth=cfg.wr_depth)
        self.retry = RetryEngine(n, cfg.clk_hz)
        self.builder = RocePacketBuilder(w, atomics=cfg.atomics)
        self.rx = RoceRx(w, n, reads=cfg.reads, ibcm=bool(cfg.rdma_cm_ports), mtu=IP_MTU)
        self.gen = TrafficGen(reads=cfg.reads, atomics=cfg.atomics is not None)
        self.wr_merge = WrMerge(n)
        self.front = StreamFrontEnd(w, ring_base=cfg.ring_base, ring_bytes=cfg.ring_bytes,
                                    max_message=cfg.max_message,
                                    max_inflight=cfg.max_inflight, addr_width=word_addr_bits)
        self.rd_reg = self.tx_reg = self.ack_slice = None

    def members(self):
        w, n = self.cfg.width, self.cfg.num_qps
        return {"wr": In(stream.Signature(WORK_REQUEST)), "cpl": Out(stream.Signature(COMPLETION)),
                "wr_room": Out(n), "gen": In(stream.Signature(GEN_CONFIG)), "gen_busy": Out(1),
                "gen_posted": Out(32), "gen_ok": Out(32), "gen_err": Out(32),
                "gen_cycles": Out(32), "msg": In(PacketSignature(w, STREAM_META))}

    def connect_sources(self, m, ep):
        """Work-request sources: the user's port, the streaming front end, the generator
        (behind a register slice: no combinational round trip through the scheduler); the
        generator's runs from the user's port and the connection manager's."""
        sched, comp, gen, front = self.sched, self.completer, self.gen, self.front
        wrm = m.submodules.wr_merge = self.wr_merge
        services = ep.features.services
        if services is None:
            wiring.connect(m, wiring.flipped(ep.wr), wrm.user)
        else:   # (the user's work requests merged with the gateware services')
            wiring.connect(m, wiring.flipped(ep.wr), services.ports.user_wr)
            wiring.connect(m, services.ports.wr, wrm.user)
        wiring.connect(m, front.wr, wrm.front)
        wiring.connect(m, gen.wr, wrm.gen)
        wiring.connect(m, wrm.o, sched.wr)
        m.d.comb += [wrm.bad_full.eq(comp.bad_full), wrm.room.eq(sched.room),
                     wrm.room_next.eq(sched.room_next), ep.wr_room.eq(sched.room)]
        gen_arb = m.submodules.gen_arbiter = StreamArbiter(GEN_CONFIG, 2)
        wiring.connect(m, wiring.flipped(ep.gen), gen_arb.i[0])
        wiring.connect(m, ep.features.connection.cm.gen, gen_arb.i[1])
        wiring.connect(m, gen_arb.o, gen.start)
        m.d.comb += [ep.gen_busy.eq(gen.busy), ep.gen_posted.eq(gen.posted),
                     ep.gen_ok.eq(gen.completed_ok), ep.gen_err.eq(gen.completed_err),
                     ep.gen_cycles.eq(gen.cycles)]
        wiring.connect(m, wiring.flipped(ep.msg), front.i)

    def connect_transmit(self, m, ep):
        """Transmit: scheduler -> payload reader -> packet builder -> UDP port 4791 (with
        READs, the responder feature's arbiter before the reader; with the responder, its
        packets take turns with these after the builder)."""
        f = ep.features
        sched, mem, builder, st = self.sched, f.memory.mem, self.builder, f.network.stack
        if not self.cfg.reads:
            wiring.connect(m, sched.desc, mem.desc)
        # a forward register between the payload reader and the builder: the reader's output
        # queue and the builder's header and lane logic are mapped apart
        rd_reg = self.rd_reg = m.submodules.rd_reg = StreamForwardRegister(mem.o.payload.shape())
        if not self.cfg.reads:
            wiring.connect(m, rd_reg.o, builder.i)
        # a forward register between the builder and UDP transmit: the reader's queue and the
        # builder's lane logic end in it, before UDP transmit's arbiter and slice
        tx_reg = self.tx_reg = m.submodules.tx_reg = ForwardRegister(
            self.cfg.width, builder.o.payload.meta.shape())
        wiring.connect(m, builder.o, tx_reg.i)
        if self.cfg.reads:
            f.responder.connect_read_responses(m, ep, rd_reg, tx_reg)
        sources = [tx_reg.o] + ([f.responder.resp.tx] if f.responder else []) + \
            ([f.ibcm.service.o] if f.ibcm else [])
        if len(sources) == 1:
            wiring.connect(m, tx_reg.o, st.udp_tx[0])
        else:
            # the responder's ACKs and the IB CM's MADs share UDP port 4791 with the requests,
            # a packet each in turn
            tx_arb = m.submodules.tx_arbiter = PacketArbiter(
                self.cfg.width, tx_reg.o.payload.meta.shape(), len(sources))
            for k, src in enumerate(sources):
                wiring.connect(m, src, tx_arb.i[k])
            wiring.connect(m, tx_arb.o, st.udp_tx[0])

    def connect_receive(self, m, ep):
        """Receive (the stack's IPv4 datagrams, headers in place -> UDP port 4791's, ICRC and
        ACK checks -> retry engine), reliability
        (acknowledgements, rewinds, timers and errors: always-ready pulses) and completions
        back to whoever posted the work request."""
        f = ep.features
        rx, sched, comp, retry = self.rx, self.sched, self.completer, self.retry
        # (RoceRx picks port 4791's datagrams out of the stack's IPv4 datagrams, headers in
        # place, by the stack's own checks; the stack's port 4791 gives it only the UDP
        # checksums' verdicts)
        st = f.network.stack
        wiring.connect(m, st.ip_in, rx.i)
        port = st.udp_rx[0]
        m.d.comb += [
            rx.local_ip.eq(ep.local_ip), port.ready.eq(1),
            # (the stack's verdict on each datagram of port 4791 with a UDP checksum)
            rx.udp_checksum.valid.eq(port.valid & port.payload.last &
                                     (port.payload.meta.udp.checksum != 0)),
            rx.udp_checksum.payload.eq(~port.payload.error),
        ]
        # (the retry engine's inputs behind register slices: its arbitration between them, and
        # the per-QP spacing of its events, does not reach the receive pipeline's enables nor the
        # scheduler's issue decision. The acknowledgements' slice passes an event on in the
        # cycle it comes while it holds none: the engine registers its event anyway, so a
        # registered slice would only add a cycle to every acknowledgement)
        ack_slice = self.ack_slice = m.submodules.ack_slice = StreamRegisterSlice(
            rx.ack.payload.shape(), bypass=True)
        if not self.cfg.reads:
            wiring.connect(m, rx.ack, ack_slice.i)
        wiring.connect(m, ack_slice.o, retry.ack)
        wiring.connect(m, sched.post, comp.post)
        if not self.cfg.reads:
            m.d.comb += sched.full.eq(comp.full)

        sent_slice = m.submodules.sent_slice = StreamRegisterSlice(sched.sent.payload.shape())
        wiring.connect(m, sched.sent, sent_slice.i)
        wiring.connect(m, sent_slice.o, retry.sent)
        wiring.connect(m, retry.cpl_ack, comp.ack)
        wiring.connect(m, retry.sched, sched.sched)
        wiring.connect(m, comp.freed, sched.freed)
        rp = f.congestion.rp
        m.d.comb += [
            retry.acked_qp.eq(sched.acked_qp), sched.acked_psn.eq(retry.acked_psn),
            retry.err_qp.eq(comp.err_qp), comp.err_status.eq(retry.err_status),
            sched.errored.eq(retry.errored), comp.errored.eq(retry.errored),
            sched.held.eq(retry.held if rp is None else retry.held | ~rp.allowed),
            f.connection.cm.errored.eq(retry.errored),
        ]

        dispatch = m.submodules.cpl_dispatch = CplDispatch()
        wiring.connect(m, comp.cpl, dispatch.i)
        services = f.services
        if services is None:
            wiring.connect(m, dispatch.user, wiring.flipped(ep.cpl))
        else:   # (the services' QPs' completions go to them)
            wiring.connect(m, dispatch.user, services.ports.cpl)
            wiring.connect(m, services.ports.user_cpl, wiring.flipped(ep.cpl))
        wiring.connect(m, dispatch.front, self.front.cpl)
        wiring.connect(m, dispatch.gen, self.gen.cpl)
