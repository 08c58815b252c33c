"""The endpoint as RDMA READ requester, in the Amaranth simulator: what no shared Verilator build
can show. Everything else the READ requester does (READs of every shape mixed with WRITEs and
SENDs, the READ limit, lost and spoiled responses, lost requests, random loss, NAKs and local
errors) is proved on the whole endpoint in Verilator: ``tests/test_cocotb_read_requester.py``."""

from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.sim.testing.harness import run_sim

MEM = 1 << 16


def test_read_unsupported_without_reads():
    """An endpoint built without READs completes a READ work request with UNSUPPORTED."""
    ep = RoceEndpoint(64, 2, mem_bytes=MEM, ring_bytes=MEM // 2, responder=True, reads=False)
    got = []

    async def tb(ctx):
        ctx.set(ep.cpl.ready, 1)
        ctx.set(ep.wr.payload, {"qp": 0, "wr_id": 9, "opcode": WrOpcode.READ,
                                "local_addr": 0x100, "remote_offset": 0, "length": 64})
        ctx.set(ep.wr.valid, 1)
        await ctx.tick().until(ep.wr.ready)
        ctx.set(ep.wr.valid, 0)
        c, = await ctx.tick().sample(ep.cpl.payload).until(ep.cpl.valid)
        got.append((c.wr_id, CplStatus(c.status)))

    run_sim(ep, testbenches=[tb], deadline_cycles=2000)
    assert got == [(9, CplStatus.UNSUPPORTED)]
