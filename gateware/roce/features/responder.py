"""The responder path: the RC responder, its READ responses on the transmit path and the
pattern sink."""

from amaranth.hdl import Cat, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.features.pfc import pfc_ingress_beats
from rocegen.gateware.roce.frontend.pattern_sink import PatternSink
from rocegen.gateware.roce.layouts import ATOMIC_WORK, PACKET_DESC, WrSource
from rocegen.gateware.roce.responder.resp_cnp import cnp_interval_cycles
from rocegen.gateware.roce.responder.resp_layouts import (
    CNP_CONFIG,
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
)
from rocegen.gateware.roce.responder.resp_read_align import RespReadAlign, reader_descriptor
from rocegen.gateware.roce.responder.responder import Responder, default_config

__all__ = ["ResponderFeature", "READER_JOB"]

#: A descriptor for the payload reader with the atomic its packet answers (``op`` NONE for every
#: packet but the responder's ATOMIC_ACKNOWLEDGEs).
READER_JOB = data.StructLayout({"desc": PACKET_DESC, "atomic": ATOMIC_WORK})


class ResponderFeature(Feature):
    """The RC responder (:class:`~rocegen.gateware.roce.responder.responder.Responder`), with
    ``pattern_sink`` a :class:`~rocegen.gateware.roce.frontend.pattern_sink.PatternSink`, with
    ``reads`` the READ responses' way to the payload reader.

    Parameters
    ----------
    cfg : EndpointConfig
        ``width``, ``num_qps``, ``memory`` (AXI4: writes acknowledged), ``resp_region``,
        ``rkey_seed``, ``rnr_timer``, ``rq_depth``, ``resp_ack_every``, ``cnp_interval``
        (default 4 us at ``clk_hz``), ``reads``, ``rd_depth``, ``pattern_sink``, and with
        ``pfc`` its ingress FIFO's depth.
    word_addr_bits : int
        Bits of a word address of local memory.

    Ports
    -----
    ``recv`` (receive buffers), ``recv_cpl`` (their completions), ``resp_cfg`` (each QP's
    region and RNR timer code, always taken), ``resp_cnp_cfg`` (the CNP interval, always
    taken).

    Behaviour
    ---------
    The peers WRITE and SEND into local memory (and with ``reads`` READ from it); the
    responder takes the receive path's requests and the QP table's contexts, sees every PSN
    and context the QP control writes, and its ACKs, NAKs and CNPs take turns with the
    requester's packets at UDP port 4791; while the stack's transmit path is idle (its
    ``tx_idle``) and ARP knows the peer, an ACK, NAK or RNR NAK is built whole instead and goes
    to the stack's ``ip_out``, past UDP and IPv4 transmit and the ICRC stage (four cycles
    sooner on the MAC). Its READ responses' descriptors take turns with the
    scheduler's at the payload reader, per packet, and their payloads are realigned before the
    builder. The connection manager names each QP's region from its configuration.
    """

    def __init__(self, cfg, word_addr_bits):
        super().__init__(cfg)
        cnp_interval = cfg.cnp_interval
        if cnp_interval is None:
            cnp_interval = cnp_interval_cycles(cfg.clk_hz)
        self.cnp_interval = cnp_interval
        base, length = cfg.resp_region
        self.resp = Responder(cfg.width, cfg.num_qps, word_addr_bits, rq_depth=cfg.rq_depth,
                              ack_every=cfg.resp_ack_every, cnp_interval=cnp_interval,
                              config_init=default_config(cfg.num_qps, base, length,
                                                         rkey_seed=cfg.rkey_seed,
                                                         rnr_timer=cfg.rnr_timer),
                              acked_writes=cfg.memory == "axi4",
                              ingress_beats=pfc_ingress_beats(cfg), reads=cfg.reads,
                              rd_depth=cfg.rd_depth, atomics=cfg.atomics is not None,
                              flush_port=bool(cfg.service_ports), ack_frames=True)
        self.sink = PatternSink(cfg.width, word_addr_bits) if cfg.pattern_sink else None

    def members(self):
        return {"recv": In(stream.Signature(RECV_POST)),
                "recv_cpl": Out(stream.Signature(RECV_COMPLETION)),
                "resp_cfg": In(stream.Signature(RESP_CONFIG_WRITE)),
                "resp_cnp_cfg": In(stream.Signature(CNP_CONFIG))}

    def connect_read_responses(self, m, ep, rd_reg, tx_reg):
        """The responder's READ responses on the transmit path: their descriptors take turns
        with the scheduler's (and the READ requester's own READ requests) at the payload reader
        (per packet), their payloads realigned before the builder; each packet's tag (a READ's
        last response, its QP) follows it from the builder's input to the transmitter's
        arbiter, where ``rd_sent`` reports it."""
        f = ep.features
        mem, builder, resp = f.memory.mem, f.requester.builder, self.resp
        # (with atomics, each descriptor with the atomic its packet answers: none but the
        # responder's)
        atomics = self.cfg.atomics is not None
        arb = m.submodules.desc_arbiter = StreamArbiter(READER_JOB if atomics else PACKET_DESC,
                                                        3 if self.cfg.reads else 2)

        def desc(port):
            return port.payload.desc if atomics else port.payload

        def job(port, source, payload):
            m.d.comb += [port.valid.eq(source.valid), source.ready.eq(port.ready),
                         desc(port).eq(payload)]

        job(arb.i[0], f.requester.sched.desc, f.requester.sched.desc.payload)
        job(arb.i[1], resp.rd, reader_descriptor(m, resp.rd.payload.desc, self.cfg.width))
        if atomics:
            m.d.comb += arb.i[1].payload.atomic.eq(resp.rd.payload.atomic)
        if self.cfg.reads:
            job(arb.i[2], f.read.resend.o, f.read.resend.o.payload)
        m.d.comb += [mem.desc.valid.eq(arb.o.valid), arb.o.ready.eq(mem.desc.ready),
                     mem.desc.payload.eq(desc(arb.o))]
        if atomics:
            m.d.comb += mem.atomic.eq(arb.o.payload.atomic)
        align = m.submodules.read_align = RespReadAlign(self.cfg.width)
        wiring.connect(m, mem.o, align.i)
        wiring.connect(m, align.o, rd_reg.i)
        # (a tag a packet, from its first beat into the builder to its last into the arbiter)
        tags = m.submodules.tx_tags = fifo.SyncFIFO(width=9, depth=4)
        bi, first = builder.i, Signal(init=1)
        with m.If(bi.valid & bi.ready):
            m.d.sync += first.eq(bi.payload.last)
        room = ~first | tags.w_rdy
        d = bi.payload.meta
        m.d.comb += [bi.payload.eq(rd_reg.o.payload), bi.valid.eq(rd_reg.o.valid & room),
                     rd_reg.o.ready.eq(bi.ready & room),
                     tags.w_en.eq(bi.valid & bi.ready & first),
                     tags.w_data.eq(Cat(d.qp, (d.src == WrSource.RESPONDER) & d.last))]
        t = tx_reg.o
        m.d.comb += [tags.r_en.eq(t.valid & t.ready & t.payload.last),
                     resp.rd_sent.valid.eq(tags.r_en & tags.r_data[8]),
                     resp.rd_sent.payload.eq(tags.r_data[:8])]

    def connect(self, m, ep):
        """The responder: requests from the receive path, the QP table's context, the set-ups
        of the QP control, payload writes into local memory (and, with AXI4, the count of
        those acknowledged), the user's ports."""
        f = ep.features
        resp = m.submodules.responder = self.resp
        qps, rx, mem, ctl = f.connection.qps, f.requester.rx, f.memory.mem, f.connection.ctl
        wiring.connect(m, rx.req, resp.i)
        m.d.comb += [
            qps.resp_qp.eq(resp.ctx_qp), resp.ctx.eq(qps.resp_context),
            # (the QP table takes every PSN write: the responder sees the same ones, with the
            # PSN it expects)
            resp.psn_set.valid.eq(ctl.table_psn.valid & ctl.table_psn.ready),
            resp.psn_set.payload.qp.eq(ctl.table_psn.payload.qp),
            resp.psn_set.payload.psn.eq(ctl.table_epsn if f.ibcm is not None
                                        else ctl.table_psn.payload.psn),
            *([resp.ctx_set.valid.eq(ctl.table_ctl.valid & ctl.table_ctl.ready),
               resp.ctx_set.payload.eq(ctl.table_ctl.payload)] if self.cfg.reads else []),
            resp.cfg_w.valid.eq(ep.resp_cfg.valid), resp.cfg_w.payload.eq(ep.resp_cfg.payload),
            ep.resp_cfg.ready.eq(1),
            resp.cnp_cfg.valid.eq(ep.resp_cnp_cfg.valid),
            resp.cnp_cfg.payload.eq(ep.resp_cnp_cfg.payload), ep.resp_cnp_cfg.ready.eq(1),
        ]
        wiring.connect(m, resp.mem, mem.resp_w)
        # ACKNOWLEDGEs built whole go to the Ethernet arbiter while the stack's transmit path is
        # idle (past UDP and IPv4 transmit and the ICRC stage)
        st = f.network.stack
        wiring.connect(m, resp.ack_frame, st.ip_out)
        wiring.connect(m, resp.peek, st.arp_peek)
        m.d.comb += [resp.tx_idle.eq(st.tx_idle), resp.local_mac.eq(ep.local_mac),
                     resp.local_ip.eq(ep.local_ip)]
        if resp.atomics:
            wiring.connect(m, mem.atomic_done, resp.atomic_done)
        if resp.acked_writes:
            m.d.comb += resp.mem_durable.eq(mem.resp_durable)
        if f.services is None:
            wiring.connect(m, wiring.flipped(ep.recv), resp.recv)
            wiring.connect(m, resp.cpl, wiring.flipped(ep.recv_cpl))
        else:   # (the user's receive buffers merged with the gateware services')
            ports = f.services.ports
            wiring.connect(m, wiring.flipped(ep.recv), ports.user_recv)
            wiring.connect(m, ports.recv, resp.recv)
            wiring.connect(m, resp.cpl, ports.recv_cpl)
            wiring.connect(m, ports.user_recv_cpl, wiring.flipped(ep.recv_cpl))
        # the connection manager names each QP's region; the pattern sink watches the payload
        # writes the memory takes, and answers QUERY through it
        cm = f.connection.cm
        m.d.comb += [resp.cfg_qp.eq(cm.cfg_qp), cm.cfg.eq(resp.cfg)]
        if self.sink is not None:
            sink = m.submodules.pattern_sink = self.sink
            m.d.comb += [sink.i.valid.eq(resp.mem.valid & resp.mem.ready),
                         sink.i.payload.eq(resp.mem.payload), cm.counts.eq(sink.counts)]
            if self.cfg.reads:
                # (and the READ responses' payload: the memory takes one write a cycle; not the
                # original values of the FPGA's own atomics, which are no test pattern)
                place = f.read.place
                rw = place.o
                data_write = rw.valid & rw.ready
                if self.cfg.atomics is not None:
                    data_write &= ~place.o_atomic
                with m.If(data_write):
                    m.d.comb += [sink.i.valid.eq(1), sink.i.payload.eq(rw.payload)]
            if self.cfg.service_ports:
                # (not the services' buffers: rping's or a client's bytes are no test pattern)
                base, length = self.cfg.service_region
                word = self.cfg.width // 8
                a = sink.i.payload.addr
                with m.If((a >= base // word) & (a < (base + length + word - 1) // word)):
                    m.d.comb += sink.i.valid.eq(0)
