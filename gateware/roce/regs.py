"""The AXI4-Lite control and status slave of the endpoint, generated from the register table of
:mod:`rocegen.gateware.roce.regmap`."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.endpoint import QP_COUNTERS, STATS
from rocegen.gateware.roce.layouts import MAX_QPS, QP_CONTEXT
from rocegen.gateware.roce.regmap import ADDR_WIDTH, QP_WORDS, REGISTERS, register_values, windows_for

__all__ = ["AxiLiteRegs", "axil_members", "OKAY", "SLVERR"]

OKAY, SLVERR = 0, 2


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
    (:mod:`~rocegen.gateware.roce.regmap`): identity and build configuration, our MAC and IPv4
    addresses (read/write), the connection manager's settings, the traffic generator's status,
    every counter, the per-QP counters and the QP table read back.

    Parameters
    ----------
    config : dict
        The endpoint's :attr:`~rocegen.gateware.roce.endpoint.RoceEndpoint.config`.
    mac, ip : int
        Reset values of ``MAC_HI``/``MAC_LO`` and ``IP``.

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

    Behaviour
        One read and one write may be in progress at once (independently). A read is accepted
        (``arready``) when no read is in progress; its address is registered, the read ports
        are driven from that register, their data taken three cycles later and answered on
        ``r`` (``rvalid`` rises four cycles after the cycle of ``arvalid & arready`` and stays
        until ``rready``). A write is accepted when ``awvalid`` and ``wvalid`` are both high
        (``awready`` = ``wready``: an AXI4-Lite slave may wait for both) and no response is
        pending; ``bvalid`` follows one cycle later. Bad accesses: see
        :mod:`~rocegen.gateware.roce.regmap` (SLVERR, counted in ``REG_BAD_WRITES`` /
        ``REG_BAD_READS``, saturating). The block only reads the endpoint's read ports, which no
        other logic uses, so reads never change traffic.
    """

    def __init__(self, config, *, mac, ip):
        num_qps = config["num_qps"]
        if not 1 <= num_qps <= MAX_QPS:
            raise ValueError(f"num_qps must be 1..{MAX_QPS}, not {num_qps}")
        self.config = dict(config)
        self.num_qps = num_qps
        self.values = register_values(config, mac, ip)
        super().__init__({
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
        })

    def elaborate(self, platform):
        m = Module()
        p = lambda name: getattr(self, f"s_axil_{name}")  # noqa: E731
        windows = {w.name: (w, count) for w, count in windows_for(self.config)}

        # read/write registers
        rw = {r.name: Signal(r.bits, name=f"reg_{r.name.lower()}", init=self.values[r.name])
              for r in REGISTERS if r.source == "rw"}
        m.d.comb += [self.local_mac.eq(Cat(rw["MAC_LO"], rw["MAC_HI"])),
                     self.local_ip.eq(rw["IP"])]
        bad_writes = Signal(32)
        bad_reads = Signal(32)
        status = {"REG_BAD_WRITES": bad_writes, "REG_BAD_READS": bad_reads,
                  "GEN_BUSY": self.gen_busy, "GEN_POSTED": self.gen_posted, "GEN_OK": self.gen_ok,
                  "GEN_ERR": self.gen_err, "GEN_CYCLES": self.gen_cycles}

        # ---- writes
        bvalid = Signal()
        bresp = Signal(2)
        take_w = Signal()
        m.d.comb += [take_w.eq(p("awvalid") & p("wvalid") & ~bvalid),
                     p("awready").eq(take_w), p("wready").eq(take_w),
                     p("bvalid").eq(bvalid), p("bresp").eq(bresp)]
        with m.If(bvalid & p("bready")):
            m.d.sync += bvalid.eq(0)
        waddr = p("awaddr")[2:]
        with m.If(take_w):
            m.d.sync += [bvalid.eq(1), bresp.eq(SLVERR)]
            with m.Switch(waddr):
                for r in REGISTERS:
                    if r.source != "rw":
                        continue
                    with m.Case(r.offset >> 2):
                        reg = rw[r.name]
                        m.d.sync += bresp.eq(OKAY)
                        for b in range((r.bits + 7) // 8):
                            hi = min(8 * b + 8, r.bits)
                            with m.If(p("wstrb")[b]):
                                m.d.sync += reg[8 * b:hi].eq(p("wdata")[8 * b:hi])
                with m.Default():
                    with m.If(bad_writes != 0xFFFF_FFFF):
                        m.d.sync += bad_writes.eq(bad_writes + 1)

        # ---- reads: address register, two cycles for the read ports, then the answer
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
        ow, o_count = windows["QP_OPEN"]
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
            for r in REGISTERS:
                with m.Case(r.offset >> 2):
                    m.d.comb += hit.eq(1)
                    if r.source == "const":
                        m.d.comb += value.eq(self.values[r.name])
                    elif r.source == "rw":
                        m.d.comb += value.eq(rw[r.name])
                    else:
                        m.d.comb += value.eq(status[r.name])
            for j in range(o_count):
                with m.Case((ow.base >> 2) + j):
                    m.d.comb += [hit.eq(1),
                                 value.eq(self.qp_open[32 * j:min(32 * j + 32, self.num_qps)])]
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
        return m
