"""The AXI4-Lite control and status slave of the endpoint, generated from the register table of
:mod:`rocegen.gateware.roce.endpoint.regmap`."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cc.dcqcn_layouts import ALPHA_ONE, DCQCN_CONFIG, G_LOG2_MAX, RATE_BITS
from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, STATS
from rocegen.gateware.roce.endpoint.regmap import (
    ADDR_WIDTH,
    CC_WORDS,
    QP_WORDS,
    RDMA_CM_WORDS,
    REGISTERS,
    cc_line_rate_max,
    register_values,
    settings_reset,
    windows_for,
)
from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
from rocegen.gateware.roce.layouts import MAX_QPS, QP_CONTEXT, QPN_BASE, TRAFFIC_CONFIG

__all__ = ["AxiLiteRegs", "axil_members", "SETTINGS_PORTS", "OKAY", "SLVERR"]

OKAY, SLVERR = 0, 2

#: Endpoint ports the block drives or reads with ``settings=True`` (those the endpoint has).
SETTINGS_PORTS = ("tc_cfg", "cc_cfg", "cc_qp", "cc_rate", "rdma_cm_connect",
                  "rdma_cm_disconnect", "rdma_cm_event")


def axil_members(prefix, addr_width=ADDR_WIDTH):
    """Members of an AXI4-Lite slave port named ``<prefix>_awaddr`` etc. (the names
    cocotbext-axi's ``AxiLiteBus.from_prefix`` and Vivado's interface inference recognise)."""
    return {
        f"{prefix}_awaddr": In(addr_width), f"{prefix}_awprot": In(3),
        f"{prefix}_awvalid": In(1), f"{prefix}_awready": Out(1),
        f"{prefix}_wdata": In(32), f"{prefix}_wstrb": In(4),
        f"{prefix}_wvalid": In(1), f"{prefix}_wready": Out(1),
        f"{prefix}_bresp": Out(2), f"{prefix}_bvalid": Out(1), f"{prefix}_bready": In(1),
        f"{prefix}_araddr": In(addr_width), f"{prefix}_arprot": In(3),
        f"{prefix}_arvalid": In(1), f"{prefix}_arready": Out(1),
        f"{prefix}_rdata": Out(32), f"{prefix}_rresp": Out(2), f"{prefix}_rvalid": Out(1),
        f"{prefix}_rready": In(1),
    }


class AxiLiteRegs(wiring.Component):
    """AXI4-Lite slave with the endpoint's configuration and status registers
    (:mod:`~rocegen.gateware.roce.endpoint.regmap`): identity and build configuration, our MAC and IPv4
    addresses (read/write), the connection manager's settings, the traffic generator's status,
    every counter, the per-QP counters and the QP table read back; with ``settings``, the
    traffic class (``TC``) and DCQCN's parameters and rates (the ``CC`` window).

    Parameters
    ----------
    config : dict
        The endpoint's :attr:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint.config`.
    mac, ip : int
        Reset values of ``MAC_HI``/``MAC_LO`` and ``IP``.
    settings : bool
        Drive the endpoint's run-time settings: ``tc_cfg`` from ``TC`` and, in a core with
        DCQCN (``config["dcqcn"]``), ``cc_cfg`` / ``cc_qp`` / ``cc_rate`` from the ``CC``
        window; in a core with the IB CM (``config["rdma_cm_ports"]``), its connects and
        disconnects from the ``RDMA_CM`` window. Without (the default), the block has none of
        these ports and ``TC`` and the windows are unmapped (SLVERR, counted).

    Ports
    -----
    ``s_axil_*``: the AXI4-Lite slave (16-bit byte addresses, 32-bit data; ``*prot`` ignored).
    ``local_mac`` / ``local_ip``: the address registers, to the endpoint.
    ``stats_addr`` -> ``stats_data``, ``qp_stats_qp`` / ``qp_stats_sel`` -> ``qp_stats_data``,
    ``qp_info_qp`` -> ``qp_info_context`` / ``qp_info_psn``: read ports of the endpoint, data
    one cycle after the address (the block holds the address steady while it waits).
    ``qp_open``, ``gen_*``: status inputs.
    ``reading`` : Out(1)
        High while a read uses the read ports: from the cycle after its address is accepted to
        the cycle its data is taken. Logic sharing a read port with the block (a board's
        counter watcher) may use the port whenever ``reading`` is low.
    ``tc_cfg`` : Out(stream.Signature(TRAFFIC_CONFIG)), with ``settings``
        The traffic class, sent in the cycle after a write of ``TC`` is accepted (valid until
        ready).
    ``cc_cfg`` : Out(stream.Signature(DCQCN_CONFIG)), with ``settings`` and DCQCN
        Every DCQCN parameter at once, sent in the cycle after a write of ``CC_COMMIT`` is
        accepted (valid until ready).
    ``rdma_cm_connect`` : Out(stream.Signature(CONNECT)), with ``settings`` and the IB CM
        A connect, offered from the cycle after a write of ``RDMA_CM_CONNECT`` until taken
        (``RDMA_CM_DST_IP`` and ``RDMA_CM_PORTS`` as they are then).
    ``rdma_cm_disconnect`` : Out(stream.Signature(8)), with ``settings`` and the IB CM
        A QP index to disconnect, from a write of ``RDMA_CM_DISCONNECT``, likewise.
    ``rdma_cm_event`` : In(stream.Signature(CM_EVENT)), with ``settings`` and the IB CM
        Taken at once: counted in ``RDMA_CM_EVENTS``, kept in ``RDMA_CM_EVENT``.
    ``cc_qp`` : Out(range(num_qps)); ``cc_rate`` : In(RATE_BITS), with ``settings`` and DCQCN
        The endpoint's rate read port: ``cc_qp`` is ``CC_RATE_QP``, ``cc_rate`` (a QP's rate
        one cycle after its index) is read as ``CC_RATE``.

    Behaviour
        One read and one write may be in progress at once (independently). A read is accepted
        (``arready``) when no read is in progress; its address is registered, the read ports
        are driven from that register, their data taken three cycles later and answered on
        ``r`` (``rvalid`` rises four cycles after the cycle of ``arvalid & arready`` and stays
        until ``rready``). A write is accepted when ``awvalid`` and ``wvalid`` are both high
        (``awready`` = ``wready``: an AXI4-Lite slave may wait for both), no response is
        pending and no setting waits to be taken (so ``tc_cfg`` / ``cc_cfg`` hold their
        payload while valid); ``bvalid`` follows one cycle later. The ``CC`` parameter words
        are staged: only ``CC_COMMIT`` sends them, all at once, and it is refused when they
        are out of range (see :data:`~rocegen.gateware.roce.endpoint.regmap.CC_WORDS`). Bad accesses:
        see :mod:`~rocegen.gateware.roce.endpoint.regmap` (SLVERR, counted in ``REG_BAD_WRITES`` /
        ``REG_BAD_READS``, saturating). The block only reads the endpoint's read ports, which
        no other logic uses, so reads never change traffic.
    """

    def __init__(self, config, *, mac, ip, settings=False):
        num_qps = config["num_qps"]
        if not 1 <= num_qps <= MAX_QPS:
            raise ValueError(f"num_qps must be 1..{MAX_QPS}, not {num_qps}")
        if not isinstance(settings, bool):
            raise TypeError(f"settings must be a bool, not {settings!r}")
        self.config = dict(config)
        self.num_qps = num_qps
        self.settings = settings
        #: The block drives the endpoint's DCQCN ports (``settings`` and a core with DCQCN).
        self.cc = settings and bool(config.get("dcqcn"))
        #: The block drives the IB CM's connects and disconnects (``settings`` and a core with
        #: ``rdma_cm_ports``).
        self.rdma_cm = settings and bool(config.get("rdma_cm_ports"))
        self.values = register_values(config, mac, ip)
        self.tc_init, self.cc_init = settings_reset(config)
        members = {
            **axil_members("s_axil"),
            "local_mac": Out(48), "local_ip": Out(32),
            "stats_addr": Out(range(len(STATS))), "stats_data": In(32),
            "qp_stats_qp": Out(range(num_qps)), "qp_stats_sel": Out(range(len(QP_COUNTERS))),
            "qp_stats_data": In(32),
            "qp_info_qp": Out(range(num_qps)), "qp_info_context": In(QP_CONTEXT),
            "qp_info_psn": In(24),
            "qp_open": In(num_qps),
            "gen_busy": In(1), "gen_posted": In(32), "gen_ok": In(32), "gen_err": In(32),
            "gen_cycles": In(32),
            "reading": Out(1),
        }
        if settings:
            members["tc_cfg"] = Out(stream.Signature(TRAFFIC_CONFIG))
        if self.cc:
            members.update({"cc_cfg": Out(stream.Signature(DCQCN_CONFIG)),
                            "cc_qp": Out(range(num_qps)), "cc_rate": In(RATE_BITS)})
        if self.rdma_cm:
            members.update({"rdma_cm_connect": Out(stream.Signature(CONNECT)),
                            "rdma_cm_disconnect": Out(stream.Signature(8)),
                            "rdma_cm_event": In(stream.Signature(CM_EVENT))})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        self._bad_writes = Signal(32)
        self._bad_reads = Signal(32)
        writes, reads, busy = {}, {}, []    # word address -> write handler / read value
        self._registers(m, writes, reads)
        if self.settings:
            busy.append(self._traffic_class(m, writes, reads))
        if self.cc:
            busy.append(self._congestion(m, writes, reads))
        if self.rdma_cm:
            busy += self._rdma_cm(m, writes, reads)
        self._write_port(m, writes, busy)
        self._read_port(m, reads)
        return m

    @staticmethod
    def _store(reg, mask=None):
        """A write handler storing the written bytes (``wstrb``) into ``reg``, masked."""
        def handler(m, data, strb, refuse):
            for b in range((len(reg) + 7) // 8):
                lo, hi = 8 * b, min(8 * b + 8, len(reg))
                src = data[lo:hi]
                if mask is not None:
                    src = src & (mask >> lo) & ((1 << (hi - lo)) - 1)
                with m.If(strb[b]):
                    m.d.sync += reg[lo:hi].eq(src)
        return handler

    def _registers(self, m, writes, reads):
        """The single registers (``TC`` is added by :meth:`_traffic_class`)."""
        self._rw = {}
        status = {"REG_BAD_WRITES": self._bad_writes, "REG_BAD_READS": self._bad_reads,
                  "GEN_BUSY": self.gen_busy, "GEN_POSTED": self.gen_posted, "GEN_OK": self.gen_ok,
                  "GEN_ERR": self.gen_err, "GEN_CYCLES": self.gen_cycles}
        for r in REGISTERS:
            if r.name == "TC":
                continue
            if r.source == "const":
                reads[r.offset >> 2] = Const(self.values[r.name], 32)
            elif r.source == "status":
                reads[r.offset >> 2] = status[r.name]
            else:
                reg = self._rw[r.name] = Signal(r.bits, name=f"reg_{r.name.lower()}",
                                                init=self.values[r.name])
                reads[r.offset >> 2] = reg
                writes[r.offset >> 2] = self._store(reg)
        m.d.comb += [self.local_mac.eq(Cat(self._rw["MAC_LO"], self._rw["MAC_HI"])),
                     self.local_ip.eq(self._rw["IP"])]
        ow, o_count = next((w, n) for w, n in windows_for(self.config) if w.name == "QP_OPEN")
        for j in range(o_count):
            reads[(ow.base >> 2) + j] = self.qp_open[32 * j:min(32 * j + 32, self.num_qps)]

    def _traffic_class(self, m, writes, reads):
        """``TC``: a write goes out on ``tc_cfg`` in the next cycle. Returns the pending flag."""
        r = next(r for r in REGISTERS if r.name == "TC")
        mask = sum(((1 << bits) - 1) << lsb for _, lsb, bits in r.fields)
        reg = Signal(r.bits, name="reg_tc", init=self.values["TC"])
        pending = Signal()
        store = self._store(reg, mask)

        def handler(m, data, strb, refuse):
            store(m, data, strb, refuse)
            m.d.sync += pending.eq(1)
        writes[r.offset >> 2] = handler
        reads[r.offset >> 2] = reg
        with m.If(self.tc_cfg.ready):
            m.d.sync += pending.eq(0)
        m.d.comb += self.tc_cfg.valid.eq(pending)
        for name, lsb, bits in r.fields:
            m.d.comb += getattr(self.tc_cfg.payload, name).eq(reg[lsb:lsb + bits])
        return pending

    def _congestion(self, m, writes, reads):
        """The ``CC`` window: staged parameters, the commit, the rate read port. Returns the
        pending flag of ``cc_cfg``."""
        base = next(w.base for w, _ in windows_for(self.config) if w.name == "CC") >> 2
        staged = Signal(DCQCN_CONFIG, init=self.cc_init)
        select = Signal(range(self.num_qps))
        pending = Signal()
        m.d.comb += [self.cc_cfg.valid.eq(pending), self.cc_cfg.payload.eq(staged),
                     self.cc_qp.eq(select)]
        with m.If(self.cc_cfg.ready):
            m.d.sync += pending.eq(0)
        ok = Signal()       # the staged set is in range
        m.d.comb += ok.eq((staged.g_log2 <= G_LOG2_MAX) & (staged.alpha_init <= ALPHA_ONE)
                          & (staged.alpha_period != 0) & (staged.rate_period != 0)
                          & (staged.byte_count != 0) & (staged.line_rate != 0)
                          & (staged.line_rate <= cc_line_rate_max(self.config))
                          & (staged.min_rate <= staged.line_rate))

        def commit(m, data, strb, refuse):
            with m.If(ok):
                m.d.sync += pending.eq(1)
            with m.Else():
                refuse()

        def choose(m, data, strb, refuse):
            with m.If(strb[0]):
                with m.If(data[:8] < self.num_qps):
                    m.d.sync += select.eq(data[:8])
                with m.Else():
                    refuse()

        for k, (name, _, field, _) in enumerate(CC_WORDS):
            if field is not None:
                word = getattr(staged, field)
                writes[base + k] = self._store(word)
                reads[base + k] = word
            elif name == "CC_COMMIT":
                writes[base + k] = commit
                reads[base + k] = Const(0, 32)
            elif name == "CC_RATE_QP":
                writes[base + k] = choose
                reads[base + k] = select
            else:
                reads[base + k] = self.cc_rate
        return pending

    def _rdma_cm(self, m, writes, reads):
        """The ``RDMA_CM`` window: the connect's address and ports, the connect and the
        disconnect (each offered until the endpoint takes it), the events counted and the last
        one kept. Returns the pending flags."""
        base = next(w.base for w, _ in windows_for(self.config) if w.name == "RDMA_CM") >> 2
        word = {name: base + k for k, (name, _, _, _) in enumerate(RDMA_CM_WORDS)}
        dst_ip, ports = Signal(32), Signal(32)
        count, last = Signal(32), Signal(32)
        conn, dis = self.rdma_cm_connect, self.rdma_cm_disconnect
        for o in (conn, dis):
            with m.If(o.ready):
                m.d.sync += o.valid.eq(0)
        m.d.comb += [conn.payload.dst_ip.eq(dst_ip), conn.payload.port.eq(ports[:16]),
                     conn.payload.src_port.eq(ports[16:])]
        for name, reg in (("RDMA_CM_DST_IP", dst_ip), ("RDMA_CM_PORTS", ports)):
            writes[word[name]], reads[word[name]] = self._store(reg), reg

        def connect(m, data, strb, refuse):
            m.d.sync += conn.valid.eq(1)

        def disconnect(m, data, strb, refuse):
            with m.If(data[:8] < self.num_qps):
                m.d.sync += [dis.valid.eq(1), dis.payload.eq(data[:8])]
            with m.Else():
                refuse()

        writes[word["RDMA_CM_CONNECT"]], reads[word["RDMA_CM_CONNECT"]] = connect, Const(0, 32)
        writes[word["RDMA_CM_DISCONNECT"]] = disconnect
        reads[word["RDMA_CM_DISCONNECT"]] = Const(0, 32)
        ev = self.rdma_cm_event
        m.d.comb += ev.ready.eq(1)
        with m.If(ev.valid):
            m.d.sync += [count.eq(count + 1),
                         last.eq(Cat((ev.payload.qpn - QPN_BASE)[:8], ev.payload.reason,
                                     Const(0, 7), ev.payload.ok))]
        reads[word["RDMA_CM_EVENTS"]], reads[word["RDMA_CM_EVENT"]] = count, last
        return [conn.valid, dis.valid]

    def _write_port(self, m, writes, busy):
        """The write channels: each write is decoded by word address to its handler; a write
        to any other address is refused."""
        p = lambda name: getattr(self, f"s_axil_{name}")  # noqa: E731
        bad_writes = self._bad_writes
        bvalid = Signal()
        bresp = Signal(2)
        take_w = Signal()
        held = Cat(*busy).any() if busy else 0      # a setting waits to be taken
        m.d.comb += [take_w.eq(p("awvalid") & p("wvalid") & ~bvalid & ~held),
                     p("awready").eq(take_w), p("wready").eq(take_w),
                     p("bvalid").eq(bvalid), p("bresp").eq(bresp)]
        with m.If(bvalid & p("bready")):
            m.d.sync += bvalid.eq(0)

        def refuse():
            m.d.sync += bresp.eq(SLVERR)
            with m.If(bad_writes != 0xFFFF_FFFF):
                m.d.sync += bad_writes.eq(bad_writes + 1)

        with m.If(take_w):
            m.d.sync += [bvalid.eq(1), bresp.eq(OKAY)]
            with m.Switch(p("awaddr")[2:]):
                for addr, handler in writes.items():
                    with m.Case(addr):
                        handler(m, p("wdata"), p("wstrb"), refuse)
                with m.Default():
                    refuse()

    def _read_port(self, m, reads):
        """The read channels: address register, two cycles for the read ports, then the
        answer."""
        p = lambda name: getattr(self, f"s_axil_{name}")  # noqa: E731
        windows = {w.name: (w, count) for w, count in windows_for(self.config)}
        bad_reads = self._bad_reads
        busy = Signal()
        rvalid = Signal()
        wait = Signal(2)
        raddr = Signal(ADDR_WIDTH - 2)
        m.d.comb += [p("arready").eq(~busy), p("rvalid").eq(rvalid),
                     self.reading.eq(busy & ~rvalid)]
        rdata = Signal(32)
        rresp = Signal(2)
        m.d.comb += [p("rdata").eq(rdata), p("rresp").eq(rresp)]
        with m.If(p("arvalid") & ~busy):
            m.d.sync += [busy.eq(1), raddr.eq(p("araddr")[2:]), wait.eq(2)]

        # the read ports, from the address register
        cw, c_count = windows["COUNTER"]
        qcw, _ = windows["QP_COUNTER"]
        qw, _ = windows["QP"]
        byte = Cat(Const(0, 2), raddr)
        qc_shift = (qcw.stride - 1).bit_length()
        q_shift = (qw.stride - 1).bit_length()
        qp_bits = max(1, (self.num_qps - 1).bit_length())
        m.d.comb += [
            self.stats_addr.eq(byte[2:2 + len(self.stats_addr)]),
            self.qp_stats_qp.eq(byte[qc_shift:qc_shift + qp_bits]),
            self.qp_stats_sel.eq(byte[2:2 + len(self.qp_stats_sel)]),
            self.qp_info_qp.eq(byte[q_shift:q_shift + qp_bits]),
        ]

        def in_window(w, count, per_block):
            """(is the address in the first ``count`` blocks of ``w``, at a word < per_block)"""
            size = w.stride * w.max_count
            inside = (byte & ~(size - 1)) == w.base
            block = (byte & (size - 1)) >> (w.stride.bit_length() - 1)
            word = (byte & (w.stride - 1)) >> 2
            return inside & (block < count) & (word < per_block)

        value = Signal(32)
        hit = Signal()
        ctx = self.qp_info_context
        qp_word = (byte & (qw.stride - 1)) >> 2
        with m.Switch(raddr):
            for addr, source in reads.items():
                with m.Case(addr):
                    m.d.comb += [hit.eq(1), value.eq(source)]
            with m.Default():
                with m.If(in_window(cw, c_count, 1)):
                    m.d.comb += [hit.eq(1), value.eq(self.stats_data)]
                with m.Elif(in_window(qcw, self.num_qps, len(QP_COUNTERS))):
                    m.d.comb += [hit.eq(1), value.eq(self.qp_stats_data)]
                with m.Elif(in_window(qw, self.num_qps, len(QP_WORDS))):
                    m.d.comb += hit.eq(1)
                    with m.Switch(qp_word):
                        for k, (_, fields) in enumerate(QP_WORDS):
                            with m.Case(k):
                                for f, lsb, bits, shift in fields:
                                    src = self.qp_info_psn if f == "psn" else getattr(ctx, f)
                                    src = src.as_value() if hasattr(src, "as_value") else src
                                    m.d.comb += value[lsb:lsb + bits].eq(src[shift:shift + bits])

        with m.If(busy & ~rvalid):
            m.d.sync += wait.eq(wait - 1)
            with m.If(wait == 0):
                m.d.sync += [rvalid.eq(1), rdata.eq(value), rresp.eq(OKAY)]
                with m.If(~hit):
                    m.d.sync += [rdata.eq(0), rresp.eq(SLVERR)]
                    with m.If(bad_reads != 0xFFFF_FFFF):
                        m.d.sync += bad_reads.eq(bad_reads + 1)
        with m.If(rvalid & p("rready")):
            m.d.sync += [rvalid.eq(0), busy.eq(0)]
