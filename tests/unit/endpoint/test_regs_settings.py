"""The register block's run-time settings: the traffic class (``TC`` -> ``tc_cfg``) and DCQCN's
parameters and rates (the ``CC`` window -> ``cc_cfg``, ``cc_qp`` / ``cc_rate``), driven by
AXI4-Lite reads and writes in Amaranth's simulator with random delays on every channel."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Fragment, UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.core import CoreTop
from rocegen.gateware.lib.records import pack, unpack
from rocegen.gateware.roce.cc.dcqcn_layouts import DCQCN_CONFIG, dcqcn_config, rate_units
from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
from rocegen.gateware.roce.endpoint.regmap import python_accessor
from rocegen.gateware.roce.endpoint.regs import OKAY, SLVERR, AxiLiteRegs
from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
from rocegen.sim.testing.harness import raises, run_sim

# addresses as the register map documents them (docs/registers.md), written out here
TC, BAD_WRITES, BAD_READS = 0x04C, 0x080, 0x084
CC_COMMIT, CC_RATE_QP, CC_RATE = 0x100, 0x104, 0x108
CC_PARAMS = {"bypass": 0x10C, "g_log2": 0x110, "alpha_init": 0x114, "alpha_period": 0x118,
             "rate_period": 0x11C, "byte_count": 0x120, "fast_steps": 0x124, "r_ai": 0x128,
             "r_hai": 0x12C, "min_rate": 0x130, "line_rate": 0x134}
FIELD_BITS = {"bypass": 1, "g_log2": 5, "alpha_init": 17, "alpha_period": 24,
              "rate_period": 24, "byte_count": 32, "fast_steps": 8, "r_ai": 27, "r_hai": 27,
              "min_rate": 27, "line_rate": 27}


def _endpoint(width, num_qps, **params):
    """An endpoint (for its configuration and reset state), without the warnings Amaranth
    gives for the parts it never elaborates."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        ep = RoceEndpoint(width, num_qps, **params)
        facts = ep.config, ep.tc_init, getattr(ep._rp, "config", None)
        del ep
        gc.collect()
    return facts


def _config(width=64, num_qps=3, **params):
    return _endpoint(width, num_qps, **params)[0]


def _tc_word(dscp, ecn, pcp):
    return dscp | ecn << 8 | pcp << 16


class Master:
    """AXI4-Lite master of ``dut``'s ``s_axil_*`` with random delays before each request and
    before taking each answer."""

    def __init__(self, ctx, dut, rng):
        self.ctx, self.dut, self.rng = ctx, dut, rng

    def p(self, name):
        return getattr(self.dut, f"s_axil_{name}")

    async def idle(self, choices=(0, 0, 1, 3)):
        for _ in range(self.rng.choice(choices)):
            await self.ctx.tick()

    async def write(self, addr, value, strb=0xF):
        ctx, p = self.ctx, self.p
        await self.idle()
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
        await self.idle((0, 1, 2))
        resp = ctx.get(p("bresp"))
        ctx.set(p("bready"), 1)
        await ctx.tick()
        ctx.set(p("bready"), 0)
        return resp

    async def read(self, addr):
        ctx, p = self.ctx, self.p
        await self.idle()
        ctx.set(p("araddr"), addr)
        ctx.set(p("arvalid"), 1)
        await ctx.tick().until(p("arready"))
        ctx.set(p("arvalid"), 0)
        await ctx.tick().until(p("rvalid"))
        await self.idle((0, 1, 2))
        value, resp = ctx.get(p("rdata")), ctx.get(p("rresp"))
        ctx.set(p("rready"), 1)
        await ctx.tick()
        ctx.set(p("rready"), 0)
        return value, resp


def _monitor(dut, log, stream_name, ready=lambda n: True):
    """A process recording, per clock edge, the write handshakes (``("w", tick, addr)``) and
    the transfers of ``dut.<stream_name>`` (``("cfg", tick, fields)``), driving its ready."""
    stream = getattr(dut, stream_name)
    layout = data.Layout.cast(stream.payload.shape())

    async def process(ctx):
        tick = 0
        ctx.set(stream.ready, ready(0))
        async for _, _, awv, awr, addr, valid, rdy, payload in ctx.tick().sample(
                dut.s_axil_awvalid, dut.s_axil_awready, dut.s_axil_awaddr, stream.valid,
                stream.ready, stream.payload.as_value()):
            if awv and awr:
                log.append(("w", tick, addr))
            if valid and rdy:
                log.append(("cfg", tick, {name: (payload >> f.offset) & ((1 << f.width) - 1)
                                          for name, f in layout}))
            tick += 1
            ctx.set(stream.ready, ready(tick))
    return process


@pytest.mark.parametrize("seed", [1, 2])
def test_tc_write_sends_the_traffic_class(seed):
    """Reset value from the generation parameters; a TC write sends its fields on tc_cfg in
    the cycle after it is accepted, once; byte strobes; other bits ignored; while tc_cfg is
    not taken, valid holds and the next write waits."""
    rng = random.Random(seed)
    cfg = {**_config(dscp=26, ecn=False), "pcp": 3}
    dut = AxiLiteRegs(cfg, mac=0, ip=0, settings=True)
    log, out = [], {}
    clock, stall = [0], [0, 0]          # tc_cfg is not taken at edges stall[0]..stall[1] - 1

    def ready(tick):
        clock[0] = tick
        return not stall[0] <= tick < stall[1]

    async def bench(ctx):
        axil = Master(ctx, dut, rng)
        out["reset"] = await axil.read(TC)
        out["w1"] = await axil.write(TC, 0xFFF8_FC00 | _tc_word(46, 2, 5))
        out["r1"] = await axil.read(TC)
        out["w2"] = await axil.write(TC, _tc_word(7, 1, 1), strb=0b0001)   # DSCP byte only
        out["r2"] = await axil.read(TC)
        stall[:] = [clock[0] + 1, clock[0] + 40]
        out["w3"] = await axil.write(TC, _tc_word(1, 0, 7))
        out["w4"] = await axil.write(TC, _tc_word(2, 2, 6))
        out["r4"] = await axil.read(TC)

    run_sim(dut, testbenches=[bench], processes=[_monitor(dut, log, "tc_cfg", ready)])
    assert out["reset"] == (_tc_word(26, 0, 3), OKAY)
    assert out["w1"] == OKAY and out["r1"] == (_tc_word(46, 2, 5), OKAY)
    assert out["w2"] == OKAY and out["r2"] == (_tc_word(7, 2, 5), OKAY)
    assert out["w3"] == out["w4"] == OKAY and out["r4"] == (_tc_word(2, 2, 6), OKAY)
    writes = [t for kind, t, addr in log if kind == "w"]
    sent = [(t, f) for kind, t, f in log if kind == "cfg"]
    assert [f for _, f in sent] == [{"dscp": 46, "ecn": 2, "pcp": 5},
                                    {"dscp": 7, "ecn": 2, "pcp": 5},
                                    {"dscp": 1, "ecn": 0, "pcp": 7},
                                    {"dscp": 2, "ecn": 2, "pcp": 6}]
    # taken in the cycle after the write when tc_cfg is ready; the third waits out the stall,
    # and the fourth write is accepted only after the third setting was taken
    assert sent[0][0] == writes[0] + 1 and sent[1][0] == writes[1] + 1
    assert stall[0] <= writes[2] + 1 < stall[1] and sent[2][0] == stall[1]
    assert writes[3] > sent[2][0] and sent[3][0] == writes[3] + 1


def _cc_config_random(rng, cfg):
    """A DCQCN configuration in range for a core of ``cfg``, every field random."""
    top = cfg["width"] // 8 << 20
    line = rng.randrange(1, top + 1)
    return {"bypass": rng.randrange(2), "g_log2": rng.randrange(17),
            "alpha_init": rng.randrange((1 << 16) + 1), "alpha_period": rng.randrange(1, 1 << 24),
            "rate_period": rng.randrange(1, 1 << 24), "byte_count": rng.randrange(1, 1 << 32),
            "fast_steps": rng.randrange(256), "r_ai": rng.randrange(1 << 27),
            "r_hai": rng.randrange(1 << 27), "min_rate": rng.randrange(line + 1),
            "line_rate": line}


@pytest.mark.parametrize("width,seed", [(64, 1), (512, 2)])
def test_cc_words_go_out_at_commit_only(width, seed):
    """Reset values from the generation parameters; words written, then CC_COMMIT: one
    cc_cfg transfer with every field; nothing before the commit; a partial set keeps the
    other words; a set out of range is refused (SLVERR, counted, nothing sent)."""
    rng = random.Random(seed)
    cfg = _config(width, 2, dcqcn=True)
    dut = AxiLiteRegs(cfg, mac=0, ip=0, settings=True)
    log, out = [], {}
    want = dcqcn_config(cfg["clk_hz"], 10 if width == 64 else 100)   # the published defaults
    new = _cc_config_random(rng, cfg)

    async def bench(ctx):
        axil = Master(ctx, dut, rng)
        out["reset"] = {f: await axil.read(a) for f, a in CC_PARAMS.items()}
        out["rate_qp"] = await axil.read(CC_RATE_QP)
        out["commit_read"] = await axil.read(CC_COMMIT)
        fields = list(CC_PARAMS)
        rng.shuffle(fields)
        for f in fields:        # bits above the field's width are ignored
            out[f] = await axil.write(CC_PARAMS[f], new[f] | (~0 << FIELD_BITS[f]) & 0xFFFF_FFFF)
        out["before"] = len([e for e in log if e[0] == "cfg"])
        out["back"] = {f: await axil.read(a) for f, a in CC_PARAMS.items()}
        out["commit"] = await axil.write(CC_COMMIT, rng.randrange(1 << 32))
        out["bypass"] = await axil.write(CC_PARAMS["bypass"], 1 - new["bypass"], strb=0b0001)
        out["commit2"] = await axil.write(CC_COMMIT, 0)
        # out of range: min_rate above line_rate, then g_log2 above 16
        out["min"] = await axil.write(CC_PARAMS["min_rate"], new["line_rate"] + 1)
        out["bad1"] = await axil.write(CC_COMMIT, 0)
        out["min_ok"] = await axil.write(CC_PARAMS["min_rate"], new["min_rate"])
        out["g"] = await axil.write(CC_PARAMS["g_log2"], 17)
        out["bad2"] = await axil.write(CC_COMMIT, 0)
        out["bad_writes"] = await axil.read(BAD_WRITES)
        await ctx.tick().repeat(5)

    run_sim(dut, testbenches=[bench], processes=[_monitor(dut, log, "cc_cfg")])
    assert out["reset"] == {f: (v, OKAY) for f, v in want.items()}
    assert out["rate_qp"] == (0, OKAY) and out["commit_read"] == (0, OKAY)
    assert all(out[f] == OKAY for f in CC_PARAMS)
    assert out["before"] == 0
    assert out["back"] == {f: (v, OKAY) for f, v in new.items()}
    writes = [(t, addr) for kind, t, addr in log if kind == "w"]
    sent = [(t, f) for kind, t, f in log if kind == "cfg"]
    commits = [t for t, addr in writes if addr == CC_COMMIT]
    assert out["commit"] == out["commit2"] == OKAY
    assert [f for _, f in sent] == [new, {**new, "bypass": 1 - new["bypass"]}]
    assert [t for t, _ in sent] == [commits[0] + 1, commits[1] + 1]
    assert out["bad1"] == out["bad2"] == SLVERR and out["bad_writes"] == (2, OKAY)


def test_cc_rate_reads_the_rate_port():
    """CC_RATE answers the value on cc_rate for the QP written to CC_RATE_QP (cc_qp); an index
    beyond the QP table is refused."""
    rng = random.Random(5)
    num_qps = 5
    dut = AxiLiteRegs(_config(64, num_qps, dcqcn=True), mac=0, ip=0, settings=True)
    rates = [rng.randrange(1 << 27) for _ in range(num_qps)]
    out = {}

    async def port(ctx):          # the endpoint's read port: the rate one cycle later
        async for _, _, qp in ctx.tick().sample(dut.cc_qp):
            ctx.set(dut.cc_rate, rates[qp])

    async def bench(ctx):
        axil = Master(ctx, dut, rng)
        order = list(range(num_qps))
        rng.shuffle(order)
        for qp in order:
            out[qp] = (await axil.write(CC_RATE_QP, qp), await axil.read(CC_RATE_QP),
                       await axil.read(CC_RATE))
        out["bad"] = await axil.write(CC_RATE_QP, num_qps)
        out["kept"] = await axil.read(CC_RATE_QP)
        out["last"] = order[-1]
        out["ro"] = await axil.write(CC_RATE, 1)
        out["bad_writes"] = await axil.read(BAD_WRITES)

    run_sim(dut, testbenches=[bench], processes=[port])
    for qp in range(num_qps):
        assert out[qp] == (OKAY, (qp, OKAY), (rates[qp], OKAY)), qp
    assert out["bad"] == SLVERR and out["kept"] == (out["last"], OKAY)
    assert out["ro"] == SLVERR and out["bad_writes"] == (2, OKAY)


@pytest.mark.parametrize("settings", [False, True])
def test_cc_window_unmapped_without_dcqcn(settings):
    """Without DCQCN the CC window answers SLVERR and counts, reads and writes; without
    ``settings`` TC does too, and the block has none of the settings ports."""
    rng = random.Random(7)
    dut = AxiLiteRegs(_config(64, 2), mac=0, ip=0, settings=settings)
    members = set(dut.signature.members)
    assert not members & {"cc_cfg", "cc_qp", "cc_rate"}
    assert ("tc_cfg" in members) == settings
    out = {}
    addrs = [CC_COMMIT, CC_RATE_QP, CC_RATE, *CC_PARAMS.values(), 0x1FC]

    async def bench(ctx):
        axil = Master(ctx, dut, rng)
        out["reads"] = [await axil.read(a) for a in addrs]
        out["writes"] = [await axil.write(a, 1) for a in addrs]
        out["tc_w"] = await axil.write(TC, 5)
        out["tc_r"] = await axil.read(TC)
        out["bad"] = (await axil.read(BAD_WRITES), await axil.read(BAD_READS))

    run_sim(dut, testbenches=[bench])
    assert out["reads"] == [(0, SLVERR)] * len(addrs)
    assert out["writes"] == [SLVERR] * len(addrs)
    if settings:
        assert out["tc_w"] == OKAY and out["tc_r"] == (_tc_word(5, 0, 0), OKAY)
    else:
        assert out["tc_w"] == SLVERR and out["tc_r"] == (0, SLVERR)
    n = len(addrs) + (0 if settings else 1)
    assert out["bad"] == ((n, OKAY), (n, OKAY))


@pytest.mark.parametrize("params", [
    {"width": 512, "dscp": 0, "ecn": True},
    {"width": 128, "dscp": 46, "ecn": False, "clk_hz": 200_000_000, "line_gbps": 25},
])
def test_reset_values_follow_the_generation_parameters(params):
    """The reset values of TC and the CC words are the endpoint's own reset state: as computed
    here from the parameters, and as the endpoint's reaction point and traffic class start."""
    width = params.pop("width")
    config, tc_init, rp_config = _endpoint(width, 2, dcqcn=True, **params)
    dut = AxiLiteRegs(config, mac=0, ip=0, settings=True)
    clk = params.get("clk_hz", 322_265_625 if width > 64 else 156_250_000)
    line = params.get("line_gbps", 100 if width > 64 else 10)
    assert dut.values["TC"] == _tc_word(params["dscp"], 2 if params["ecn"] else 0, 0)
    assert dut.values["TC"] == _tc_word(**tc_init)
    # the published defaults at this clock and line: 55 us timers, 40 / 400 / 100 Mb/s
    assert dut.values["CC_ALPHA_PERIOD"] == dut.values["CC_RATE_PERIOD"] == round(55e-6 * clk)
    assert dut.values["CC_R_AI"] == round(40e6 * (1 << 20) / (8 * clk))
    assert dut.values["CC_LINE_RATE"] == rate_units(line * 1e9, clk)
    cc = {f: dut.values[f"CC_{f.upper()}"] for f in CC_PARAMS}
    assert cc == dcqcn_config(clk, line) == rp_config
    assert dut.values["CC_RATE_QP"] == 0
    # dcqcn_params and pcp count when the configuration holds them
    cfg = {**config, "pcp": 6, "dcqcn_params": {"timer_us": 20, "bypass": True}}
    dut = AxiLiteRegs(cfg, mac=0, ip=0, settings=True)
    assert dut.values["TC"] >> 16 == 6
    assert dut.values["CC_RATE_PERIOD"] == round(20e-6 * clk) and dut.values["CC_BYPASS"] == 1
    Fragment.get(dut, None)


def test_settings_parameter():
    raises(TypeError, "settings must be a bool", lambda: AxiLiteRegs(_config(), mac=0, ip=0,
                                                                     settings=1))


def test_accessor_sets_and_reads_the_settings():
    """The generated Python accessor: the traffic class, the DCQCN parameters (the words
    written first, CC_COMMIT last), a QP's rate (CC_RATE_QP written before CC_RATE is read);
    a core without DCQCN has no CC registers."""
    cfg = _config(64, 4, dcqcn=True)
    ns = {}
    exec(python_accessor(cfg, 0, 0), ns)
    ops, mem = [], {}

    class Bus:
        def read(self, addr):
            ops.append(("r", addr))
            return mem.get(addr, 0)

        def write(self, addr, value):
            ops.append(("w", addr, value))
            mem[addr] = value
    regs = ns["Registers"](Bus())
    regs.set_tc(46, 2, 5)
    assert mem[TC] == _tc_word(46, 2, 5) and regs.tc() == {"dscp": 46, "ecn": 2, "pcp": 5}
    ops.clear()
    regs.set_cc_config(g_log2=4, min_rate=1234)
    assert ops == [("w", CC_PARAMS["g_log2"], 4), ("w", CC_PARAMS["min_rate"], 1234),
                   ("w", CC_COMMIT, 1)]
    assert regs.cc_config()["min_rate"] == 1234
    ops.clear()
    mem[CC_RATE] = 999
    assert regs.cc_rate(3) == 999 and ops == [("w", CC_RATE_QP, 3), ("r", CC_RATE)]
    with pytest.raises(KeyError, match="unknown DCQCN"):
        regs.set_cc_config(rate=1)

    import asyncio
    order = []

    class AsyncBus:
        async def read(self, addr):
            order.append(("r", addr))
            return 7

        async def write(self, addr, value):
            order.append(("w", addr, value))
    aregs = ns["Registers"](AsyncBus())
    assert asyncio.run(aregs.cc_rate(2)) == 7
    asyncio.run(aregs.set_cc_config(bypass=1))
    assert order == [("w", CC_RATE_QP, 2), ("r", CC_RATE), ("w", CC_PARAMS["bypass"], 1),
                     ("w", CC_COMMIT, 1)]
    ns = {}
    exec(python_accessor(_config(64, 4), 0, 0), ns)
    with pytest.raises(RuntimeError, match="without DCQCN"):
        ns["Registers"](Bus()).cc_rate(0)


def test_dcqcn_config_layout_matches_the_words():
    assert {n: f.width for n, f in data.Layout.cast(DCQCN_CONFIG)} == FIELD_BITS


def test_core_top_gives_the_settings_to_the_register_block():
    """CoreTop with the register block: tc_cfg and the DCQCN ports are not top-level ports
    (they are without it); through the real endpoint, CC_RATE reads a QP's rate after reset
    (the line rate) and, after a commit with the bypass and a new line rate, the new one."""
    core = CoreTop(64, 2, axil=True, dcqcn=True)
    members = set(core.signature.members)
    assert not {n for n in members if n.startswith(("tc_cfg", "cc_"))}
    assert {"tc_cfg_data", "cc_cfg_data", "cc_qp", "cc_rate"} <= set(_flat_members())
    line = rate_units(10e9, 156_250_000)            # 10 Gb/s at 156.25 MHz (W = 64)
    new_line = rate_units(4e9, 156_250_000)
    rng = random.Random(3)
    out = {}

    async def bench(ctx):
        axil = Master(ctx, core, rng)
        out["reset"] = await axil.read(CC_PARAMS["line_rate"])
        await axil.write(CC_RATE_QP, 1)
        out["rate"] = await axil.read(CC_RATE)
        await axil.write(CC_PARAMS["line_rate"], new_line)
        await axil.write(CC_PARAMS["bypass"], 1)
        out["unchanged"] = await axil.read(CC_RATE)
        out["commit"] = await axil.write(CC_COMMIT, 0)
        for _ in range(50):
            out["after"] = await axil.read(CC_RATE)
            if out["after"] == (new_line, OKAY):
                break
        out["tc"] = await axil.write(TC, _tc_word(10, 2, 0))

    run_sim(core, testbenches=[bench], deadline_cycles=20_000)
    assert out["reset"] == (line, OKAY) and out["rate"] == (line, OKAY)
    assert out["unchanged"] == (line, OKAY) and out["commit"] == OKAY
    assert out["after"] == (new_line, OKAY) and out["tc"] == OKAY


def _flat_members():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        members = set(CoreTop(64, 2, dcqcn=True).signature.members)
        gc.collect()
    return members


# the RDMA_CM window, as the register map documents it
CM_DST_IP, CM_PORTS, CM_CONNECT, CM_DISCONNECT, CM_EVENTS, CM_LAST = range(0x0E0, 0x0F8, 4)


@pytest.mark.parametrize("seed", [1, 2])
def test_rdma_cm_window_connects_disconnects_and_keeps_the_events(seed):
    """With the IB CM: a write of RDMA_CM_CONNECT offers a connect of the address and ports
    written before, held until taken (the next write waits); RDMA_CM_DISCONNECT a QP index,
    refused beyond the QPs; each event is counted and the last kept. Without: the window
    answers SLVERR and the block has none of these ports."""
    rng = random.Random(seed)
    dut = AxiLiteRegs(_config(64, 3, rdma_cm_ports=(7174,)), mac=0, ip=0, settings=True)
    conns, dis, out = [], [], {}
    stall = [0]

    async def take(ctx):
        tick = 0
        async for _, _, cv, cr, cp, dv, dr, dp in ctx.tick().sample(
                dut.rdma_cm_connect.valid, dut.rdma_cm_connect.ready,
                dut.rdma_cm_connect.payload.as_value(), dut.rdma_cm_disconnect.valid,
                dut.rdma_cm_disconnect.ready, dut.rdma_cm_disconnect.payload):
            ready = tick >= stall[0]
            if cv and cr:
                conns.append(cp)
            if dv and dr:
                dis.append(dp)
            ctx.set(dut.rdma_cm_connect.ready, ready and rng.random() < 0.5)
            ctx.set(dut.rdma_cm_disconnect.ready, ready and rng.random() < 0.5)
            tick += 1

    async def event(ctx, ok, qpn, reason):
        ctx.set(dut.rdma_cm_event.payload.as_value(),
                pack(CM_EVENT, {"ok": ok, "qpn": qpn, "dst_ip": 1, "port": 2, "reason": reason}))
        ctx.set(dut.rdma_cm_event.valid, 1)
        await ctx.tick()
        ctx.set(dut.rdma_cm_event.valid, 0)

    async def bench(ctx):
        axil = Master(ctx, dut, rng)
        out["w"] = [await axil.write(CM_DST_IP, 0x0A00_0001),
                    await axil.write(CM_PORTS, 7174 | 0xC001 << 16),
                    await axil.write(CM_CONNECT, 1), await axil.write(CM_DST_IP, 0x0A00_0002),
                    await axil.write(CM_CONNECT, 0), await axil.write(CM_DISCONNECT, 2),
                    await axil.write(CM_DISCONNECT, 3)]
        out["r"] = [await axil.read(a) for a in (CM_DST_IP, CM_PORTS, CM_CONNECT)]
        out["e0"] = [await axil.read(a) for a in (CM_EVENTS, CM_LAST)]
        await event(ctx, 1, 257, 0)
        out["e1"] = [await axil.read(a) for a in (CM_EVENTS, CM_LAST)]
        await event(ctx, 0, 0, 8)
        out["e2"] = [await axil.read(a) for a in (CM_EVENTS, CM_LAST)]

    stall[0] = 30
    run_sim(dut, testbenches=[bench], processes=[take])
    assert out["w"] == [OKAY] * 6 + [SLVERR]
    assert out["r"] == [(0x0A00_0002, OKAY), (7174 | 0xC001 << 16, OKAY), (0, OKAY)]
    assert [unpack(CONNECT, c) for c in conns] == [
        {"dst_ip": 0x0A00_0001, "port": 7174, "src_port": 0xC001},
        {"dst_ip": 0x0A00_0002, "port": 7174, "src_port": 0xC001}]
    assert dis == [2]
    assert out["e0"] == [(0, OKAY), (0, OKAY)]
    assert out["e1"] == [(1, OKAY), (1 << 31 | 1, OKAY)]
    assert out["e2"] == [(2, OKAY), (8 << 8, OKAY)]

    plain = AxiLiteRegs(_config(64, 3), mac=0, ip=0, settings=True)
    assert not set(plain.signature.members) & {"rdma_cm_connect", "rdma_cm_disconnect",
                                                "rdma_cm_event"}
    got = {}

    async def unmapped(ctx):
        axil = Master(ctx, plain, rng)
        got["r"] = await axil.read(CM_EVENTS)
        got["w"] = await axil.write(CM_CONNECT, 1)

    run_sim(plain, testbenches=[unmapped])
    assert got == {"r": (0, SLVERR), "w": SLVERR}


def test_accessor_reaches_the_rdma_cm_window():
    """The generated accessor's IB CM methods write and read the RDMA_CM words (a bus that
    records the writes and answers reads from them); a core without the IB CM refuses."""
    class Bus:
        def __init__(self):
            self.words, self.log = {CM_EVENTS: 4, CM_LAST: 1 << 31 | 3}, []

        def write(self, addr, value):
            self.log.append((addr, value))

        def read(self, addr):
            return self.words.get(addr, 0)

    ns = {}
    exec(python_accessor(_config(64, 3, rdma_cm_ports=(7174,)), 0, 0), ns)
    bus = Bus()
    regs = ns["Registers"](bus)
    regs.rdma_cm_connect(0x0A00_0001, 7174, 0xC002)
    regs.rdma_cm_disconnect(2)
    assert bus.log == [(CM_DST_IP, 0x0A00_0001), (CM_PORTS, 7174 | 0xC002 << 16),
                       (CM_CONNECT, 1), (CM_DISCONNECT, 2)]
    assert regs.rdma_cm_event() == {"count": 4, "ok": 1, "qp": 3, "reason": 0}
    ns = {}
    exec(python_accessor(_config(64, 3), 0, 0), ns)
    raises(RuntimeError, "without the IB CM", lambda: ns["Registers"](Bus()).rdma_cm_disconnect(1))
