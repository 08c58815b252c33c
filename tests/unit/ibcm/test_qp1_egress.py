"""QP1's send path against its reference (``rocegen.sim.models.ibcm.qp1.egress``) and the CM
frame builder: every MAD leaves behind its BTH and DETH with the UDP fields to send it with, the
PSN counting packets; idle cycles on the input, backpressure on the output; W = 64 and 512."""

import random

import pytest

from rocegen.gateware.roce.ibcm.qp1_egress import Qp1Egress
from rocegen.sim.models.ibcm import wrap
from rocegen.sim.models.ibcm.qp1 import egress
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I


@pytest.mark.parametrize("width", [64, 512])
def test_mads_leave_as_ud_sends_from_qp1(width):
    rng = random.Random(width)
    mads = [Packet(rng.randbytes(I.MAD_LENGTH),
                   {"dst_ip": rng.getrandbits(32), "dst_qp": rng.choice([1, rng.getrandbits(24)]),
                    "pkey": rng.choice([0xFFFF, 0x7FFF, rng.getrandbits(16)])})
            for _ in range(12)]
    dut = Qp1Egress(width)
    drv = StreamDriver(dut.i, width, idle=0.3, seed=width)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=width + 1)
    sent = []

    async def count(ctx):
        async for _, _, s in ctx.tick().sample(dut.sent):
            sent.append(s)

    async def tb(ctx):
        await drv.send(ctx, mads)
        while len(col.packets) < len(mads):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, count])
    assert sum(sent) == len(mads)
    for psn, (mad, got) in enumerate(zip(mads, col.packets)):
        payload, udp = egress(mad.data, psn=psn, **mad.meta)
        assert got.data == payload and not got.error, psn
        assert got.meta["udp"] == {**udp, "dscp": 0, "ecn": 0, "icrc": 1, "checksum": 0}, psn
        # the same bytes as the CM frame builder's (a MAD to QP1 of the peer)
        if mad.meta["dst_qp"] == I.QP1:
            frame = wrap(mad.data, src_mac=1, dst_mac=2, src_ip=3, dst_ip=mad.meta["dst_ip"],
                         psn=psn, pkey=mad.meta["pkey"])
            at = H.ETH.length + H.IPV4.length + H.UDP.length
            assert got.data == frame[at:-4]


def test_width_is_checked():
    raises(ValueError, "width", lambda: Qp1Egress(32))
