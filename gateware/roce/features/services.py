"""The gateware services on the IB CM's connections: the rping server (librdmacm's ``rping
-s``) and the SEND echo (the server of librdmacm's ``rdma_client``), each on a port of its own,
and the rping client (``rping -c``) on the FPGA's connections to a host's rping port."""

from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.responder.responder import default_config
from rocegen.gateware.roce.services.rping_client import RpingClient
from rocegen.gateware.roce.services.rping_server import RpingServer
from rocegen.gateware.roce.services.send_echo import SendEcho
from rocegen.gateware.roce.services.service_ports import ServicePorts

__all__ = ["ServicesFeature"]


class ServicesFeature(Feature):
    """:class:`~rocegen.gateware.roce.services.rping_server.RpingServer` (with ``rping_port``)
    and :class:`~rocegen.gateware.roce.services.send_echo.SendEcho` (with ``echo_port``) on
    the QPs the IB CM opens on their ports,
    :class:`~rocegen.gateware.roce.services.rping_client.RpingClient` (with
    ``rping_client_port``) on the QPs of the FPGA's connections to that port of a host, and
    :class:`~rocegen.gateware.roce.services.service_ports.ServicePorts`, which shares the
    user's work-request and receive ports with them.

    Parameters
    ----------
    cfg : EndpointConfig
        ``rping_port``, ``echo_port``, ``rping_client_port`` (``rping_client_size``,
        ``rping_client_count``), ``service_region`` (``service_slices``: QP ``k``'s
        buffers at ``base + k * bytes_per_qp``), ``num_qps``, ``width``, ``rq_depth``,
        ``resp_region`` and ``rkey_seed`` (the R_Keys the client states).
    word_addr_bits : int
        Bits of a word address of local memory.

    Ports
    -----
    ``service_qps`` (bit k: QP k is a service's). Otherwise the feature sits between the
    user's ``wr`` / ``cpl`` and ``recv`` / ``recv_cpl`` and the requester and responder (the
    requester and responder features wire it there).

    Behaviour
    ---------
    Each connection of ``rping_port`` is served as ``rping -s`` serves it (the server's
    docstring): the client's advertisements arrive by SEND in the QP's receive slot (seen on
    the responder's memory writes), the server READs the client's buffer into the QP's slice
    and WRITEs it back, its R_Keys written into the QP table; the largest ping is
    ``bytes_per_qp - 2 * max(16, W/8)`` bytes. Each connection of ``echo_port`` gets every
    message it SENDs SENT back, up to ``bytes_per_qp`` bytes. The rping client pings the host's
    ``rping -s`` on each connection the FPGA opens to ``rping_client_port`` (one at a time),
    ``rping_client_count`` pings of ``rping_client_size`` bytes, each compared (``-V``), then
    disconnects; its buffers are filled through the memory's user write port (taking turns
    with ``mem_w``), its disconnects go to the IB CM beside the user's, it follows the
    responder's table (``resp_cfg``) for the R_Keys it states. Completions of the services' QPs
    go to them; the others to the user. A connection's start flushes the user's receive
    buffers left on its QP, its end the service's.
    """

    def __init__(self, cfg, word_addr_bits):
        super().__init__(cfg)
        base, per_qp = cfg.service_slices
        align = max(16, cfg.width // 8)
        self.rping = None if cfg.rping_port is None else RpingServer(
            cfg.num_qps, width=cfg.width, addr_width=word_addr_bits, base=base,
            bytes_per_qp=per_qp, max_size=min(per_qp - 2 * align, (1 << 31) - 1))
        self.echo = None if cfg.echo_port is None else SendEcho(
            cfg.num_qps, width=cfg.width, base=base, bytes_per_qp=min(per_qp, 1 << 30))
        self.client = None
        if cfg.rping_client_port is not None:
            rb, rl = cfg.resp_region
            rkeys = [c["mr"]["rkey"] for c in default_config(cfg.num_qps, rb, rl,
                                                             rkey_seed=cfg.rkey_seed)]
            self.client = RpingClient(
                cfg.num_qps, width=cfg.width, addr_width=word_addr_bits, base=base,
                bytes_per_qp=per_qp, size=cfg.rping_client_size, count=cfg.rping_client_count,
                rkeys=rkeys)
        #: the services in the order of ``cfg.service_sides`` (the IB CM's ``service[j]``)
        self.services = [s for s in (self.rping, self.echo, self.client) if s is not None]
        self.ports = ServicePorts(cfg.num_qps, cfg.rq_depth, len(self.services))

    def members(self):
        return {"service_qps": Out(self.cfg.num_qps)}

    def connect(self, m, ep):
        """The services' events from the IB CM's QPs, their requests and buffers through the
        shared ports; the rping server's R_Keys into the QP table and the responder's memory
        writes to it."""
        f = ep.features
        ports = m.submodules.service_ports = self.ports
        qps, resp = f.ibcm.qps, f.responder.resp
        wiring.connect(m, qps.rq_flush, resp.rq_flush)
        served = 0
        for j, svc in enumerate(self.services):
            m.submodules[{self.rping: "rping", self.echo: "echo", self.client: "rping_client"}
                         [svc]] = svc
            wiring.connect(m, qps.service[j], svc.opened)
            m.d.comb += ports.served[j].eq(qps.served[j])
            served |= qps.served[j]
            wiring.connect(m, svc.wr, ports.svc_wr[j])
            wiring.connect(m, svc.recv, ports.svc_recv[j])
            wiring.connect(m, ports.svc_cpl[j], svc.cpl)
            wiring.connect(m, ports.svc_recv_cpl[j], svc.recv_cpl)
        m.d.comb += ep.service_qps.eq(served)
        if self.rping is not None:
            srv = self.rping
            wiring.connect(m, srv.rkey, f.connection.qps.rkey_w)
            m.d.comb += [srv.adv_w.valid.eq(resp.mem.valid & resp.mem.ready),
                         srv.adv_w.payload.eq(resp.mem.payload)]
        if self.client is not None:
            c = self.client
            wiring.connect(m, c.mem_w, f.memory.writes.i[1])
            wiring.connect(m, c.disconnect, f.ibcm.disconnects.i[1])
            m.d.comb += [c.resp_w.valid.eq(resp.mem.valid & resp.mem.ready),
                         c.resp_w.payload.eq(resp.mem.payload),
                         c.cfg_w.valid.eq(ep.resp_cfg.valid), c.cfg_w.payload.eq(ep.resp_cfg.payload)]
