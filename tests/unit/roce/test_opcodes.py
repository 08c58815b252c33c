"""The opcode catalogue (``rocegen.wire.opcodes``) against the wire notes' opcode table and
scapy's RoCE layers, its queries, the verbs' enums, and that no other module writes opcodes
down."""

import ast
import re
from pathlib import Path

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import enum as amaranth_enum
from amaranth.sim import Simulator
from scapy.contrib import roce as scapy_roce

from rocegen.gateware.roce import layouts
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire import verbs
from tests.pyast import parse

ROOT = Path(__file__).resolve().parents[3]

#: The wire notes' "RC opcodes" table, written down here from the text: code, name, what it
#: carries after the BTH.
SPEC = {
    0x00: ("SEND_FIRST", ()),
    0x01: ("SEND_MIDDLE", ()),
    0x02: ("SEND_LAST", ()),
    0x03: ("SEND_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x04: ("SEND_ONLY", ()),
    0x05: ("SEND_ONLY_WITH_IMMEDIATE", ("ImmDt",)),
    0x06: ("RDMA_WRITE_FIRST", ("RETH",)),
    0x07: ("RDMA_WRITE_MIDDLE", ()),
    0x08: ("RDMA_WRITE_LAST", ()),
    0x09: ("RDMA_WRITE_LAST_WITH_IMMEDIATE", ("ImmDt",)),
    0x0A: ("RDMA_WRITE_ONLY", ("RETH",)),
    0x0B: ("RDMA_WRITE_ONLY_WITH_IMMEDIATE", ("RETH", "ImmDt")),
    0x0C: ("RDMA_READ_REQUEST", ("RETH",)),
    0x0D: ("RDMA_READ_RESPONSE_FIRST", ("AETH",)),
    0x0E: ("RDMA_READ_RESPONSE_MIDDLE", ()),
    0x0F: ("RDMA_READ_RESPONSE_LAST", ("AETH",)),
    0x10: ("RDMA_READ_RESPONSE_ONLY", ("AETH",)),
    0x11: ("ACKNOWLEDGE", ("AETH",)),
    0x12: ("ATOMIC_ACKNOWLEDGE", ("AETH", "AtomicAckETH")),
    0x13: ("COMPARE_SWAP", ("AtomicETH",)),
    0x14: ("FETCH_ADD", ("AtomicETH",)),
    0x81: ("CNP", ("16 zero bytes",)),
}
#: The lengths the notes give the extension headers.
SPEC_LENGTH = {"RETH": 16, "ImmDt": 4, "AETH": 4, "AtomicETH": 28, "AtomicAckETH": 8,
               "16 zero bytes": 16}
HEADER_OF = {"RETH": H.RETH, "ImmDt": H.IMMDT, "AETH": H.AETH, "AtomicETH": H.ATOMIC_ETH,
             "AtomicAckETH": H.ATOMIC_ACK_ETH, "16 zero bytes": H.CNP_PAYLOAD}


def test_rows_are_the_spec_table():
    assert [r.code for r in opc.ROWS] == sorted(SPEC)
    for r in opc.ROWS:
        name, carries = SPEC[r.code]
        assert r.name == name
        assert r.headers == tuple(HEADER_OF[h] for h in carries), name
        assert r.ext_length == sum(SPEC_LENGTH[h] for h in carries), name
        assert opc.name(r.code) == name and opc.row(r.code) is r


#: The UD SEND opcodes: the wire notes' "UD SEND_ONLY is 0x64 (with DETH)"; 0x65, with an ImmDt
#: after the DETH, from InfiniBand volume 1's opcode table (the SEND_ONLY_WITH_IMMEDIATE code,
#: 0x05, in the UD transport, 011).
SPEC_UD = {0x64: ("UD_SEND_ONLY", ("DETH",)), 0x65: ("UD_SEND_ONLY_WITH_IMMEDIATE",
                                                     ("DETH", "ImmDt"))}
#: DETH: Q_Key (4), reserved (1), source QP (3).
SPEC_DETH_LENGTH = 8


def test_ud_rows():
    """The UD rows: in :data:`BY_CODE`, not in :data:`ROWS` (nor, so, in the datapath's
    queries), not supported, the headers and names the notes and scapy give them."""
    assert [r.code for r in opc.UD_ROWS] == sorted(SPEC_UD)
    assert H.DETH.length == SPEC_DETH_LENGTH
    lengths = {**SPEC_LENGTH, "DETH": SPEC_DETH_LENGTH}
    headers = {**HEADER_OF, "DETH": H.DETH}
    for r in opc.UD_ROWS:
        name, carries = SPEC_UD[r.code]
        assert r.name == name and opc.name(r.code) == name and opc.row(r.code) is r
        assert r.headers == tuple(headers[h] for h in carries)
        assert r.ext_length == sum(lengths[h] for h in carries)
        assert scapy_roce._bth_opcodes[r.code] == name
        assert opc.transport(r.code) == opc.TRANSPORT_UD
        assert not r.supported and r not in opc.ROWS
        assert r.verb is opc.Verb.SEND and r.position is opc.Position.ONLY and r.payload
        assert not opc.is_request(r.code) and r.code not in opc.codes(verb=opc.Verb.SEND)
    assert opc.OP_UD_SEND_ONLY == 0x64 and opc.OP_UD_SEND_ONLY_WITH_IMMEDIATE == 0x65
    assert opc.has_imm(0x65) and not opc.has_imm(0x64)


def test_rows_agree_with_their_names():
    for r in opc.ROWS:
        if r.verb in (opc.Verb.SEND, opc.Verb.RDMA_WRITE, opc.Verb.RDMA_READ_RESPONSE):
            assert r.name.startswith(r.verb.value + "_" + r.position.value), r.name
            assert r.has_imm == r.name.endswith("_WITH_IMMEDIATE")
        else:
            assert r.position is opc.Position.ONLY
        assert r.is_request == (r.name in ("RDMA_READ_REQUEST", "COMPARE_SWAP", "FETCH_ADD")
                                or r.verb in (opc.Verb.SEND, opc.Verb.RDMA_WRITE))
        assert r.is_response == ("RESPONSE" in r.name or "ACKNOWLEDGE" in r.name)
        # only the packets that move a message's bytes carry a payload
        assert r.payload == (r.verb in (opc.Verb.SEND, opc.Verb.RDMA_WRITE,
                                        opc.Verb.RDMA_READ_RESPONSE))


def test_every_row_is_supported():
    """The atomics too: the responder executes atomic requests and the requester issues them
    and takes their ATOMIC_ACKNOWLEDGE (with the generator's ``atomics``)."""
    assert all(r.supported for r in opc.ROWS)


def test_names_are_scapys():
    """scapy's BTH opcode names (RC_ + the name; the CNP) and its CNP code."""
    for r in opc.ROWS:
        want = "CNP" if r.verb is opc.Verb.CNP else "RC_" + r.name
        assert scapy_roce._bth_opcodes[r.code] == want
    assert opc.OP_CNP == scapy_roce.CNP_OPCODE


def _packet(r):
    """BTH and zeroed extension headers of row ``r``, through the header table."""
    return H.BTH.pack(opcode=r.code, pkey=0xFFFF, dest_qp=0x123, psn=7) + \
        b"".join(h.pack() for h in r.headers)


@pytest.mark.parametrize("code", sorted(opc.BY_CODE))
def test_header_lengths_by_scapy(code):
    """A packet of each row has the BTH scapy parses and, where scapy knows the extension
    header (AETH of ACKNOWLEDGE, the CNP's 16 bytes), the length scapy gives it."""
    r = opc.row(code)
    raw = _packet(r) + bytes(4)              # and an ICRC
    pkt = scapy_roce.BTH(raw)
    assert pkt.opcode == code and pkt.dqpn == 0x123 and pkt.psn == 7
    assert len(raw) == 12 + r.ext_length + 4
    if code == opc.OP_RC_ACKNOWLEDGE:
        assert len(pkt[scapy_roce.AETH]) - len(pkt[scapy_roce.AETH].payload) == H.AETH.length
    if code == opc.OP_CNP:
        assert len(scapy_roce.CNPPadding()) == H.CNP_PAYLOAD.length == r.ext_length


def test_queries():
    S, W, RR = opc.Verb.SEND, opc.Verb.RDMA_WRITE, opc.Verb.RDMA_READ_RESPONSE
    F, M, L, O = opc.Position
    assert opc.opcode(W, L, imm=True) == 0x09 and opc.opcode(S, O) == 0x04
    with pytest.raises(KeyError):
        opc.opcode(S, M, imm=True)
    assert opc.verb_opcodes(RR) == (0x0D, 0x0E, 0x0F, 0x10)
    assert {op.name: opc.message_opcodes(op) for op in verbs.WrOpcode if op.sends_payload} == {
        "WRITE": (0x06, 0x07, 0x08, 0x0A), "WRITE_IMM": (0x06, 0x07, 0x09, 0x0B),
        "SEND": (0x00, 0x01, 0x02, 0x04), "SEND_IMM": (0x00, 0x01, 0x03, 0x05)}
    with pytest.raises(ValueError, match="READ"):
        opc.message_opcodes(verbs.WrOpcode.READ)
    assert opc.codes(has_reth=True) == (0x06, 0x0A, 0x0B, 0x0C)
    assert opc.codes(has_imm=True) == (0x03, 0x05, 0x09, 0x0B)
    assert opc.codes(has_aeth=True) == (0x0D, 0x0F, 0x10, 0x11, 0x12)
    assert opc.RESPONSES == tuple(range(0x0D, 0x13))
    assert opc.name(0x15) == "0x15" and opc.row(0x15) is None and not opc.has_reth(0x15)
    for code in range(256):
        # the responder answers every RC code but the responses (reserved codes: to refuse)
        assert opc.is_request(code) == (code < 0x20 and not 0x0D <= code <= 0x12)


_SETS = [opc.codes(verb=opc.Verb.SEND), opc.codes(has_reth=True), opc.READ_RESPONSES,
         opc.RESPONSES, (0x0D, 0x0F, 0x10), (2, 3), (0x11,)]


def test_matches_on_integers():
    for codes in _SETS:
        for v in range(256):
            assert bool(opc.matches(v, codes)) == (v in codes)
    with pytest.raises(ValueError):
        opc.matches(0, ())


def test_matches_in_hardware():
    """The same predicates as Amaranth logic, every opcode through the simulator."""
    m = Module()
    op = Signal(8)
    outs = [Signal(name=f"m{k}") for k in range(len(_SETS))]
    m.d.comb += [o.eq(opc.matches(op, codes)) for o, codes in zip(outs, _SETS)]
    sim = Simulator(m)

    async def bench(ctx):
        for v in range(256):
            ctx.set(op, v)
            for o, codes in zip(outs, _SETS):
                assert ctx.get(o) == (v in codes), (v, codes)

    sim.add_testbench(bench)
    sim.run()


def test_verbs_and_hardware_enums():
    assert verbs.VERBS == ("WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ")
    assert verbs.SEND_VERBS == verbs.VERBS[:4]
    for wire_enum, hw_enum, bits in ((verbs.WrOpcode, layouts.WrOpcode, 3),
                                     (verbs.CplStatus, layouts.CplStatus, 4),
                                     (verbs.QpState, layouts.QpState, 3)):
        assert issubclass(hw_enum, amaranth_enum.Enum)
        assert hw_enum.as_shape().width == bits
        assert [(m.name, m.value) for m in hw_enum] == [(m.name, m.value) for m in wire_enum]


# ---- no opcode written down outside the catalogue

#: Folders whose modules must take their opcodes from the catalogue.
SCANNED = ("wire", "gateware", "sim/models", "sim/testing")
CODES = set(opc.BY_CODE)
ROW_NAMES = {r.name for r in opc.ROWS}
_OPCODE_NAME = re.compile(r"^(op|opcode|opcodes)$", re.I)


def _name(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ""


def _ints(node):
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [v for e in node.elts for v in _ints(e)]
    return []


def opcode_literals(text):
    """``(line, value)`` of the integer literals in ``text`` that stand for a BTH opcode:
    compared with (or passed as) a name ``op``/``opcode``, assigned to an ``OP_*`` name or to
    a name of a row (with that row's code), or keys of a table of opcodes (three or more integer
    keys, all codes, one of them past the SEND and WRITE codes). ARP has an ``op`` field too
    (1 request, 2 reply): functions named for ARP and ``ARP(...)`` calls are not looked at."""
    tree = parse(text)
    skip = set()
    for node in ast.walk(tree):
        arp_fn = isinstance(node, ast.FunctionDef) and "arp" in node.name.lower()
        arp_call = isinstance(node, ast.Call) and _name(node.func) == "ARP"
        if arp_fn or arp_call:
            skip |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        found = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_OPCODE_NAME.match(_name(o)) for o in operands):
                found = [v for o in operands for v in _ints(o)]
        elif isinstance(node, ast.keyword) and _OPCODE_NAME.match(node.arg or ""):
            found = _ints(node.value)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                n = _name(t)
                vals = _ints(node.value)
                if n.startswith("OP_"):
                    found += vals
                elif n in ROW_NAMES:
                    found += [v for v in vals if opc.BY_CODE.get(v) and opc.BY_CODE[v].name == n]
        elif isinstance(node, ast.Dict):
            keys = [v for k in node.keys if isinstance(k, ast.Constant) for v in _ints(k)]
            if len(keys) >= 3 and set(keys) <= CODES and max(keys) >= opc.OP_RC_RDMA_READ_REQUEST:
                found = keys
        yield from ((node.lineno, v) for v in found if v in CODES)


def test_the_scan_finds_opcode_literals():
    text = (
        "OP_RC_ACKNOWLEDGE = 0x11\n"
        "class Op:\n    RDMA_READ_REQUEST = 0x0C\n"
        "NAMES = {0x0D: 'a', 0x0E: 'b', 0x0F: 'c'}\n"
        "def f(op, bth):\n"
        "    send = op <= 5\n    ack = bth.opcode == 0x11\n    return g(opcode=0x81)\n"
        "def arp_reply(op):\n    return op == 2\n"
        "class Verdict:\n    CNP = 8\n")
    assert sorted(opcode_literals(text)) == [(1, 0x11), (3, 0x0C), (4, 0x0D), (4, 0x0E),
                                             (4, 0x0F), (6, 5), (7, 0x11), (8, 0x81)]


def test_no_opcode_literal_outside_the_catalogue():
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "wire/opcodes.py":
                continue
            found += [f"{rel}:{line}: {value:#04x}"
                      for line, value in opcode_literals(path.read_text())]
    assert not found, "opcodes written down outside wire/opcodes.py:\n" + "\n".join(found)
