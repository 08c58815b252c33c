"""The connection manager's checks of a request datagram that need no QP record."""

from amaranth.hdl import Const, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_defs import CM_PORT, REQ_OPEN_QP, int_param, parse_net
from rocegen.gateware.roce.layouts import CM_CHECKS, CM_DATAGRAM

__all__ = ["CmChecks"]


class CmChecks(wiring.Component):
    """Checks a request on what the datagram alone says (made while the QP's records are read).

    Parameters
    ----------
    allow_net : (ip, prefix_len) or None
        Subnet whose hosts may use the connection manager (``ip`` an integer or dotted string,
        host bits zero); None: any host.
    port : int
        The UDP port served.

    Ports
    -----
    datagram : In(CM_DATAGRAM)
        The request.
    local_ip : In(32)
        Our IPv4 address.
    any_free : In(1)
        A QP is free (for ``open_ok``).
    checks : Out(CM_CHECKS)
        ``ext_ok``: ``pmtu_code`` <= 5 and ``timeout_code`` <= 31; ``src_allowed``: ``src_ip``
        in ``allow_net``; ``peer_allowed``: ``loc_ip`` in ``allow_net``; ``opening``: an
        OPEN_QP code; ``open_ok``: ``ext_ok``, ``src_allowed``, ``peer_allowed`` and
        ``any_free``; ``addr_bad``: ``dst_ip`` is not ``local_ip`` or ``dst_port`` not
        ``port``; ``gen_bad``: bit 31 of ``dma_length`` set or ``window_log2`` above 31.

    Behaviour: ``checks`` are registered, one cycle after their inputs; no other state.
    """

    def __init__(self, *, allow_net=None, port=CM_PORT):
        self.net = parse_net(allow_net)
        self.port = int_param("port", port, 1, 0xFFFF)
        super().__init__({
            "datagram": In(CM_DATAGRAM),
            "local_ip": In(32),
            "any_free": In(1),
            "checks": Out(CM_CHECKS),
        })

    def _allowed(self, ip):
        if self.net is None:
            return Const(1, 1)
        net, mask = self.net
        return (ip & mask) == net

    def elaborate(self, platform):
        m = Module()
        dg, c = self.datagram, self.checks
        req = dg.req
        ext_ok = (req.pmtu_code <= 5) & (req.timeout_code <= 31)
        src_allowed, peer_allowed = self._allowed(dg.src_ip), self._allowed(req.loc_ip)
        m.d.sync += [
            c.ext_ok.eq(ext_ok), c.src_allowed.eq(src_allowed), c.peer_allowed.eq(peer_allowed),
            c.opening.eq(req.req_type == REQ_OPEN_QP),
            c.open_ok.eq(ext_ok & src_allowed & peer_allowed & self.any_free),
            c.addr_bad.eq((dg.dst_ip != self.local_ip) | (dg.dst_port != self.port)),
            c.gen_bad.eq(req.dma_length[31] | (req.window_log2 > 31)),
        ]
        return m
