"""Top level of the 10G/25G endpoint: the network stack behind the 64-bit XGMII MAC."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.mac.xgmii import FCS_BYTES
from rocegen.gateware.mac.xgmii_rx import XgmiiRx
from rocegen.gateware.mac.xgmii_tx import XgmiiTx
from rocegen.gateware.net.stack import STATS, NetStack
from rocegen.gateware.top import add_echo_service
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["XgmiiStackTop", "MAC_COUNTERS"]

#: Counter output ports of :class:`XgmiiStackTop` and the MAC strobe each one counts.
MAC_COUNTERS = {
    "mac_rx_frames": ("rx", "rx_frame"),
    "mac_rx_fcs_errors": ("rx", "rx_fcs_error"),
    "mac_rx_runts": ("rx", "rx_runt"),
    "mac_rx_too_long": ("rx", "rx_too_long"),
    "mac_rx_bad_codes": ("rx", "rx_bad_code"),
    "mac_rx_bad_preambles": ("rx", "rx_bad_preamble"),
    "mac_tx_frames": ("tx", "tx_frame"),
    "mac_tx_underruns": ("tx", "tx_underrun"),
}

#: Width of the XGMII data path, the only width this top level supports.
XGMII_WIDTH = 64


class XgmiiStackTop(wiring.Component):
    """The network stack with the UDP echo service of :class:`~rocegen.gateware.top.StackTop`,
    on a 64-bit XGMII (10GBASE-R at 156.25 MHz, 25GBASE-R at 390.625 MHz): the 10G/25G flavour
    of the endpoint.

    Data path::

        xgmii_rxd/rxc -> XgmiiRx -> NetStack.mac_rx            (stack, echo on udp_rx/tx[0])
        NetStack.mac_tx -> XgmiiTx -> xgmii_txd/txc

    The stack sends each frame whole from its store-and-forward transmit FIFO, which is what
    the MAC needs (it must not be starved inside a frame).

    Parameters
    ----------
    width : int
        Must be 64 (the XGMII word); any other value raises :exc:`ValueError`. Accepted so that
        the parameters are those of :class:`~rocegen.gateware.top.StackTop`.
    mac, ip : str
        Our MAC (``"aa:bb:cc:dd:ee:ff"``) and IPv4 (dotted quad) address.
    echo_port : int
        UDP port whose datagrams are sent back to their source (stack port index 0).
    udp_ports : sequence of int
        Further UDP ports of the stack; their datagrams are received and drained.
    arp_retry_cycles : int
        ARP request repeat interval, in clock cycles.
    **stack_args
        Passed to :class:`~rocegen.gateware.net.stack.NetStack` (``mtu``, ``vlan``,
        ``rx_fifo_beats``, ``arp_entries``, ``arp_retries``). The MAC's longest accepted frame
        follows the stack: ``mtu + 22`` octets (Ethernet header, a VLAN tag and the FCS), 1522
        for the default MTU of 1500.

    Ports
    -----
    ``xgmii_rxd``, ``xgmii_rxc`` : ``In(64)``, ``In(8)``
        XGMII receive data and control from the PHY (registered inside).
    ``xgmii_txd``, ``xgmii_txc`` : ``Out(64)``, ``Out(8)``
        XGMII transmit data and control to the PHY, registered; all idles out of reset.
    ``stats_addr`` / ``stats_data`` : ``In(range(len(STATS)))`` / ``Out(32)``
        Read port of the stack counters named in :data:`~rocegen.gateware.net.stack.STATS`:
        ``stats_data`` is the counter at ``stats_addr`` one cycle later.
    ``mac_*`` : ``Out(32)``
        Saturating counters of the MAC (see :data:`MAC_COUNTERS`): frames received (every frame
        delivered to the stack, good or errored), receive errors by kind (``mac_rx_fcs_errors``,
        ``mac_rx_runts``, ``mac_rx_too_long``, ``mac_rx_bad_codes``: at most one per frame, by
        the priority of :class:`~rocegen.gateware.mac.xgmii_rx.XgmiiRx`;
        ``mac_rx_bad_preambles``: frames discarded before reaching the stack), frames
        transmitted and transmit underruns (the MAC starved inside a frame: stays 0 because the
        stack sends frames whole). They update one cycle after the MAC strobe.

    Behaviour
    ---------
    * Byte order: lane 0 (``d[0:8]``) of an XGMII word is first on the wire; octet 0 of a frame
      (the first octet of the destination address) travels in lane 0 of the first stack beat.
      Multi-octet header fields are big-endian on the wire, the FCS least significant octet
      first.
    * Receive: a frame the MAC flags (bad FCS, runt, too long, bad control character) reaches
      the stack with ``error`` on its last beat; the stack drops it whole and counts it in
      ``rx_bad_frame`` (and ``rx_frames``), the MAC in the ``mac_rx_*`` counter of its kind. A
      frame with a bad start word never reaches the stack.
    * Transmit: the stack queues every frame whole in its transmit FIFO before the MAC is
      offered its first beat, so the MAC -- which must get one beat per cycle once a frame has started -- is
      never starved inside a frame. A frame the stack ends with ``error`` (abort) is still sent,
      with an inverted FCS and /E/ in place of /T/. Frames shorter than 60 octets are padded
      (the stack already pads); the MAC appends the FCS; frames start in lane 0, at least 12
      octets apart.
    * Backpressure: none at the XGMII ports (a PHY cannot be stalled either way). Received
      frames that find the stack's receive FIFO full are dropped whole and counted in
      ``rx_overflow``. On transmit the MAC holds ``mac_tx`` off during preamble, FCS and gap.
    * Latency: a received frame's first beat reaches the stack 3 cycles after ``xgmii_rxd``
      holds its octet 7 (see :class:`~rocegen.gateware.mac.xgmii_rx.XgmiiRx`); the stack's
      receive FIFO is store-and-forward, so processing starts once the whole frame is in. On
      transmit, when the MAC is idle with its inter-frame gap elapsed, the start word of a frame
      is on ``xgmii_txd`` 1 cycle after the stack offers its first beat, and each beat follows
      one per cycle.
    """

    def __init__(self, width=XGMII_WIDTH, mac="02:00:00:00:00:01", ip="10.0.0.2", echo_port=7,
                 udp_ports=(17185,), arp_retry_cycles=2000, **stack_args):
        if not isinstance(width, int) or isinstance(width, bool):
            raise TypeError(f"width must be an integer number of bits, not {width!r}")
        if width != XGMII_WIDTH:
            raise ValueError(f"XgmiiStackTop's data path is the 64-bit XGMII word: width must be "
                             f"{XGMII_WIDTH}, not {width} (use StackTop for wider AXI-Stream "
                             f"MACs)")
        self.width = width
        self.mac = parse_mac(mac)
        self.ip = parse_ip(ip)
        self.echo_port = echo_port
        self.stack = NetStack(width, (echo_port, *udp_ports), arp_retry_cycles=arp_retry_cycles,
                              **stack_args)
        mtu = self.stack.mtu
        # longest frame on the wire: header, VLAN tag, IPv4 packet, FCS
        self.max_frame = mtu + 14 + 4 + FCS_BYTES
        self._rx = XgmiiRx(max_frame=self.max_frame)
        self._tx = XgmiiTx()
        super().__init__({
            "xgmii_rxd": In(64),
            "xgmii_rxc": In(8),
            "xgmii_txd": Out(64),
            "xgmii_txc": Out(8),
            "stats_addr": In(range(len(STATS))),
            "stats_data": Out(32),
            **{name: Out(32) for name in MAC_COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        st = m.submodules.stack = self.stack
        rx = m.submodules.mac_rx = self._rx
        tx = m.submodules.mac_tx = self._tx
        m.d.comb += [st.local_mac.eq(self.mac), st.local_ip.eq(self.ip),
                     st.stats_addr.eq(self.stats_addr), self.stats_data.eq(st.stats_data)]

        # receive: the MAC has no backpressure (its ``o`` is always-ready) and the stack never
        # stalls ``mac_rx`` (its receive FIFO drops what does not fit), so the MAC drives the
        # stack directly and ``mac_rx.ready`` is left unused.
        m.d.comb += [rx.rxd.eq(self.xgmii_rxd), rx.rxc.eq(self.xgmii_rxc),
                     st.mac_rx.payload.eq(rx.o.payload), st.mac_rx.valid.eq(rx.o.valid)]

        # transmit: frames come whole from the stack's transmit FIFO; an aborted frame (error on
        # its last beat) is ended with /E/ by the MAC.
        wiring.connect(m, st.mac_tx, tx.i)
        m.d.comb += [self.xgmii_txd.eq(tx.txd), self.xgmii_txc.eq(tx.txc)]

        add_echo_service(m, st)

        blocks = {"rx": rx, "tx": tx}
        for name, (block, strobe) in MAC_COUNTERS.items():
            counter = getattr(self, name)
            with m.If(getattr(blocks[block], strobe) & (counter != (1 << 32) - 1)):
                m.d.sync += counter.eq(counter + 1)
        return m
