"""Top levels with AXI-Stream port names: the network stack on a CMAC-shaped port."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axis import axis_members, connect_axis
from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.mapmeta import MapMeta
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.net.layouts import UDP_RX_META
from rocegen.gateware.net.stack import STATS, NetStack
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["StackTop", "add_echo_service"]


def add_echo_service(m, stack):
    """Serve UDP echo on port index 0 of ``stack`` (a :class:`NetStack` elaborated in ``m``).

    Adds submodules ``echo_fifo`` and ``echo`` to module ``m``: datagrams arriving on
    ``stack.udp_rx[0]`` go through a cut-through FIFO (256 beats at W=64, 64 beats wider; it
    decouples the echo from the receive path) and are sent back on ``stack.udp_tx[0]`` to their
    source address and port, from the port they came to, with their DSCP and ECN 0. Payload bytes
    are untouched (byte order as received). Latency: the FIFO's two cycles plus the stack's
    transmit path; backpressure from ``udp_tx[0]`` fills the FIFO, then stalls ``udp_rx[0]``.
    Every other port ``udp_rx[k]`` (k >= 1) is drained (``ready`` tied high): that is where the
    user's logic would go.

    Shared by :class:`StackTop` and :class:`~rocegen.gateware.xgmii_top.XgmiiStackTop`.
    """
    W = stack.width
    buf = m.submodules.echo_fifo = PacketFifo(W, 256 if W == 64 else 64, UDP_RX_META,
                                              store_and_forward=False, drop_errors=False,
                                              overflow="wait")
    wiring.connect(m, stack.udp_rx[0], buf.i)

    def turn_around(m_, s, d):
        m_.d.comb += [
            d.udp.dst_ip.eq(s.ipv4.src), d.udp.src_port.eq(s.udp.dst_port),
            d.udp.dst_port.eq(s.udp.src_port), d.udp.length.eq(s.udp.length - 8),
            d.udp.dscp.eq(s.ipv4.dscp), d.udp.ecn.eq(0),
        ]
    echo = m.submodules.echo = MapMeta(W, UDP_RX_META, UDP_TX_META, turn_around)
    wiring.connect(m, buf.o, echo.i)
    wiring.connect(m, echo.o, stack.udp_tx[0])
    for k in range(1, len(stack.udp_rx)):
        # other ports are left to the user's logic; here they are drained
        m.d.comb += stack.udp_rx[k].ready.eq(1)


class StackTop(wiring.Component):
    """The network stack with a UDP echo service, for simulation and bring-up.

    Ports: ``s_axis_*`` frames from the MAC (``tuser`` = bad FCS), ``m_axis_*`` frames to the
    MAC (``tuser`` = abort), ``stats_addr``/``stats_data`` the counters of
    :data:`~rocegen.gateware.net.stack.STATS`. Datagrams to ``echo_port`` are sent back to their
    source.
    """

    def __init__(self, width=512, mac="02:00:00:00:00:01", ip="10.0.0.2", echo_port=7,
                 udp_ports=(17185,), arp_retry_cycles=2000, **stack_args):
        check_width(width)
        self.width = width
        self.mac = parse_mac(mac)
        self.ip = parse_ip(ip)
        self.echo_port = echo_port
        self.stack = NetStack(width, (echo_port, *udp_ports), arp_retry_cycles=arp_retry_cycles,
                              **stack_args)
        super().__init__({
            **axis_members("s_axis", width, sink=True),
            **axis_members("m_axis", width, sink=False),
            "stats_addr": In(range(len(STATS))),
            "stats_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        st = m.submodules.stack = self.stack
        m.d.comb += [st.local_mac.eq(self.mac), st.local_ip.eq(self.ip),
                     st.stats_addr.eq(self.stats_addr), self.stats_data.eq(st.stats_data)]
        connect_axis(m, self, "s_axis", st.mac_rx, sink=True)
        connect_axis(m, self, "m_axis", st.mac_tx, sink=False)
        add_echo_service(m, st)
        return m
