"""QP1's receive path against its reference (``rocegen.sim.models.ibcm.qp1.ingress``): MADs to
QP1 picked out of every kind of RoCEv2 datagram, checked and queued, with idle cycles on the
input, backpressure on the output and a queue that overflows; W = 64 and 512."""

import random

import pytest

from rocegen.gateware.roce.ibcm.qp1_ingress import COUNTERS, Qp1Ingress
from rocegen.sim.models.ibcm import wrap
from rocegen.sim.models.ibcm.qp1 import ingress
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc

FPGA_IP = 0x0A000002


def datagram(rng, *, opcode=opc.OP_UD_SEND_ONLY, dest_qp=I.QP1, qkey=I.QP1_QKEY, pkey=0xFFFF,
             payload=None):
    """A RoCEv2 datagram as RoCE's ICRC check hands it on (IPv4 header first, no ICRC)."""
    payload = rng.randbytes(I.MAD_LENGTH) if payload is None else payload
    body = H.BTH.pack(opcode=opcode, pkey=pkey, dest_qp=dest_qp, psn=rng.getrandbits(24))
    if opc.BY_CODE.get(opcode) in opc.UD_ROWS:
        body += H.DETH.pack(qkey=qkey, src_qp=rng.choice([1, rng.getrandbits(24)]))
    body += payload
    udp = H.UDP.pack(src_port=rng.getrandbits(16), dst_port=H.UDP_PORT_ROCEV2,
                     length=H.UDP.length + len(body) + 4)
    ip = H.IPV4.pack(version=4, ihl=5, total_length=H.IPV4.length + len(udp) + len(body) + 4,
                     ttl=64, protocol=H.IP_PROTO_UDP, src=rng.getrandbits(32), dst=FPGA_IP)
    return ip + udp + body


def mix(rng, n):
    """``n`` datagrams of every kind: MADs to QP1 (good, from the CM frame builder too, odd
    lengths, bad Q_Key, bad P_Key, bad ICRC), and datagrams not for QP1."""
    def one():
        k = rng.randrange(10)
        if k == 0:
            f = wrap(rng.randbytes(I.MAD_LENGTH), src_mac=1, dst_mac=2,
                     src_ip=rng.getrandbits(32), dst_ip=FPGA_IP, pkey=0x7FFF)
            return Packet(f[H.ETH.length:-4])
        if k == 1:
            return Packet(datagram(rng, qkey=rng.choice([0, I.QP1_QKEY ^ 1, 0x80010001])))
        if k == 2:
            return Packet(datagram(rng, pkey=rng.choice([0x0000, 0x8001, 0x7FFE])))
        if k == 3:
            return Packet(datagram(rng), error=True)
        if k == 4:
            return Packet(datagram(rng, payload=rng.randbytes(rng.choice([0, 1, 100, 300]))))
        if k == 5:          # not for QP1: another QP, another UD opcode, RC packets
            return Packet(rng.choice([
                datagram(rng, dest_qp=rng.choice([0, 2, 0x101])),
                datagram(rng, opcode=opc.OP_UD_SEND_ONLY_WITH_IMMEDIATE),
                datagram(rng, opcode=opc.OP_RC_ACKNOWLEDGE, payload=rng.randbytes(4)),
                datagram(rng, opcode=opc.OP_RC_SEND_ONLY, dest_qp=I.QP1,
                         payload=rng.randbytes(rng.randrange(300)))]))
        if k == 6:          # shorter than the headers
            return Packet(datagram(rng)[:rng.randrange(1, I.UD_IN.length)])
        return Packet(datagram(rng))
    return [one() for _ in range(n)]


def run(width, packets, *, queue, idle, backpressure, seed, stall=0, later=()):
    """Send ``packets``, and ``later`` once ``o`` has been ready a while; returns the MADs out
    (``[Packet]``) and the counter strobes' counts. ``stall``: ``o`` is not ready for the first
    ``stall`` cycles."""
    dut = Qp1Ingress(width, queue=queue)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    counts = dict.fromkeys(COUNTERS, 0)
    ready = [0]

    async def collect(ctx):
        for _ in range(stall):
            ctx.set(dut.o.ready, 0)
            await ctx.tick()
        await col.run(ctx)

    async def strobes(ctx):
        signals = [getattr(dut, c) for c in COUNTERS]
        async for _clk, _rst, i_ready, *values in ctx.tick().sample(dut.i.ready, *signals):
            for c, v in zip(COUNTERS, values):
                counts[c] += v
            if not i_ready:
                ready[0] += 1

    async def tb(ctx):
        await drv.send(ctx, packets)
        await ctx.tick().repeat(stall + 40 * len(packets) + 200)
        await drv.send(ctx, later)
        await ctx.tick().repeat(40 * len(later) + 200)

    run_sim(dut, testbenches=[tb], processes=[collect, strobes])
    assert ready[0] == 0, "the input was held"
    return col.packets, counts


def expected(packets):
    verdicts = [ingress(p.data, error=p.error) for p in packets]
    return [v for v in verdicts if v is not None]


def check(packets, got, counts):
    """The MADs out are the model's queued ones in order, less those the queue had no room for
    (each counted once in ``drop_overflow``); every other counter is the model's."""
    want = expected(packets)
    queued = [Packet(v.mad, v.meta) for v in want if v.verdict == "queued"]
    assert counts["mads"] == len(want)
    for c in ("drop_qkey", "drop_pkey", "drop_error"):
        assert counts[c] == sum(v.verdict == c for v in want), c
    it = iter(queued)
    for n, pkt in enumerate(got):
        assert not pkt.error
        assert any(pkt == q for q in it), f"MAD {n} out is not the next queued one"
    assert counts["drop_overflow"] == len(queued) - len(got)
    return queued


@pytest.mark.parametrize("width", [64, 512])
def test_mads_picked_checked_and_queued(width):
    rng = random.Random(width)
    packets = mix(rng, 120)
    got, counts = run(width, packets, queue=4, idle=0.3, backpressure=0.3, seed=width)
    queued = check(packets, got, counts)
    assert all(counts[c] for c in ("drop_qkey", "drop_pkey", "drop_error"))
    assert len(got) > 0.8 * len(queued)
    # the model's reading of the builder's frames: every CM frame is a MAD for QP1
    assert expected([Packet(wrap(bytes(256), src_mac=1, dst_mac=2, src_ip=1, dst_ip=FPGA_IP)
                            [H.ETH.length:-4])])[0].verdict == "queued"


@pytest.mark.parametrize("width", [64, 512])
def test_a_full_queue_drops_and_recovers(width):
    """``o`` held for a long time: the queue keeps ``queue`` MADs and drops the rest, counted;
    released, it delivers them and then every MAD again."""
    rng = random.Random(7)
    first = [Packet(datagram(rng)) for _ in range(5)]
    later = [Packet(datagram(rng)) for _ in range(3)]
    beats = 5 * (I.UD_IN.length + I.MAD_LENGTH) // (width // 8) + 50
    got, counts = run(width, first, queue=2, idle=0.0, backpressure=0.0, seed=3,
                      stall=beats, later=later)
    check(first + later, got, counts)
    assert [p.data for p in got] == [p.data[I.UD_IN.length:] for p in first[:2] + later]
    assert counts["drop_overflow"] == 3


def test_parameters_are_checked():
    raises(ValueError, "width", lambda: Qp1Ingress(32))
    raises(ValueError, "queue must be 1..16, not 0", lambda: Qp1Ingress(64, queue=0))
    raises(TypeError, "queue must be an integer", lambda: Qp1Ingress(64, queue=2.0))
