"""The portable endpoint core with flat port names, as ``rocegen verilog`` emits it for
integration into a user's own FPGA project."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import Axi4Signature, axi4_members, connect_axi4
from rocegen.gateware.lib.axis import axis_members, connect_axis
from rocegen.gateware.lib.records import connect_record, record_members
from rocegen.gateware.lib.stream import is_packet_stream
from rocegen.gateware.mac.xgmii_rx import XgmiiRx
from rocegen.gateware.mac.xgmii_tx import XgmiiTx
from rocegen.gateware.roce.endpoint.endpoint import IP_MTU, RoceEndpoint
from rocegen.gateware.roce.endpoint.regs import AxiLiteRegs, axil_members
from rocegen.gateware.xgmii_top import MAC_COUNTERS, XGMII_WIDTH
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["CoreTop", "PHYS", "xgmii_mac", "XGMII_MAX_FRAME"]

#: Endpoint ports the AXI4-Lite register block owns when it is there.
REGS_OWN = ("stats_addr", "stats_data", "qp_stats_qp", "qp_stats_sel", "qp_stats_data",
            "qp_info_qp", "qp_info_context", "qp_info_psn", "tc_cfg", "cc_cfg", "cc_qp", "cc_rate",
            "rdma_cm_connect", "rdma_cm_disconnect", "rdma_cm_event")

#: MAC sides of the core: the CMAC-shaped AXI-Stream port, or the built-in XGMII MAC.
PHYS = ("axis", "xgmii")

#: Longest frame the XGMII MAC accepts in front of the endpoint: the endpoint's IP MTU, the
#: Ethernet header, a VLAN tag and the FCS.
XGMII_MAX_FRAME = IP_MTU + 14 + 4 + 4


def xgmii_mac(m, endpoint, counters=None):
    """Put the 64-bit XGMII MAC (:class:`~rocegen.gateware.mac.xgmii_rx.XgmiiRx` /
    :class:`~rocegen.gateware.mac.xgmii_tx.XgmiiTx`) in front of ``endpoint`` in module ``m``
    (submodules ``mac_rx`` and ``mac_tx``). Returns ``(rx, tx)``; the caller drives ``rx.rxd``
    / ``rx.rxc`` and reads ``tx.txd`` / ``tx.txc``. When ``counters`` is an object with the
    ``Out(32)`` members named in :data:`~rocegen.gateware.xgmii_top.MAC_COUNTERS`, they count
    the MAC's strobes (saturating, one cycle after the strobe).

    The MAC has no receive backpressure and the endpoint's network stack never stalls
    ``mac_rx`` (its receive FIFO drops what does not fit), so the MAC drives it directly; the
    stack sends each frame whole, so the transmit MAC is never starved inside a frame."""
    rx = m.submodules.mac_rx = XgmiiRx(max_frame=XGMII_MAX_FRAME)
    tx = m.submodules.mac_tx = XgmiiTx()
    m.d.comb += [endpoint.mac_rx.payload.eq(rx.o.payload), endpoint.mac_rx.valid.eq(rx.o.valid)]
    wiring.connect(m, endpoint.mac_tx, tx.i)
    if counters is not None:
        blocks = {"rx": rx, "tx": tx}
        for name, (block, strobe) in MAC_COUNTERS.items():
            counter = getattr(counters, name)
            with m.If(getattr(blocks[block], strobe) & (counter != (1 << 32) - 1)):
                m.d.sync += counter.eq(counter + 1)
    return rx, tx


class CoreTop(wiring.Component):
    """:class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` with flat, Verilog-friendly port
    names and fixed addresses: the core to instantiate in a hand-written FPGA top level.

    Every port of the endpoint appears at the top level, named after it:

    * the MAC (``phy="axis"``): ``s_axis_*`` frames from the MAC (``tuser`` = bad frame),
      ``m_axis_*`` frames to the MAC (``tuser`` = abort), both without FCS, W bits wide, as the
      Xilinx CMAC's AXI-Stream interface; with ``phy="xgmii"``, the built-in 10G/25G MAC with
      ``xgmii_rxd``/``xgmii_rxc``/``xgmii_txd``/``xgmii_txc`` and the ``mac_*`` counters of
      :data:`~rocegen.gateware.xgmii_top.MAC_COUNTERS`;
    * record streams (``wr``, ``cpl``, ``qp_ctl``, ``qp_psn``, ``gen``, ``mem_w``...): as
      ``<name>_data`` / ``<name>_valid`` / ``<name>_ready`` (the record's bits, first field in
      the low bits; :mod:`rocegen.gateware.lib.records`);
    * packet streams other than the MAC (``msg``): ``s_<name>_axis_*`` (or ``m_<name>_axis_*``
      for an output) plus ``<name>_meta`` for the packet's metadata;
    * the AXI4 memory port (``memory="axi4"``): ``m_axi_*``;
    * when the endpoint has them (:attr:`pause_ports`), the pause ports for a MAC that
      terminates and sends PFC/PAUSE frames itself: ``pause_rx`` (In(8), bit ``n`` high while
      the link partner pauses priority ``n``) and ``pause_tx`` (Out(8), XOFF request level per
      priority); :class:`~rocegen.boards.xilinx.cmac.Cmac` with ``pfc=True`` turns them into
      the CMAC's pause interface. The built-in XGMII MAC has none, so ``phy="xgmii"`` refuses
      an endpoint with them;
    * every other port (``stats_addr``, ``stats_data``, ``gen_busy``...) under its own name.

    One clock domain (``clk``, ``rst`` active high, synchronous). Byte order, latency and
    backpressure are those of the endpoint (byte 0 of a frame in the low lane of its first beat;
    every stream obeys valid/ready).

    Parameters
    ----------
    width, num_qps, memory
        As for :class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` (W must be 64 with
        ``phy="xgmii"``).
    phy : ``"axis"`` or ``"xgmii"``
        The MAC side (see above).
    mac, ip : str
        Our MAC (``"aa:bb:cc:dd:ee:ff"``) and IPv4 (dotted quad) address: fixed in the core, or
        the reset values of the ``MAC_HI``/``MAC_LO``/``IP`` registers with ``axil``.
    axil : bool
        Add the AXI4-Lite control and status slave ``s_axil_*``
        (:class:`~rocegen.gateware.roce.endpoint.regs.AxiLiteRegs`, register map in
        :mod:`~rocegen.gateware.roce.endpoint.regmap`). It then owns the endpoint's read ports:
        ``stats_*``, ``qp_stats_*`` are not top-level ports; every counter, the per-QP counters
        and the QP table are read through it.
    **params
        Further parameters of the endpoint (``mem_bytes``, ``wr_depth``, ``window``, ``clk_hz``...).
    """

    def __init__(self, width=512, num_qps=8, *, memory="onchip", phy="axis",
                 mac="02:00:00:00:00:01", ip="10.0.0.2", axil=False, **params):
        if phy not in PHYS:
            raise ValueError(f"phy must be one of {', '.join(PHYS)}, not {phy!r}")
        if phy == "xgmii" and width != XGMII_WIDTH:
            raise ValueError(f"the XGMII MAC's data path is 64 bits: width must be "
                             f"{XGMII_WIDTH} with phy='xgmii', not {width!r}")
        self.mac = parse_mac(mac)
        self.ip = parse_ip(ip)
        self.phy = phy
        self.width = width
        self.axil = bool(axil)
        self.endpoint = ep = RoceEndpoint(width, num_qps, memory=memory, qp_info=self.axil,
                                          **params)
        self.num_qps = ep.num_qps
        self.memory = ep.memory
        #: The endpoint has the pause ports ``pause_rx``/``pause_tx`` (they become ports here).
        self.pause_ports = {"pause_rx", "pause_tx"} <= set(ep.signature.members)
        if self.pause_ports and phy == "xgmii":
            raise ValueError("phy='xgmii': the built-in XGMII MAC neither decodes nor sends "
                             "pause frames, so it cannot drive the endpoint's pause_rx/pause_tx; "
                             "build the endpoint to handle PFC itself")
        members = {}
        self._plan = []
        self._regs = None
        if self.axil:
            self._regs = AxiLiteRegs(ep.config, mac=self.mac, ip=self.ip, settings=True)
            members.update(axil_members("s_axil"))
        for name, member in ep.signature.members.items():
            if name in ("local_mac", "local_ip"):
                continue
            if self.axil and name in REGS_OWN:
                continue
            if name in ("mac_rx", "mac_tx"):
                continue
            sink = member.flow == In
            if member.is_port:
                members[name] = (In if sink else Out)(member.shape)
                self._plan.append(("port", name, name))
            elif isinstance(member.signature, Axi4Signature):
                sig = member.signature
                members.update(axi4_members("m_axi", sig.addr_width, sig.data_width, sig.id_width))
                self._plan.append(("axi", name, "m_axi"))
            elif is_packet_stream(member):
                prefix = f"s_{name}_axis" if sink else f"m_{name}_axis"
                members.update(axis_members(prefix, width, sink=sink))
                meta = data.Layout.cast(member.signature.members["payload"].shape).members["meta"]
                meta_bits = data.Layout.cast(meta).size
                if meta_bits:
                    members[f"{name}_meta"] = (In if sink else Out)(meta_bits)
                self._plan.append(("packet", name, prefix))
            elif isinstance(member.signature, stream.Signature):
                members.update(record_members(name, member.signature.members["payload"].shape, sink=sink))
                self._plan.append(("record", name, name))
            else:
                raise TypeError(f"endpoint port {name!r} has an interface CoreTop cannot "
                                f"flatten: {member.signature!r}")
        if phy == "axis":
            members.update(axis_members("s_axis", width, sink=True))
            members.update(axis_members("m_axis", width, sink=False))
        else:
            members.update({"xgmii_rxd": In(64), "xgmii_rxc": In(8),
                            "xgmii_txd": Out(64), "xgmii_txc": Out(8)})
            members.update({name: Out(32) for name in MAC_COUNTERS})
        clash = [n for n in members if n in ("clk", "rst")]
        if clash:
            raise ValueError(f"endpoint port names clash with the clock/reset ports: {clash}")
        super().__init__(members)

    def port_groups(self):
        """How the endpoint's ports appear here: ``(kind, endpoint port, top-level prefix)`` with
        kind ``"port"`` (under its own name), ``"record"`` (``<prefix>_data/_valid/_ready``),
        ``"packet"`` (AXI-Stream ``<prefix>_t*`` and ``<name>_meta``) or ``"axi"``."""
        return list(self._plan)

    def elaborate(self, platform):
        m = Module()
        ep = m.submodules.endpoint = self.endpoint
        if self.axil:
            regs = m.submodules.regs = self._regs
            for name in regs.signature.members:
                if name == "reading":
                    continue            # the block owns the endpoint's read ports alone
                if name.startswith("s_axil_"):
                    if regs.signature.members[name].flow == In:
                        m.d.comb += getattr(regs, name).eq(getattr(self, name))
                    else:
                        m.d.comb += getattr(self, name).eq(getattr(regs, name))
                elif regs.signature.members[name].is_signature:     # tc_cfg, cc_cfg, rdma_cm_*
                    wiring.connect(m, getattr(regs, name), getattr(ep, name))
                elif regs.signature.members[name].flow == In:
                    m.d.comb += getattr(regs, name).eq(getattr(ep, name))
                else:
                    m.d.comb += getattr(ep, name).eq(getattr(regs, name))
        else:
            m.d.comb += [ep.local_mac.eq(self.mac), ep.local_ip.eq(self.ip)]
        if self.phy == "axis":
            connect_axis(m, self, "s_axis", ep.mac_rx, sink=True)
            connect_axis(m, self, "m_axis", ep.mac_tx, sink=False)
        else:
            rx, tx = xgmii_mac(m, ep, counters=self)
            m.d.comb += [rx.rxd.eq(self.xgmii_rxd), rx.rxc.eq(self.xgmii_rxc),
                         self.xgmii_txd.eq(tx.txd), self.xgmii_txc.eq(tx.txc)]
        for kind, name, flat in self._plan:
            port = getattr(ep, name)
            sink = ep.signature.members[name].flow == In
            if kind == "port":
                if sink:
                    m.d.comb += port.eq(getattr(self, flat))
                else:
                    m.d.comb += getattr(self, flat).eq(port)
            elif kind == "axi":
                connect_axi4(m, self, flat, port)
            elif kind == "packet":
                connect_axis(m, self, flat, port, sink=sink)
                meta = getattr(self, f"{name}_meta", None)
                if meta is not None:
                    if sink:
                        m.d.comb += port.payload.meta.as_value().eq(meta)
                    else:
                        m.d.comb += meta.eq(port.payload.meta.as_value())
            else:
                connect_record(m, self, flat, port, sink=sink)
        return m
