"""cocotb testbench: the gateware rping client of an endpoint built with ``rping_client_port``,
against the host NIC model as a librdmacm peer that listens on that port and runs rping's server
loop (``rping -s``, written here from ``examples/rping.c``: each advertisement received, the
client's ``start_buf`` READ, the go-ahead SENT, the second advertisement, the WRITE back of
``strlen + 1`` bytes, the go-ahead).

The cocotb test ``rping_client``:

* the user's logic connects the FPGA to the host's rping port (``rdma_cm_connect``): its event
  says established, and the QP is the client's (its completions never reach the user's port);
* the client runs ``RPING_CLIENT_COUNT`` pings of ``RPING_CLIENT_SIZE`` bytes: each
  ``start_buf`` the server READ is rping's ping (``ping_data``), the client compared each WRITE
  back (``-V``), and then it disconnected (the host's connection in time-wait: the FPGA's DREQ);
* again, with a server that changes one byte of its second WRITE back: the client counts the
  mismatch and disconnects at once;
* the counters: the pings, one connection done, one mismatch, nothing else.
"""

import os
import random

import cocotb

from rocegen.gateware.roce.endpoint.endpoint_stats import STATS
from rocegen.sim.cocotb.rdma_cm import HOST_LISTEN, SEED, CmEnv, fpga_connect
from rocegen.sim.cocotb.roce_resp import NUM_QPS, REGION, W
from rocegen.sim.models.ibcm.cm import Role, State
from rocegen.sim.models.rnic import WcStatus
from rocegen.sim.models.rnic.cq import WcOpcode
from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.services.rping import ADV_BYTES, ping_data, unpack_adv
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.roce_env import wait_cycles

#: the host's rping port (the build's ``rping_client_port``), the client's size and count
PORT = int(os.environ.get("RPING_CLIENT_PORT", "7174"))
SIZE = int(os.environ.get("RPING_CLIENT_SIZE", "1000"))
COUNT = int(os.environ.get("RPING_CLIENT_COUNT", "4"))
#: the server's buffers in the host's memory
SERVER_BUF = 0x30_0000_0000


class ClientEnv(CmEnv):
    """:class:`CmEnv` whose host also listens on the rping port."""

    LISTEN = (HOST_LISTEN, PORT)


class Server:
    """``rping -s -S SIZE`` on the host's end of one connection: its buffers registered in the
    NIC model, what it READ (ping by ping), whether its loop ended with the disconnect."""

    def __init__(self, env, conn, slot, flip=None):
        self.env, self.conn, self.flip = env, conn, flip
        nic, key, base = env.peer, 0x6100 + 16 * slot, SERVER_BUF + slot * (1 << 20)
        self.recv_buf, self.send_buf, self.rdma_buf = base, base + 0x100, base + 0x1000
        nic.register_mr(self.recv_buf, ADV_BYTES, key, Access.LOCAL_WRITE)
        nic.register_mr(self.send_buf, ADV_BYTES, key + 1, Access.LOCAL_WRITE)
        nic.register_mr(self.rdma_buf, SIZE, key + 2, Access.LOCAL_WRITE)
        nic.write_mem(self.send_buf, bytes(ADV_BYTES))
        self.read = []

    async def _wait(self, opcode):
        """The next completion of the host QP: of ``opcode``, or None when the QP was flushed
        (the client disconnected); SEND completions are passed by (rping does not wait for
        them)."""
        env, hq = self.env, self.conn.qpn
        got = []

        def done():
            got.extend(c for c in env.peer.poll_cq() + env.peer.poll_send_cq()
                       if c.qpn == hq and c.opcode != WcOpcode.SEND)
            return bool(got) or self.conn.state is not State.ESTABLISHED
        await env.settle(done, f"the rping server waits for {opcode.name}")
        if not got or got[0].status == WcStatus.WR_FLUSH_ERR:
            env.dut._log.info(f"the rping server's loop ends: {got or self.conn.state.name} "
                              f"({env.host_problems()})")
            return None
        c = got.pop(0)
        assert c.status == WcStatus.SUCCESS and c.opcode == opcode, c
        assert not got, got
        return c

    async def _advert(self):
        nic, hq = self.env.peer, self.conn.qpn
        c = await self._wait(WcOpcode.RECV)
        if c is None:
            return None
        assert c.byte_len == ADV_BYTES, c
        adv = unpack_adv(nic.read_mem(self.recv_buf, ADV_BYTES))
        nic.post_recv(hq, ADV_BYTES, 1, addr=self.recv_buf)
        return adv

    def _post(self, opcode, **kw):
        self.env.peer.post_send(self.conn.qpn, opcode, **kw)
        self.env.mac.poke()

    async def run(self):
        """The server loop until the client disconnects."""
        nic, hq = self.env.peer, self.conn.qpn
        nic.post_recv(hq, ADV_BYTES, 1, addr=self.recv_buf)
        while True:
            adv = await self._advert()
            if adv is None:
                return
            buf, rkey, size = adv
            assert size == SIZE, adv
            self._post("READ", length=size, remote_addr=buf, rkey=rkey,
                       local_addr=self.rdma_buf, wr_id=2)
            if await self._wait(WcOpcode.RDMA_READ) is None:
                return
            data = nic.read_mem(self.rdma_buf, size)
            self.read.append(data)
            self._post("SEND", data=bytes(ADV_BYTES), wr_id=3)
            adv = await self._advert()
            if adv is None:
                return
            buf, rkey, _ = adv
            back = bytearray(data[:data.index(0) + 1])          # strlen(rdma_buf) + 1
            if self.flip is not None and len(self.read) == self.flip:
                back[len(back) // 2] ^= 0x20
            self._post("WRITE", data=bytes(back), remote_addr=buf, rkey=rkey, wr_id=4)
            if await self._wait(WcOpcode.RDMA_WRITE) is None:
                return
            self._post("SEND", data=bytes(ADV_BYTES), wr_id=5)


async def run_client(env, slot, flip=None):
    """The FPGA connects to the host's rping port; the server runs until the client's DREQ.
    Returns the server and the event."""
    ev = await fpga_connect(env, PORT)
    assert ev["ok"] and ev["port"] == PORT, ev
    (conn,) = [c for c in env.peer.cm.connections.values()
               if c.peer_qpn == ev["qpn"] and c.role is Role.PASSIVE and
               c.state in (State.ESTABLISHED, State.REP_SENT)]
    await env.settle(lambda: conn.state is State.ESTABLISHED, "the host got no RTU")
    server = Server(env, conn, slot, flip)
    try:
        await server.run()
    except AssertionError:
        st = await read_stats(env.dut, STATS)
        env.dut._log.info(f"counters: { {k: v for k, v in st.items() if v} } "
                          f"host: {env.host_problems()} {dict(env.peer.counters)}")
        raise
    env.dut._log.info(f"the rping server READ {len(server.read)} pings; its connection "
                      f"{conn.state.name}")
    await env.settle(lambda: conn.state is State.TIMEWAIT,
                     lambda: f"no DREQ from the FPGA's client: the connection {conn.state.name}, "
                     f"{len(server.read)} pings READ")
    return server, ev


@cocotb.test()
async def rping_client(dut):
    random.seed(SEED)
    env = ClientEnv(dut)
    await env.start()
    # (the testbench gave each QP a share of the responder's region; the QP of the client's
    # connection must let the server READ and WRITE its slice: every QP the whole region, as
    # after reset, with the testbench's R_Keys, which the client follows)
    for k in range(NUM_QPS):
        await env.set_region(k, *REGION)
    before = await read_stats(dut, STATS)
    user_cpls = len(env.cpl.items)
    server, ev = await run_client(env, 0)
    assert server.read == [ping_data(p, SIZE) for p in range(COUNT)]
    k = ev["qpn"] - 256
    await env.settle(lambda: not int(dut.qp_open.value) >> k & 1, "the client's QP stays open")
    # again, with a server whose second WRITE back differs in one byte
    server, _ = await run_client(env, 1, flip=2)
    assert server.read == [ping_data(p, SIZE) for p in range(2)]
    await wait_cycles(W, 2000)
    after = await read_stats(dut, STATS)
    got = {k: after[k] - before[k] for k in STATS if k.startswith("rping_client_")}
    want = {f"rping_client_{n}": 0 for n in ("ended", "bogus", "bad_status", "busy")}
    assert got == {**want, "rping_client_pings": COUNT + 1, "rping_client_done": 1,
                   "rping_client_mismatch": 1}, got
    # the client's completions went to it, none to the user's port
    assert len(env.cpl.items) == user_cpls, env.cpl.items[user_cpls:]
    assert not env.host_problems(), env.host_problems()
    dut._log.info(env.mac.framecheck.summary())
