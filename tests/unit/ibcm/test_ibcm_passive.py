"""The IB CM's passive side, with the receiver and the reply builder in front and behind it:
sequences of MADs (from the reference model's active side, from the wire tables, malformed)
fed to the blocks and to the reference model, the blocks' replies compared byte for byte with
the model's, the QP pool's state with the model's; idle cycles on the input, backpressure on
the output and on the pool, at 64 and 512 bits."""

import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_passive import COUNTERS
from rocegen.sim.models.ibcm import IbCm, QpPool, Region, State
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import ibcm as I
from tests.unit.ibcm.chain import Chain, pool_process
from tests.unit.ibcm.link import parse
from tests.unit.ibcm.mads import FPGA, HOST, HOST2, mad, malformed, random_message, req

PORT, PORT2 = 7174, 20000
REGION = Region(addr=0x0000_7F00_1234_5000, rkey=0xA5A5_0001, length=1 << 20)
GUID, RNR, RESP_TIME = 0x0002C9030012AB34, 6, 18
FIRST_CID, PSN_SEED = 0x1234_0000, 0x00BEEF
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


class Scenario:
    """MADs delivered to the model node (and recorded for the blocks), its answers kept; the
    echoes of unmatched Gets and Sets (which the blocks do not send) kept apart."""

    def __init__(self, *, qpns=QPNS, responder_resources=2, initiator_depth=3, **model):
        self.pool = QpPool(qpns)
        self.params = dict(responder_resources=responder_resources,
                           initiator_depth=initiator_depth)
        self.model = model
        self.fpga = self.node(self.pool)
        self.inputs, self.expected, self.echoes = [], [], []
        self.hosts = {}

    def node(self, pool):
        """A model node as the blocks are made, on ``pool``."""
        return IbCm(pool=pool, local_ip=FPGA, ca_guid=GUID, ports=[PORT, PORT2],
                    region=REGION, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME,
                    first_comm_id=FIRST_CID, psn=lfsr_psns(PSN_SEED), **self.params,
                    **self.model)

    def deliver(self, src_ip, data):
        """``data`` to the model from ``src_ip``; its answers."""
        self.inputs.append((src_ip, data))
        before = dict(self.fpga.counters)
        outs = self.fpga.receive(0, data, src_ip=src_ip)
        if any(self.fpga.counters[c] > before[c]
               for c in ("answered_bad_version", "answered_unsupported")):
            self.echoes += outs
        else:
            self.expected += [(o.dst_ip, o.mad) for o in outs]
        return outs

    def host(self, ip, **kw):
        """Host ``ip``'s model node (made with ``kw`` the first time)."""
        if ip not in self.hosts:
            self.hosts[ip] = IbCm(pool=QpPool(range(0x100 + (ip & 0xFF) * 16,
                                                    0x110 + (ip & 0xFF) * 16)),
                                  local_ip=ip, ca_guid=ip, seed=ip, initiator_depth=2,
                                  responder_resources=4, **kw)
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

    def ours(self, ip, cid):
        """The model node's connection with host ``ip``'s ``cid``."""
        (conn,) = [c for c in self.fpga.connections.values()
                   if c.peer_ip == ip and c.remote_comm_id == cid]
        return conn


def run(sc, width, *, connections=8, idle=0.3, backpressure=0.3, seed=0):
    """The recorded inputs through the blocks; returns ``[(dst_ip, mad)]`` sent and the
    blocks' QP pool."""
    dut = Chain(width, ca_guid=GUID, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME,
                ports=[PORT, PORT2], connections=connections, first_comm_id=FIRST_CID,
                psn_seed=PSN_SEED, clk_hz=CLK_HZ, qpns=BLOCK_QPNS, **sc.params)
    rng = random.Random(seed)
    pool = QpPool(sc.pool._all)
    packets = [Packet(d, {"src_ip": ip, "src_qp": I.QP1, "pkey": I.DEFAULT_PKEY})
               for ip, d in sc.inputs]
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    counts = dict.fromkeys(COUNTERS, 0)

    async def count(ctx):
        strobes = [getattr(dut.cm, name) for name in COUNTERS]
        async for _, _, *values in ctx.tick().sample(*strobes):
            for name, v in zip(COUNTERS, values):
                counts[name] += v

    async def tb(ctx):
        ctx.set(dut.local_ip, FPGA)
        ctx.set(dut.region, {"addr": REGION.addr, "rkey": REGION.rkey, "length": REGION.length})
        await drv.send(ctx, packets)
        # the last MAD's answer (the scan of the table, then the MAD)
        for _ in range(connections + 40 + 2048 // width * 8):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[
        col.run, count, pool_process(dut, pool, rng, backpressure=backpressure, delay=3)])
    for p in col.packets:
        assert not p.error
        assert (p.meta["dst_qp"], p.meta["pkey"]) == (I.QP1, I.DEFAULT_PKEY)
    return [(p.meta["dst_ip"], p.data) for p in col.packets], pool, counts


def model_counts(sc, node=None):
    """The model's counters as the blocks count them: its echoes neither sent nor answered."""
    c = (node or sc.fpga).counters
    out = {name: c[name] for name in COUNTERS if name in c}
    out["unanswered_get_set"] = c["answered_bad_version"] + c["answered_unsupported"]
    out["tx_mads"] -= out["unanswered_get_set"]
    return out


def check(sc, width, **kw):
    sent, pool, counts = run(sc, width, **kw)
    names = [parse(d)[0] for _, d in sent]
    want = [parse(d)[0] for _, d in sc.expected]
    assert names == want
    for n, (got, exp) in enumerate(zip(sent, sc.expected)):
        assert got == exp, (n, names[n])
    assert pool.allocated == sc.pool.allocated
    assert counts == model_counts(sc)
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
    # ClassPortInfo; malformed MADs (the echoes of unmatched Gets and Sets apart)
    sc.deliver(HOST, mad(I.ATTR_CLASS_PORT_INFO, 0x42, method=I.METHOD_GET, class_specific=5,
                         attribute_modifier=0x1234))
    for _, m in malformed(rng):
        sc.deliver(HOST2, m)
    assert len(sc.echoes) == 3
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
    sent, pool, counts = run(sc, 64, connections=2)
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

