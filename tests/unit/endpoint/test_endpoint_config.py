"""EndpointConfig: the endpoint's generator parameters, their checks, and what is made from
them (the command-line options, the board checks, the README's table)."""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from rocegen.gateware.roce.endpoint.config import (
    MAX_QPS,
    MAX_RD_ATOMIC,
    MAX_WR_DEPTH,
    MEMORIES,
    PFC_MODES,
    WIDTHS,
    EndpointConfig,
    markdown_table,
    params,
)

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_are_resolved():
    c = EndpointConfig()
    assert (c.width, c.num_qps, c.mem_bytes, c.clk_hz, c.line_gbps) == \
        (512, 8, 256 * 1024, 322_265_625, 100)
    assert (c.ring_base, c.ring_bytes, c.max_message) == (128 * 1024, 128 * 1024, 32 * 1024)
    assert (c.reads, c.pattern_sink, c.resp_region) == (False, False, (0, 128 * 1024))
    r = EndpointConfig(width=64, responder=True, memory="axi4")
    assert (r.reads, r.pattern_sink, r.mem_bytes, r.ring_bytes) == (True, True, 1 << 32, 1 << 20)
    assert (r.clk_hz, r.line_gbps) == (156_250_000, 10)
    with pytest.raises(dataclasses_error()):
        r.width = 128
    # the services' quiet time: 10 s with a service of the peers' connections, none without
    e = EndpointConfig(width=64, responder=True, rdma_cm_ports=(7471,), echo_port=7471)
    assert (e.service_idle_us, r.service_idle_us) == (10_000_000, None)


def dataclasses_error():
    import dataclasses
    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("kw, exc, message", [
    (dict(width=100), ValueError, "width must be one of 64, 128, 256, 512 bits, not 100"),
    (dict(num_qps=0), ValueError, "num_qps must be 1..256, not 0"),
    (dict(num_qps=2.0), TypeError, "num_qps must be an integer, not 2.0"),
    (dict(memory="ddr4"), ValueError, "memory must be one of onchip, axi4, not 'ddr4'"),
    (dict(mem_bytes=3000), ValueError, "mem_bytes must be a power of two"),
    (dict(mem_bytes=512), ValueError, "mem_bytes must be a power of two from 1024 to 2^32"),
    (dict(wr_depth=3), ValueError, "wr_depth must be a power of two from 1 to 1024, not 3"),
    (dict(wr_depth=2048), ValueError, "wr_depth must be a power of two from 1 to 1024, not 2048"),
    (dict(pmtu=300), ValueError, "pmtu must be one of 256, 512, 1024, 2048, 4096, not 300"),
    (dict(cm_port=4791), ValueError, "cm_port must not be 4791"),
    (dict(cm_allow_net=("10.0.0.0", 33)), ValueError, "cm_allow_net prefix length"),
    (dict(rq_depth=3), ValueError, "rq_depth must be a power of two 1..1024, not 3"),
    (dict(rd_depth=8), ValueError, "rd_depth must be a power of two 16..1024, not 8"),
    (dict(pfc="switch"), ValueError, "pfc must be one of mac, core, not 'switch'"),
    (dict(ecn=1), TypeError, "ecn must be a bool or None, not 1"),
    (dict(reads=True), ValueError, "reads are answered by the responder"),
    (dict(pattern_sink=True), ValueError, "pattern_sink checks the responder's writes"),
    (dict(dcqcn_params={}), ValueError, "dcqcn_params needs dcqcn=True"),
    (dict(resp_region=(0, 1 << 20)), ValueError, "resp_region [0x0, +0x100000) is not inside"),
    (dict(ring_bytes=1 << 20), ValueError, "the ring [-0xc0000, +0x100000) is not inside"),
    (dict(rd_hole_wait=-1), ValueError, "rd_hole_wait must be a non-negative number"),
    (dict(service_idle_us=1000), ValueError, "service_idle_us needs rping_port or echo_port"),
    (dict(responder=True, rdma_cm_ports=(7471,), echo_port=7471, service_idle_us=-1),
     ValueError, "service_idle_us must be"),
])
def test_errors_name_the_field(kw, exc, message):
    with pytest.raises(exc) as info:
        EndpointConfig(**kw)
    assert message in str(info.value)
    assert info.value.field in str(info.value)


def test_limits_are_the_gateware_ones():
    from rocegen.gateware.lib.stream import WIDTHS as STREAM_WIDTHS
    from rocegen.gateware.mac.pfc import PFC_MODES as GW_PFC_MODES
    from rocegen.gateware.roce.layouts import MAX_QPS as GW_MAX_QPS
    from rocegen.gateware.roce.layouts import MAX_WR_DEPTH as GW_MAX_WR_DEPTH
    from rocegen.gateware.roce.memory.payload_memory import MEMORIES as GW_MEMORIES
    from rocegen.gateware.roce.read.read_layouts import MAX_RD_ATOMIC as GW_MAX_RD
    from rocegen.gateware.roce.responder.resp_layouts import CNP_INTERVAL_BITS, UNACKED_BITS
    assert (WIDTHS, MAX_QPS, MAX_WR_DEPTH, MEMORIES, PFC_MODES, MAX_RD_ATOMIC) == \
        (STREAM_WIDTHS, GW_MAX_QPS, GW_MAX_WR_DEPTH, GW_MEMORIES, GW_PFC_MODES, GW_MAX_RD)
    fields = params()
    assert fields["cnp_interval"][1].hi == (1 << CNP_INTERVAL_BITS) - 1
    assert fields["resp_ack_every"][1].hi == (1 << UNACKED_BITS) - 1


def test_endpoint_takes_the_fields():
    """Every field is a keyword of RoceEndpoint, and the endpoint keeps the config."""
    from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
    ep = RoceEndpoint(64, 2, responder=True, rq_depth=4, dscp=5)
    assert ep.cfg == EndpointConfig(width=64, num_qps=2, responder=True, rq_depth=4, dscp=5)
    assert (ep.config["rq_depth"], ep.tc_init["dscp"]) == (4, 5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rq_dpth'"):
        RoceEndpoint(64, 2, rq_dpth=4)


def test_config_needs_no_amaranth():
    code = ("import sys; from rocegen.sim.apps import options; "
            "from rocegen.gateware.roce.endpoint.config import EndpointConfig; EndpointConfig(); "
            "assert not [m for m in sys.modules if m.startswith('amaranth')], 'amaranth loaded'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_options_are_the_fields():
    from rocegen.sim.apps.options import ENDPOINT_OPTIONS, add_endpoint_options
    parser = argparse.ArgumentParser()
    add_endpoint_options(parser, "--cm-port")
    options = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    with_cli = {p.cli: (name, p) for name, (_, p) in params().items() if p.cli}
    assert set(options) - {"-h"} == set(with_cli)
    assert set(ENDPOINT_OPTIONS) == set(with_cli) - {"--cm-port"}
    for option, (_, p) in with_cli.items():
        assert options[option].help.startswith(p.help)
        assert options[option].default is None


def test_build_checks_endpoint_fields():
    from rocegen.boards import get_board
    from rocegen.boards.base import check_build_params
    common = {"num_qps": 8, "mac": "02:00:00:00:00:01", "ip": "10.0.0.2",
              "retransmit_memory": "bram"}
    assert check_build_params(get_board("vcu118"), endpoint={"rq_depth": 4, "responder": True},
                              **common) == ("onchip", 1 << 18)
    with pytest.raises(ValueError, match="rq_depth must be a power of two 1..1024, not 3"):
        check_build_params(get_board("vcu118"), endpoint={"rq_depth": 3, "responder": True},
                           **common)
    with pytest.raises(ValueError, match=r"resp_region \[0x0, \+0x80000\) is not inside"):
        check_build_params(get_board("vcu118"), endpoint={"responder": True,
                                                          "resp_region": (0, 1 << 19)}, **common)


def test_readme_table_is_generated():
    from rocegen.cli.main import readme_with_params
    text = (ROOT / "README.md").read_text()
    assert markdown_table() in text
    assert readme_with_params(text) == text, (
        "README.md's parameter table differs from EndpointConfig's fields: run "
        "`rocegen params --readme README.md` (or `python -m rocegen.cli.main params --readme "
        "README.md`)")


def test_params_command(capsys, tmp_path):
    from rocegen.cli.main import README_TABLE, main
    assert main(["params", "--markdown"]) == 0
    assert capsys.readouterr().out == markdown_table()
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{README_TABLE[0]}\nold\n{README_TABLE[1]}\nrest\n")
    assert main(["params", "--readme", str(readme)]) == 0
    assert readme.read_text() == f"# x\n{README_TABLE[0]}\n{markdown_table()}{README_TABLE[1]}\nrest\n"


def test_wr_depth_default_and_the_rings_bound():
    """128 work requests per QP by default, 64 with more than 128 QPs: the scheduler's ring
    holds 16384 in all; more is refused, naming wr_depth."""
    assert EndpointConfig(64, 128).wr_depth == 128
    assert EndpointConfig(64, 129).wr_depth == EndpointConfig(64, 256).wr_depth == 64
    assert EndpointConfig(64, 16, wr_depth=1024).wr_depth == 1024
    with pytest.raises(ValueError, match="wr_depth"):
        EndpointConfig(64, 256, wr_depth=128)
