"""The CMAC's pause interface (boards/xilinx/): the request glue holds each
``ctl_tx_pause_req`` bit 16 cycles, sends XON as quanta 0 with a resend, and the IP's
flow-control ports are all driven, on with ``pfc`` and off without."""

import random
import re
from pathlib import Path

import pytest
from amaranth.hdl import Const, Fragment, Instance, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.boards.xilinx.cmac import CMAC_MODULE, Cmac, CmacPlacement, connect_pause
from rocegen.boards.xilinx.cmac_pause import REQ_HOLD, CmacPauseTx
from rocegen.sim.testing.harness import raises, run_sim

STUB = Path(__file__).resolve().parents[3] / "boards" / "stubs" / f"{CMAC_MODULE}.v"
PLACE = CmacPlacement("CMACE4_X0Y8", ("X1Y44", "X1Y45", "X1Y46", "X1Y47"),
                      ref_clk_mhz=161.1328125, drp_clk_mhz=125, where="QSFP28 cage 0")


def run_glue(levels, xon_cycles=40):
    """Drive ``xoff`` with ``levels`` (one per cycle); returns per cycle (req, zero, resend)."""
    dut = CmacPauseTx(xon_cycles)
    out = []

    async def tb(ctx):
        for level in levels:
            ctx.set(dut.xoff, level)
            out.append((ctx.get(dut.req), ctx.get(dut.zero), ctx.get(dut.resend)))
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    return out


def bits(trace, index, prio):
    return [t[index] >> prio & 1 for t in trace]


def test_xoff_refresh_xon_timeline():
    # priority 2 requested from cycle 5 to cycle 104, then again at cycle 120
    levels = [0] * 5 + [4] * 100 + [0] * 15 + [4] * 100
    out = run_glue(levels, xon_cycles=40)
    req, zero = bits(out, 0, 2), bits(out, 1, 2)
    resend = [t[2] for t in out]
    assert req.index(1) == 6                          # a rise: XOFF, one cycle later
    assert zero.index(1) == 106                       # the fall: quanta 0 ...
    assert [n for n, r in enumerate(resend) if r] == [106, 121]     # ... sent at once
    assert req[6:121] == [1] * 115                    # XON and a new XOFF while req stands
    assert zero[106:121] == [1] * 15 and zero[121:] == [0] * (len(zero) - 121)
    assert all(t[0] & ~4 == 0 for t in out)


def test_xon_then_release_and_hold():
    levels = [1] * 30 + [0] * 100 + [1] * 60
    out = run_glue(levels, xon_cycles=20)
    req, zero = bits(out, 0, 0), bits(out, 1, 0)
    assert req[1:51] == [1] * 50 and zero[31:51] == [1] * 20    # XON stands 20 cycles
    assert req[51:131] == [0] * 80                     # released, then nothing asked
    assert req[131] == 1                               # asked again at cycle 130


def test_random_requests_keep_the_hold():
    rng = random.Random(4)
    levels, level = [], 0
    for _ in range(400):
        level ^= 1 << rng.randrange(8)
        levels += [level] * rng.choice([1, 2, 3, 7, 20, 60])
    levels += [0] * 200
    out = run_glue(levels, xon_cycles=REQ_HOLD)
    for prio in range(8):
        req = bits(out, 0, prio)
        edges = [n for n in range(1, len(req)) if req[n] != req[n - 1]]
        assert all(b - a >= REQ_HOLD for a, b in zip(edges, edges[1:])), prio
        assert len(edges) > 20 and req[-1] == 0
        zero = bits(out, 1, prio)
        assert all(r or not z for r, z in zip(req, zero))        # quanta 0 only while req


def _instance(mac):
    m = Module()
    m.submodules.mac = mac
    found = []

    def walk(frag):
        if isinstance(frag, Instance) and frag.type == CMAC_MODULE:
            found.append(frag)
        for sub, _, _ in getattr(frag, "subfragments", []):
            walk(sub)
    walk(Fragment.get(m, None))
    (inst,) = found
    return inst.ports


def stub_ports():
    text = STUB.read_text()
    return {name: d for d, name in
            re.findall(r"^\s*(input|output)\s+wire\s+(?:\[\d+:0\]\s+)?(\w+)", text, re.M)}


@pytest.mark.parametrize("pfc", [False, True])
def test_every_flow_control_input_driven(pfc):
    ports = _instance(Cmac(PLACE, pfc=pfc, pause_quanta=0x1000))
    stub = stub_ports()
    inputs = {n for n, d in stub.items() if d == "input"}
    assert inputs == {n for n, (_, d) in ports.items() if d == "i"}
    assert {n for n, (_, d) in ports.items() if d == "o"} <= {n for n, d in stub.items()
                                                              if d == "output"}
    for name in ("ctl_rx_enable_ppp", "ctl_rx_enable_gpp", "ctl_rx_check_opcode_ppp",
                 "ctl_rx_check_mcast_pcp"):
        value = ports[name][0]
        assert isinstance(value, Const) and value.value == int(pfc), name
    assert ports["ctl_rx_check_sa_ppp"][0].value == 0
    assert ports["ctl_rx_pause_enable"][0].value == 0x1FF * pfc
    assert ports["ctl_tx_pause_enable"][0].value == 0xFF * pfc
    timer = ports["ctl_tx_pause_refresh_timer3"][0]
    assert isinstance(timer, Const) and timer.value == 0x800 * pfc
    assert ("stat_rx_pause_req" in ports) == pfc


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_tcl_generates_flow_control():
    tcl = Cmac(PLACE).ip_tcl()
    for setting in ("TX_FLOW_CONTROL {1}", "RX_FLOW_CONTROL {1}", "RX_CHECK_ACK {0}",
                    "RX_FORWARD_CONTROL_FRAMES {0}"):
        assert f"CONFIG.{setting} " in tcl, setting
    assert "XOFF of 65535 quanta, refreshed every 32767" in \
        " ".join(Cmac(PLACE, pfc=True).notes().split())
    assert "pause frames reach the core as frames" in " ".join(Cmac(PLACE).notes().split())


class _Core(wiring.Component):
    def __init__(self, ports):
        super().__init__(ports)

    def elaborate(self, platform):
        return Module()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_connect_pause_only_when_the_core_has_the_ports():
    m = Module()
    mac = Cmac(PLACE, pfc=True)
    assert not connect_pause(m, mac, _Core({"other": In(1)}))
    core = _Core({"pause_rx": In(8), "pause_tx": Out(8)})
    assert connect_pause(m, mac, core)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters_are_checked():
    raises(ValueError, "xon_cycles must be an integer of at least 16", lambda: CmacPauseTx(8))
    raises(ValueError, "pause_quanta must be an integer in 1..65535",
           lambda: Cmac(PLACE, pause_quanta=0))
    raises(TypeError, "pfc must be True or False", lambda: Cmac(PLACE, pfc=1))
