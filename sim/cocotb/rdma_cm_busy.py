"""cocotb bench: line-rate traffic on a QP while QP1 is busy (the IB CM's build of
sim/cocotb/rdma_cm.py). The traffic generator WRITEs ``BUSY_COUNT`` messages of ``BUSY_SIZE``
bytes to the host on QP 0, alone (twice: the first run is a warm-up) and once while the host
sends a MAD every ``BUSY_GAP`` cycles: with ``BUSY_KIND`` ``req``, a REQ for a port nobody
listens on (each answered with a REJ, on the same transmit port as the WRITEs); with ``rtu``,
an RTU naming no connection (each dropped and counted, no answer). Those beyond the CM's
ingress queue are dropped and counted. The figures go to ``ROCE_RESULTS``: the generator's
cycles and goodput both times, the MADs sent, answered and dropped, and the bytes the REJs took
on the line."""

import json
import os
import random

import cocotb

from rocegen.gateware.roce.endpoint.endpoint_stats import STATS
from rocegen.gateware.roce.layouts import WrOpcode
from rocegen.sim.cocotb.rdma_cm import PORT, CmEnv
from rocegen.sim.cocotb.roce_resp import NUM_QPS, W, share
from rocegen.sim.models.ibcm import IbCm, QpPool
from rocegen.sim.models.ibcm.frames import wrap
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.ibcm_mads import random_message
from rocegen.sim.testing.roce_env import wait_cycles, wait_low
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import ibcm as I
from rocegen.wire.addr import parse_ip, parse_mac

COUNT = int(os.environ.get("BUSY_COUNT", "32"))
SIZE = int(os.environ.get("BUSY_SIZE", "16384"))
GAP = int(os.environ.get("BUSY_GAP", "100"))
KIND = os.environ.get("BUSY_KIND", "req")
#: the counters read around each run
NAMES = ("ibcm_rx_mads", "ibcm_tx_mads", "ibcm_qp1_drop_overflow", "ibcm_req_rejected",
         "roce_tx_packets")


async def generate(env):
    """One run of the generator on QP 0: its cycles from the first work request to the last
    completion."""
    dut = env.dut
    await env.gen.send({"qp": 0, "opcode": WrOpcode.WRITE, "length": SIZE, "count": COUNT,
                        "spacing": 0, "imm": 0, "window": COUNT * SIZE})
    await wait_cycles(W, 4)         # (the run starts)
    await wait_low(dut, dut.gen_busy, W, max_cycles=50_000_000, what="the traffic generator")
    assert int(dut.gen_ok.value) == COUNT and int(dut.gen_err.value) == 0
    return int(dut.gen_cycles.value)


async def flood(env, state):
    """REQs for port ``PORT + 1`` (nobody listens: each gets a REJ), one every :data:`GAP`
    cycles until ``state["stop"]``; counts them in ``state["sent"]``."""
    host = IbCm(pool=QpPool(range(0x1000, 0x1000 + (1 << 16))), local_ip=parse_ip(HOST_IP),
                ca_guid=2, ports=[])
    rng = random.Random(GAP)
    while not state["stop"]:
        if KIND == "req":
            mads = [o.mad for o in host.connect(0, dst_ip=parse_ip(FPGA_IP), port=PORT + 1)[1]]
        else:
            mads = [random_message(rng, I.ATTR_RTU)]
        for mad in mads:
            env.mac.to_endpoint(wrap(mad, src_mac=parse_mac(HOST_MAC),
                                     dst_mac=parse_mac(FPGA_MAC), src_ip=parse_ip(HOST_IP),
                                     dst_ip=parse_ip(FPGA_IP)))
            state["sent"] += 1
        env.mac.poke()
        await wait_cycles(W, GAP)


@cocotb.test()
async def qp1_busy(dut):
    env = CmEnv(dut)
    await env.start()
    pmtu = 4096 if W == 512 else 1024
    await env.open(0, pmtu=pmtu, psn=0x100, region=share(0, NUM_QPS))
    warm = await generate(env)      # (the first run of a build also warms up the host model)
    alone = await generate(env)
    before = await read_stats(dut, NAMES, block=STATS)
    state = {"stop": False, "sent": 0}
    side = cocotb.start_soon(flood(env, state))
    busy = await generate(env)
    state["stop"] = True
    await side
    await wait_cycles(W, 20 * GAP)
    after = await read_stats(dut, NAMES, block=STATS)
    d = {k: after[k] - before[k] for k in NAMES}
    mads_out = d["ibcm_tx_mads"]
    # (a REJ on the line: its frame, 322 bytes, and the Ethernet overhead of 24 bytes)
    rej_bytes = mads_out * (322 + 24)
    result = {"width": W, "count": COUNT, "size": SIZE, "gap": GAP, "kind": KIND,
              "warm_up_cycles": warm, "alone_cycles": alone, "busy_cycles": busy,
              "alone_bytes_per_cycle": COUNT * SIZE / alone,
              "busy_bytes_per_cycle": COUNT * SIZE / busy, "ratio": alone / busy,
              "mads_sent": state["sent"], "mads_in": d["ibcm_rx_mads"], "rejs_out": mads_out,
              "mads_dropped": d["ibcm_qp1_drop_overflow"], "rej_bytes": rej_bytes,
              "rej_bytes_per_cycle": rej_bytes / busy}
    dut._log.info(json.dumps(result))
    out = os.environ.get("ROCE_RESULTS")
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
    assert d["ibcm_req_rejected"] == mads_out and (mads_out > 0) == (KIND == "req"), d
    assert not env.host_problems(), env.host_problems()
