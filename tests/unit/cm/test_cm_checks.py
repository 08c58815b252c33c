"""Connection manager checks: subnet, address, extension-code and test-traffic checks of random
datagrams, registered one cycle later, with and without a subnet."""

import random

import pytest

from rocegen.gateware.roce.cm.cm_checks import CmChecks
from rocegen.sim.models.cm import cm as M
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.headers import CM

LOCAL_IP = 0x0A010064


@pytest.mark.parametrize("allow_net", [("10.1.0.0", 16), ("10.1.0.96", 28), ("0.0.0.0", 0), None])
def test_random_datagrams(allow_net):
    rng = random.Random(str(allow_net))
    dut = CmChecks(allow_net=allow_net, port=M.CM_PORT)
    net = M.parse_net(allow_net)
    seen = {"src_allowed": 0, "open_ok": 0, "addr_bad": 0, "gen_bad": 0, "ext_bad": 0}

    def address():
        inside = net[0] | rng.getrandbits(32) & ~net[1] & 0xFFFFFFFF if net else LOCAL_IP
        return rng.choice([LOCAL_IP, inside, inside, 0x0A010000 | rng.getrandbits(16),
                           rng.getrandbits(32)])

    async def tb(ctx):
        ctx.set(dut.local_ip, LOCAL_IP)
        for _ in range(400):
            req = CM.unpack(bytes(rng.getrandbits(8) for _ in range(CM.length)))
            req.update(req_type=rng.choice([M.REQ_OPEN_QP, M.REQ_CLOSE_QP, rng.randrange(8)]),
                       pmtu_code=rng.choice([0, 5, rng.randrange(6), 6, rng.getrandbits(8)]),
                       timeout_code=rng.choice([0, 31, rng.randrange(32), 32, rng.getrandbits(8)]),
                       window_log2=rng.choice([0, 31, 32, rng.getrandbits(8)]),
                       loc_ip=address())
            dg = {"req": req, "src_ip": address(), "dst_ip": rng.choice([LOCAL_IP, address()]),
                  "src_port": rng.getrandbits(16), "length_ok": 1,
                  "dst_port": rng.choice([M.CM_PORT, M.CM_PORT, rng.getrandbits(16)])}
            any_free = rng.randrange(2)
            ctx.set(dut.datagram, dg)
            ctx.set(dut.any_free, any_free)
            await ctx.tick()
            got = meta_dict(ctx.get(dut.checks))
            ext_ok = req["pmtu_code"] <= 5 and req["timeout_code"] <= 31
            src, peer = M.in_net(net, dg["src_ip"]), M.in_net(net, req["loc_ip"])
            want = {"ext_ok": ext_ok, "src_allowed": src, "peer_allowed": peer,
                    "opening": req["req_type"] == M.REQ_OPEN_QP,
                    "open_ok": ext_ok and src and peer and bool(any_free),
                    "addr_bad": dg["dst_ip"] != LOCAL_IP or dg["dst_port"] != M.CM_PORT,
                    "gen_bad": req["dma_length"] >= 1 << 31 or req["window_log2"] > 31}
            assert got == {k: int(v) for k, v in want.items()}, (dg, got)
            for k in seen:
                seen[k] += want["ext_ok"] is False if k == "ext_bad" else bool(want[k])

    run_sim(dut, testbenches=[tb])
    assert all(v > 10 for v in seen.values()), seen


def test_parameters_are_checked():
    raises(ValueError, "host bits", lambda: CmChecks(allow_net=("10.1.0.1", 16)))
    raises(TypeError, "tuple", lambda: CmChecks(allow_net="10.1.0.0/16"))
    raises(ValueError, "port", lambda: CmChecks(port=0x10000))
