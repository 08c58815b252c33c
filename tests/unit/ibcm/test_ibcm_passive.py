"""The IB CM's passive side, with the receiver and the reply builder in front and behind it:
sequences of MADs (from the reference model's active side, from the wire tables, malformed)
fed to the blocks and to the reference model, the blocks' replies compared byte for byte with
the model's, the QP pool's state with the model's; idle cycles on the input, backpressure on
the output and on the pool, at 64 and 512 bits. Then in time: MADs and received packets
(``data_seen``) at given cycles, the model met with each MAD at the cycle the blocks were
offered it and its timers run on time; what the blocks' timers send (the REP again, REJ
TIMEOUT) and the QPs they give back (REJ TIMEOUT, the end of time-wait) no earlier than the
model's and late by at most the lateness the passive side documents."""

import math
import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_layouts import QP_SET, TICK_NS
from rocegen.gateware.roce.ibcm.ibcm_passive import COUNTERS
from rocegen.sim.models.ibcm import IbCm, QpPool, Region, Role, State
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.ibcm_mads import FPGA, HOST, HOST2, mad, malformed, random_message, req
from rocegen.wire import ibcm as I
from tests.unit.ibcm.chain import Chain, Watch, counter_process, pool_process
from tests.unit.ibcm.link import parse

PORT, PORT2 = 7174, 20000
REGION = Region(addr=0x0000_7F00_1234_5000, rkey=0xA5A5_0001, length=1 << 20)
GUID, RNR, RESP_TIME = 0x0002C9030012AB34, 6, 18
FIRST_CID, PSN_SEED, FIRST_TID = 0x1234_0000, 0x00BEEF, 0x5EED_0000_FFFF_FFFE
QPNS = range(0x200, 0x204)
#: The blocks' QP numbers (those of every pool here) and clock (no timer is due in the
#: untimed tests: their REQs wait seconds, the time-wait 67 ms)
BLOCK_QPNS = range(0x200, 0x310)
CLK_HZ = 100_000_000


def lfsr_psns(seed):
    """The starting PSNs the blocks are stated to draw: x^24 + x^23 + x^22 + x^17 + 1, a
    Galois LFSR shifting right from ``seed``."""
    state = seed

    def psn():
        nonlocal state
        out = state
        state = (state >> 1) ^ (0xE10000 if state & 1 else 0)
        return out
    return psn


def opened_active(conn):
    """The ``qp_set`` of a QP the model's connection ``conn`` (one it asked for) opens when
    the REP comes."""
    r = conn.peer_region
    return {"open": 1, "qpn": conn.qpn, "peer_ip": conn.peer_ip, "peer_qpn": conn.peer_qpn,
            "psn": conn.peer_psn, "epsn": conn.psn, "path_mtu": conn.path_mtu,
            "ack_timeout": conn.local_ack_timeout, "retry_count": conn.retry_count,
            "rnr_retry_count": conn.rnr_retry_count,
            "responder_resources": conn.responder_resources,
            "initiator_depth": conn.initiator_depth, "port": conn.port, "rkey": r.rkey,
            "base": r.addr, "active": 1}


def opened(conn, req_mad, max_mtu):
    """The ``qp_set`` of a QP the model's connection ``conn`` (taken from REQ ``req_mad``)
    opens: from the model's connection, the path MTU the smaller of the REQ's and
    ``max_mtu``'s."""
    f = I.REQ.unpack(req_mad[I.MAD_HDR_LENGTH:])
    return {"open": 1, "qpn": conn.qpn, "peer_ip": conn.peer_ip, "peer_qpn": conn.peer_qpn,
            "psn": conn.psn, "path_mtu": min(f["path_mtu"], I.mtu_code(max_mtu)),
            "ack_timeout": conn.local_ack_timeout, "retry_count": conn.retry_count,
            "rnr_retry_count": conn.rnr_retry_count,
            "responder_resources": conn.responder_resources,
            "initiator_depth": conn.initiator_depth, "port": f["service_id"] & 0xFFFF,
            "epsn": conn.psn, "rkey": 0, "base": 0, "active": 0}


class Scenario:
    """MADs delivered to the model node (and recorded for the blocks), its answers kept."""

    def __init__(self, *, qpns=QPNS, responder_resources=2, initiator_depth=3, block=None,
                 **model):
        self.pool = QpPool(qpns)
        self.params = dict(responder_resources=responder_resources,
                           initiator_depth=initiator_depth)
        self.block = block or {}        # the blocks' own parameters besides
        self.model = model
        self.fpga = self.node(self.pool)
        self.inputs, self.expected = [], []
        self.sets = []          # the QP set-ups and closes (``qp_set``) the model's changes make
        self.events = []        # (ok, qpn, dst_ip, port, reason) of the FPGA's connections
        self.hosts = {}

    def node(self, pool):
        """A model node as the blocks are made, on ``pool``."""
        return IbCm(pool=pool, local_ip=FPGA, ca_guid=GUID, ports=[PORT, PORT2],
                    region=REGION, rnr_retry_count=RNR, first_comm_id=FIRST_CID,
                    first_tid=FIRST_TID, **self.params,
                    **({"psn": lfsr_psns(PSN_SEED), "cm_response_timeout": RESP_TIME}
                       | self.model))

    def deliver(self, src_ip, data):
        """``data`` to the model from ``src_ip``; its answers."""
        self.inputs.append((src_ip, data))
        return self._record(data, lambda: self.fpga.receive(0, data, src_ip=src_ip))

    def close(self, qpn):
        """The FPGA's user disconnects QP ``qpn`` (``disconnect``); the model's DREQ."""
        self.inputs.append((None, qpn))
        return self._record(None, lambda: self.fpga.disconnect_qp(0, qpn))

    def fpga_connect(self, ip, port=PORT, src_port=0xC000):
        """The FPGA's user connects to ``ip``'s ``port`` (``connect``); the model's REQ."""
        c = {"dst_ip": ip, "port": port, "src_port": src_port}
        self.inputs.append(("connect", c))
        no_qp = self.fpga.counters["connect_no_qp"]
        outs = self._record(None, lambda: self.fpga.connect(0, dst_ip=ip, port=port,
                                                            src_port=src_port)[1])
        if self.fpga.counters["connect_no_qp"] > no_qp:
            self.events.append((0, 0, ip, port, I.RejReason.NO_QP))
        return outs

    def _record(self, data, act):
        """What ``act`` (the model met with an input) sends, does to the QPs and tells of the
        connections the FPGA asked for."""
        before = {cid: (c.state, c.qpn, c.peer_ip, c.port, c.role)
                  for cid, c in self.fpga.connections.items()}
        seen = len(self.fpga.events)
        outs = act()
        self.expected += [(o.dst_ip, o.mad) for o in outs]
        closing = (State.TIMEWAIT, State.DREQ_SENT)
        for cid, c in self.fpga.connections.items():
            if cid not in before and c.role is Role.PASSIVE:
                self.sets.append(opened(c, data, self.model.get("max_mtu", 4096)))
            elif cid not in before:
                pass
            elif c.state is State.ESTABLISHED and before[cid][0] is State.REQ_SENT:
                self.sets.append(opened_active(c))
            elif c.state in closing and before[cid][0] not in closing:
                self.sets.append(dict.fromkeys(QP_SET.members, 0) | {"qpn": c.qpn})
        for name, cid, detail in self.fpga.events[seen:]:
            if cid not in before or before[cid][4] is not Role.ACTIVE or \
                    before[cid][0] is not State.REQ_SENT:
                continue
            _, qpn, ip, port, _ = before[cid]
            if name == "established":
                self.events.append((1, qpn, ip, port, 0))
            elif name in ("rejected", "req_timeout"):
                reason = I.RejReason.TIMEOUT if name == "req_timeout" else detail
                self.events.append((0, qpn, ip, port, int(reason)))
        return outs

    def host(self, ip, **kw):
        """Host ``ip``'s model node (made with ``kw`` the first time)."""
        if ip not in self.hosts:
            kw = {"initiator_depth": 2, "responder_resources": 4} | kw
            self.hosts[ip] = IbCm(pool=QpPool(range(0x100 + (ip & 0xFF) * 16,
                                                    0x110 + (ip & 0xFF) * 16)),
                                  local_ip=ip, ca_guid=ip, seed=ip, **kw)
        return self.hosts[ip]

    def connect(self, ip, *, port=PORT, lose_rep=False):
        """A connection from host ``ip``: its REQ, the answer back to it and what it sends then
        (the RTU), unless the answer is lost. Returns the host's comm ID and its REQ."""
        host = self.host(ip)
        cid, (out,) = host.connect(0, dst_ip=FPGA, port=port)
        answers = self.deliver(ip, out.mad)
        if not lose_rep:
            self.back(ip, answers)
        return cid, out.mad

    def send(self, ip, outs):
        """What host ``ip`` sent (``Outgoing``), to the model, and the answers back to it."""
        for o in outs:
            self.back(ip, self.deliver(ip, o.mad))

    def back(self, ip, answers):
        for a in answers:
            for x in self.hosts[ip].receive(0, a.mad, src_ip=FPGA):
                self.deliver(ip, x.mad)

    def talk(self, ip, outs):
        """``outs`` (the FPGA's) to host ``ip``, its answers to the FPGA, and so on."""
        while outs:
            outs = [x for o in outs for a in self.hosts[ip].receive(0, o.mad, src_ip=FPGA)
                    for x in self.deliver(ip, a.mad)]

    def ours(self, ip, cid):
        """The model node's connection with host ``ip``'s ``cid``."""
        (conn,) = [c for c in self.fpga.connections.values()
                   if c.peer_ip == ip and c.remote_comm_id == cid]
        return conn


def run(sc, width, *, connections=8, idle=0.3, backpressure=0.3, seed=0):
    """The recorded inputs through the blocks; returns ``[(dst_ip, mad)]`` sent, the blocks'
    QP pool, their counts, their QP set-ups and closes and their ``connected`` events."""
    dut = Chain(width, ca_guid=GUID, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME,
                ports=[PORT, PORT2], connections=connections, first_comm_id=FIRST_CID,
                psn_seed=PSN_SEED, clk_hz=CLK_HZ, qpns=BLOCK_QPNS, first_tid=FIRST_TID,
                **sc.params, **sc.block)
    rng = random.Random(seed)
    pool = QpPool(sc.pool._all)
    sets = []
    inputs = [(ip, Packet(d, {"src_ip": ip, "src_qp": I.QP1, "pkey": I.DEFAULT_PKEY})
               if isinstance(ip, int) else d) for ip, d in sc.inputs]
    events = []
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    counts = dict.fromkeys(COUNTERS, 0)

    count = counter_process({name: getattr(dut.cm, name) for name in COUNTERS}, counts)

    async def tb(ctx):
        ctx.set(dut.local_ip, FPGA)
        ctx.set(dut.region, {"addr": REGION.addr, "rkey": REGION.rkey, "length": REGION.length})
        settle = connections + 40 + 2048 // width * 8
        for ip, x in inputs:
            if isinstance(ip, int):
                await drv.send(ctx, [x])
                continue
            # a disconnect or a connect once the MADs before it are answered, held until it
            # is taken
            port = dut.connect if ip == "connect" else dut.disconnect
            await ctx.tick().repeat(settle)
            ctx.set(port.payload, x)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)
        # the last input's answer (the scan of the table, then the MAD)
        await ctx.tick().repeat(settle)

    async def watch_events(ctx):
        ctx.set(dut.connected.ready, 1)
        async for _, _, v, e in ctx.tick().sample(dut.connected.valid, dut.connected.payload):
            if v:
                events.append((e.ok, e.qpn, e.dst_ip, e.port, e.reason))

    run_sim(dut, testbenches=[tb], processes=[
        col.run, count, watch_events,
        pool_process(dut, pool, rng, backpressure=backpressure, delay=3, sets=sets)])
    for p in col.packets:
        assert not p.error
        assert (p.meta["dst_qp"], p.meta["pkey"]) == (I.QP1, I.DEFAULT_PKEY)
    return [(p.meta["dst_ip"], p.data) for p in col.packets], pool, counts, sets, events


def model_counts(sc, node=None):
    """The model's counters of those the blocks count."""
    c = (node or sc.fpga).counters
    return {name: c[name] for name in COUNTERS}


def check(sc, width, **kw):
    sent, pool, counts, sets, events = run(sc, width, **kw)
    names = [parse(d)[0] for _, d in sent]
    want = [parse(d)[0] for _, d in sc.expected]
    assert names == want
    for n, (got, exp) in enumerate(zip(sent, sc.expected)):
        assert got == exp, (n, names[n])
    assert pool.allocated == sc.pool.allocated
    assert counts == model_counts(sc)
    assert sets == sc.sets
    assert events == sc.events
    return names


def story(rng):
    """One of everything the passive side does, in an order that makes each happen."""
    sc = Scenario()
    a_cid, a_req = sc.connect(HOST)                      # REQ, REP, RTU: established
    sc.deliver(HOST, a_req)                              # duplicate of an established: nothing
    b_cid, b_req = sc.connect(HOST2, port=PORT2, lose_rep=True)
    sc.back(HOST2, sc.deliver(HOST2, b_req))             # duplicate in REP_SENT: the same REP
    assert sc.ours(HOST2, b_cid).state is State.ESTABLISHED
    a_qpn = sc.ours(HOST, a_cid).peer_qpn
    cid = iter(range(0x5000, 0x6000))
    for fields in (dict(port=9999), dict(port=1, service_id=0x0000_0000_0107_1C06),
                   dict(transport_service_type=I.TRANSPORT_UC), dict(path_mtu=0),
                   dict(path_mtu=6), dict(path_mtu=15), dict(qpn=a_qpn),
                   dict(cma_cma_version=1), dict(cma_ip_version=6),
                   dict(cma_src_addr=HOST2), dict(cma_dst_addr=FPGA + 1),
                   dict(cma_src_addr=HOST | 1 << 64), dict(cma_dst_addr=FPGA | 1 << 127)):
        sc.deliver(HOST, req(rng, comm_id=next(cid), **fields))   # each a REJ
    # a third connection, then a REQ whose REJ from the host frees its QP (by our ID), one
    # freed by the host's ID alone, one established and then rejected (time-wait)
    sc.connect(HOST)
    for by_ours in (True, False):
        c, r = sc.connect(HOST2, lose_rep=True)
        ours = sc.ours(HOST2, c)
        sc.deliver(HOST2, mad(I.ATTR_REJ, 7, I.REJ.pack(
            local_comm_id=c, remote_comm_id=ours.local_comm_id if by_ours else 0,
            message_rejected=I.MsgResponse.REP, reason=I.RejReason.TIMEOUT)))
    c, _ = sc.connect(HOST2)
    ours = sc.ours(HOST2, c)
    sc.deliver(HOST2, mad(I.ATTR_REJ, 8, I.REJ.pack(
        local_comm_id=c, remote_comm_id=ours.local_comm_id, reason=I.RejReason.CONSUMER_DEFINED)))
    assert ours.state is State.TIMEWAIT
    # the pool is empty now (A, B, the third, the time-wait): NO_QP
    sc.deliver(HOST, req(rng, comm_id=next(cid)))
    # A disconnects: DREP, time-wait; the DREQ again: DREP again; A's REQ again: STALE_CONN
    sc.send(HOST, sc.host(HOST).disconnect(0, a_cid))
    dreq = sc.inputs[-1][1]
    sc.deliver(HOST, dreq)
    sc.deliver(HOST, a_req)
    ours_a = sc.ours(HOST, a_cid)
    # DREQs of no connection: unknown IDs, a wrong QPN, from another address
    d = I.DREQ.unpack(dreq[I.MAD_HDR_LENGTH:])
    for changes, src in ((dict(remote_comm_id=0x777), HOST), (dict(local_comm_id=0x778), HOST2),
                         (dict(remote_qpn=ours_a.qpn ^ 1), HOST), ({}, HOST2)):
        sc.deliver(src, mad(I.ATTR_DREQ, rng.getrandbits(64), I.DREQ.pack(**(d | changes))))
    # a REP to us, an MRA, a DREP, RTU and REJ naming nothing: REJ INVALID_COMM_ID, nothing
    for attr in (I.ATTR_REP, I.ATTR_MRA, I.ATTR_DREP, I.ATTR_RTU, I.ATTR_REJ):
        sc.deliver(HOST, random_message(rng, attr))
    # ClassPortInfo; malformed MADs (unmatched Gets and Sets echoed)
    sc.deliver(HOST, mad(I.ATTR_CLASS_PORT_INFO, 0x42, method=I.METHOD_GET, class_specific=5,
                         attribute_modifier=0x1234))
    for _, m in malformed(rng):
        sc.deliver(HOST2, m)
    assert sc.fpga.counters["answered_bad_version"] == 1
    assert sc.fpga.counters["answered_unsupported"] == 2
    return sc


@pytest.mark.parametrize("width,connections", [(64, 8), (128, 8), (256, 8), (512, 8),
                                               (512, 256)])
def test_every_answer_is_the_models(width, connections):
    sc = story(random.Random(width))
    names = check(sc, width, connections=connections, seed=width)
    for name in ("REP", "REJ", "DREP", "ClassPortInfo"):
        assert name in names
    assert len(sc.expected) >= 30
    counted = {c for c, n in sc.fpga.counters.items() if n}
    assert counted >= {"req_duplicate", "req_stale", "req_rejected", "rep_unknown",
                       "rtu_unknown", "mra_unknown", "rej_unknown", "dreq_unknown",
                       "dreq_duplicate", "drep_unknown", "class_port_info", "established",
                       "rejected", "drop_length", "drop_attribute"}


@pytest.mark.parametrize("width", [64, 512])
def test_qps_start_at_the_reqs_psn(width):
    """With ``psn_from_req`` a REP states, and ``qp_set`` opens the QP at, the REQ's own
    starting PSN (the model's ``psn="req"``); a smaller MTU of ours bounds the QP's."""
    rng = random.Random(3)
    sc = Scenario(block={"psn_from_req": True, "max_mtu": 1024}, psn="req", max_mtu=1024)
    for k in range(3):
        sc.deliver(HOST, req(rng, comm_id=0x40 + k, path_mtu=5 - 2 * k))
    reps = [I.REP.unpack(d[I.MAD_HDR_LENGTH:]) for _, d in sc.expected]
    reqs = [I.REQ.unpack(d[I.MAD_HDR_LENGTH:]) for _, d in sc.inputs]
    assert [r["starting_psn"] for r in reps] == [r["starting_psn"] for r in reqs]
    assert [st["path_mtu"] for st in sc.sets] == [3, 3, 1]
    check(sc, width, seed=width)


def rej(sc, ip, cid, *, ours=True):
    """Host ``ip`` rejects its connection ``cid`` (naming our ID, or only its own)."""
    local = sc.ours(ip, cid).local_comm_id if ours else 0
    return sc.deliver(ip, mad(I.ATTR_REJ, 11, I.REJ.pack(
        local_comm_id=cid, remote_comm_id=local, reason=I.RejReason.CONSUMER_DEFINED)))


def dreq(sc, ip, local, remote, qpn):
    return sc.deliver(ip, mad(I.ATTR_DREQ, 12, I.DREQ.pack(
        local_comm_id=local, remote_comm_id=remote, remote_qpn=qpn)))


@pytest.mark.parametrize("width", [64, 512])
def test_what_a_connection_leaves_behind(width):
    """A connection in time-wait does not make its peer's QP stale; a rejected one is
    forgotten (its REQ again is a new connection); a DREQ with another QPN leaves the
    connection as it is; a peer whose communication ID is 0 is matched by any ID; an MRA of
    our REP is known, others not; an RTU again is a duplicate."""
    rng = random.Random(7)
    sc = Scenario(qpns=range(0x200, 0x208))
    a, _ = sc.connect(HOST)
    sc.send(HOST, sc.host(HOST).disconnect(0, a))
    assert sc.ours(HOST, a).state is State.TIMEWAIT
    sc.deliver(HOST, req(rng, comm_id=0x900, qpn=sc.ours(HOST, a).peer_qpn))     # a REP
    b, b_req = sc.connect(HOST2, lose_rep=True)
    for msg in (I.MsgResponse.REP, I.MsgResponse.OTHER, I.MsgResponse.REQ):   # one known MRA
        sc.deliver(HOST2, mad(I.ATTR_MRA, 15, I.MRA.pack(
            local_comm_id=b, remote_comm_id=sc.ours(HOST2, b).local_comm_id, message_mraed=msg,
            service_timeout=20)))
    rej(sc, HOST2, b)
    sc.deliver(HOST2, b_req)                                # a new connection: a new REP
    c, c_req = sc.connect(HOST2)
    ours = sc.ours(HOST2, c)
    sc.deliver(HOST2, sc.inputs[-1][1])                     # its RTU again: nothing
    dreq(sc, HOST2, c, ours.local_comm_id, ours.qpn ^ 1)    # DREP of no connection
    sc.deliver(HOST2, c_req)                                # still established: nothing
    assert ours.state is State.ESTABLISHED
    sc.deliver(HOST, req(rng, comm_id=0, qpn=0x77))
    zero = sc.ours(HOST, 0)
    sc.deliver(HOST, mad(I.ATTR_RTU, 13, I.RTU.pack(local_comm_id=5,
                                                    remote_comm_id=zero.local_comm_id)))
    assert zero.state is State.ESTABLISHED
    dreq(sc, HOST, 6, zero.local_comm_id, zero.qpn)         # DREP (ours, 0): time-wait
    sc.deliver(HOST, mad(I.ATTR_RTU, 14, I.RTU.pack(local_comm_id=5,
                                                    remote_comm_id=zero.local_comm_id)))
    assert zero.state is State.TIMEWAIT                     # (an RTU does not bring it back)
    sc.deliver(HOST, req(rng, comm_id=0, qpn=0x77))         # REJ STALE_CONN
    names = check(sc, width, seed=width + 9)
    assert {c: sc.fpga.counters[c] for c in ("rtu_duplicate", "mra_unknown")} == \
        {"rtu_duplicate": 1, "mra_unknown": 2}
    assert names == ["REP", "DREP", "REP", "REP", "REP", "REP", "DREP", "REP", "DREP", "REJ"]


@pytest.mark.parametrize("width", [64, 512])
def test_the_fpga_disconnects(width):
    """A disconnect of an established connection's QP sends its DREQ (our next transaction
    ID, the peer's QPN) and puts the QP in the error state; the host's DREP starts the
    time-wait. A disconnect of a QP in time-wait, of one waiting for its RTU, of one of no
    connection: nothing. A DREQ of the host crossing ours: DREP, time-wait; a REJ in its
    place: time-wait; a DREP of no DREQ of ours: nothing."""
    sc = Scenario(qpns=range(0x200, 0x208))
    a, _ = sc.connect(HOST)
    b, _ = sc.connect(HOST2)
    c, _ = sc.connect(HOST, lose_rep=True)                  # waits for its RTU
    d, _ = sc.connect(HOST2, port=PORT2)
    qa = sc.ours(HOST, a).qpn
    sc.back(HOST, sc.close(qa))                             # DREQ; the host's DREP
    assert sc.ours(HOST, a).state is State.TIMEWAIT
    drep = sc.inputs[-1][1]
    for qpn in (qa, sc.ours(HOST, c).qpn, 0x207, 0x2FF):    # nothing
        assert sc.close(qpn) == []
    (lost,) = sc.close(sc.ours(HOST2, b).qpn)               # DREQ lost; the host's own DREQ
    assert sc.ours(HOST2, b).state is State.DREQ_SENT
    sc.send(HOST2, sc.host(HOST2).disconnect(0, b))
    assert sc.ours(HOST2, b).state is State.TIMEWAIT
    sc.close(sc.ours(HOST2, d).qpn)                         # DREQ lost; a REJ
    rej(sc, HOST2, d)
    assert sc.ours(HOST2, d).state is State.TIMEWAIT
    sc.deliver(HOST, drep)                                  # a DREP again: nothing
    names = check(sc, width, seed=width + 3)
    assert names == ["REP", "REP", "REP", "REP", "DREQ", "DREQ", "DREP", "DREQ"]
    assert {k: sc.fpga.counters[k] for k in ("disconnects", "disconnect_unknown",
                                              "drep_unknown")} == \
        {"disconnects": 3, "disconnect_unknown": 4, "drep_unknown": 1}
    assert I.DREQ.unpack(lost.mad[I.MAD_HDR_LENGTH:])["remote_qpn"] == \
        sc.ours(HOST2, b).peer_qpn


@pytest.mark.parametrize("width", [64, 512])
def test_the_fpga_connects(width):
    """A connection the FPGA asks for: its REQ (our ID, QP, PSN and transaction ID; the port,
    our address and ``src_port`` in its ``cma_hdr``); the host's REP opens the QP (its QPN and
    PSN, the region it states, its RNR retry count, the depths negotiated) and gets the RTU;
    ``connected`` says so. The REP again: the RTU again. A host that does not listen on the
    port: its REJ frees the QP, ``connected`` gives the reason. A REP naming no connection:
    REJ. No QP left: ``connected`` says NO_QP and nothing is sent. The FPGA's connection
    disconnected by the FPGA: DREQ, the host's DREP."""
    sc = Scenario(qpns=range(0x200, 0x203))
    region = Region(addr=0x7F00_0000_1000, rkey=0xABCD_0001, length=1 << 16)
    A, B, C = HOST, HOST2, HOST + 7
    sc.host(A, ports=[PORT], region=region, rnr_retry_count=3, responder_resources=1)
    sc.host(B)
    sc.host(C, ports=[PORT])
    (req,) = sc.fpga_connect(A, PORT, 0xC123)
    f = I.REQ.unpack(req.mad[I.MAD_HDR_LENGTH:])
    assert I.CMA_HDR.unpack(I.private_bytes(I.REQ, f))["src_port"] == 0xC123
    rep = sc.hosts[A].receive(0, req.mad, src_ip=FPGA)
    for a in rep:
        sc.deliver(A, a.mad)                             # the RTU (lost on its way)
    ours = sc.fpga.connections[FIRST_CID]
    assert ours.state is State.ESTABLISHED and ours.peer_region == region
    sc.talk(A, [])
    sc.deliver(A, rep[0].mad)                            # the REP again: the RTU again
    sc.talk(B, sc.fpga_connect(B, PORT2))               # REJ INVALID_SERVICE_ID
    sc.deliver(C, mad(I.ATTR_REP, 9, I.REP.pack(local_comm_id=5, remote_comm_id=0x777)))
    sc.fpga_connect(C)                                  # (no answer: REQ_SENT)
    sc.connect(C)                                       # the last QP, to C's REQ
    sc.fpga_connect(A)                                  # no QP: NO_QP
    sc.talk(A, sc.close(ours.qpn))                      # DREQ; DREP
    names = check(sc, width, seed=width + 5)
    assert names == ["REQ", "RTU", "RTU", "REQ", "REJ", "REQ", "REP", "DREQ"]
    assert [e[0] for e in sc.events] == [1, 0, 0] and \
        sc.events[1][4] == I.RejReason.INVALID_SERVICE_ID and \
        sc.events[2][4] == I.RejReason.NO_QP
    assert {k: sc.fpga.counters[k] for k in ("connects", "rep_duplicate", "connect_no_qp")} \
        == {"connects": 3, "rep_duplicate": 1, "connect_no_qp": 1}


@pytest.mark.parametrize("width", [64, 512])
def test_no_resources_for_reads(width):
    """A node that serves no RDMA READ refuses a REQ that would send some, takes one that
    would not."""
    rng = random.Random(5)
    sc = Scenario(responder_resources=0)
    sc.deliver(HOST, req(rng, comm_id=1, initiator_depth=1))
    sc.deliver(HOST, req(rng, comm_id=2, initiator_depth=0, responder_resources=9))
    assert [parse(d)[0] for _, d in sc.expected] == ["REJ", "REP"]
    check(sc, width)


def test_table_full_is_no_qp():
    """With fewer table entries than QPs, a REQ finding the table full gets REJ NO_QP, as the
    model does with as many QPs as entries."""
    rng = random.Random(6)
    sc = Scenario(qpns=QPNS[:2])
    for n in range(3):
        sc.deliver(HOST, req(rng, comm_id=n + 1, qpn=0x10 + n))
    assert [parse(d)[2].get("reason") for _, d in sc.expected] == [None, None, I.RejReason.NO_QP]
    sc.pool = QpPool(QPNS)
    sent, pool, counts, _, _ = run(sc, 64, connections=2)
    assert sent == sc.expected and len(pool.allocated) == 2
    assert counts == model_counts(sc)


@pytest.mark.parametrize("width", [64, 512])
def test_random_sequences(width):
    """Hosts connecting, losing REPs, sending again, rejecting, disconnecting and repeating
    their DREQs at random, with malformed MADs among them."""
    rng = random.Random(100 + width)
    sc = Scenario(qpns=range(0x300, 0x306))
    live = []
    for _ in range(40):
        op = rng.random()
        ip = rng.choice([HOST, HOST2, HOST + 7])
        if op < 0.35:
            c, r = sc.connect(ip, port=rng.choice([PORT, PORT2, 5]), lose_rep=rng.random() < 0.3)
            live.append((ip, c, r))
        elif op < 0.5 and live:
            ip, c, r = rng.choice(live)
            sc.back(ip, sc.deliver(ip, r))
        elif op < 0.65 and live:
            ip, c, _ = rng.choice(live)
            conn = sc.hosts[ip].connections.get(c)
            if conn is not None and conn.state is State.ESTABLISHED:
                sc.send(ip, sc.hosts[ip].disconnect(0, c))
        elif op < 0.75 and live:
            ip, c, _ = rng.choice(live)
            mine = [x for x in sc.fpga.connections.values()
                    if x.peer_ip == ip and x.remote_comm_id == c]
            sc.deliver(ip, mad(I.ATTR_REJ, 9, I.REJ.pack(
                local_comm_id=c, remote_comm_id=mine[0].local_comm_id if mine else 0,
                reason=I.RejReason.CONSUMER_DEFINED)))
        elif op < 0.85:
            sc.deliver(ip, rng.choice(malformed(rng))[1])
        else:
            sc.deliver(ip, random_message(rng, rng.choice(list(I.MESSAGES))))
    check(sc, width, seed=width + 3)


def test_parameters_are_checked():
    import gc
    import warnings
    from fractions import Fraction
    from functools import partial

    from amaranth.hdl import UnusedElaboratable

    from rocegen.gateware.roce.ibcm.ibcm_passive import IbCmPassive, tick_cycles
    P = partial(IbCmPassive, clk_hz=CLK_HZ)
    raises(ValueError, "port", lambda: P(ports=[70000]))
    raises(TypeError, "port", lambda: P(ports=["x"]))
    raises(ValueError, "connections", lambda: P(ports=[], connections=0))
    raises(ValueError, "connections", lambda: P(ports=[], connections=257))
    raises(ValueError, "responder_resources", lambda: P(ports=[], responder_resources=256))
    raises(ValueError, "initiator_depth", lambda: P(ports=[], initiator_depth=-1))
    raises(ValueError, "first_comm_id", lambda: P(ports=[], first_comm_id=0))
    raises(ValueError, "psn_seed", lambda: P(ports=[], psn_seed=0))
    raises(ValueError, "psn_seed", lambda: P(ports=[], psn_seed=1 << 24))
    raises(TypeError, "clk_hz must be a number", lambda: IbCmPassive(ports=[], clk_hz="1e8"))
    raises(TypeError, "clk_hz must be a number", lambda: IbCmPassive(ports=[], clk_hz=True))
    raises(ValueError, "clk_hz must be a positive", lambda: IbCmPassive(ports=[], clk_hz=0))
    raises(ValueError, "clk_hz must be a positive",
           lambda: IbCmPassive(ports=[], clk_hz=float("inf")))
    raises(ValueError, r"clk_hz must be at least 244140\.625 Hz",
           lambda: IbCmPassive(ports=[], clk_hz=244140))
    assert tick_cycles(244140.625) == 1 and tick_cycles(10e6) == Fraction(5120, 125)
    raises(TypeError, "qpns must be a range", lambda: P(ports=[], qpns=[256, 257]))
    for bad in (range(256, 256), range(256, 300, 2), range(1, 10), range(256, 256 + 4097),
                range((1 << 24) - 1, (1 << 24) + 1)):
        raises(ValueError, "qpns must be a range of 1..4096", partial(P, ports=[], qpns=bad))
    raises(ValueError, "time_wait_ns", lambda: P(ports=[], time_wait_ns=-1))
    raises(ValueError, "time_wait_ns", lambda: P(ports=[], time_wait_ns=(4096 << 31) + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        assert [P(ports=[], time_wait_ns=t).time_wait_ticks for t in (0, 4096, 4097)] == [0, 1, 2]
        gc.collect()


@pytest.mark.parametrize("connections", [4, 16])
def test_latency(connections):
    """The decision ``connections`` + 2 cycles after the record is offered: a reply offered
    the cycle after, the record taken the cycle after the reply; without a reply, taken the
    cycle after the decision."""
    from rocegen.gateware.roce.ibcm.ibcm_layouts import Verdict
    from rocegen.gateware.roce.ibcm.ibcm_passive import IbCmPassive
    dut = IbCmPassive(ports=[PORT], connections=connections, clk_hz=CLK_HZ)
    hdr = {"attribute_id": I.ATTR_REP}
    records = [{"verdict": Verdict.OK, "hdr": hdr, "src_ip": HOST},      # REJ INVALID_COMM_ID
               {"verdict": Verdict.LENGTH, "hdr": hdr, "src_ip": HOST}]  # dropped
    seen = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = 0
        for r in records:
            ctx.set(dut.i.payload, r)
            ctx.set(dut.i.valid, 1)
            start, reply = cycle, None
            while True:
                _, _, ready, o_valid = await ctx.tick().sample(dut.i.ready, dut.o.valid)
                if o_valid and reply is None:
                    reply = cycle - start
                cycle += 1
                if ready:
                    break
            seen.append((reply, cycle - 1 - start))
            ctx.set(dut.i.valid, 0)
            await ctx.tick()
            cycle += 1

    run_sim(dut, testbenches=[tb])
    n = connections
    assert seen == [(n + 3, n + 4), (None, n + 3)]


# ---- with time: the timers and data_seen

#: The strobes of the passive side's actions on due entries (``established`` of an RTU too:
#: counting more work only widens a bound)
ACTIONS = ("retransmits", "rep_timeouts", "timewait_exits", "established")


class Timed(Scenario):
    """A scenario in time: MADs and packets (``data_seen``) at cycles of a ``clk_hz`` clock (a
    whole number of ns each). The model node meets them at those cycles, its timers run
    meanwhile and what they send is lost; that makes the hosts' messages. (The blocks are
    checked against another model node, which meets each MAD when the blocks took it up.)"""

    def __init__(self, *, clk_hz, time_wait_ns=4096 * 8, **kw):
        self.clk_hz, self.time_wait_ns = clk_hz, time_wait_ns
        self.cycle_ns, rest = divmod(10 ** 9, clk_hz)
        assert not rest
        super().__init__(time_wait_ns=time_wait_ns, **kw)
        self.cycle = 0
        # (cycle, src_ip, mad), (cycle, qpn) of data_seen, (cycle, qpn) of disconnect
        self.mads, self.packets, self.closes, self.connects = [], [], [], []

    def at(self, cycle):
        """From now on at ``cycle``; the model node's timers run until then."""
        assert cycle >= self.cycle
        self.cycle = cycle
        while (d := self.fpga.next_deadline()) is not None and d <= cycle * self.cycle_ns:
            self.fpga.poll(d)
        return self

    def deliver(self, src_ip, data):
        self.mads.append((self.cycle, src_ip, data))
        return self.fpga.receive(self.cycle * self.cycle_ns, data, src_ip=src_ip)

    def close(self, qpn):
        self.closes.append((self.cycle, qpn))
        return self.fpga.disconnect_qp(self.cycle * self.cycle_ns, qpn)

    def fpga_connect(self, ip, port=PORT, src_port=0xC000):
        c = {"dst_ip": ip, "port": port, "src_port": src_port}
        self.connects.append((self.cycle, c))
        return self.fpga.connect(self.cycle * self.cycle_ns, **c)[1]

    def packet(self, qpn):
        self.packets.append((self.cycle, qpn))
        self.fpga.data_seen(self.cycle * self.cycle_ns, qpn)

    def lost_rep(self, ip, port=PORT):
        """Host ``ip`` connects; the REP does not reach it. Returns its comm ID and REP."""
        cid, (req,) = self.host(ip).connect(0, dst_ip=FPGA, port=port)
        (rep,) = self.deliver(ip, req.mad)
        return cid, rep

    def answer(self, ip, outs):
        """What host ``ip`` sends back for ``outs`` (delivered at the current cycle)."""
        for o in outs:
            for x in self.hosts[ip].receive(0, o.mad, src_ip=FPGA):
                self.deliver(ip, x.mad)


def run_timed(sc, width, *, end, connections, idle=0.3, backpressure=0.3, seed=0):
    """The scenario's MADs (each sent from its cycle on, after the one before) and packets
    through the blocks until cycle ``end``; returns the chain, the watch, ``[(dst_ip, mad)]``
    sent and the blocks' QP pool."""
    ours = {k: sc.model[k] for k in ("cm_response_timeout", "max_cm_retries",
                                     "max_peer_response_timeout") if k in sc.model}
    dut = Chain(width, ca_guid=GUID, rnr_retry_count=RNR,
                **({"cm_response_timeout": RESP_TIME} | ours),
                ports=[PORT, PORT2], connections=connections, first_comm_id=FIRST_CID,
                psn_seed=PSN_SEED, clk_hz=sc.clk_hz, time_wait_ns=sc.time_wait_ns,
                qpns=BLOCK_QPNS, first_tid=FIRST_TID, **sc.params)
    rng = random.Random(seed)
    pool = QpPool(sc.pool._all)
    watch = Watch(dut)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)

    async def mads(ctx):
        ctx.set(dut.local_ip, FPGA)
        ctx.set(dut.connected.ready, 1)
        ctx.set(dut.region, {"addr": REGION.addr, "rkey": REGION.rkey, "length": REGION.length})
        for cycle, ip, data in sc.mads:
            while watch.cycle < cycle:
                await ctx.tick()
            await drv.send(ctx, [Packet(data, {"src_ip": ip, "src_qp": I.QP1,
                                               "pkey": I.DEFAULT_PKEY})])
        while watch.cycle < end:
            await ctx.tick()

    async def packets(ctx):
        for cycle, qpn in sc.packets:
            while watch.cycle < cycle:
                await ctx.tick()
            ctx.set(dut.data_seen.payload, qpn)
            ctx.set(dut.data_seen.valid, 1)
            await ctx.tick()
            ctx.set(dut.data_seen.valid, 0)

    def requests(port, items):
        async def run(ctx):
            for cycle, x in items:
                while watch.cycle < cycle:
                    await ctx.tick()
                ctx.set(port.payload, x)
                ctx.set(port.valid, 1)
                await ctx.tick().until(port.ready)
                ctx.set(port.valid, 0)
        return run

    run_sim(dut, testbenches=[mads, packets, requests(dut.disconnect, sc.closes),
                              requests(dut.connect, sc.connects)], processes=[
        col.run, watch.run, pool_process(dut, pool, rng, backpressure=backpressure, delay=3)])
    for p in col.packets:
        assert not p.error
        assert (p.meta["dst_qp"], p.meta["pkey"]) == (I.QP1, I.DEFAULT_PKEY)
    return dut, watch, [(p.meta["dst_ip"], p.data) for p in col.packets], pool


class LoggedPool(QpPool):
    """A QP pool recording ``(now, qpn, window, rounding)`` of each QP given back
    (``rounding`` for those of ``rounded``)."""

    def __init__(self, qpns):
        super().__init__(qpns)
        self.now, self.window, self.rounding, self.rounded, self.log = 0, None, 0, (), []

    def free(self, qpn):
        super().free(qpn)
        self.log.append((self.now, qpn, self.window,
                         self.rounding if qpn in self.rounded else 0))


def _timer(conn):
    return conn.state, conn.deadline, conn.timewait_until, conn.pending is None


def replay(sc, watch, end):
    """A model node meeting the scenario's MADs at the cycles the blocks were offered them and
    its packets at theirs, its timers run on time until cycle ``end``. Returns the node, its
    pool and ``[(ns, dst_ip, mad, window)]`` sent; ``window``: for what a timer sent, the cycle
    of the MAD that armed the timer of a connection due then (the earliest), else None. The
    pool's log has the window of each QP a timer gave back and, for the end of a time-wait,
    what the blocks' rounding of ``time_wait_ns`` up to ticks adds (ns)."""
    assert len(watch.offers) == len(sc.mads)
    pool = LoggedPool(sc.pool._all)
    node = sc.node(pool)
    arm, sent = {}, []

    def timers(until):
        while (d := node.next_deadline()) is not None and d <= until:
            due = [c for c in node.connections.values()
                   if (c.timewait_until if c.state is State.TIMEWAIT else
                       c.deadline if c.pending is not None else until + 1) <= d]
            pool.now, pool.window = d, min(arm[c.local_comm_id] for c in due)
            pool.rounding = -sc.time_wait_ns % TICK_NS
            pool.rounded = {c.qpn for c in due if c.state is State.TIMEWAIT}
            sent.extend((d, o.dst_ip, o.mad, pool.window) for o in node.poll(d))
            pool.window, pool.rounded = None, ()

    assert len(watch.closes) == len(sc.closes) and len(watch.connects) == len(sc.connects)
    events = sorted([(c, 0, n) for n, c in enumerate(watch.offers)]
                    + [(c, 1, q) for c, q in watch.data]
                    + [(c, 2, q) for c, (_, q) in zip(watch.closes, sc.closes)]
                    + [(c, 3, n) for n, c in enumerate(watch.connects)])
    for cycle, kind, x in events:
        t = cycle * sc.cycle_ns
        timers(t)
        pool.now = t
        if kind == 1:
            node.data_seen(t, x)
            continue
        before = {cid: _timer(c) for cid, c in node.connections.items()}
        if kind == 2:
            outs = node.disconnect_qp(t, x)
        elif kind == 3:
            outs = node.connect(t, **sc.connects[x][1])[1]
        else:
            _, ip, data = sc.mads[x]
            outs = node.receive(t, data, src_ip=ip)
        sent.extend((t, o.dst_ip, o.mad, None) for o in outs)
        arm |= {cid: cycle for cid, c in node.connections.items() if before.get(cid) != _timer(c)}
    timers(end * sc.cycle_ns)
    return node, pool, sent


def check_timed(sc, width, *, end, connections=4, **kw):
    """The blocks against the model in time: to each destination the same MADs in the same
    order, the QPs given back the same; what a timer sends, and the QP it gives back, from the
    model's time on, late by at most the documented bound: a tick (and the rounding of
    ``time_wait_ns`` up to ticks at the end of a time-wait), a cycle, N + 3 cycles, and the
    work that came first (the wait of the MAD that armed the timer before it was taken up;
    from the model's time on, cycles a record was offered or a MAD or QP waited to leave, and
    4 cycles for each record and action). Returns the watch, the model node and, per
    destination, ``[(name, cycle of the timer's action or None)]``."""
    dut, watch, sent, pool = run_timed(sc, width, end=end, connections=connections, **kw)
    node, mpool, model_sent = replay(sc, watch, end)
    ns, tick = sc.cycle_ns, math.ceil(dut.cm.tick)

    def bound(arm, due, act):
        """The lateness allowed an action in cycle ``act`` due (the model's time) in cycle
        ``due``, armed by a MAD offered in cycle ``arm``: the tick, a cycle, N + 3 cycles;
        the wait before that MAD was taken up (at most the busy cycles from its offer on);
        from ``due`` on, the busy cycles and 4 for each record and action (one more for one
        under way)."""
        taken_up = arm
        while watch.busy[taken_up]:
            taken_up += 1
        work = 1 + sum(due <= c <= act for c in watch.offers + watch.closes +
                       watch.connects) + \
            sum(due <= c <= act for a in ACTIONS for c in watch.strobes[a])
        return (tick + 1 + connections + 3 + (taken_up - arm) + sum(watch.busy[due:act + 1])
                + 4 * work)

    def within(t, arm, cycle, rounding=0):
        limit = bound(arm, t // ns, cycle)
        assert t <= cycle * ns <= t + rounding + limit * ns, (t / ns, cycle, rounding / ns, limit)

    # each MAD the blocks sent, with the cycle of the timer's action that sent it, if one did
    assert len(watch.sent) == len(sent)
    acts, prev, ours = sorted(watch.strobes["retransmits"] + watch.strobes["rep_timeouts"] +
                              watch.strobes["req_timeouts"]), -1, []
    for h, (dst, data) in zip(watch.sent, sent):
        by = [c for c in acts if prev < c < h]
        assert len(by) <= 1
        ours.append((dst, data, by[0] if by else None))
        prev = h
    story = {}
    for dst in {d for _, d, _, _ in model_sent} | {d for d, _, _ in ours}:
        theirs = [(t, m, w) for t, d, m, w in model_sent if d == dst]
        mine = [(m, act) for d, m, act in ours if d == dst]
        assert [parse(m)[0] for _, m, _ in theirs] == [parse(m)[0] for m, _ in mine], hex(dst)
        for (t, m, window), (m2, act) in zip(theirs, mine):
            assert m2 == m
            assert (window is None) == (act is None)
            if act is not None:
                within(t, window, act)
        story[dst] = [(parse(m)[0], act) for m, act in mine]
    for qpn in {q for _, q, _, _ in mpool.log} | {q for _, q in watch.frees}:
        theirs = [(t, w, r) for t, q, w, r in mpool.log if q == qpn]
        mine = [c for c, q in watch.frees if q == qpn]
        assert len(theirs) == len(mine), hex(qpn)
        for (t, window, rounding), c in zip(theirs, mine):
            if window is not None:
                within(t, window, c, rounding)
    assert pool.allocated == mpool.allocated
    assert watch.counts() == model_counts(sc, node)
    return watch, node, story


def _host_timers(t, retries):
    """A host whose REQs ask for a response within 2^t ticks and ``retries`` REPs again."""
    return dict(cm_response_timeout=t, max_cm_retries=retries)


@pytest.mark.parametrize("width", [512])
def test_rep_sent_again_then_rej_timeout(width):
    """A REP not answered is sent again each 2^t ticks of the REQ's local CM response timeout,
    as often as its max CM retries; then REJ TIMEOUT (our CA GUID as ARI) and the QP back in
    the pool. An RTU just before the first time it would be sent again: never again; just
    after: once. An MRA holds it back for its service timeout; a duplicate REQ meanwhile gets
    it at once. A tick is 32 cycles here."""
    sc = Timed(clk_hz=7_812_500)
    A, B, C, D = HOST, HOST2, HOST + 7, HOST + 9
    sc.host(A, **_host_timers(2, 2))
    sc.host(B, **_host_timers(4, 2))
    sc.host(C, **_host_timers(3, 2))
    sc.host(D, **_host_timers(2, 1))
    sc.at(0).lost_rep(A)                         # REP at 0, 128, 256; REJ at 384 (cycles)
    _, b_rep = sc.at(40).lost_rep(B)             # first due at 40 + 512
    _, c_rep = sc.at(80).lost_rep(C)             # first due at 80 + 256
    d_cid, _ = sc.at(100).lost_rep(D)
    sc.at(150).deliver(D, mad(I.ATTR_MRA, 3, I.MRA.pack(
        local_comm_id=d_cid, remote_comm_id=sc.ours(D, d_cid).local_comm_id,
        message_mraed=I.MsgResponse.REP, service_timeout=4)))      # due at 150 + 512
    sc.at(200).deliver(D, sc.mads[3][2])         # its REQ again: the REP again
    sc.at(80 + 256 + 90).answer(C, [c_rep])      # C's RTU, after its first due
    sc.at(40 + 512 - 30).answer(B, [b_rep])      # B's RTU, before its first due
    watch, node, story = check_timed(sc, width, end=1000, seed=1)
    assert [(n, c is None) for n, c in story[A]] == [("REP", True), ("REP", False),
                                                      ("REP", False), ("REJ", False)]
    assert [n for n, _ in story[B]] == ["REP"]
    assert [(n, c is None) for n, c in story[C]] == [("REP", True), ("REP", False)]
    assert [(n, c is None) for n, c in story[D]] == [("REP", True), ("REP", True),
                                                      ("REP", False), ("REJ", False)]
    assert node.counters["retransmits"] == 4 and node.counters["rep_timeouts"] == 2
    assert {c.peer_ip: c.state for c in node.connections.values()} == \
        {B: State.ESTABLISHED, C: State.ESTABLISHED}


@pytest.mark.parametrize("width", [64, 512])
def test_dreq_sent_again_then_time_wait(width):
    """Our DREQ not answered is sent again each 2^t ticks of the REQ's local CM response
    timeout, as often as its max CM retries (a host that vanished); then the time-wait, at
    its end the QP back in the pool. A DREP after the first DREQ sent again: the time-wait from
    then on. A tick is 32 cycles here, the time-wait 8 ticks."""
    sc = Timed(clk_hz=7_812_500)
    A, B = HOST, HOST2
    sc.host(A, **_host_timers(2, 2))
    sc.host(B, **_host_timers(3, 1))
    sc.at(0).connect(A)
    b_cid, _ = sc.at(20).connect(B)
    sc.at(300).close(sc.fpga.connections[FIRST_CID].qpn)     # DREQ at 300, 428, 556; 684
    (b_dreq,) = sc.at(320).close(sc.ours(B, b_cid).qpn)     # DREQ at 320, 576
    sc.at(620).answer(B, [b_dreq])                          # B's DREP: time-wait
    watch, node, story = check_timed(sc, width, end=1300, seed=5)
    assert [(n, c is None) for n, c in story[A]] == [("REP", True), ("DREQ", True),
                                                      ("DREQ", False), ("DREQ", False)]
    assert [(n, c is None) for n, c in story[B]] == [("REP", True), ("DREQ", True),
                                                      ("DREQ", False)]
    assert {k: node.counters[k] for k in ("retransmits", "dreq_timeouts", "timewait_exits")} \
        == {"retransmits": 3, "dreq_timeouts": 1, "timewait_exits": 2}
    assert node.connections == {} and len(watch.frees) == 2


@pytest.mark.parametrize("width", [64])
def test_peer_response_timeout_cut(width):
    """``max_peer_response_timeout`` cuts a REQ's longer local CM response timeout (a host
    that asks for 2^6 ticks gets its DREQs 2^2 ticks apart, as a REQ asking for 2^2 would) and
    leaves a shorter one (2^1); the REP's wait likewise. A tick is 32 cycles here."""
    sc = Timed(clk_hz=7_812_500, max_peer_response_timeout=2)
    A, B, C = HOST, HOST2, HOST + 7
    sc.host(A, **_host_timers(6, 2))
    sc.host(B, **_host_timers(1, 1))
    sc.host(C, **_host_timers(9, 1))
    sc.at(0).connect(A)
    sc.at(20).connect(B)
    sc.at(40).lost_rep(C)                                   # REP at 40, 168; REJ at 296
    sc.at(300).close(sc.fpga.connections[FIRST_CID].qpn)     # DREQ at 300, 428, 556; 684
    sc.at(320).close(sc.fpga.connections[FIRST_CID + 1].qpn)  # DREQ at 320, 384; 448
    watch, node, story = check_timed(sc, width, end=1100, seed=4)
    assert [(n, c is None) for n, c in story[A]] == [("REP", True), ("DREQ", True),
                                                      ("DREQ", False), ("DREQ", False)]
    assert [(n, c is None) for n, c in story[B]] == [("REP", True), ("DREQ", True),
                                                      ("DREQ", False)]
    assert [(n, c is None) for n, c in story[C]] == [("REP", True), ("REP", False),
                                                      ("REJ", False)]
    assert {k: node.counters[k] for k in ("dreq_timeouts", "rep_timeouts", "timewait_exits")} \
        == {"dreq_timeouts": 2, "rep_timeouts": 1, "timewait_exits": 2}
    assert node.connections == {} and len(watch.frees) == 3


@pytest.mark.parametrize("width", [64])
def test_our_req_waits_at_most_the_cut(width):
    """Our REQ states our CM response timeout (2^6 ticks) and waits at most
    ``max_peer_response_timeout``'s 2^2 ticks for the REP: sent again at 128 and 256 cycles,
    REJ TIMEOUT at 384, as a REQ of 2^2 would. A tick is 32 cycles here."""
    sc = Timed(clk_hz=7_812_500, cm_response_timeout=6, max_cm_retries=2,
               max_peer_response_timeout=2)
    A = HOST
    sc.host(A, ports=[PORT])
    sc.at(0).fpga_connect(A)                       # REQ at 0, 128, 256; REJ at 384
    watch, node, story = check_timed(sc, width, end=600, seed=8)
    assert [(n, c is None) for n, c in story[A]] == [("REQ", True), ("REQ", False),
                                                      ("REQ", False), ("REJ", False)]
    assert node.counters["req_timeouts"] == 1 and len(watch.frees) == 1


@pytest.mark.parametrize("width", [64, 512])
def test_req_sent_again_then_rej_timeout(width):
    """Our REQ not answered is sent again each 2^t ticks of our CM response timeout, as often
    as our max CM retries; then REJ TIMEOUT (our CA GUID as ARI), the QP back in the pool,
    ``connected`` says TIMEOUT. An MRA of the REQ holds it back for its service timeout; the
    REP after it establishes the connection. A tick is 32 cycles here."""
    sc = Timed(clk_hz=7_812_500, cm_response_timeout=2, max_cm_retries=2)
    A, B = HOST, HOST2
    sc.host(A, ports=[PORT])
    sc.host(B, ports=[PORT])
    sc.at(0).fpga_connect(A)                       # REQ at 0, 128, 256; REJ at 384
    (b_req,) = sc.at(40).fpga_connect(B)           # REQ at 40
    sc.at(100).deliver(B, mad(I.ATTR_MRA, 3, I.MRA.pack(
        local_comm_id=0x55, remote_comm_id=FIRST_CID + 1, message_mraed=I.MsgResponse.REQ,
        service_timeout=4)))                      # due at 100 + 512
    sc.at(700).answer(B, [b_req])                  # B's REP: established, the RTU
    watch, node, story = check_timed(sc, width, end=1000, seed=7)
    assert [(n, c is None) for n, c in story[A]] == [("REQ", True), ("REQ", False),
                                                      ("REQ", False), ("REJ", False)]
    assert [(n, c is None) for n, c in story[B]] == [("REQ", True), ("REQ", False),
                                                      ("RTU", True)]
    assert {k: node.counters[k] for k in ("retransmits", "req_timeouts", "established")} \
        == {"retransmits": 3, "req_timeouts": 1, "established": 1}
    assert len(watch.frees) == 1 and \
        [c.state for c in node.connections.values()] == [State.ESTABLISHED]


def test_time_wait_ends():
    """A DREQ or a host's REJ puts an established connection in time-wait; at its end
    (``time_wait_ns``, not a whole number of ticks: rounded up) the QP is back in the pool and
    the connection forgotten: its REQ again is a new connection, not STALE_CONN as during the
    time-wait, and a REQ refused for want of a QP is taken. A clock of 10 MHz: 40.96 cycles
    a tick, the prescaler's fractions at work."""
    sc = Timed(clk_hz=10_000_000, time_wait_ns=4096 * 6 + 1000, qpns=QPNS[:2])
    A, B, C = HOST, HOST2, HOST + 7
    a_cid, a_req = sc.at(0).connect(A)
    b_cid, _ = sc.at(40).connect(B)
    sc.at(100).send(A, sc.host(A).disconnect(0, a_cid))              # time-wait until ~387
    sc.at(150).deliver(B, mad(I.ATTR_REJ, 4, I.REJ.pack(            # time-wait until ~437
        local_comm_id=b_cid, remote_comm_id=sc.ours(B, b_cid).local_comm_id,
        reason=I.RejReason.CONSUMER_DEFINED)))
    dreq = sc.mads[-2][2]
    sc.at(200).deliver(A, a_req)                                     # REJ STALE_CONN
    _, (c_req,) = sc.at(220).host(C).connect(0, dst_ip=FPGA, port=PORT)
    sc.deliver(C, c_req.mad)                                         # REJ NO_QP
    sc.at(560).deliver(C, c_req.mad)                                 # a REP
    sc.at(600).deliver(A, a_req)                                     # a REP
    sc.at(640).deliver(A, dreq)                                      # DREP, of no connection
    watch, node, story = check_timed(sc, 64, end=800, seed=3)
    assert [n for n, _ in story[A]] == ["REP", "DREP", "REJ", "REP", "DREP"]
    assert [n for n, _ in story[C]] == ["REJ", "REP"]
    assert node.counters["timewait_exits"] == 2 and node.counters["req_stale"] == 1
    assert {c.peer_ip for c in node.connections.values()} == {A, C}


def test_data_seen_establishes():
    """The first packet on the QP of a connection waiting for its RTU establishes it: its REP
    is not sent again, its RTU then is a duplicate, its REQ again gets nothing. A packet on
    any other QP does nothing: before the QP is taken (a REQ taking it forgets it), on an
    established or a free QP, outside ``qpns``; nor does one that comes with the RTU twice."""
    sc = Timed(clk_hz=7_812_500)
    A, B, C, D = HOST, HOST2, HOST + 7, HOST + 9
    for ip in (A, B, C, D):
        sc.host(ip, **_host_timers(3, 1))
    sc.at(0).packet(QPNS[0])                     # before A's REQ takes it
    _, a_rep = sc.at(10).lost_rep(A)             # QPNS[0]: REP again at ~266
    b_cid, b_rep = sc.at(30).lost_rep(B)         # QPNS[1]
    b_req = sc.mads[-1][2]
    _, c_rep = sc.at(50).lost_rep(C)             # QPNS[2]
    sc.at(100).packet(QPNS[1])                   # B established
    sc.at(150).answer(B, [b_rep])                # its RTU: a duplicate
    sc.at(160).deliver(B, b_req)                 # its REQ again: nothing
    sc.at(180).packet(QPNS[2])                   # C's packet and RTU together
    sc.answer(C, [c_rep])
    sc.at(182).packet(QPNS[2])
    sc.at(200).packet(0x500)                     # outside qpns
    sc.at(201).packet(QPNS[3])                   # free
    _, d_rep = sc.at(230).lost_rep(D)            # takes QPNS[3]: REP again at ~490
    sc.at(400).answer(A, [a_rep])
    sc.at(450).packet(QPNS[0])                   # established already
    sc.at(600).answer(D, [d_rep])
    watch, node, story = check_timed(sc, 512, end=800, seed=4)
    assert [(n, c is None) for n, c in story[A]] == [("REP", True), ("REP", False)]
    assert [(n, c is None) for n, c in story[D]] == [("REP", True), ("REP", False)]
    assert [n for n, _ in story[B]] == [n for n, _ in story[C]] == ["REP"]
    assert node.counters["established"] == 4 and node.counters["rtu_duplicate"] == 2
    assert all(c.state is State.ESTABLISHED for c in node.connections.values())


@pytest.mark.parametrize("width", [64, 512])
def test_many_due_in_one_scan(width):
    """Four connections whose REPs are due in the same tick (256 cycles here) are each sent
    again, then each REJ TIMEOUT with its QP back; meanwhile other MADs keep coming (unknown
    messages, malformed ones, Gets), each taken up between two of the actions."""
    rng = random.Random(width)
    sc = Timed(clk_hz=62_500_000)
    hosts = [HOST + 16 * k for k in range(4)]
    for n, ip in enumerate(hosts):
        sc.host(ip, **_host_timers(1, 1))
        sc.at(5 * n).lost_rep(ip)
    other, gap = HOST + 100, 2 * 2048 // width        # a MAD every two MADs' beats
    junk = [m for _, m in malformed(rng)] + [
        random_message(rng, a) for a in (I.ATTR_MRA, I.ATTR_RTU, I.ATTR_REJ, I.ATTR_DREQ,
                                         I.ATTR_DREP, I.ATTR_REP)] + [
        mad(I.ATTR_CLASS_PORT_INFO, n, method=I.METHOD_GET) for n in range(2)]
    for n, m in enumerate(rng.sample(junk, 16)):
        sc.at(650 + gap * n).deliver(other, m)
    watch, node, story = check_timed(sc, width, end=1800, seed=width + 5)
    tick = 256
    assert len({c // tick for c in watch.offers[:4]}) == 1      # the REQs: one tick
    again = sorted(watch.strobes["retransmits"])
    assert len(again) == 4 and again[0] // tick == again[-1] // tick
    assert any(again[0] < c < again[-1] for c in watch.offers)  # a record among them
    for ip in hosts:
        assert [n for n, _ in story[ip]] == ["REP", "REP", "REJ"]
    assert not node.connections and node.counters["rep_timeouts"] == 4


def test_records_back_to_back_leave_room_for_the_timers():
    """The passive side alone, records offered back to back (``i.valid`` never low: the
    background scan never runs) and a tick of one cycle (the slowest clock): the REP of a
    REQ taken is sent again and then REJ TIMEOUT with its QP back, each after the record
    under way when it falls due and the next one (whose matching notes it)."""
    from rocegen.gateware.roce.ibcm.ibcm_layouts import ReplyKind, Verdict
    from rocegen.gateware.roce.ibcm.ibcm_passive import IbCmPassive
    N, t = 2, 3
    dut = IbCmPassive(ports=[PORT], connections=N, clk_hz=244140.625, qpns=QPNS)
    cma = {"cma_version": I.CMA_VERSION, "cma_ip_version": I.CMA_IP_VERSION_4,
           "cma_high_zero": 1, "cma_src_ip": HOST, "cma_dst_ip": FPGA}
    req_record = {"verdict": Verdict.OK, "hdr": {"attribute_id": I.ATTR_REQ,
                                                 "transaction_id": 77},
                  "src_ip": HOST, "src_qp": I.QP1, "pkey": I.DEFAULT_PKEY,
                  "local_comm_id": 5, "service_id": I.service_id(PORT), "local_qpn": 0x99,
                  "transport_service_type": I.TRANSPORT_RC, "path_mtu": 5,
                  "local_cm_response_timeout": t, "max_cm_retries": 1, **cma}
    dropped = {"verdict": Verdict.LENGTH, "hdr": {}, "src_ip": HOST2}
    pool = QpPool(QPNS)
    sent, offered, strobes = [], [], {"retransmits": [], "rep_timeouts": []}

    async def tb(ctx):
        ctx.set(dut.local_ip, FPGA)
        await send_records(ctx, dut.i, [req_record] + [dropped] * 16)

    async def watch(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = 0
        async for _, _, iv, ov, out, again, gave_up in ctx.tick().sample(
                dut.i.valid, dut.o.valid, dut.o.payload, dut.retransmits, dut.rep_timeouts):
            offered.append(iv)
            if ov:
                sent.append((cycle, out.kind, out.reason, out.ari_guid, out.message))
            for name, v in (("retransmits", again), ("rep_timeouts", gave_up)):
                if v:
                    strobes[name].append(cycle)
            cycle += 1

    run_sim(dut, testbenches=[tb], processes=[watch, pool_process(dut, pool, random.Random(1))])
    rep, rej = ReplyKind.REP, ReplyKind.REJ
    assert [k for _, k, *_ in sent] == [rep, rep, rej]
    assert sent[2][2:] == (I.RejReason.TIMEOUT, 1, I.MsgResponse.OTHER)
    assert not pool.allocated                                   # the QP given back
    record = N + 4                       # a dropped record: offered to taken, back to back
    for name, due in (("retransmits", 2 ** t + 1), ("rep_timeouts", 2 * 2 ** t + 1)):
        (act,) = strobes[name]           # (the REQ offered in cycle 0, in tick 0)
        assert due < act <= due + 2 * record + 2, (name, act)
        assert all(offered[:act + 1])    # no idle cycle: no background scan
