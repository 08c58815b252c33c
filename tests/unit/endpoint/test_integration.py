"""The integration kit (SystemVerilog package, port table, template) and the register map's
generated files (docs/registers.md, C header, Python accessor), and the AXI4-Lite register
block in Amaranth's simulator."""

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth.hdl import Shape
from amaranth.lib import data
from amaranth.sim import Simulator

from rocegen.gateware import integration
from rocegen.gateware.core import CoreTop
from rocegen.gateware.roce.endpoint import regmap
from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, STATS, RoceEndpoint
from rocegen.gateware.roce.endpoint.regs import OKAY, SLVERR, AxiLiteRegs
from rocegen.gateware.roce.layouts import QP_CONTEXT, QpState
from rocegen.sim.testing.verilator import verilator_bin_dir

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def core():
    return CoreTop(64, 4, axil=True)


def _sv_types(text):
    """Widths of the package's types and, for structs, their members ``(name, type, lsb,
    width)`` as SystemVerilog packs them: the last member in the least significant bits."""
    widths, structs = {}, {}
    for hi, name in re.findall(r"typedef enum logic \[(\d+):0\] \{.*?\} (\w+);", text, re.S):
        widths[name] = int(hi) + 1
    for body, name in re.findall(r"typedef struct packed \{[^\n]*\n(.*?)\} (\w+);", text, re.S):
        members = []
        for line in body.strip().splitlines():
            m = re.match(r"\s*(logic(?: \[(\d+):0\])?|\w+) (\w+);", line)
            t = m.group(1)
            w = int(m.group(2)) + 1 if m.group(2) else 1 if t == "logic" else widths[t]
            members.append((m.group(3), t, w))
        lsb, packed = 0, []
        for member, t, w in reversed(members):
            packed.append((member, t, lsb, w))
            lsb += w
        widths[name], structs[name] = lsb, packed
    return widths, structs


def test_sv_structs_match_amaranth_layouts(core):
    text = integration.sv_package(core, "core")
    widths, structs = _sv_types(text)
    template = integration.instantiation(core, "core")
    ports = integration.record_ports(core)
    assert {p[0] for p in ports} >= {"wr_data", "cpl_data", "qp_ctl_data", "qp_psn_data",
                                     "gen_data", "msg_meta", "mem_w_data"}

    def check(struct, layout):
        layout = data.Layout.cast(layout)
        assert widths[struct] == layout.size
        got = {integration.sv_name(n): (lsb, w) for n, _, lsb, w in structs[struct]}
        assert len(got) == len(list(layout))
        for name, field in layout:
            assert got[integration.sv_name(name)] == (field.offset, field.width), (struct, name)
            if hasattr(field.shape, "members"):
                inner = next(t for n, t, _, _ in structs[struct] if n == integration.sv_name(name))
                check(inner, field.shape)

    for flat, _, layout, _ in ports:
        struct = re.search(rf"^(\w+) {flat};", template, re.M).group(1)
        check(struct, layout)
    # the QP context is nested, and its field named like an SV keyword is renamed
    assert "qp_ctl_context_t context_;" in text
    # enumeration values as Amaranth's
    assert "QP_STATE_RTS = 3'd3" in text and QpState.RTS.value == 3


def test_sv_package_and_template_compile(core, tmp_path):
    """Verilator parses the package and a module declaring the template's signals."""
    pkg = tmp_path / "core_pkg.sv"
    pkg.write_text(integration.sv_package(core, "core"))
    decls = integration.instantiation(core, "core").split("core u_core")[0]
    top = tmp_path / "user.sv"
    top.write_text("module user(input logic clk, output logic [200:0] o);\n"
                   + decls.replace("import core_pkg::*;", "")
                   + "  assign o = wr_data;\n  assign wr_data.remote_offset = 64'd5;\n"
                   "endmodule\n")
    top.write_text(top.read_text().replace("module user(", "module user import core_pkg::*; ("))
    verilator = verilator_bin_dir() / "verilator"
    r = subprocess.run([str(verilator), "--lint-only", "-Wno-fatal", "-Wno-UNDRIVEN",
                        "-Wno-UNUSEDSIGNAL", str(pkg), str(top)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def test_port_without_description_is_an_error(core, monkeypatch):
    monkeypatch.delitem(integration.PORT_DOCS, "gen_busy")
    with pytest.raises(KeyError, match="gen_busy"):
        integration.port_table(core, "core")


def test_port_table_lists_fields_and_statuses(core):
    table = integration.port_table(core, "core")
    assert "| `remote_offset` | [169:106] | unsigned |" in table   # 32+8+3+32+31 = 106
    for status in ("BAD_QP", "QP_NOT_READY", "LOCAL_ALIGN", "LOCAL_LENGTH", "UNSUPPORTED"):
        assert f"| `{status}` |" in table
    assert "`context_.peer_ip` | [42:11]" in table                  # qp 8 + state 3 = 11
    # ports the register block owns are not top-level ports with it
    assert "`stats_addr`" not in table and "`s_axil_araddr`" in table


def test_docs_registers_is_current():
    assert (ROOT / "docs" / "registers.md").read_text() == regmap.default_docs(), \
        "regenerate: python -m rocegen.gateware.roce.endpoint.regmap > docs/registers.md"


def test_c_header(tmp_path, core):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    cfg = core.endpoint.config
    (tmp_path / "core_regs.h").write_text(regmap.c_header(cfg, core.mac, core.ip, prefix="CORE"))
    (tmp_path / "t.c").write_text(
        '#include "core_regs.h"\n'
        "_Static_assert(CORE_ID == 0x0, \"\");\n"
        "_Static_assert(CORE_ID_VALUE == 0x526F4345u, \"\");\n"
        "_Static_assert(CORE_IP == 0x48, \"\");\n"
        f"_Static_assert(CORE_COUNTER_TX_FRAMES == 0x1000 + 4 * {STATS.index('tx_frames')}, \"\");\n"
        "_Static_assert(CORE_QP_PSN(3) == 0x8000 + 3 * 0x40 + 0x18, \"\");\n"
        "_Static_assert(CORE_QP_TIMERS_TIMEOUT(0x3u << 7) == 3, \"\");\n"
        "_Static_assert(CORE_QP_COUNT == 4, \"\");\n")
    r = subprocess.run([cc, "-fsyntax-only", "-std=c11", str(tmp_path / "t.c")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _accessor(core):
    ns = {}
    exec(regmap.python_accessor(core.endpoint.config, core.mac, core.ip), ns)
    return ns


def test_python_accessor_sync_and_async(core):
    ns = _accessor(core)
    mem = {}

    class Bus:
        def read(self, addr):
            return mem.get(addr, 0)

        def write(self, addr, value):
            mem[addr] = value
    base = 0x8000 + 2 * 0x40
    mem.update({base: 3, base + 4: 0x0A000001, base + 8: 0x42, base + 0x10: 0x89ABCDEF,
                base + 0x14: 0x01234567, base + 0x18: 0x123456,
                base + 0x1C: 0x1234 | 5 << 16 | 2 << 22,
                base + 0x20: 10 | 4 << 4 | 14 << 7 | 7 << 12 | 6 << 15,
                0x1000 + 4 * STATS.index("tx_frames"): 77, 0x0C0: 0b101,
                0x4000 + 0x40 + 4 * QP_COUNTERS.index("acks"): 9})
    regs = ns["Registers"](Bus())
    q = regs.qp(2)
    assert q == {"state": 3, "peer_ip": 0x0A000001, "peer_qpn": 0x42, "rkey": 0,
                 "base_va": 0x0123456789ABCDEF, "psn": 0x123456, "udp_sport": 0x1234, "dscp": 5,
                 "ecn": 2, "pmtu_log2": 10, "ack_every_log2": 4, "timeout": 14, "retry_cnt": 7,
                 "rnr_retry": 6, "state_name": "RTS"}
    assert set(q) - {"state_name", "psn"} == set(data.Layout.cast(QP_CONTEXT).members)
    assert regs.counters()["tx_frames"] == 77 and regs.qp_open() == {0, 2}
    assert regs.qp_counter(1, "acks") == 9
    regs.set_mac(0x0211_2233_4455)
    assert mem[0x40] == 0x0211 and mem[0x44] == 0x2233_4455 and regs.mac() == 0x0211_2233_4455

    class AsyncBus(Bus):
        async def read(self, addr):
            return mem.get(addr, 0)
    regs = ns["Registers"](AsyncBus())
    assert asyncio.run(regs.qp(2)) == q and asyncio.run(regs.counter("tx_frames")) == 77


def test_register_map_is_consistent():
    cfg = RoceEndpoint(64, 256).config
    spans = sorted([(r.offset, r.offset + 4) for r in regmap.REGISTERS]
                   + [(w.base, w.base + w.stride * n) for w, n in regmap.windows_for(cfg)])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] <= 1 << regmap.ADDR_WIDTH


def test_regs_block_in_simulation():
    """Byte strobes, refused writes, reads of every kind of register with the master slow to
    take the answers, in Amaranth's simulator (the read ports stand in for the endpoint's)."""
    cfg = RoceEndpoint(64, 3).config
    dut = AxiLiteRegs(cfg, mac=0x02_00_00_00_00_01, ip=0x0A000002)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def ports(ctx):
        # read ports with one cycle of latency: counter k = 1000 + k, per-QP counter
        # 100 * qp + sel, QP table: peer_ip = qp, state = RTS, psn = 7 * qp
        async for _, _, addr, qsel, qqp, iqp in ctx.tick().sample(
                dut.stats_addr, dut.qp_stats_sel, dut.qp_stats_qp, dut.qp_info_qp):
            ctx.set(dut.stats_data, 1000 + addr)
            ctx.set(dut.qp_stats_data, 100 * qqp + qsel)
            ctx.set(dut.qp_info_context, {"state": QpState.RTS, "peer_ip": iqp, "peer_qpn": 0,
                                          "rkey": 0, "base_va": 0, "pmtu_log2": 0,
                                          "udp_sport": 0, "dscp": 0, "ecn": 0,
                                          "ack_every_log2": 0, "timeout": 0, "retry_cnt": 0,
                                          "rnr_retry": 0})
            ctx.set(dut.qp_info_psn, 7 * iqp)

    results = {}

    async def master(ctx):
        p = lambda n: getattr(dut, f"s_axil_{n}")  # noqa: E731
        ctx.set(dut.qp_open, 0b101)

        async def write(addr, value, strb=0xF):
            ctx.set(p("awaddr"), addr)
            ctx.set(p("wdata"), value)
            ctx.set(p("wstrb"), strb)
            ctx.set(p("awvalid"), 1)
            ctx.set(p("wvalid"), 1)
            await ctx.tick().until(p("awready"))
            ctx.set(p("awvalid"), 0)
            ctx.set(p("wvalid"), 0)
            if not ctx.get(p("bvalid")):
                await ctx.tick().until(p("bvalid"))
            await ctx.tick().repeat(2)          # slow to take the response
            resp = ctx.get(p("bresp"))
            ctx.set(p("bready"), 1)
            await ctx.tick()
            ctx.set(p("bready"), 0)
            return resp

        async def read(addr):
            ctx.set(p("araddr"), addr)
            ctx.set(p("arvalid"), 1)
            await ctx.tick().until(p("arready"))
            ctx.set(p("arvalid"), 0)
            await ctx.tick().until(p("rvalid"))
            await ctx.tick().repeat(3)
            value, resp = ctx.get(p("rdata")), ctx.get(p("rresp"))
            ctx.set(p("rready"), 1)
            await ctx.tick()
            ctx.set(p("rready"), 0)
            return value, resp

        results["w_ip"] = await write(0x48, 0xC0A80109, 0b0101)   # bytes 0 and 2 only
        results["ip"] = await read(0x48)
        results["w_ro"] = await write(0x08, 1)
        results["w_none"] = await write(0x2000, 1)
        results["bad_w"] = await read(0x80)
        results["id"] = await read(0x00)
        results["counter"] = await read(0x1000 + 4 * 12)
        results["counter_end"] = await read(0x1000 + 4 * len(STATS))
        results["qp_counter"] = await read(0x4000 + 2 * 0x40 + 4 * 5)
        results["qp_counter_none"] = await read(0x4000 + 3 * 0x40)
        results["peer_ip"] = await read(0x8000 + 2 * 0x40 + 4)
        results["state"] = await read(0x8000 + 1 * 0x40)
        results["psn"] = await read(0x8000 + 2 * 0x40 + 0x18)
        results["qp_open"] = await read(0xC0)
        results["bad_r"] = await read(0x84)
        results["local_ip"] = ctx.get(dut.local_ip)
        results["local_mac"] = ctx.get(dut.local_mac)

    sim.add_process(ports)
    sim.add_testbench(master)
    sim.run_until(2e-5)
    assert results["w_ip"] == OKAY and results["ip"] == (0x0AA80009, OKAY)
    assert results["local_ip"] == 0x0AA80009 and results["local_mac"] == 0x02_00_00_00_00_01
    assert results["w_ro"] == SLVERR and results["w_none"] == SLVERR
    assert results["bad_w"] == (2, OKAY)
    assert results["id"] == (0x526F4345, OKAY)
    assert results["counter"] == (1012, OKAY)
    assert results["counter_end"] == (0, SLVERR)
    assert results["qp_counter"] == (205, OKAY)
    assert results["qp_counter_none"] == (0, SLVERR)
    assert results["peer_ip"] == (2, OKAY) and results["state"] == (3, OKAY)
    assert results["psn"] == (14, OKAY) and results["qp_open"] == (0b101, OKAY)
    assert results["bad_r"] == (2, OKAY)


def test_core_top_takes_the_ib_cms_ports():
    """The core with the IB CM and its services: its record ports come out whole, the plain
    ones too (``rdma_cm_disconnect`` carries a QP index, 8 bits, not a layout), in the
    integration kit as well (a vector with no type of its own, documented)."""
    from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
    top = CoreTop(64, 2, memory="onchip", phy="axis", responder=True, reads=True,
                  rdma_cm_ports=(7470, 7174), rping_port=7174, rping_client_port=7174,
                  rping_client_size=100)
    widths = {name: Shape.cast(top.signature.members[f"{name}_data"].shape).width
              for name in ("rdma_cm_disconnect", "rdma_cm_connect", "rdma_cm_event")}
    assert widths == {"rdma_cm_disconnect": 8, "rdma_cm_connect": data.Layout.cast(CONNECT).size,
                      "rdma_cm_event": data.Layout.cast(CM_EVENT).size}
    assert "logic [7:0] rdma_cm_disconnect_data;" in integration.instantiation(top, "ep")
    assert "| `rdma_cm_disconnect_data` | input | 8 |" in integration.port_table(top, "ep")
    integration.sv_package(top, "ep")
