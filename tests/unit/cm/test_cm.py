"""Connection manager: the gateware against the Python model on random request sequences from
several hosts (authorized or not, legal or not, malformed), with scapy-built datagrams and
replies checked by scapy; the QP pool never leaks; the traffic generator never blocks it."""

import gc
import random
import struct
import warnings
from collections import Counter, namedtuple
from ipaddress import IPv4Address

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import stream
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.gateware.roce.cm.cm import ConnectionManager
from rocegen.gateware.roce.frontend.pattern_sink import PATTERN_COUNTS
from rocegen.gateware.roce.layouts import QPN_BASE, TRAFFIC_CONFIG, QpState, WrOpcode
from rocegen.gateware.roce.read.read_layouts import READ_LIMIT
from rocegen.gateware.roce.responder.resp_layouts import RESP_QP_CONFIG
from rocegen.gateware.roce.responder.responder import default_config
from rocegen.sim.models.cm import cm as M
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, StreamCollector, StreamDriver, meta_dict
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.wire import verbs
from rocegen.wire.addr import parse_net
from rocegen.wire.cm import atomic_caps
from rocegen.wire.headers import ETH, IPV4
from rocegen.wire.headers import UDP as UDP_HDR
from tests.tiers import full

LOCAL_IP = "10.1.0.100"
LOCAL_MAC = "02:00:00:00:00:01"
NET = ("10.1.0.0", 16)
INSIDE = ["10.1.0.11", "10.1.0.12", "10.1.3.7"]
OUTSIDE = ["192.168.5.5"]


#: READ depths a host states in its requests (300: more than the byte holds, stated as 255).
DEPTHS = [0, 1, 8, 16, 300]


def ip(s):
    return int(IPv4Address(s))


# ---- datagrams as the network stack hands them on, built with scapy ----

def datagram(payload, src, *, dst=LOCAL_IP, sport=0x4322, dport=M.CM_PORT, error=False):
    """A UDP datagram from host ``src`` as the stack delivers it: the payload with the parsed
    Ethernet, IPv4 and UDP headers as metadata (and the model's view of it)."""
    frame = bytes(Ether(src="02:00:00:00:00:aa", dst=LOCAL_MAC) / IP(src=src, dst=dst) /
                  UDP(sport=sport, dport=dport) / Raw(payload))
    meta = {"eth": ETH.unpack(frame[:14]), "ipv4": IPV4.unpack(frame[14:34]),
            "udp": UDP_HDR.unpack(frame[34:42])}
    assert frame[42:] == payload
    args = {"src_ip": ip(src), "src_port": sport, "dst_ip": ip(dst), "dst_port": dport,
            "error": error}
    return Packet(payload, meta, error), args


def reply_checksum_by_scapy(reply):
    """The UDP checksum scapy computes for a reply datagram."""
    p = IP(src=LOCAL_IP, dst=str(IPv4Address(reply.dst_ip))) / \
        UDP(sport=M.REPLY_PORT, dport=reply.dst_port) / Raw(reply.payload)
    return IP(bytes(p))[UDP].chksum


# ---- the gateware bench ----

#: What :func:`simulate` traces in a cycle: a datagram's last beat taken, a reply's last beat
#: sent, ``pool_idle``, ``qp_open``.
Cycle = namedtuple("Cycle", "request_end reply_end pool_idle qp_open")

class Sink:
    """Takes every beat of a stream (random ``ready``; never ready when ``stall``)."""

    def __init__(self, stream, *, backpressure=0.0, seed=0, stall=False):
        self.stream = stream
        self.backpressure = backpressure
        self.stall = stall
        self.rng = random.Random(seed)
        self.items = []

    async def run(self, ctx):
        s = self.stream
        while True:
            ready = not self.stall and not (self.backpressure and
                                            self.rng.random() < self.backpressure)
            ctx.set(s.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(s.valid, s.payload)
            if valid and ready:
                self.items.append(meta_dict(payload))


def simulate(width, num_qps, packets, *, expect_replies, idle=0.3, backpressure=0.3, seed=0,
             gen_stall=False, errored=0, reserved=0, config=None, sink_counts=None, tclass=None,
             trace=None, **params):
    """Run ``packets`` through a ConnectionManager (``errored``, ``reserved``: its inputs of
    those names, held); returns what came out. ``trace``: a list to append, each cycle, a
    :class:`Cycle` of the datagrams' and replies' last beats, ``pool_idle`` and ``qp_open``.
    ``config``: each QP's responder configuration, served on the ``cfg_qp`` / ``cfg`` read
    port as the responder's table does (one cycle after the QP);
    ``sink_counts``: the pattern sink's ``(checked, wrong)`` on ``counts``, held. With
    ``reads``, the ``rd_limit`` pulses are returned as ``(qp, limit)``."""
    dut = shared(ConnectionManager, width, num_qps, regions=config is not None,
                 query=sink_counts is not None, **params)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    ctl = Sink(dut.qp_ctl, backpressure=backpressure, seed=seed + 2)
    psn = Sink(dut.qp_psn, backpressure=backpressure, seed=seed + 3)
    gen = Sink(dut.gen, backpressure=backpressure, seed=seed + 4, stall=gen_stall)
    counts = Counter()
    checksums = []
    final = {}
    limits = []

    async def limit_port(ctx):
        async for _, _, v, qp, limit in ctx.tick().sample(dut.rd_limit.valid,
                                                          dut.rd_limit.payload.qp,
                                                          dut.rd_limit.payload.limit):
            if v:
                limits.append((qp, limit))

    async def monitor(ctx):
        sigs = [getattr(dut, n) for n in M.COUNTERS]
        async for _, _, v, r, last, ck, *pulses in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload.last, dut.o_checksum, *sigs):
            if v and r and last:
                checksums.append(ck)
            for name, p in zip(M.COUNTERS, pulses):
                counts[name] += p

    async def tracer(ctx):
        async for _, _, *values in ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload.last, dut.o.valid, dut.o.ready,
                dut.o.payload.last, dut.pool_idle, dut.qp_open):
            iv, ir, il, ov, o_r, ol, idle, qp_open = values
            trace.append(Cycle(iv and ir and il, ov and o_r and ol, idle, qp_open))

    async def cfg_port(ctx):
        async for _, _, qp in ctx.tick().sample(dut.cfg_qp):
            # (a QP number past the table reads as anything; zeros here)
            ctx.set(dut.cfg, RESP_QP_CONFIG.const(config[qp] if qp < num_qps else {}))

    async def tb(ctx):
        ctx.set(dut.local_ip, ip(LOCAL_IP))
        ctx.set(dut.errored, errored)
        ctx.set(dut.reserved, reserved)
        if tclass is not None:
            ctx.set(dut.tclass, TRAFFIC_CONFIG.const(tclass))
        if sink_counts is not None:
            checked, wrong = sink_counts
            ctx.set(dut.counts, PATTERN_COUNTS.const({"checked": checked, "wrong": wrong}))
        await drv.send(ctx, packets)
        while counts["rx_requests"] < len(packets) or len(col.packets) < expect_replies:
            await ctx.tick()
        for _ in range(60):
            await ctx.tick()
        final["qp_open"] = ctx.get(dut.qp_open)

    run_sim(dut, testbenches=[tb], processes=[col.run, ctl.run, psn.run, gen.run, monitor] +
            ([cfg_port] if config is not None else []) + ([limit_port] if dut.reads else []) +
            ([tracer] if trace is not None else []))
    assert len(checksums) == len(col.packets)
    out = {"replies": col.packets, "checksums": checksums, "ctl": ctl.items, "psn": psn.items,
           "gen": gen.items, "counts": counts, "qp_open": final["qp_open"]}
    if dut.reads:
        out["rd_limit"] = limits
    return out


def check(out, model, results, *, gen_pending=0):
    """The gateware did exactly what the model did (``gen_pending``: runs still offered on a
    stalled ``gen`` at the end)."""
    replies = [r.reply for r in results if r.reply is not None]
    assert len(out["replies"]) == len(replies)
    for n, (pkt, ck, rep) in enumerate(zip(out["replies"], out["checksums"], replies)):
        assert not pkt.error
        assert pkt.data == rep.payload, (n, M.unpack(pkt.data), rep.fields)
        assert pkt.meta["udp"] == {"dst_ip": rep.dst_ip, "src_port": M.REPLY_PORT,
                                   "dst_port": rep.dst_port, "length": 64, "dscp": 0, "ecn": 0,
                                   "icrc": 0, "checksum": rep.checksum}, n
        assert ck == rep.checksum == reply_checksum_by_scapy(rep) != 0, n
        fields = M.unpack(pkt.data)
        assert fields["ack_valid"] == 1 and fields["info_valid"] == 1
        assert fields["loc_ip"] == ip(LOCAL_IP)
        assert fields["pmtu_code"] == fields["timeout_code"] == fields["window_log2"] == 0
    assert out["ctl"] == [{"qp": k, "context": c} for k, c in
                          (r.context for r in results if r.context is not None)]
    assert out["psn"] == [{"qp": k, "psn": p} for k, p in
                          (r.psn for r in results if r.psn is not None)]
    # a run is refused (and counted) only while the previous one still waits on `gen`
    gens = [r.gen for r in results if r.gen is not None]
    it = iter(gens)
    assert all(any(g == x for x in it) for g in out["gen"]), "generator runs out of order"
    assert len(out["gen"]) + out["counts"]["drop_gen"] + gen_pending == len(gens)
    expected = Counter(p for r in results for p in r.pulses)
    assert {n: out["counts"][n] for n in M.COUNTERS if n != "drop_gen"} == \
        {n: expected[n] for n in M.COUNTERS if n != "drop_gen"}
    assert out["qp_open"] == model.qp_open
    if "rd_limit" in out:
        assert out["rd_limit"] == [r.rd_limit for r in results if r.rd_limit is not None]


# ---- random request sequences ----

class Scenario:
    """Builds random datagrams that exercise the model's current state, and runs them through
    the model as they are made."""

    def __init__(self, model, rng, hosts, *, frames=True, query_rate=0.0, depths=False):
        self.frames = frames            # False: model only (no scapy frames, much faster)
        self.depths = depths            # READ depths in most 64-byte datagrams
        self.query_rate = query_rate    # share of QUERY requests among the steps
        self.model = model
        self.rng = rng
        self.hosts = hosts
        self.packets = []
        self.results = []

    def send(self, payload, src, *, dst=LOCAL_IP, sport=0x4322, dport=M.CM_PORT, error=False):
        if self.depths and len(payload) == 64 and self.rng.random() < 0.7:
            payload = M.with_read_depths(payload, self.rng.choice([0, 1, 16, 255]),
                                         self.rng.choice(DEPTHS + [self.rng.randrange(256)]))
        if self.frames:
            pkt, args = datagram(payload, src, dst=dst, sport=sport, dport=dport, error=error)
            self.packets.append(pkt)
        else:
            args = {"src_ip": ip(src), "src_port": sport, "dst_ip": ip(dst), "dst_port": dport,
                    "error": error}
        self.results.append(self.model.receive(payload, **args))
        return self.results[-1]

    def target(self):
        """A QPN and a sender: usually an open QP and its owner."""
        rng, m = self.rng, self.model
        open_ = [k for k in range(m.num_qps) if m.in_use[k]]
        if open_ and rng.random() < 0.75:
            k = rng.choice(open_)
            src = m.owner[k] if rng.random() < 0.8 else rng.choice(self.hosts)
            return QPN_BASE + k, str(IPv4Address(src))
        qpn = rng.choice([QPN_BASE + rng.randrange(m.num_qps + 2), rng.getrandbits(24),
                          QPN_BASE - 1, 0])
        return qpn, rng.choice(self.hosts)

    def fields(self, src):
        rng = self.rng
        f = {"loc_qpn": rng.getrandbits(24), "loc_psn": rng.getrandbits(24),
             "loc_rkey": rng.getrandbits(32), "loc_vaddr": rng.getrandbits(64),
             "loc_ip": ip(src) if rng.random() < 0.9 else ip(rng.choice(INSIDE + OUTSIDE)),
             "rem_psn": rng.getrandbits(24), "rem_rkey": rng.getrandbits(32),
             "rem_vaddr": rng.getrandbits(64), "rem_ip": ip(LOCAL_IP),
             "listening_port": rng.choice([0x4322, 0x4322, rng.randrange(1, 65536), 0])}
        r = rng.random()
        if r < 0.2:          # valid extension bytes
            f.update(pmtu_code=rng.randrange(6), timeout_code=rng.randrange(32))
            if rng.random() < 0.5:
                f.update(M.retry_byte(rng.randrange(8), rng.randrange(8)))
        elif r < 0.3:        # some of them out of range (the request is illegal)
            f.update(pmtu_code=rng.choice([6, 7, 255]), timeout_code=rng.choice([0, 32, 200]))
        if rng.random() < 0.1:
            f.update(window_log2=rng.getrandbits(8), resv25=1)      # ignored by requests
        return f

    def step(self):
        rng = self.rng
        if self.query_rate and rng.random() < self.query_rate:
            src = rng.choice(self.hosts)
            self.send(M.request(M.REQ_QUERY, **self.fields(src),
                                rem_qpn=rng.choice([0, QPN_BASE, rng.getrandbits(24)])), src)
            return
        r = rng.random()
        src = rng.choice(self.hosts)
        if r < 0.30:
            self.send(M.request(M.REQ_OPEN_QP, **self.fields(src)), src)
        elif r < 0.60:
            qpn, src = self.target()
            kind = rng.choice([M.REQ_CLOSE_QP, M.REQ_CLOSE_QP, M.REQ_SEND_QP_INFO,
                               M.REQ_MODIFY_QP_RTS])
            self.send(M.request(kind, **self.fields(src), rem_qpn=qpn), src)
        elif r < 0.72:
            qpn, src = self.target()
            self.send(M.traffic(qpn, rng.choice([0, 1, 4096, rng.getrandbits(32)]),
                                rng.getrandbits(rng.choice([4, 32])), rng.getrandbits(12),
                                write=rng.random() < 0.5, imm=rng.random() < 0.5,
                                start=rng.random() < 0.9, read=rng.random() < 0.2,
                                window_log2=rng.choice([0, 0, rng.randrange(32), rng.getrandbits(8)])),
                      src)
        elif r < 0.78:
            self.send(M.request(rng.choice([M.REQ_NULL, M.REQ_ERROR, 5, 6]),
                                **self.fields(src)), src)
        elif r < 0.81:        # a reply sent to us, or a datagram without any flag
            self.send(rng.choice([M.pack(info_valid=1, req_type=1, ack_valid=1, ack_type=1),
                                  M.pack(rem_qpn=QPN_BASE)]), src)
        elif r < 0.87:        # wrong length or damaged
            length = rng.choice([0, 1, 8, 63, 65, 72, 128, rng.randrange(200)])
            if length == 64:
                length = 65
            payload = bytes(rng.getrandbits(8) for _ in range(length))
            if rng.random() < 0.3:
                self.send(M.request(M.REQ_OPEN_QP, **self.fields(src)), src, error=True)
            else:
                self.send(payload, src)
        elif r < 0.90:        # addressed to another IP or port
            if rng.random() < 0.5:
                self.send(M.request(M.REQ_OPEN_QP, **self.fields(src)), src, dst="10.1.0.101")
            else:
                self.send(M.request(M.REQ_OPEN_QP, **self.fields(src)), src, dport=17186)
        else:
            qpn, src = self.target()
            self.send(M.request(M.REQ_CLOSE_QP, **self.fields(src), rem_qpn=qpn), src)

    def cleanup(self, reserved=0):
        """Close every open QP as its owner, then open all QPs (but those of ``reserved``, held
        by another manager) and one more: nothing leaked."""
        m = self.model
        for k in range(m.num_qps):
            if m.in_use[k]:
                owner = str(IPv4Address(m.owner[k]))
                r = self.send(M.request(M.REQ_CLOSE_QP, rem_qpn=QPN_BASE + k, loc_ip=ip(owner),
                                        listening_port=0x4322), owner)
                assert r.reply.fields["ack_type"] == M.ACK_ACK
        assert m.qp_open == 0
        host = self.hosts[0]
        for k in (k for k in range(m.num_qps) if not reserved >> k & 1):
            r = self.send(M.request(M.REQ_OPEN_QP, loc_ip=ip(host), loc_qpn=0x11 + k), host)
            assert r.reply.fields["loc_qpn"] == QPN_BASE + k
        r = self.send(M.request(M.REQ_OPEN_QP, loc_ip=ip(host)), host)
        assert r.reply.fields["ack_type"] == M.ACK_NO_QP


def scenario(num_qps, steps, seed, allow_net, *, frames=True, dscp=0, ecn=0):
    model = M.ConnectionManagerModel(num_qps, local_ip=ip(LOCAL_IP), allow_net=allow_net,
                                     dscp=dscp, ecn=ecn)
    hosts = INSIDE + OUTSIDE if allow_net else INSIDE
    sc = Scenario(model, random.Random(seed), hosts, frames=frames)
    for _ in range(steps):
        sc.step()
        model.check_pool()
    sc.cleanup()
    return sc


@pytest.mark.parametrize("width,num_qps,allow_net,steps", [
    (64, 4, NET, 160),
    (512, 4, None, 220),
    full(128, 3, NET, 100),
    full(512, 1, NET, 80),
])
def test_random_requests_match_the_model(width, num_qps, allow_net, steps):
    sc = scenario(num_qps, steps, seed=width + num_qps, allow_net=allow_net)
    results = sc.results
    pulses = Counter(p for r in results for p in r.pulses)
    # the sequence covers every outcome
    rare = {"drop_gen"} | ({"nak_not_allowed"} if allow_net is None else set())
    assert all(pulses[name] > 0 for name in set(M.COUNTERS) - rare), pulses
    assert sum(r.gen is not None for r in results) > 0
    out = simulate(width, num_qps, sc.packets, allow_net=allow_net,
                   expect_replies=sum(r.reply is not None for r in results), seed=width)
    check(out, sc.model, results)


@pytest.mark.parametrize("width, dscp, ecn", [(64, 26, 0b10), (512, 63, 0b01)])
def test_opened_qps_take_the_traffic_class(width, dscp, ecn):
    """The DSCP and ECN of input ``tclass`` go into the context of every QP an OPEN_QP opens
    (the model does the same; ``pcp`` is not the connection manager's)."""
    sc = scenario(3, 60, seed=width, allow_net=None, dscp=dscp, ecn=ecn)
    opened = [r.context[1] for r in sc.results if r.context is not None
              and r.context[1]["state"] == QpState.RTS.value]
    assert opened
    assert all(c["dscp"] == dscp and c["ecn"] == ecn for c in opened)
    out = simulate(width, 3, sc.packets, expect_replies=sum(r.reply is not None
                                                            for r in sc.results),
                   seed=width, tclass={"dscp": dscp, "ecn": ecn, "pcp": 5})
    check(out, sc.model, sc.results)


@pytest.mark.parametrize("width,num_qps,allow_net,steps,atomics", [
    (64, 3, NET, 120, "little"),
    (512, 4, None, 120, None),
    (128, 2, NET, 60, "big"),
])
def test_regions_and_query_match_the_model(width, num_qps, allow_net, steps, atomics):
    """With the responder: ACKs of OPEN_QP, SEND_QP_INFO and MODIFY_QP_RTS name the QP's region
    as its configuration holds it (and the byte order of its atomics, when it executes them),
    QUERY's ACK carries the sink's counters; every other reply is as without the responder."""
    rng = random.Random(width)
    config = default_config(num_qps, 0, 0)
    for c, length in zip(config, [1 << 32, 0, 4096, rng.getrandbits(32)]):
        c["mr"].update(rkey=rng.getrandbits(32), base=rng.getrandbits(32), length=length)
    sink = (rng.getrandbits(48), rng.getrandbits(48))
    model = M.ConnectionManagerModel(num_qps, local_ip=ip(LOCAL_IP), allow_net=allow_net,
                                     regions=config, query=True, atomics=atomics)
    model.counts = sink
    sc = Scenario(model, rng, INSIDE + OUTSIDE if allow_net else INSIDE, query_rate=0.12)
    for _ in range(steps):
        sc.step()
    sc.cleanup()
    kinds = Counter()
    for r in sc.results:
        if r.reply is None:
            continue
        f = r.reply.fields
        kind = (f["req_type"], f["ack_type"])
        kinds[kind] += 1
        if f["ack_type"] == M.ACK_ACK and f["req_type"] in M.REGION_REQUESTS:
            mr = config[f["loc_qpn"] - QPN_BASE]["mr"]
            assert M.region(f) == (mr["rkey"], mr["base"], min(mr["length"], (1 << 32) - 1))
            assert atomic_caps(f) == atomics
        elif kind == (M.REQ_QUERY, M.ACK_ACK):
            assert M.query_counts(r.reply.payload) == sink
        else:
            assert f["dma_length"] == f["n_transfers"] == f["frequency"] == 0
            assert atomic_caps(f) is None
    assert {(M.REQ_OPEN_QP, M.ACK_ACK), (M.REQ_SEND_QP_INFO, M.ACK_ACK),
            (M.REQ_MODIFY_QP_RTS, M.ACK_ACK), (M.REQ_QUERY, M.ACK_ACK),
            (M.REQ_CLOSE_QP, M.ACK_ACK)} <= set(kinds), kinds
    if allow_net:
        assert kinds[(M.REQ_QUERY, M.ACK_NAK)] > 0
    out = simulate(width, num_qps, sc.packets, allow_net=allow_net, config=config,
                   sink_counts=sink, seed=width + 1, atomics=atomics,
                   expect_replies=sum(r.reply is not None for r in sc.results))
    check(out, model, sc.results)


# ---- directed cases ----

def old_tool_request(req_type, *, loc_qpn, loc_psn, loc_rkey, loc_vaddr, loc_ip, rem_qpn=0,
                     listening_port=0x4322, txmeta=0, dma_length=0, n_transfers=0, frequency=0):
    """A request laid out field by field as the original host script builds it."""
    flags = 0x1 | (req_type << 1) if req_type is not None else 0
    msg = struct.pack(">B", flags)
    msg += struct.pack(">LLLQL", loc_qpn, loc_psn, loc_rkey, loc_vaddr, loc_ip)
    msg += struct.pack(">LLLQL", rem_qpn, 0, 0, 0, ip(LOCAL_IP))
    msg += struct.pack(">HB", listening_port, txmeta)
    msg += struct.pack(">LLL", dma_length, n_transfers, frequency)
    return msg


def test_pack_matches_the_original_byte_layout():
    host = ip("10.1.0.11")
    raw = old_tool_request(M.REQ_OPEN_QP, loc_qpn=0x12, loc_psn=0xABCDEF, loc_rkey=0x234,
                           loc_vaddr=0x12341242, loc_ip=host)
    assert len(raw) == 64
    assert raw == M.request(M.REQ_OPEN_QP, loc_qpn=0x12, loc_psn=0xABCDEF, loc_rkey=0x234,
                            loc_vaddr=0x12341242, loc_ip=host, rem_ip=ip(LOCAL_IP),
                            listening_port=0x4322)
    raw = old_tool_request(None, loc_qpn=0x12, loc_psn=0, loc_rkey=0, loc_vaddr=0, loc_ip=host,
                           rem_qpn=0x101, listening_port=0, txmeta=0x1 | 0x2 | 0x4 | 0x8,
                           dma_length=4096, n_transfers=10, frequency=7)
    assert raw == M.traffic(0x101, 4096, 10, 7, write=True, imm=True, loc_qpn=0x12, loc_ip=host,
                            rem_ip=ip(LOCAL_IP))
    f = M.unpack(raw)
    assert (f["txmeta_valid"], f["start"], f["is_imm"], f["tx_type"]) == (1, 1, 1, 1)
    with pytest.raises(ValueError, match="64 bytes"):
        M.unpack(raw[:63])


@pytest.mark.parametrize("width", [64, 512])
def test_open_modify_close_and_traffic(width):
    model = M.ConnectionManagerModel(4, local_ip=ip(LOCAL_IP), allow_net=NET, default_pmtu=1024)
    sc = Scenario(model, random.Random(0), INSIDE)
    a, b, evil = INSIDE[0], INSIDE[1], OUTSIDE[0]
    host = {"loc_qpn": 0x12, "loc_psn": 0x345678, "loc_rkey": 0x234, "loc_vaddr": 0x7F0012340000,
            "loc_ip": ip(a), "listening_port": 0x4322}
    # the original tool's OPEN_QP, then its MODIFY_QP_RTS, then OPEN_QP again
    sc.send(old_tool_request(M.REQ_OPEN_QP, **host), a)
    sc.send(old_tool_request(M.REQ_MODIFY_QP_RTS, **host, rem_qpn=QPN_BASE), a)
    sc.send(old_tool_request(M.REQ_OPEN_QP, **host), a)
    # extension bytes: MTU 512, timeout code 20, retry 3 / RNR retry 5
    sc.send(M.request(M.REQ_OPEN_QP, **{**host, "loc_ip": ip(b)}, pmtu_code=2, timeout_code=20,
                      **M.retry_byte(3, 5)), b)
    sc.send(M.request(M.REQ_SEND_QP_INFO, **{**host, "loc_ip": ip(b), "loc_qpn": 0x99},
                      rem_qpn=QPN_BASE + 2, timeout_code=9), b)
    # refusals: another host, outside the subnet, a peer outside the subnet, unknown QP
    sc.send(M.request(M.REQ_CLOSE_QP, **host, rem_qpn=QPN_BASE), b)
    sc.send(M.request(M.REQ_OPEN_QP, **{**host, "loc_ip": ip(evil)}), evil)
    sc.send(M.request(M.REQ_OPEN_QP, **{**host, "loc_ip": ip(evil)}), a)
    sc.send(M.request(M.REQ_CLOSE_QP, **host, rem_qpn=QPN_BASE + 3), a)
    sc.send(M.traffic(QPN_BASE, 4096, 100, 5, imm=True), b)
    # test traffic: SEND with immediate and WRITE
    sc.send(M.traffic(QPN_BASE, 4096, 100, 5, write=False, imm=True), a)
    sc.send(M.traffic(QPN_BASE + 2, 12345, 3, write=True, window_log2=20), b)
    # test traffic: READ (write and imm ignored)
    sc.send(M.traffic(QPN_BASE + 2, 8192, 4, write=True, imm=True, read=True, window_log2=16), b)
    # close and reopen: the lowest number comes back
    sc.send(M.request(M.REQ_CLOSE_QP, **host, rem_qpn=QPN_BASE), a)
    sc.send(M.request(M.REQ_OPEN_QP, **{**host, "listening_port": 0}), a, sport=5555)
    r = sc.results
    acks = [x.reply.fields["ack_type"] if x.reply else None for x in r]
    assert acks == [M.ACK_ACK, M.ACK_ACK, M.ACK_ACK, M.ACK_ACK, M.ACK_ACK,
                    M.ACK_NAK, M.ACK_NAK, M.ACK_NAK, M.ACK_NAK, None, None, None, None,
                    M.ACK_ACK, M.ACK_ACK]
    assert r[0].reply.fields["loc_qpn"] == QPN_BASE and r[0].reply.fields["loc_psn"] == 0x345678
    assert r[0].reply.fields["rem_qpn"] == 0x12 and r[0].reply.fields["rem_vaddr"] == host["loc_vaddr"]
    assert r[0].context == (0, {"state": QpState.RTS.value, "peer_ip": ip(a), "peer_qpn": 0x12,
                                "rkey": 0x234, "base_va": 0x7F0012340000, "pmtu_log2": 10,
                                "udp_sport": 0xC000, "dscp": 0, "ecn": 0, "ack_every_log2": 4,
                                "timeout": 14, "retry_cnt": 7, "rnr_retry": 7})
    assert r[0].psn == (0, 0x345678)
    assert r[1].context is None                                  # RTS -> RTS: nothing written
    assert r[2].reply.fields["loc_qpn"] == QPN_BASE + 1          # no number leaked
    c = r[3].context[1]
    assert (c["pmtu_log2"], c["timeout"], c["retry_cnt"], c["rnr_retry"]) == (9, 20, 3, 5)
    c = r[4].context[1]
    assert (c["peer_qpn"], c["pmtu_log2"], c["timeout"], c["retry_cnt"]) == (0x99, 9, 9, 3)
    assert r[4].psn is None
    assert [sorted(x.pulses - {"rx_requests", "replies"}) for x in r[5:10]] == [
        ["nak_owner"], ["nak_not_allowed"], ["nak_not_allowed"], ["nak_illegal"], ["nak_owner"]]
    assert r[10].gen == {"qp": 0, "opcode": WrOpcode.SEND_IMM.value, "length": 4096, "count": 100,
                         "spacing": 5, "imm": QPN_BASE, "window": 0}
    assert r[11].gen["opcode"] == WrOpcode.WRITE.value and r[11].gen["qp"] == 2
    assert r[11].gen["window"] == 1 << 20
    assert r[12].gen == {"qp": 2, "opcode": WrOpcode.READ.value, "length": 8192, "count": 4,
                         "spacing": 0, "imm": QPN_BASE + 2, "window": 1 << 16}
    assert r[13].context == (0, M.ConnectionManagerModel.reset_context())
    assert r[14].reply.fields["loc_qpn"] == QPN_BASE and r[14].reply.dst_port == 5555
    out = simulate(width, 4, sc.packets, allow_net=NET, default_pmtu=1024, seed=3,
                   expect_replies=sum(x.reply is not None for x in r))
    check(out, model, r)
    assert out["counts"]["drop_gen"] == 0


@pytest.mark.parametrize("width", [64, 512])
def test_malformed_datagrams_are_dropped_and_counted(width):
    model = M.ConnectionManagerModel(2, local_ip=ip(LOCAL_IP))
    sc = Scenario(model, random.Random(1), INSIDE)
    a = INSIDE[0]
    good = M.request(M.REQ_OPEN_QP, loc_ip=ip(a), listening_port=0x4322)
    for length in (0, 1, 8, 63, 65, 127, 128, 300):
        sc.send((good * 5)[:length], a)
    sc.send(good, a, error=True)
    sc.send(good, a, dst="10.1.0.1")
    sc.send(good, a, dport=4791)
    sc.send(M.pack(info_valid=1, req_type=5, listening_port=1), a)
    sc.send(M.pack(info_valid=1, req_type=M.REQ_OPEN_QP, ack_valid=1, ack_type=M.ACK_ACK), a)
    sc.send(bytes(64), a)
    sc.send(good, a)
    pulses = Counter(p for x in sc.results for p in x.pulses)
    assert pulses == {"rx_requests": 15, "drop_length": 9, "drop_ip": 2, "drop_unknown": 3,
                      "replies": 1}
    out = simulate(width, 2, sc.packets, expect_replies=1, seed=5)
    check(out, model, sc.results)
    assert out["qp_open"] == 1


def test_a_busy_generator_never_blocks_requests():
    model = M.ConnectionManagerModel(2, local_ip=ip(LOCAL_IP))
    sc = Scenario(model, random.Random(2), INSIDE)
    a = INSIDE[0]
    sc.send(M.request(M.REQ_OPEN_QP, loc_ip=ip(a), listening_port=0x4322), a)
    sc.send(M.traffic(QPN_BASE, 64, 1000), a)          # taken, then waits on `gen` for ever
    sc.send(M.traffic(QPN_BASE, 128, 1000), a)         # refused: drop_gen
    sc.send(M.request(M.REQ_OPEN_QP, loc_ip=ip(a), listening_port=0x4322), a)
    sc.send(M.request(M.REQ_CLOSE_QP, loc_ip=ip(a), rem_qpn=QPN_BASE, listening_port=1), a)
    out = simulate(64, 2, sc.packets, expect_replies=3, gen_stall=True, seed=7)
    assert out["gen"] == [] and out["counts"]["drop_gen"] == 1
    check(out, model, sc.results, gen_pending=1)
    assert [M.unpack(p.data)["ack_type"] for p in out["replies"]] == [M.ACK_ACK] * 3


def test_the_pool_never_leaks():
    """Thousands of random requests on the model (with the pool invariants checked after each),
    including the sequence that used to leak a number: OPEN, MODIFY_QP_RTS, OPEN."""
    for num_qps, seed in ((1, 1), (3, 2), (8, 3), (256, 4)):
        steps = 600 if num_qps == 256 else 3000
        sc = scenario(num_qps, steps, seed, NET, frames=False)
        opened = Counter()
        for r in sc.results:
            if r.reply is None:
                continue
            f = r.reply.fields
            if f["req_type"] == M.REQ_OPEN_QP and f["ack_type"] == M.ACK_ACK:
                opened[f["loc_qpn"]] += 1
            elif f["req_type"] == M.REQ_CLOSE_QP and f["ack_type"] == M.ACK_ACK:
                opened[f["loc_qpn"]] -= 1
                assert opened[f["loc_qpn"]] == 0
            if f["ack_type"] == M.ACK_NO_QP:
                assert sum(opened.values()) == num_qps
        assert all(v == 1 for v in opened.values()) and len(opened) == num_qps
        assert sc.model.qp_open == (1 << num_qps) - 1


def test_transition_table():
    S = verbs.QpState
    for old in S:
        assert M.legal_transition(old, S.RESET) and M.legal_transition(old, S.ERROR)
    legal = {(a, b) for a in S for b in S if M.legal_transition(a, b)}
    assert legal - {(a, b) for a in S for b in (S.RESET, S.ERROR)} == {
        (S.RESET, S.INIT), (S.INIT, S.RTR), (S.RTR, S.RTS), (S.RTS, S.RTS)}


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="1..256"):
        ConnectionManager(64, 0)
    with pytest.raises(ValueError, match="1..256"):
        ConnectionManager(64, 257)
    with pytest.raises(ValueError, match="width"):
        ConnectionManager(32, 4)
    with pytest.raises(TypeError, match="num_qps"):
        ConnectionManager(64, 2.0)
    with pytest.raises(ValueError, match="default_pmtu"):
        ConnectionManager(64, 4, default_pmtu=1500)
    with pytest.raises(ValueError, match="default_timeout"):
        ConnectionManager(64, 4, default_timeout=32)
    with pytest.raises(ValueError, match="default_retry"):
        ConnectionManager(64, 4, default_retry=8)
    with pytest.raises(ValueError, match="default_rnr_retry"):
        ConnectionManager(64, 4, default_rnr_retry=-1)
    with pytest.raises(ValueError, match="port"):
        ConnectionManager(64, 4, port=0)
    with pytest.raises(ValueError, match="host bits"):
        ConnectionManager(64, 4, allow_net=("10.1.0.1", 16))
    with pytest.raises(ValueError, match="prefix"):
        ConnectionManager(64, 4, allow_net=("10.1.0.0", 33))
    with pytest.raises(TypeError, match="tuple"):
        ConnectionManager(64, 4, allow_net="10.1.0.0/16")
    with pytest.raises(TypeError, match="reads must be a bool"):
        ConnectionManager(64, 4, reads=1)
    with pytest.raises(ValueError, match="max_rd_atomic must be 1..16, not 17"):
        ConnectionManager(64, 4, reads=True, max_rd_atomic=17)
    with pytest.raises(TypeError, match="max_rd_atomic must be an integer"):
        ConnectionManager(64, 4, reads=True, max_rd_atomic=4.0)
    with pytest.raises(ValueError, match="rd_depth must be 0 .no READ responder. or a power"):
        ConnectionManager(64, 4, reads=True, rd_depth=20)
    with pytest.raises(ValueError, match="rd_depth must be 0"):
        ConnectionManager(64, 4, reads=True, rd_depth=2048)
    with pytest.raises(TypeError, match="rd_depth must be an integer"):
        ConnectionManager(64, 4, reads=True, rd_depth=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        plain, reads = ConnectionManager(64, 4), ConnectionManager(64, 4, reads=True)
        assert "rd_limit" not in plain.signature.members
        assert reads.signature.members["rd_limit"].signature == \
            stream.Signature(READ_LIMIT, always_ready=True)
        del plain, reads
        gc.collect()
    assert parse_net((ip("10.1.0.0"), 16)) == (ip("10.1.0.0"), 0xFFFF0000)
    assert parse_net(("0.0.0.0", 0)) == (0, 0) and parse_net(None) is None


@pytest.mark.parametrize("width", [64, 512])
def test_latency(width):
    """Without idle cycles or backpressure: QP table writes 3 cycles and the reply 7 cycles
    after the request's last beat; the next request is taken 2 cycles after the reply."""
    a = INSIDE[0]
    pkts = [datagram(M.request(M.REQ_OPEN_QP, loc_ip=ip(a), listening_port=1), a)[0]
            for _ in range(2)]
    dut = ConnectionManager(width, 2)
    drv = StreamDriver(dut.i, width)
    col = StreamCollector(dut.o, width)
    taken = HandshakeMonitor(dut.i)
    ctl = HandshakeMonitor(dut.qp_ctl)
    psn = HandshakeMonitor(dut.qp_psn)

    async def tb(ctx):
        ctx.set(dut.local_ip, ip(LOCAL_IP))
        ctx.set(dut.qp_ctl.ready, 1)
        ctx.set(dut.qp_psn.ready, 1)
        await drv.send(ctx, pkts)
        while len(col.packets) < 2:
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, taken.run, ctl.run, psn.run])
    beats = 512 // width
    last_in = taken.cycles[beats - 1]
    assert ctl.cycles[0] == psn.cycles[0] == last_in + 3
    assert col.spans[0] == (last_in + 7, last_in + 7 + beats - 1)
    assert taken.cycles[beats] == col.spans[0][1] + 2


@pytest.mark.parametrize("width", [64, 512])
def test_errored_qp_reads_as_error(width):
    """A QP the retry engine failed (its ``errored`` bit) is in ERROR: MODIFY_QP_RTS and test
    traffic on it are refused, SEND_QP_INFO and CLOSE_QP work; another QP is unaffected."""
    model = M.ConnectionManagerModel(4, local_ip=ip(LOCAL_IP), allow_net=NET)
    sc = Scenario(model, random.Random(1), INSIDE)
    a = INSIDE[0]
    host = {"loc_qpn": 0x40, "loc_psn": 0x1000, "loc_rkey": 0x77, "loc_vaddr": 0x1000_0000,
            "loc_ip": ip(a), "listening_port": 0x4322}
    sc.send(M.request(M.REQ_OPEN_QP, **host), a)
    sc.send(M.request(M.REQ_OPEN_QP, **{**host, "loc_qpn": 0x41}), a)
    model.errored[0] = True                     # the gateware's input is set from the start
    sc.send(M.request(M.REQ_MODIFY_QP_RTS, **host, rem_qpn=QPN_BASE), a)
    sc.send(M.request(M.REQ_MODIFY_QP_RTS, **host, rem_qpn=QPN_BASE + 1), a)
    sc.send(M.traffic(QPN_BASE, 4096, 10, 0), a)
    sc.send(M.traffic(QPN_BASE + 1, 4096, 10, 0), a)
    sc.send(M.request(M.REQ_SEND_QP_INFO, **{**host, "loc_qpn": 0x42}, rem_qpn=QPN_BASE), a)
    sc.send(M.request(M.REQ_CLOSE_QP, **host, rem_qpn=QPN_BASE), a)
    r = sc.results
    acks = [x.reply.fields["ack_type"] if x.reply else None for x in r]
    assert acks == [M.ACK_ACK, M.ACK_ACK, M.ACK_NAK, M.ACK_ACK, None, None, M.ACK_ACK, M.ACK_ACK]
    assert "nak_illegal" in r[2].pulses and "nak_illegal" in r[4].pulses
    assert r[4].gen is None and r[5].gen["qp"] == 1
    out = simulate(width, 4, sc.packets, allow_net=NET, seed=5, errored=0b0001,
                   expect_replies=sum(x.reply is not None for x in r))
    check(out, model, r)


# ---- READ depths ----

#: The READ limit a host's rd_depth gives (0: not stated), by generator max_rd_atomic.
LIMITS = {4: {0: 1, 1: 1, 8: 4, 16: 4, 300: 4}, 16: {0: 1, 1: 1, 8: 8, 16: 16, 300: 16}}


@pytest.mark.parametrize("width, max_rd, rd_depth, stated", [
    (64, 4, 16, 16), (512, 16, 0, 0), (128, 16, 1024, 255), full(64, 4, 32, 32),
])
def test_read_depths(width, max_rd, rd_depth, stated):
    """OPEN_QP and SEND_QP_INFO stating every host rd_depth (and none, as the original tool):
    the QP's READ limit on ``rd_limit``, stated in byte 56 of the ACK with the responder's
    depth in byte 57; refusals and MODIFY_QP_RTS set nothing; CLOSE_QP sets ``max_rd_atomic``
    back. Every reply is byte for byte that of a connection manager without reads but for
    bytes 56-57, which that one leaves zero (its gateware too)."""
    a, b = INSIDE[0], INSIDE[1]
    L = LIMITS[max_rd]
    model = M.ConnectionManagerModel(8, local_ip=ip(LOCAL_IP), allow_net=NET, reads=True,
                                     max_rd_atomic=max_rd, rd_depth=rd_depth)
    plain = M.ConnectionManagerModel(8, local_ip=ip(LOCAL_IP), allow_net=NET)
    sc, sc_plain = Scenario(model, random.Random(0), INSIDE), \
        Scenario(plain, random.Random(0), INSIDE, frames=False)
    host = {"loc_qpn": 0x40, "loc_psn": 0x1000, "loc_rkey": 0x77, "loc_vaddr": 0x1000_0000,
            "loc_ip": ip(a), "listening_port": 0x4322}

    def send(kind, depth, src=a, **fields):
        raw = M.with_read_depths(M.request(kind, **{**host, **fields}), 16, depth)
        sc.send(raw, src)
        sc_plain.send(raw, src)

    for depth in DEPTHS:                                        # QPs 0..4
        send(M.REQ_OPEN_QP, depth)
    raw = old_tool_request(M.REQ_OPEN_QP, **host)               # QP 5, no depths
    sc.send(raw, a)
    sc_plain.send(raw, a)
    send(M.REQ_SEND_QP_INFO, 16, rem_qpn=QPN_BASE)
    send(M.REQ_SEND_QP_INFO, 0, rem_qpn=QPN_BASE + 4)
    send(M.REQ_SEND_QP_INFO, 1, rem_qpn=QPN_BASE + 2)
    send(M.REQ_SEND_QP_INFO, 8, src=b, rem_qpn=QPN_BASE + 1, loc_ip=ip(b))     # not the owner
    send(M.REQ_OPEN_QP, 8, pmtu_code=7)                         # illegal
    send(M.REQ_MODIFY_QP_RTS, 8, rem_qpn=QPN_BASE + 1)
    send(M.REQ_CLOSE_QP, 1, rem_qpn=QPN_BASE + 3)
    send(M.REQ_OPEN_QP, 8)                                      # QP 3 again
    r = sc.results
    assert [x.rd_limit for x in r if x.rd_limit] == [
        (0, L[0]), (1, L[1]), (2, L[8]), (3, L[16]), (4, L[300]), (5, 1),
        (0, L[16]), (4, 1), (2, 1), (3, max_rd), (3, L[8])]
    assert model.rd_limits == [L[16], L[1], 1, L[8], 1, 1, max_rd, max_rd]
    acks = [x.reply.fields["ack_type"] for x in r]
    assert acks == [M.ACK_ACK] * 9 + [M.ACK_NAK, M.ACK_NAK, M.ACK_ACK, M.ACK_ACK, M.ACK_ACK]
    assert [M.read_depths(x.reply.payload) for x in r] == \
        [(L[0], stated), (L[1], stated), (L[8], stated), (L[16], stated), (L[300], stated),
         (1, stated), (L[16], stated), (1, stated), (1, stated), (0, 0), (0, 0), (0, 0), (0, 0),
         (L[8], stated)]
    for x, y in zip(r, sc_plain.results):
        p, q = x.reply.payload, y.reply.payload
        assert p[:56] + p[58:] == q[:56] + q[58:] and q[56:58] == bytes(2)
    n = len(r)
    out = simulate(width, 8, sc.packets, allow_net=NET, seed=width, expect_replies=n,
                   reads=True, max_rd_atomic=max_rd, rd_depth=rd_depth)
    check(out, model, r)
    assert [M.read_depths(p.data) for p in out["replies"]][:6] == \
        [(L[0], stated), (L[1], stated), (L[8], stated), (L[16], stated), (L[300], stated),
         (1, stated)]
    if width == 64:
        check(simulate(width, 8, sc.packets, allow_net=NET, seed=1, expect_replies=n),
              plain, sc_plain.results)


@pytest.mark.parametrize("width, num_qps, allow_net, max_rd, rd_depth, responder", [
    (64, 4, NET, 4, 16, False),
    full(512, 3, None, 16, 0, False),
    (128, 4, NET, 16, 64, True),
])
def test_random_requests_with_reads(width, num_qps, allow_net, max_rd, rd_depth, responder):
    """Random sequences whose datagrams mostly state READ depths: replies (with the regions
    and QUERY's counters when ``responder``), writes and READ limits as the model's."""
    rng = random.Random(width + max_rd)
    config = sink = None
    if responder:
        config = default_config(num_qps, 0, 0)
        for c in config:
            c["mr"].update(rkey=rng.getrandbits(32), base=rng.getrandbits(32),
                           length=rng.getrandbits(32))
        sink = (rng.getrandbits(48), rng.getrandbits(48))
    model = M.ConnectionManagerModel(num_qps, local_ip=ip(LOCAL_IP), allow_net=allow_net,
                                     regions=config, query=responder, reads=True,
                                     max_rd_atomic=max_rd, rd_depth=rd_depth)
    if responder:
        model.counts = sink
    sc = Scenario(model, rng, INSIDE + OUTSIDE if allow_net else INSIDE, depths=True,
                  query_rate=0.1 if responder else 0.0)
    for _ in range(150):
        sc.step()
    sc.cleanup()
    limits = Counter(lim for r in sc.results if r.rd_limit for lim in [r.rd_limit[1]])
    assert {1, max_rd} <= set(limits) and (max_rd < 16 or 8 in limits), limits
    out = simulate(width, num_qps, sc.packets, allow_net=allow_net, config=config,
                   sink_counts=sink, seed=width + 2, reads=True, max_rd_atomic=max_rd,
                   rd_depth=rd_depth,
                   expect_replies=sum(r.reply is not None for r in sc.results))
    check(out, model, sc.results)


# ---- a QP pool shared with another manager ----

class ReservedPool:
    """The QPs the connection manager may open while another manager holds those of
    ``reserved`` (bit k: QP k), as the model's ``pool``: the lowest neither open nor reserved."""

    def __init__(self, num_qps, reserved):
        self.free_qpns = {QPN_BASE + k for k in range(num_qps) if not reserved >> k & 1}

    def allocate(self):
        if not self.free_qpns:
            return None
        qpn = min(self.free_qpns)
        self.free_qpns.remove(qpn)
        return qpn

    def free(self, qpn):
        self.free_qpns.add(qpn)


def naming_reserved(sc, theirs):
    """A request or a test traffic run naming one of the other manager's QPs ``theirs``; the
    model's result."""
    rng = sc.rng
    qpn, src = rng.choice(theirs), rng.choice(sc.hosts)
    if rng.random() < 0.2:
        return sc.send(M.traffic(qpn, 4096, 3), src)
    kind = rng.choice([M.REQ_CLOSE_QP, M.REQ_SEND_QP_INFO, M.REQ_MODIFY_QP_RTS])
    return sc.send(M.request(kind, **sc.fields(src), rem_qpn=qpn), src)


@pytest.mark.parametrize("width, num_qps, reserved", [
    (64, 6, 0b010010),
    (512, 3, 0b001),
    full(128, 8, 0b10000001),
])
def test_reserved_qps_are_never_opened(width, num_qps, reserved):
    """With the QPs of ``reserved`` held by another manager: OPEN_QP takes the lowest QP neither
    open nor reserved (NO_QP when every QP is one or the other), a request or a test traffic
    run naming a reserved QP is refused (NAK illegal: not in use here), random requests do as
    the model with that pool, and at the end every other QP opens again, in order."""
    rng = random.Random(width + reserved)
    model = M.ConnectionManagerModel(num_qps, local_ip=ip(LOCAL_IP),
                                     pool=ReservedPool(num_qps, reserved))
    sc = Scenario(model, rng, INSIDE)
    theirs = [QPN_BASE + k for k in range(num_qps) if reserved >> k & 1]
    for _ in range(100):
        sc.step()
        if rng.random() < 0.2:
            r = naming_reserved(sc, theirs)
            assert "nak_illegal" in r.pulses and r.context is None and r.gen is None
            assert r.reply is None or r.reply.fields["ack_type"] == M.ACK_NAK
        model.check_pool()
    sc.cleanup(reserved)
    opens = Counter(r.reply.fields["ack_type"] for r in sc.results if r.reply is not None
                    and r.reply.fields["req_type"] == M.REQ_OPEN_QP)
    assert opens[M.ACK_ACK] > num_qps and opens[M.ACK_NO_QP] > 1, opens
    assert not {r.reply.fields["loc_qpn"] for r in sc.results if r.reply is not None
                and r.reply.fields["req_type"] == M.REQ_OPEN_QP} & set(theirs)
    out = simulate(width, num_qps, sc.packets, reserved=reserved, seed=width,
                   expect_replies=sum(r.reply is not None for r in sc.results))
    check(out, model, sc.results)
    assert out["qp_open"] == ((1 << num_qps) - 1) & ~reserved


def replied_requests(rng, num_qps, steps):
    """``steps`` random OPEN_QP, CLOSE_QP and SEND_QP_INFO requests (each answered), with the
    model's results."""
    model = M.ConnectionManagerModel(num_qps, local_ip=ip(LOCAL_IP))
    sc = Scenario(model, rng, INSIDE)
    for _ in range(steps):
        src = rng.choice(INSIDE)
        if rng.random() < 0.5:
            sc.send(M.request(M.REQ_OPEN_QP, **sc.fields(src)), src)
        else:
            qpn, src = sc.target()
            kind = rng.choice([M.REQ_CLOSE_QP, M.REQ_CLOSE_QP, M.REQ_SEND_QP_INFO])
            sc.send(M.request(kind, **sc.fields(src), rem_qpn=qpn), src)
    assert all(r.reply is not None for r in sc.results)
    return sc


@pytest.mark.parametrize("width", [64, full(128)])
def test_pool_idle_is_low_around_each_request(width):
    """``pool_idle`` is low from the cycle of a datagram's last beat (its request offered in
    the next) to its reply's last beat, so in the three cycles before a QP shows in ``qp_open``
    (the decision's cycle before, the decision's, the QP's take); it is high again from the
    third cycle after the reply (the request is let go two cycles after it) until the next
    datagram's last beat (at these widths a datagram takes cycles to arrive: the check covers
    several cycles between requests)."""
    num_qps = 3
    sc = replied_requests(random.Random(width), num_qps, 40)
    trace = []
    out = simulate(width, num_qps, sc.packets, expect_replies=len(sc.packets), seed=width + 5,
                   trace=trace)
    check(out, sc.model, sc.results)
    idle = [c.pool_idle for c in trace]
    starts = [k for k, c in enumerate(trace) if c.request_end]
    ends = [k for k, c in enumerate(trace) if c.reply_end]
    assert len(starts) == len(ends) == len(sc.packets)
    for t, e in zip(starts, ends):
        assert not any(idle[t:e + 1]), (t, e)
    for e, t in zip(ends, starts[1:]):
        assert all(idle[e + 3:t]), (e, t)
    assert sum(max(0, t - e - 3) for e, t in zip(ends, starts[1:])) > len(starts)
    assert all(idle[:starts[0]]) and all(idle[ends[-1] + 3:])
    takes = [k for k in range(1, len(trace)) if trace[k].qp_open & ~trace[k - 1].qp_open]
    assert len(takes) >= num_qps
    assert not any(idle[k - 3] or idle[k - 2] or idle[k - 1] for k in takes)
