"""The rping server: librdmacm's ``rping -s`` in gateware, on the IB CM's connections of one
port."""

from amaranth.lib import wiring

from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.services.rping_server import RpingServer
from rocegen.gateware.roce.services.service_ports import ServicePorts

__all__ = ["RpingFeature"]


class RpingFeature(Feature):
    """:class:`~rocegen.gateware.roce.services.rping_server.RpingServer` on the QPs the IB CM
    opens for ``rping_port``, and
    :class:`~rocegen.gateware.roce.services.service_ports.ServicePorts`, which shares the
    user's work-request and receive ports with it.

    Parameters
    ----------
    cfg : EndpointConfig
        ``rping_port``, ``rping_region`` (``rping_slices``: QP ``k``'s buffers at ``base + k *
        bytes_per_qp``), ``num_qps``, ``width``.
    word_addr_bits : int
        Bits of a word address of local memory.

    Ports
    -----
    None of its own: it sits between the user's ``wr`` / ``cpl`` and ``recv`` / ``recv_cpl``
    and the requester and responder (the requester and responder features wire it there).

    Behaviour
    ---------
    Each connection of ``rping_port`` is served as ``rping -s`` serves it (the server's
    docstring): the client's advertisements arrive by SEND in the QP's receive slot (seen on
    the responder's memory writes), the server READs the client's buffer into the QP's slice
    and WRITEs it back, its R_Keys written into the QP table. The largest ping is
    ``bytes_per_qp - 2 * max(16, W/8)`` bytes. Completions of the QPs the IB CM opened for
    the port go to the server (``served``); the others to the user. A connection's close
    flushes the server's receive buffer.
    """

    def __init__(self, cfg, word_addr_bits):
        super().__init__(cfg)
        base, per_qp = cfg.rping_slices
        align = max(16, cfg.width // 8)
        self.server = RpingServer(cfg.num_qps, width=cfg.width, addr_width=word_addr_bits,
                                  base=base, bytes_per_qp=per_qp,
                                  max_size=min(per_qp - 2 * align, (1 << 31) - 1))
        self.ports = ServicePorts(cfg.num_qps, cfg.rq_depth)

    def connect(self, m, ep):
        """The server's events from the IB CM's QPs, its requests and buffers through the
        shared ports, its R_Keys into the QP table, the responder's memory writes to it."""
        f = ep.features
        srv = m.submodules.rping = self.server
        ports = m.submodules.service_ports = self.ports
        qps, resp = f.ibcm.qps, f.responder.resp
        wiring.connect(m, qps.service, srv.opened)
        wiring.connect(m, qps.rq_flush, resp.rq_flush)
        m.d.comb += ports.served.eq(qps.served)
        wiring.connect(m, srv.rkey, f.connection.qps.rkey_w)
        m.d.comb += [srv.adv_w.valid.eq(resp.mem.valid & resp.mem.ready),
                     srv.adv_w.payload.eq(resp.mem.payload)]
        wiring.connect(m, srv.wr, ports.svc_wr)
        wiring.connect(m, srv.recv, ports.svc_recv)
        wiring.connect(m, ports.svc_cpl, srv.cpl)
        wiring.connect(m, ports.svc_recv_cpl, srv.recv_cpl)
