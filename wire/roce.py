"""RoCEv2 transport facts (InfiniBand Architecture Specification volume 1 and its Annex A17, as
summarised in the project's wire notes): opcode names, path MTUs, PSN arithmetic, AETH
syndromes and the timer tables behind retransmit timeout and RNR codes."""

from rocegen.wire import headers as H

__all__ = [
    "OPCODE_NAMES", "opcode_name", "is_request_opcode", "PMTUS", "PSN_MOD", "PSN_MASK",
    "SYN_ACK", "SYN_RNR", "NAK_PSN_SEQ", "NAK_INV_REQ", "NAK_REM_ACCESS", "NAK_REM_OP",
    "RNR_DELAY_US", "timeout_ns", "ETH_MIN_FRAME", "CNP_INTERVAL_NS", "cnp_interval_cycles",
]

#: BTH opcode -> its name in the specification (RC and CNP as rocegen sends and receives them).
OPCODE_NAMES = {
    H.OP_RC_SEND_FIRST: "SEND_FIRST",
    H.OP_RC_SEND_MIDDLE: "SEND_MIDDLE",
    H.OP_RC_SEND_LAST: "SEND_LAST",
    H.OP_RC_SEND_LAST_WITH_IMMEDIATE: "SEND_LAST_WITH_IMMEDIATE",
    H.OP_RC_SEND_ONLY: "SEND_ONLY",
    H.OP_RC_SEND_ONLY_WITH_IMMEDIATE: "SEND_ONLY_WITH_IMMEDIATE",
    H.OP_RC_RDMA_WRITE_FIRST: "RDMA_WRITE_FIRST",
    H.OP_RC_RDMA_WRITE_MIDDLE: "RDMA_WRITE_MIDDLE",
    H.OP_RC_RDMA_WRITE_LAST: "RDMA_WRITE_LAST",
    H.OP_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: "RDMA_WRITE_LAST_WITH_IMMEDIATE",
    H.OP_RC_RDMA_WRITE_ONLY: "RDMA_WRITE_ONLY",
    H.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    H.OP_RC_RDMA_READ_REQUEST: "RDMA_READ_REQUEST",
    0x0D: "RDMA_READ_RESPONSE_FIRST",
    0x0E: "RDMA_READ_RESPONSE_MIDDLE",
    0x0F: "RDMA_READ_RESPONSE_LAST",
    0x10: "RDMA_READ_RESPONSE_ONLY",
    H.OP_RC_ACKNOWLEDGE: "ACKNOWLEDGE",
    H.OP_CNP: "CNP",
}


def opcode_name(opcode):
    """The name of a BTH opcode, or ``"0xNN"`` for one rocegen does not know."""
    return OPCODE_NAMES.get(opcode, f"0x{opcode:02x}")


def is_request_opcode(opcode):
    """``opcode`` is one a responder answers: an RC request (SEND, WRITE, READ, atomic, or a
    reserved RC code, which it refuses), not a READ response, an ACKNOWLEDGE, an ATOMIC
    ACKNOWLEDGE or another transport."""
    return opcode >> 5 == 0 and not 0x0D <= opcode <= 0x12


#: Path MTUs in bytes (the IB MTU codes 1..5).
PMTUS = (256, 512, 1024, 2048, 4096)
#: PSNs are 24-bit and wrap.
PSN_MOD = 1 << 24
PSN_MASK = PSN_MOD - 1

#: AETH syndromes: bits 6:5 the kind (00 ACK, 01 RNR NAK, 11 NAK), 4:0 a value. 0x1F is an ACK
#: without a credit count; 0x00..0x1E carry the end-to-end credit code.
SYN_ACK = 0x1F
SYN_RNR = 0x20          # | the RNR timer code
NAK_PSN_SEQ = 0x60
NAK_INV_REQ = 0x61
NAK_REM_ACCESS = 0x62
NAK_REM_OP = 0x63

#: RNR NAK timer codes (the AETH's 5-bit value) in microseconds (IBTA table 45; code 0 is the
#: longest).
RNR_DELAY_US = (655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
                2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920,
                122880, 163840, 245760, 327680, 491520)


def timeout_ns(code):
    """The local ACK timeout of a 5-bit timeout code 1..31: 4.096 us x 2^code (0 is "never")."""
    if not 1 <= code <= 31:
        raise ValueError(f"timeout code must be 1..31, not {code}")
    return 4096 << code


#: The local ACK timeout code a real RDMA stack's QP needs against a simulated FPGA (``rocegen
#: sim serve``, ``rocegen sim rxe``): 4.096 us x 2^20 = 4.3 s. The simulation runs some 10^3 to
#: 10^4 times slower than the FPGA, while a real stack's timers run in real time, so at the usual
#: 14 (67 ms) it would retransmit long before the simulated FPGA answers.
SIMULATED_PEER_TIMEOUT = 20

#: Shortest Ethernet frame before its FCS; a MAC pads shorter ones and drops shorter received ones.
ETH_MIN_FRAME = 60

#: The shortest time between two CNPs of a QP by default: 4 us ("a few microseconds",
#: ``shared/spec/roce-wire.md``; a ConnectX sets it in microseconds too).
CNP_INTERVAL_NS = 4000


def cnp_interval_cycles(clk_hz, ns=CNP_INTERVAL_NS):
    """``ns`` nanoseconds in cycles of a ``clk_hz`` clock, rounded up."""
    return -(-int(ns) * int(clk_hz) // 1_000_000_000)
