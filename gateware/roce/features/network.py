"""The endpoint's network stack: the MAC port, the local addresses, RoCEv2 and the connection
manager on their UDP ports."""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature
from rocegen.gateware.net.stack import NetStack
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.features.pfc import IP_MTU, pfc_rx_fifo_beats
from rocegen.wire.headers import UDP_PORT_ROCEV2

__all__ = ["NetworkFeature"]


class NetworkFeature(Feature):
    """The network stack (:class:`~rocegen.gateware.net.stack.NetStack`) of the endpoint.

    Parameters
    ----------
    cfg : EndpointConfig
        ``width``, ``cm_port`` (the stack's second UDP port), ``vlan``, ``pcp``, ``arp_*`` and
        ``rx_fifo_beats`` (with ``pfc``: at least what the headroom needs,
        :func:`~rocegen.gateware.roce.features.pfc.pfc_rx_fifo_beats`).

    Ports
    -----
    ``local_mac``, ``local_ip``; ``mac_rx`` / ``mac_tx``: the MAC (frames without FCS).

    Behaviour
    ---------
    The stack takes the MAC's frames and the local addresses; its transmit side goes to the
    MAC directly, or through PFC's pause gate
    (:class:`~rocegen.gateware.roce.features.pfc.PfcFeature`). Its UDP port 0 is RoCEv2
    (4791), port 1 the connection manager's.

    With on-chip memory the transmit FIFO passes frames cut-through: every frame the endpoint
    sends is steady then (its payload is read from on-chip memory a word a cycle at a fixed
    latency into the reader's queue, or generated, or built from registers: ACKs, CNPs,
    atomic answers, the connection managers' replies), so no frame can pause inside and the
    MAC cannot underrun. With AXI4 memory a payload's words come at the memory's pace, so the
    FIFO stores each frame whole.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.stack = NetStack(cfg.width, (UDP_PORT_ROCEV2, cfg.cm_port), mtu=IP_MTU,
                              vlan=cfg.vlan, pcp=cfg.pcp, arp_entries=cfg.arp_entries,
                              arp_retry_cycles=cfg.arp_retry_cycles,
                              arp_retries=cfg.arp_retries, rx_fifo_beats=pfc_rx_fifo_beats(cfg),
                              # RoceRx (its ICRC check) and the connection manager drop a
                              # damaged datagram themselves
                              cut_through_ports=(UDP_PORT_ROCEV2, cfg.cm_port),
                              tx_cut_through=cfg.memory == "onchip",
                              # the responder's ACKNOWLEDGEs built whole
                              ip_out=cfg.responder,
                              # RoCEv2 receive reads the datagrams with their headers in place
                              ip_in=True)

    def members(self):
        w = self.cfg.width
        return {"local_mac": In(48), "local_ip": In(32), "mac_rx": In(PacketSignature(w)),
                "mac_tx": Out(PacketSignature(w))}

    def connect(self, m, ep):
        """The MAC and the addresses; the transmit side through PFC when there is one."""
        st = self.stack
        m.d.comb += [st.local_mac.eq(ep.local_mac), st.local_ip.eq(ep.local_ip)]
        wiring.connect(m, wiring.flipped(ep.mac_rx), st.mac_rx)
        if ep.features.pfc is None:
            wiring.connect(m, st.mac_tx, wiring.flipped(ep.mac_tx))
        else:
            ep.features.pfc.connect(m, ep)
