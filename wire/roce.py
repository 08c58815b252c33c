"""RoCEv2 transport facts (InfiniBand Architecture Specification volume 1 and its Annex A17, as
summarised in the project's wire notes): path MTUs, PSN arithmetic, AETH syndromes and the timer
tables behind retransmit timeout and RNR codes. The opcodes are in :mod:`rocegen.wire.opcodes`."""

__all__ = [
    "PMTUS", "PSN_MOD", "PSN_MASK",
    "SYN_ACK", "SYN_RNR", "NAK_PSN_SEQ", "NAK_INV_REQ", "NAK_REM_ACCESS", "NAK_REM_OP",
    "RNR_DELAY_US", "timeout_ns", "ETH_MIN_FRAME", "CNP_INTERVAL_NS", "cnp_interval_cycles",
]

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
