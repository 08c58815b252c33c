"""The RoCEv2 headers of the header table against scapy's ``contrib.roce`` and the shared
vectors, in Python (pack/unpack) and in gateware (to_lanes/from_lanes)."""

import random
import re
import struct

import pytest
import scapy.contrib.roce as roce
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from scapy.compat import raw
from scapy.layers.inet import IP
from scapy.layers.inet import UDP as ScapyUDP
from scapy.layers.l2 import Ether

from rocegen.sim.testing.vectors import read_vectors
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.headers import AETH, BTH, CNP_PAYLOAD, IMMDT, IPV6, RETH

# our field name -> scapy's
BTH_NAMES = {"opcode": "opcode", "se": "solicited", "m": "migreq", "padcnt": "padcount",
             "tver": "version", "pkey": "pkey", "fecn": "fecn", "becn": "becn", "resv6": "resv6",
             "dest_qp": "dqpn", "ack_req": "ackreq", "resv7": "resv7", "psn": "psn"}


def random_fields(header, rng):
    return {name: rng.getrandbits(bits) for name, bits in header.fields}


def test_lengths_and_field_order():
    assert (BTH.length, RETH.length, AETH.length, IMMDT.length, CNP_PAYLOAD.length) == \
        (12, 16, 4, 4, 16)
    assert IPV6.length == 40
    assert [f for f, _ in BTH.fields] == list(BTH_NAMES)
    assert [f for f, _ in RETH.fields] == ["va", "rkey", "dma_len"]
    assert [f for f, _ in AETH.fields] == ["syndrome", "msn"]
    assert [f for f, _ in IMMDT.fields] == ["imm"]


def test_bth_matches_scapy():
    rng = random.Random(1)
    for _ in range(200):
        values = random_fields(BTH, rng)
        ours = BTH.pack(**values)
        theirs = raw(roce.BTH(**{BTH_NAMES[k]: v for k, v in values.items()}, icrc=0))
        assert ours == theirs[:12]
        assert BTH.unpack(theirs) == values
        parsed = roce.BTH(ours + b"\0" * 4)
        assert {k: getattr(parsed, s) for k, s in BTH_NAMES.items()} == values


def test_aeth_matches_scapy_in_a_whole_packet():
    rng = random.Random(2)
    for _ in range(100):
        bth = random_fields(BTH, rng) | {"opcode": opc.OP_RC_ACKNOWLEDGE}
        aeth = random_fields(AETH, rng)
        pkt = Ether() / IP() / ScapyUDP(sport=0xC000, dport=H.UDP_PORT_ROCEV2) / \
            roce.BTH(**{BTH_NAMES[k]: v for k, v in bth.items()}) / roce.AETH(**aeth)
        wire = raw(pkt)
        start = 14 + 20 + 8
        assert wire[start:start + 12] == BTH.pack(**bth)
        assert wire[start + 12:start + 16] == AETH.pack(**aeth)
        back = Ether(wire)                       # scapy dissects by UDP port and opcode
        assert back[roce.AETH].syndrome == aeth["syndrome"]
        assert back[roce.AETH].msn == aeth["msn"]
        assert AETH.unpack(raw(roce.AETH(**aeth))) == aeth


def test_cnp_matches_scapy():
    rng = random.Random(3)
    qp = rng.getrandbits(24)
    wire = raw(Ether() / IP() / ScapyUDP(dport=H.UDP_PORT_ROCEV2) / roce.cnp(qp))
    body = wire[42:-4]
    assert body == BTH.pack(opcode=opc.OP_CNP, pkey=0xFFFF, becn=1, dest_qp=qp) + CNP_PAYLOAD.pack()


def test_opcodes_and_port_match_scapy():
    consts = {name: getattr(opc, name) for name in opc.__all__ if name.startswith("OP_")}
    assert len(consts) == 24            # 21 RC, the CNP, 2 UD SENDs
    for name, value in consts.items():
        assert roce._bth_opcodes[value] == name[3:], name
    assert roce.CNP_OPCODE == opc.OP_CNP
    pkt = Ether(raw(Ether() / IP() / ScapyUDP(dport=H.UDP_PORT_ROCEV2) / roce.BTH(opcode=4)))
    assert pkt.haslayer(roce.BTH)


def test_reth_and_immdt_against_struct():
    """scapy has no RETH or ImmDt layer: check them against ``struct`` (network order)."""
    rng = random.Random(4)
    for _ in range(100):
        reth = random_fields(RETH, rng)
        assert RETH.pack(**reth) == struct.pack(">QII", reth["va"], reth["rkey"], reth["dma_len"])
        imm = rng.getrandbits(32)
        assert IMMDT.pack(imm=imm) == struct.pack(">I", imm)
        assert IMMDT.unpack(struct.pack(">I", imm)) == {"imm": imm}


def test_headers_in_the_shared_vectors():
    """The vectors whose names give RETH fields or an immediate parse to those values."""
    checked = 0
    for name, frame in read_vectors():
        if "vlan" in name or "IPv6" in name:
            continue
        bth = BTH.unpack(frame[42:])
        assert bth["opcode"] == int(re.search(r"\((0x[0-9a-f]+)\)", name).group(1), 16)
        reth = re.search(r"va=(0x[0-9a-f]+) rkey=(0x[0-9a-f]+) len=(\d+)", name)
        if reth:
            assert RETH.unpack(frame[54:]) == {"va": int(reth.group(1), 16),
                                               "rkey": int(reth.group(2), 16),
                                               "dma_len": int(reth.group(3))}
            checked += 1
        if bth["opcode"] == opc.OP_RC_ACKNOWLEDGE:
            syndrome = AETH.unpack(frame[54:])["syndrome"]
            code = re.search(r"\((0x[0-9a-f]+)\)", name[name.index("AETH"):])
            credits = re.search(r"credits=(0x[0-9a-f]+)", name)
            assert syndrome == int((code or credits).group(1), 16), name
            checked += 1
        if bth["opcode"] == opc.OP_RC_SEND_LAST_WITH_IMMEDIATE:
            assert IMMDT.unpack(frame[54:]) == {"imm": 0xAABBCCDD}
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("header", [BTH, RETH, AETH, IMMDT, CNP_PAYLOAD, IPV6],
                         ids=lambda h: h.name)
def test_gateware_lanes_match_pack(header):
    """``to_lanes`` puts the packed bytes in lane order and ``from_lanes`` reads them back."""
    rng = random.Random(header.length)
    view = Signal(header.layout)
    lanes_in = Signal(8 * header.length)
    lanes_out = Signal(8 * header.length)
    parsed = Signal(header.layout)
    m = Module()
    m.d.comb += [lanes_out.eq(header.to_lanes(view)), parsed.eq(header.from_lanes(lanes_in))]
    cases = [random_fields(header, rng) for _ in range(30)]

    async def tb(ctx):
        for values in cases:
            ctx.set(view, values)
            ctx.set(lanes_in, int.from_bytes(header.pack(**values), "little"))
            assert ctx.get(lanes_out).to_bytes(header.length, "little") == header.pack(**values)
            got = ctx.get(parsed)
            assert {name: int(getattr(got, name)) for name, _ in header.fields} == values

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
