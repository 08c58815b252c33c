"""cocotb testbench of the ICRC blocks (sim.roce_tops.IcrcTop) on the generated Verilog.

Frames are built by scapy (whose ``contrib.roce`` computes the ICRC) and taken from the shared
vectors; cocotbext-axi drives them with random idle cycles and backpressure on all three paths at
once: insertion must give scapy's bytes, checking must strip the ICRC and flag exactly the
corrupted frames, and insertion then checking must give the frames back unchanged."""

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.sim.models import icrc as model
from rocegen.sim.testing.cocotb_helpers import frame_bytes, pauses
from rocegen.sim.testing.vectors import read_vectors

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
#: Simulated time within which a frame must come out once it has gone in.
RECV_TIMEOUT_US = 50


def last_tuser(f):
    return f.tuser if isinstance(f.tuser, int) else f.tuser[-1]


def scapy_frame(rng, payload_len, pad=True):
    """A RoCEv2 frame as scapy builds it, ICRC included. ``pad=False`` leaves out the pad bytes
    (the datagram is then not a multiple of 4 bytes: not RoCEv2, but the ICRC is defined)."""
    payload = rng.randbytes(payload_len)
    opcode = rng.choice([0x04, 0x06, 0x0A, 0x11])
    bth = BTH(opcode=opcode, solicited=rng.getrandbits(1), padcount=(-payload_len) & 3,
              fecn=rng.getrandbits(1), becn=rng.getrandbits(1), dqpn=rng.getrandbits(24),
              ackreq=rng.getrandbits(1), psn=rng.getrandbits(24))
    if opcode == 0x11:
        bth = bth / AETH(syndrome=0x1F, msn=rng.getrandbits(24))
    pkt = (Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
           / IP(src="10.0.0.1", dst="10.0.0.2", tos=rng.getrandbits(8), ttl=rng.randrange(1, 256),
                id=rng.getrandbits(16), flags="DF")
           / UDP(sport=rng.randrange(0xC000, 0x10000), dport=4791,
                 chksum=rng.choice([0, rng.getrandbits(16)]))
           / bth / Raw(payload + bytes((-payload_len) & 3 if pad else 0)))
    return raw(pkt)


def corrupt(rng, frame):
    """Flip one bit after the masked header fields (payload or ICRC)."""
    f = bytearray(frame)
    pos = rng.randrange(14 + 40, len(f))
    f[pos] ^= 1 << rng.randrange(8)
    return bytes(f)


def remask(rng, frame):
    """New TOS and TTL: masked, so the ICRC stays right (the IP checksum is masked too)."""
    f = bytearray(frame)
    f[15], f[22] = rng.getrandbits(8), rng.getrandbits(8)
    return bytes(f)


async def start(dut, rng):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    ports = {}
    for path in ("tx", "rx", "loop"):
        src = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"s_{path}_axis"), dut.clk, dut.rst)
        sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, f"m_{path}_axis"), dut.clk, dut.rst)
        src.log.setLevel("WARNING")
        sink.log.setLevel("WARNING")
        src.set_pause_generator(pauses(rng, 0.3))
        sink.set_pause_generator(pauses(rng, 0.3))
        ports[path] = (src, sink)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    return ports


async def receive(sink, count, what):
    out = []
    for n in range(count):
        try:
            out.append(await with_timeout(sink.recv(), RECV_TIMEOUT_US, "us"))
        except TimeoutError:
            raise AssertionError(f"{what}: only {n} of {count} frames came out") from None
    return out


async def send_all(src, frames):
    for f in frames:
        await src.send(AxiStreamFrame(f, tuser=0))


@cocotb.test()
async def three_paths(dut):
    width = PARAMS["width"]
    B = width // 8
    rng = random.Random(int(os.environ.get("SEED", "3")) + width)
    ports = await start(dut, rng)
    vectors = [f for _, f in read_vectors() if model.ip_offset(f) == 14 and f[14] >> 4 == 4]
    assert len(vectors) >= 10
    # unpadded payloads of 0 .. 2B+7 bytes reach every frame length modulo the beat width (a
    # RoCEv2 datagram is a multiple of 4 bytes, so real frames only reach a quarter of them)
    scapy_frames = [scapy_frame(rng, n, pad=False) for n in range(0, 2 * B + 8)]
    scapy_frames += [scapy_frame(rng, n) for n in range(0, B + 8)]
    scapy_frames += [scapy_frame(rng, rng.randrange(0, 1500)) for _ in range(10)]

    # transmit: scapy's ICRC comes out
    tx_in = vectors + scapy_frames
    # receive: good, corrupted and re-masked frames
    rx_in, rx_ok = [], []
    for f in vectors + scapy_frames:
        kind = rng.choice(["good", "corrupt", "remask"])
        g = {"good": f, "corrupt": corrupt(rng, f), "remask": remask(rng, f)}[kind]
        rx_in.append(g)
        rx_ok.append(model.check(g))
    assert rx_ok.count(False) > 5 and rx_ok.count(True) > 5
    loop_in = [f[:-4] for f in scapy_frames]

    (tx_src, tx_sink), (rx_src, rx_sink), (lp_src, lp_sink) = \
        ports["tx"], ports["rx"], ports["loop"]
    cocotb.start_soon(send_all(tx_src, [f[:-4] for f in tx_in]))
    cocotb.start_soon(send_all(rx_src, rx_in))
    cocotb.start_soon(send_all(lp_src, loop_in))

    for sent, got in zip(tx_in, await receive(tx_sink, len(tx_in), "insert")):
        assert frame_bytes(got) == sent, f"frame of {len(sent)} bytes"
        assert not last_tuser(got)
    for sent, ok, got in zip(rx_in, rx_ok, await receive(rx_sink, len(rx_in), "check")):
        assert frame_bytes(got) == sent[:-4], f"frame of {len(sent)} bytes"
        assert last_tuser(got) == (not ok), f"frame of {len(sent)} bytes: ICRC ok {ok}"
    for sent, got in zip(loop_in, await receive(lp_sink, len(loop_in), "loop")):
        assert frame_bytes(got) == sent and not last_tuser(got)

    await ClockCycles(dut.clk, 20)
    assert tx_sink.empty() and rx_sink.empty() and lp_sink.empty()
    assert int(dut.rx_bad.value) == rx_ok.count(False)
    assert int(dut.loop_bad.value) == 0
