"""cocotb testbench: the standard RDMA connection manager of an endpoint built with
``rdma_cm_ports`` (the IB CM over QP1), against the host NIC model as a librdmacm peer
(:class:`~rocegen.sim.models.rnic.rdma_cm.CmPeer`: its ``rdma_connect`` and ``rdma_disconnect``
go to the endpoint as MADs, its QPs are made when the connection is).

The cocotb test ``connections``:

* the host connects to the listened port: the REP names a QP of the endpoint (``qp_open``
  shows it), states the QP's region (its base, R_Key and length in the responder's table) and
  the REQ's own starting PSN; the host's RTU establishes the connection;
* the host RDMA-WRITEs into the region and READs it back, byte for byte; the endpoint SENDs
  to the host (a receive buffer the host posted): data moves both ways on the QP the CM
  opened, with the PSNs and MTU the REQ asked for;
* a 17185 OPEN_QP meanwhile gets another QP, and a 17185 CLOSE_QP of the IB CM's QP is
  refused (neither manager touches the other's);
* a REQ for a port nobody listens on gets REJ INVALID_SERVICE_ID and takes no QP;
* the host disconnects: DREP, the endpoint's QP leaves ``qp_open`` after the time-wait;
  then the host connects again and moves data again, while it sends MADs no connection asked
  for (one malformed MAD of each kind, random messages naming no connection): the endpoint
  counts each as the reference model does and the data is not disturbed;
* the FPGA disconnects (``rdma_cm_disconnect``); then it connects to the host
  (``rdma_cm_connect``): refused on a port the host does not listen on, established on the
  one it does; it WRITEs into the region the host's REP stated, the host SENDs to it (the
  FPGA's QP expects the host's own PSN) and it WRITEs that back; it disconnects;
* the endpoint's counters agree with what went on the line (MADs in and out, connections
  established, refused) and every frame it sent passes the independent frame check.
"""

import os
import random

import cocotb
from cocotb.triggers import FallingEdge, RisingEdge

from rocegen.gateware.lib.records import pack, unpack
from rocegen.gateware.roce.endpoint.endpoint_stats import STATS
from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.gateware.roce.responder.resp_layouts import RecvStatus
from rocegen.sim.cocotb.roce_resp import NUM_QPS, B, RespEnv, W, rkey_of, share
from rocegen.sim.models.cm.cm import ACK_ACK, ACK_NAK, CM_PORT, REQ_CLOSE_QP, REQ_OPEN_QP
from rocegen.sim.models.cm.cm import request as cm_request
from rocegen.sim.models.cm.cm import unpack as cm_unpack
from rocegen.sim.models.ibcm import IbCm, QpPool, Region
from rocegen.sim.models.ibcm.cm import Role, State
from rocegen.sim.models.ibcm.frames import wrap
from rocegen.sim.models.rnic import WcStatus
from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.rnic.rdma_cm import CmPeer
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.ibcm_mads import malformed, random_message
from rocegen.sim.testing.roce_env import now_cycle, period_ps, wait_cycles
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import ibcm as I
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import BTH, ETH, IPV4, UDP, UDP_PORT_ROCEV2
from rocegen.wire.opcodes import OP_UD_SEND_ONLY

#: the TCP port the build listens on (``rdma_cm_ports``)
PORT = int(os.environ.get("RDMA_CM_PORT", "7471"))
SEED = int(os.environ.get("SEED", "5"))
#: the host's QP numbers (the CM's) and where its buffers live
HOST_QPNS = range(0x300, 0x310)
HOST_BUF = 0x10_0000_0000
MAX_CYCLES = 2_000_000
CM_SPORT, CM_LISTEN = 0x5123, 0x5124
#: the port the host listens on for the FPGA's connections, and the region its REPs state
HOST_LISTEN = 18515
HOST_REGION = Region(addr=0x7F_0000_0000, rkey=0x5151, length=1 << 16)


def _now_ns():
    return now_cycle(W) * period_ps(W) / 1000


def _is_mad(frame):
    """A UD SEND_ONLY to QP1 (an untagged RoCEv2 frame)."""
    at = ETH.length + IPV4.length
    if len(frame) < at + UDP.length + BTH.length or \
            UDP.unpack(frame[at:])["dst_port"] != UDP_PORT_ROCEV2:
        return False
    bth = BTH.unpack(frame[at + UDP.length:])
    return bth["opcode"] == OP_UD_SEND_ONLY and bth["dest_qp"] == I.QP1


class CmEnv(RespEnv):
    """:class:`RespEnv` whose host NIC model is a librdmacm peer; counts the MADs each way."""

    #: the TCP ports the host listens on
    LISTEN = (HOST_LISTEN,)

    def __init__(self, dut):
        super().__init__(dut, seed=SEED)
        self.nic.udp_ports = (CM_LISTEN,)       # (the 17185 manager's replies)
        # (the host also listens, for the FPGA's connections: its REPs state HOST_REGION)
        self.peer = self.nic = CmPeer(self.nic, qpns=HOST_QPNS, ports=self.LISTEN,
                                      region=HOST_REGION)
        self.nic.register_mr(HOST_BUF, 1 << 16, 0x7700, Access.LOCAL_WRITE)
        self.nic.register_mr(HOST_REGION.addr, HOST_REGION.length, HOST_REGION.rkey,
                             Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
        self.mads_in = 0

    async def start(self):
        """The MAC model, the MADs counted; each QP's region a share of the responder's with
        the testbench's R_Key (:func:`rkey_of`)."""
        await super().start()
        self.mac.taps.append(self._tap)
        for k in range(NUM_QPS):
            await self.set_region(k, *share(k, NUM_QPS))

    def _tap(self, frame):
        self.mads_in += _is_mad(frame)

    def mads_out(self):
        return sum(_is_mad(fr) for _, _, fr in self.mac.frames)

    def send(self, frames):
        for f in frames:
            self.mac.to_endpoint(f)
        self.mac.poke()

    async def connect(self, port=PORT):
        """``rdma_connect`` to ``port``: the connection (its state when the answer came)."""
        cid, frames = self.peer.connect(_now_ns(), dst_ip=FPGA_IP, dst_mac=FPGA_MAC, port=port)
        self.send(frames)
        conn = self.peer.cm.connections[cid]
        await self.settle(lambda: cid not in self.peer.cm.connections or
                          conn.state is not State.REQ_SENT, f"no answer to the REQ on {port}")
        return cid, conn

    async def qp_open(self):
        await wait_cycles(W, 2)
        return int(self.dut.qp_open.value)


async def cm17185(env, payload):
    """One exchange with the UDP 17185 connection manager: its reply's fields."""
    seen = len(env.nic.udp_rx)
    env.mac.to_endpoint(env.nic.udp_frame(FPGA_IP, CM_SPORT, CM_PORT, payload, dst_mac=FPGA_MAC))
    env.mac.poke()
    await env.settle(lambda: len(env.nic.udp_rx) > seen, "no 17185 reply")
    return cm_unpack(env.nic.udp_rx[seen][3])


#: cycles between two hostile MADs: more than the CM takes for one at W = 64 (its ingress
#: queue holds two; a burst beyond that is dropped and counted, ``ibcm_qp1_drop_overflow``)
HOSTILE_GAP = 300


async def hostile_mads(env, rng, counts):
    """MADs no connection asked for, sent from the host while data moves, one every
    :data:`HOSTILE_GAP` cycles: one malformed MAD of each kind the reference model drops or
    answers (those of 256 bytes: a RoCEv2 frame to QP1 carries each), and random messages
    naming no connection. ``counts`` gets the counters the reference model (a node without
    connections) counts for them."""
    model = IbCm(pool=QpPool([2]), local_ip=parse_ip(FPGA_IP), ca_guid=1, ports=[PORT])
    mads = [m for _, m in malformed(rng) if len(m) == I.MAD_LENGTH]
    mads += [random_message(rng, attr) for attr in (I.ATTR_RTU, I.ATTR_DREP, I.ATTR_MRA,
                                                     I.ATTR_REJ, I.ATTR_REP, I.ATTR_DREQ)]
    for m in mads:
        model.receive(0, m, src_ip=parse_ip(HOST_IP))
        env.send([wrap(m, src_mac=parse_mac(HOST_MAC), dst_mac=parse_mac(FPGA_MAC),
                       src_ip=parse_ip(HOST_IP), dst_ip=parse_ip(FPGA_IP))])
        await wait_cycles(W, HOSTILE_GAP)
    counts.update({f"ibcm_{k}": v for k, v in model.counters.items() if f"ibcm_{k}" in STATS})


async def move_data(env, conn, rng, what, during=None):
    """The host WRITEs a message into the region the REP stated and READs it back (``during``:
    a coroutine started once both are posted, awaited after); the endpoint SENDs one to the
    host."""
    hq, k = conn.qpn, conn.peer_qpn - 256
    r = conn.peer_region
    data = rng.randbytes(rng.randrange(1500, 5000))
    # (a whole word: the endpoint's SEND below takes its bytes from there)
    off = rng.randrange(0, r.length - len(data)) // B * B
    env.wr_id += 2
    w, rd = env.wr_id - 1, env.wr_id
    env.peer.post_send(hq, "WRITE", data=data, remote_addr=r.addr + off, rkey=r.rkey, wr_id=w)
    env.peer.post_send(hq, "READ", length=len(data), remote_addr=r.addr + off, rkey=r.rkey,
                       wr_id=rd)
    env.mac.poke()
    side = cocotb.start_soon(during) if during is not None else None
    await env.settle(lambda: not env.peer.send_outstanding(), f"{what}: host WRITE and READ")
    done = {c.wr_id: c for c in env.peer.send_cq if c.wr_id in (w, rd)}
    assert all(c.status == WcStatus.SUCCESS for c in done.values()), (what, done)
    assert done[rd].data == data, f"{what}: the READ returned other bytes than written"
    if side is not None:
        await side
    env.shadow[r.addr + off:r.addr + off + len(data)] = data
    # the endpoint SENDs 600 bytes of its memory to a buffer the host posted
    env.peer.post_recv(hq, 4096, 0x99, addr=HOST_BUF)
    first = len(env.cpl.items)
    await env.wr.send({"wr_id": 0x5000 + k, "qp": k, "opcode": WrOpcode.SEND,
                       "local_addr": r.addr + off, "length": 600, "remote_offset": 0, "imm": 0})
    cpl = (await env.cpl.wait_for(first + 1, max_cycles=MAX_CYCLES))[first]
    assert cpl["status"] == CplStatus.OK.value, (what, cpl)
    assert env.peer.read_mem(HOST_BUF, 600) == data[:600], f"{what}: the SEND's bytes"


@cocotb.test()
async def connections(dut):
    rng = random.Random(SEED)
    env = CmEnv(dut)
    await env.start()
    # a connection: the REP names a QP, its region and the REQ's PSN; the RTU establishes it
    cid, conn = await env.connect()
    assert conn.state is State.ESTABLISHED, conn
    k = conn.peer_qpn - 256
    assert 0 <= k < NUM_QPS and (await env.qp_open()) >> k & 1
    base, length = share(k, NUM_QPS)
    assert (conn.peer_region.addr, conn.peer_region.rkey, conn.peer_region.length) == \
        (base, rkey_of(k), length), conn.peer_region
    assert conn.peer_psn == conn.psn, "the endpoint's QP starts at the REQ's PSN"
    await move_data(env, conn, rng, "first connection")

    # the UDP manager: another QP; the IB CM's is not its to close
    reply = await cm17185(env, cm_request(REQ_OPEN_QP, loc_qpn=0x77, loc_psn=5,
                                          loc_ip=parse_ip(HOST_IP), listening_port=CM_LISTEN))
    assert reply["ack_type"] == ACK_ACK and reply["loc_qpn"] != conn.peer_qpn, reply
    oob = reply["loc_qpn"]
    reply = await cm17185(env, cm_request(REQ_CLOSE_QP, rem_qpn=conn.peer_qpn,
                                          loc_ip=parse_ip(HOST_IP), listening_port=CM_LISTEN))
    assert reply["ack_type"] == ACK_NAK, reply

    # nobody listens on PORT + 1: REJ INVALID_SERVICE_ID, no QP taken
    before = await env.qp_open()
    bad, _ = await env.connect(PORT + 1)
    assert bad not in env.peer.cm.connections
    assert ("rejected", bad, I.RejReason.INVALID_SERVICE_ID) in env.peer.cm.events
    assert await env.qp_open() == before

    # disconnect: DREP, time-wait, the QP free again; connect again and move data
    env.send(env.peer.disconnect(_now_ns(), cid))
    await env.settle(lambda: conn.state is State.TIMEWAIT, "no DREP")
    await env.settle(lambda: not int(dut.qp_open.value) >> k & 1, "the QP stays open")
    _, again = await env.connect()
    assert again.state is State.ESTABLISHED
    before = await read_stats(dut, STATS)
    hostile = {}
    await move_data(env, again, rng, "second connection, hostile MADs meanwhile",
                    during=hostile_mads(env, rng, hostile))
    await wait_cycles(W, 2000)
    after = await read_stats(dut, STATS)
    got = {k: after[k] - before[k] for k in hostile}
    assert got == hostile and hostile["ibcm_rx_mads"] >= 15, (got, hostile)
    dut._log.info(f"the hostile MADs during traffic, counted as the model counts them: "
                  f"{ {k: v for k, v in got.items() if v} }")
    reply = await cm17185(env, cm_request(REQ_CLOSE_QP, rem_qpn=oob, loc_ip=parse_ip(HOST_IP),
                                          listening_port=CM_LISTEN))
    assert reply["ack_type"] == ACK_ACK, reply

    # the FPGA disconnects (the user's logic on rdma_cm_disconnect): its DREQ, the host's
    # DREP, the QP free again after the time-wait; the same QP again at once: nothing
    k2 = again.peer_qpn - 256
    for qp in (k2, k2):
        await fpga_disconnect(env, qp)
    await env.settle(lambda: again.state is State.TIMEWAIT, "no DREQ from the FPGA")
    await env.settle(lambda: not int(dut.qp_open.value) >> k2 & 1, "the QP stays open")
    got = await read_stats(dut, ["ibcm_disconnects", "ibcm_disconnect_unknown"], block=STATS)
    assert got == {"ibcm_disconnects": 1, "ibcm_disconnect_unknown": 1}, got

    await fpga_connects(env, rng)
    await check_counters(env)
    assert not env.host_problems(), env.host_problems()
    dut._log.info(env.mac.framecheck.summary())


async def fpga_connect(env, port):
    """The user's logic asks the endpoint to connect to the host's ``port``: the event that
    answers (its fields)."""
    dut = env.dut
    dut.cmev_ready.value = 1
    dut.cmconn_data.value = pack(CONNECT, {"dst_ip": parse_ip(HOST_IP), "port": port,
                                           "src_port": 0xC777})
    dut.cmconn_valid.value = 1
    while True:
        await FallingEdge(dut.clk)
        if dut.cmconn_ready.value:
            break
    await RisingEdge(dut.clk)
    dut.cmconn_valid.value = 0
    for _ in range(MAX_CYCLES):
        await FallingEdge(dut.clk)
        if dut.cmev_valid.value:
            return unpack(CM_EVENT, int(dut.cmev_data.value))
    raise AssertionError(f"no event for the connection to port {port}")


async def fpga_connects(env, rng):
    """The FPGA connects to the host (``rdma_cm_connect``): a port the host does not listen
    on is refused (the event gives the REJ's reason) and takes no QP; the one it listens on
    gives a QP; the FPGA WRITEs into the region the host's REP stated (its R_Key and address),
    the host SENDs to the FPGA (the FPGA's responder expects the host's own PSN) and the
    FPGA WRITEs those bytes back; then the FPGA disconnects."""
    dut = env.dut
    before = await env.qp_open()
    ev = await fpga_connect(env, HOST_LISTEN + 1)
    assert not ev["ok"] and ev["reason"] == I.RejReason.INVALID_SERVICE_ID, ev
    await env.settle(lambda: int(dut.qp_open.value) == before, "the refused QP stays taken")
    ev = await fpga_connect(env, HOST_LISTEN)
    assert ev["ok"] and ev["port"] == HOST_LISTEN, ev
    k = ev["qpn"] - 256
    (conn,) = [c for c in env.peer.cm.connections.values()
               if c.peer_qpn == ev["qpn"] and c.role is Role.PASSIVE]
    await env.settle(lambda: conn.state is State.ESTABLISHED, "the host got no RTU")
    assert conn.psn != conn.peer_psn, "(the two directions' PSNs should differ here)"
    # the FPGA WRITEs bytes of its memory into the host's region
    data = rng.randbytes(2500)
    at = share(k, NUM_QPS)[0]
    env.shadow[at:at + len(data)] = data
    await env.store(at, len(data))
    await write_to_host(env, k, at, data, 0x100)
    # the host SENDs to the FPGA, which WRITEs what came back to the host
    back = rng.randbytes(1800)
    land = at + 4096
    got = len(env.rcpl.items)
    await env.post_recv(k, 0x77, land, 4096)
    env.peer.post_send(conn.qpn, "SEND", data=back, wr_id=0x78)
    env.mac.poke()
    rc = (await env.rcpl.wait_for(got + 1, max_cycles=MAX_CYCLES))[got]
    assert rc["status"] == RecvStatus.OK.value and rc["length"] == len(back), rc
    env.shadow[land:land + len(back)] = back
    await write_to_host(env, k, land, back, 0x4000)
    await fpga_disconnect(env, k)
    await env.settle(lambda: conn.state is State.TIMEWAIT, "no DREQ from the FPGA")
    await env.settle(lambda: not int(dut.qp_open.value) >> k & 1, "the QP stays open")


async def write_to_host(env, k, at, data, offset):
    """QP k WRITEs ``data`` (at local address ``at``) to ``offset`` in the region the host's
    REP stated; its completion OK, the bytes in the host's memory."""
    first = len(env.cpl.items)
    await env.wr.send({"wr_id": 0x6000 + offset, "qp": k, "opcode": WrOpcode.WRITE,
                       "local_addr": at, "length": len(data), "remote_offset": offset, "imm": 0})
    cpl = (await env.cpl.wait_for(first + 1, max_cycles=MAX_CYCLES))[first]
    assert cpl["status"] == CplStatus.OK.value, cpl
    assert env.peer.read_mem(HOST_REGION.addr + offset, len(data)) == data


async def fpga_disconnect(env, qp):
    """The user's logic asks the endpoint to close QP ``qp``'s connection."""
    dut = env.dut
    dut.cmdis_data.value = qp
    dut.cmdis_valid.value = 1
    while True:
        await FallingEdge(dut.clk)           # (ready settled: taken at the next rising edge)
        if dut.cmdis_ready.value:
            break
    await RisingEdge(dut.clk)
    dut.cmdis_valid.value = 0


async def check_counters(env):
    """The endpoint's counters against what went on the line."""
    await wait_cycles(W, 50)
    names = ["roce_rx_mads", "ibcm_qp1_mads", "ibcm_rx_mads", "ibcm_tx_mads",
             "ibcm_established", "ibcm_req_rejected", "ibcm_qp1_drop_qkey", "roce_rx_drop_opcode"]
    got = await read_stats(env.dut, names, block=STATS)
    want = {"roce_rx_mads": env.mads_in, "ibcm_qp1_mads": env.mads_in,
            "ibcm_rx_mads": env.mads_in, "ibcm_tx_mads": env.mads_out(),
            "ibcm_established": 3, "ibcm_req_rejected": 1, "ibcm_qp1_drop_qkey": 0,
            "roce_rx_drop_opcode": 0}
    assert got == want, (got, want)
