"""cocotb testbench: the gateware services of an endpoint built with ``rping_port`` and
``echo_port`` (two of its ``rdma_cm_ports``), against the host NIC model as a librdmacm peer
(:class:`~rocegen.sim.models.rnic.rdma_cm.CmPeer` connects).

The cocotb test ``rping``: ``rping -c`` (the client's steps are
:class:`~rocegen.sim.models.services.rping.RpingClient`'s, its buffers registered in the
NIC model's memory, which the endpoint READs and WRITEs):

* the user's logic has left two receive buffers on every QP for its next connections;
* two clients connect to rping's port at once (``-C 10 -S 4096 -V`` and ``-C 6 -S 100 -V``) and
  run to the end: every ping's bytes came back whole (``-V``);
* meanwhile the user's logic SENDs on a connection of the other port: its completion comes to
  the user's port, none of the server's to it; the user's buffers on the two rping QPs came
  back FLUSHED (flushed when the QP was opened for the server), the others stay; a buffer the
  user posts on an rping QP is refused (FLUSHED at once);
* the first client disconnects and connects again (its QP's receive buffer was flushed, the
  service starts afresh) and runs ``-C 3 -S 26 -V``;
* the server's counters: the pings done, and no service ended by an error.

The cocotb test ``quiet``: an ``rdma_client``-like client of the echo whose DREQ is lost and
which then destroys its id (as ``rdma_client`` does; Linux sends that DREQ once): the endpoint
closes the connection itself (its DREQ, the host's DREP, the time-wait) after between
``service_idle_us`` and twice that without a request on it, and the QP serves a new client;
meanwhile a client that SENDs a message every quarter of that time keeps its connection, and the
user's connection on the other port, quiet all along, keeps its own (only the services'
connections are watched).

The cocotb test ``send_echo``: two clients of the echo's port at once, as librdmacm's
``rdma_client`` (a receive posted, a SEND, its echo received) with messages of 16 bytes (the
example's), 0 bytes, one packet and several packets (up to a QP's slice), every echo byte for
byte the message; a client's next message, sent once the echo reached it, may meet an RNR NAK
(the echo's buffer is posted again when the echo's ACK came), and is retried; the counters.
"""

import dataclasses
import os
import random

import cocotb

from rocegen.gateware.roce.endpoint.config import EndpointConfig
from rocegen.gateware.roce.endpoint.endpoint_stats import STATS
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.gateware.roce.responder.resp_layouts import RecvStatus
from rocegen.sim.cocotb.rdma_cm import HOST_BUF, MAX_CYCLES, PORT, CmEnv, _now_ns
from rocegen.sim.cocotb.roce_resp import NUM_QPS, PARAMS, W
from rocegen.sim.models.ibcm.cm import State
from rocegen.sim.models.rnic import WcStatus
from rocegen.sim.models.rnic.cq import WcOpcode
from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.services.rping import ADV_BYTES, MemoryRegion, RpingClient, ping_data
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.roce_env import period_ps, wait_cycles

#: rping's port and the echo's in the build (``rping_port``, ``echo_port``)
RPING_PORT = int(os.environ.get("RPING_PORT", "7174"))
ECHO_PORT = int(os.environ.get("ECHO_PORT", "7475"))
SEED = int(os.environ.get("SEED", "7"))
#: where each client's buffers live in the host's memory (a slot of 1 MiB per client)
CLIENT_BASE, CLIENT_SLOT = 0x20_0000_0000, 1 << 20
#: the work request IDs of the user's receive buffers
USER_BUF = 0x7000
#: the services' buffers in the build: (base, bytes per QP)
SLICES = EndpointConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in PARAMS.items()
                          if k in {f.name for f in dataclasses.fields(EndpointConfig)}}
                       ).service_slices


class Client:
    """One ``rping -c``: its connection, its buffers registered in the NIC model (``start_buf``
    and ``rdma_buf`` remote read and write, ``recv_buf`` and ``send_buf``), the model of its
    steps."""

    def __init__(self, env, slot, size, count):
        self.env, self.size = env, size
        base = CLIENT_BASE + slot * CLIENT_SLOT
        key = 0x4000 + 16 * slot
        self.recv_buf, self.send_buf = base, base + 0x100
        start, rdma = base + 0x1000, base + 0x1000 + (size + 0xFFF) // 0x1000 * 0x1000
        nic = env.peer
        nic.register_mr(self.recv_buf, ADV_BYTES, key, Access.LOCAL_WRITE)
        nic.register_mr(self.send_buf, ADV_BYTES, key + 1, Access.LOCAL_WRITE)
        both = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE
        nic.register_mr(start, size, key + 2, both)
        nic.register_mr(rdma, size, key + 3, both)
        self.model = RpingClient(size, count, start=MemoryRegion(start, key + 2, bytearray(size)),
                                 rdma=MemoryRegion(rdma, key + 3, bytearray(size)))
        self.cid = self.conn = None

    async def run(self):
        """Connect, ping until the model's ``result``, disconnect; returns the result."""
        env, model = self.env, self.model
        self.cid, self.conn = await env.connect(RPING_PORT)
        assert self.conn.state is State.ESTABLISHED, self.conn
        hq = self.conn.qpn
        env.peer.post_recv(hq, ADV_BYTES, 1, addr=self.recv_buf)
        self._send(hq, model.connected())
        while model.result is None:
            cpl = await self._receive(hq)
            if cpl.status != WcStatus.SUCCESS:
                model.fail(f"receive completion {cpl.status.name}")
                break
            env.peer.post_recv(hq, ADV_BYTES, 1, addr=self.recv_buf)
            model.rdma.data[:] = env.peer.read_mem(model.rdma.addr, self.size)
            msg = model.received(cpl.byte_len)
            if msg is not None:
                self._send(hq, msg)
        env.send(env.peer.disconnect(_now_ns(), self.cid))
        await env.settle(lambda: self.conn.state is State.TIMEWAIT, "no DREP")
        return model.result

    def _send(self, hq, msg):
        """The client's SEND of ``msg`` (``start_buf`` in host memory as the model has it)."""
        model = self.model
        self.env.peer.write_mem(model.start.addr, bytes(model.start.data))
        self.env.peer.write_mem(self.send_buf, msg)
        self.env.peer.post_send(hq, "SEND", data=msg, wr_id=2)
        self.env.mac.poke()

    async def _receive(self, hq):
        got = []

        def done():
            got.extend(c for c in self.env.peer.poll_cq() if c.qpn == hq or self._other(c))
            return any(c.qpn == hq for c in got)

        await self.env.settle(done, f"rping client on host QP {hq:#x}: no go-ahead")
        mine = [c for c in got if c.qpn == hq]
        assert len(mine) == 1 and mine[0].opcode == WcOpcode.RECV, mine
        return mine[0]

    def _other(self, c):
        """A completion of another client's QP, put back for it."""
        self.env.others.append(c)
        return False


class RpingEnv(CmEnv):
    """:class:`CmEnv` whose clients share the NIC model's receive completions."""

    def __init__(self, dut):
        super().__init__(dut)
        self.others = []
        poll = self.peer.poll_cq

        def poll_all(max_entries=None):
            mine, self.others[:] = list(self.others), []
            return mine + poll(max_entries)
        self.peer.poll_cq = poll_all


async def user_send(env, conn, k):
    """The user's logic SENDs 256 bytes on QP ``k`` (a connection of the other port): the
    completion comes to the user's port."""
    env.peer.post_recv(conn.qpn, 4096, 0x99, addr=HOST_BUF)
    first = len(env.cpl.items)
    await env.wr.send({"wr_id": 0x6000 + k, "qp": k, "opcode": WrOpcode.SEND,
                       "local_addr": 0, "length": 256, "remote_offset": 0, "imm": 0})
    cpl = (await env.cpl.wait_for(first + 1, max_cycles=MAX_CYCLES))[first]
    assert cpl["status"] == CplStatus.OK.value and cpl["wr_id"] == 0x6000 + k, cpl
    return cpl


@cocotb.test()
async def rping(dut):
    random.seed(SEED)
    env = RpingEnv(dut)
    await env.start()
    before = await read_stats(dut, STATS)
    # the user's buffers, left on every QP for its next connections
    for k in range(NUM_QPS):
        for j in range(2):
            await env.post_recv(k, USER_BUF + 2 * k + j, 0, 64)
    # the user's own connection on the other port
    _, other = await env.connect(PORT)
    assert other.state is State.ESTABLISHED
    a, b = Client(env, 0, 4096, 10), Client(env, 1, 100, 6)
    runs = [cocotb.start_soon(c.run()) for c in (a, b)]
    await wait_cycles(W, 3000)
    user_cpls = len(env.cpl.items)
    await user_send(env, other, other.peer_qpn - 256)
    results = [await r for r in runs]
    assert results == ["ok", "ok"], results
    # the user's port saw its own completion only
    assert len(env.cpl.items) == user_cpls + 1, env.cpl.items[user_cpls:]
    # the user's buffers on the rping QPs came back flushed, the others stay; a buffer posted
    # on an rping QP is refused
    rping_qps = {a.conn.peer_qpn - 256, b.conn.peer_qpn - 256}
    mine = [(c["qp"], c["wr_id"], c["status"]) for c in env.rcpl.items
            if c["wr_id"] >> 8 == USER_BUF >> 8]
    assert sorted(mine) == [(k, USER_BUF + 2 * k + j, RecvStatus.FLUSHED.value)
                            for k in sorted(rping_qps) for j in range(2)], mine
    seen = len(env.rcpl.items)
    await env.post_recv(a.conn.peer_qpn - 256, USER_BUF + 0xFF, 0, 64)
    await env.settle(lambda: len(env.rcpl.items) > seen, "the refused buffer's completion")
    assert [(c["wr_id"], c["status"]) for c in env.rcpl.items[seen:]] == \
        [(USER_BUF + 0xFF, RecvStatus.FLUSHED.value)]
    # (what rping's -V compared, ping by ping: the bytes the endpoint wrote back)
    assert a.model.log == [ping_data(i, 4096) for i in range(10)]
    assert b.model.log == [ping_data(i, 100) for i in range(6)]
    # again, after the first client's disconnect (the same QP, once free again)
    await env.settle(lambda: not int(dut.qp_open.value) >> (a.conn.peer_qpn - 256) & 1,
                     "the rping QP stays open")
    c = Client(env, 2, 26, 3)
    assert await c.run() == "ok"
    await wait_cycles(W, 2000)
    after = await read_stats(dut, STATS)
    got = {k: after[k] - before[k] for k in STATS
           if k.startswith("rping_") and not k.startswith("rping_client_")}
    assert got == {"rping_pings": 19, "rping_ended": 3, "rping_bad_adv": 0,
                   "rping_bad_status": 0, "rping_bad_event": 0}, got
    assert not env.host_problems(), env.host_problems()
    dut._log.info(env.mac.framecheck.summary())


def _echoed(env, hq, seen):
    """The receive completions of host QP ``hq`` into ``seen`` (the others put back for their
    clients); whether there is one."""
    seen.extend(c for c in env.peer.poll_cq() if c.qpn == hq or env.others.append(c))
    return bool(seen)


async def echo_client(env, rng, sizes, slot, *, gap=0, lose_dreq=False):
    """One client of the echo: connects, and for each size SENDs a message of random bytes
    into its posted receive buffer's echo (``gap`` cycles after the echo before), then
    disconnects; returns the messages, the echoes' bytes and the connection. ``lose_dreq``: its
    DREQ is lost and the client destroys its id at once, as ``rdma_client`` does."""
    _, conn = await env.connect(ECHO_PORT)
    assert conn.state is State.ESTABLISHED, conn
    hq, buf = conn.qpn, CLIENT_BASE + slot * CLIENT_SLOT
    env.peer.register_mr(buf, CLIENT_SLOT, 0x5000 + slot, Access.LOCAL_WRITE)
    sent, got = [], []
    for n in sizes:
        await wait_cycles(W, gap)
        msg = rng.randbytes(n)
        env.peer.post_recv(hq, CLIENT_SLOT, n, addr=buf)
        env.peer.post_send(hq, "SEND", data=msg, wr_id=n)
        env.mac.poke()
        sent.append(msg)
        seen = []
        await env.settle(lambda seen=seen: _echoed(env, hq, seen),
                         f"no echo of {n} bytes on host QP {hq:#x}")
        (c,) = seen
        assert c.status == WcStatus.SUCCESS and c.byte_len == n, c
        got.append(env.peer.read_mem(buf, n))
    dreq = env.peer.disconnect(_now_ns(), conn.local_comm_id)
    if lose_dreq:
        env.send(env.peer.destroy(_now_ns(), conn.local_comm_id))
    else:
        env.send(dreq)
    await env.settle(lambda: conn.state is State.TIMEWAIT, "no DREP")
    return sent, got, conn


async def echo_env(dut):
    """The echo tests' start: their random numbers, the started :class:`RpingEnv` and the
    counters before."""
    env = RpingEnv(dut)
    await env.start()
    return random.Random(SEED), env, await read_stats(dut, STATS)


@cocotb.test()
async def send_echo(dut):
    rng, env, before = await echo_env(dut)
    _, per_qp = SLICES
    sizes = ([16, 0, 1, 1000, 4096, per_qp], [16, 3000, 16])
    runs = [cocotb.start_soon(echo_client(env, random.Random(rng.getrandbits(32)), s, 8 + k))
            for k, s in enumerate(sizes)]
    for r in runs:
        sent, got, _ = await r
        assert got == sent, "an echo differs from its message"
    await wait_cycles(W, 2000)
    after = await read_stats(dut, STATS)
    got = {k: after[k] - before[k] for k in STATS if k.startswith("echo_")}
    assert got == {"echo_echoes": sum(map(len, sizes)), "echo_ended": 2,
                   "echo_bad_status": 0, "echo_bad_event": 0}, got
    # (a client's next message may come before the echo's ACK: the endpoint then has no buffer
    # posted yet and answers RNR, as documented; anything else is a problem)
    problems = [p for p in env.host_problems() if not p.startswith("req_rnr_rx")]
    assert not problems, problems


@cocotb.test()
async def quiet(dut):
    rng, env, before = await echo_env(dut)
    idle_ns = PARAMS["service_idle_us"] * 1000
    idle = round(idle_ns * 1000 / period_ps(W))
    _, user = await env.connect(PORT)
    assert user.state is State.ESTABLISHED
    gone_at = {}

    async def gone():
        sent, got, conn = await echo_client(env, rng, [16, 100], 8, lose_dreq=True)
        gone_at["ns"] = _now_ns()       # (after its last echo: no request of it from here)
        assert got == sent
        return conn

    # a client SENDing every quarter of the idle time, through three of them
    live = cocotb.start_soon(echo_client(env, random.Random(rng.getrandbits(32)), [16] * 12, 9,
                                         gap=idle // 4))
    conn = await gone()
    k = conn.peer_qpn - 256
    await env.settle(lambda: not int(dut.qp_open.value) >> k & 1,
                     "the quiet connection's QP is still taken", max_cycles=4 * idle + MAX_CYCLES)
    closed_ns = _now_ns() - gone_at["ns"]
    sent, got, kept = await live
    assert got == sent and kept.state is State.TIMEWAIT
    # the QP serves again
    sent, got, again = await echo_client(env, rng, [16], 10)
    assert got == sent and again.peer_qpn == conn.peer_qpn
    await wait_cycles(W, 2000)
    after = await read_stats(dut, STATS)
    got = {k: after[k] - before[k] for k in ("ibcm_idle_closes", "ibcm_disconnects",
                                             "echo_ended", "echo_bad_event")}
    assert got == {"ibcm_idle_closes": 1, "ibcm_disconnects": 1, "echo_ended": 3,
                   "echo_bad_event": 0}, got
    # closed after a quiet window at least (it also waited out the time-wait), and within two
    # windows and the time-wait
    wait_ns = PARAMS["rdma_cm_time_wait_us"] * 1000
    assert idle_ns <= closed_ns <= 2 * idle_ns + wait_ns + 10_000, (closed_ns, idle_ns)
    # the user's connection, quiet all along, is open on both sides
    assert user.state is State.ESTABLISHED and int(dut.qp_open.value) >> (user.peer_qpn - 256) & 1
    assert not [p for p in env.host_problems() if not p.startswith("req_rnr_rx")]
