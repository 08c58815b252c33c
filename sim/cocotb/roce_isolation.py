"""cocotb testbench: an error stays on its QP. QP A (index 0) is driven into the error state in
every way it can enter it, as responder and as requester, while QP B (index 1) moves data at
the line rate; then A is opened again and works.

Ways in (:data:`RESPONDER_KINDS`: the host's request on A is refused by the endpoint's
responder; :data:`REQUESTER_KINDS`: the endpoint's own work requests on A fail):

``rkey``, ``range``
    A host WRITE with a wrong R_Key, or reaching past the end of A's region: NAK remote access.
``length``
    A host SEND longer than A's first receive buffer: NAK invalid request, that buffer
    completes with status LENGTH.
``sequence``
    A WRITE MIDDLE at A's expected PSN with no message open: NAK invalid request.
``retry``
    A's frames lost on the way to the host: its first work request fails with RETRY_EXCEEDED.
``rnr``
    The host refuses A's SENDs with RNR NAKs: RNR_RETRY_EXCEEDED.
``remote``
    A WRITE of A past the end of the host's region: the host's NAK, REMOTE_ACCESS.
``close``
    A closed (its context written with state RESET, as the connection manager's CLOSE_QP does)
    while its work requests are outstanding: each completes FLUSHED.
``full``
    As ``retry``, but A's work comes from the traffic generator, :data:`GEN_MORE` requests more
    than A's work-request queue holds: A's queue stays full until its retries run out, and the
    generator's next request for A waits at the endpoint's intake beside B's requests on the
    user's port (they must pass). Every one of A's requests completes with an error (the
    generator's ``gen_err``), none OK.

B's traffic is of the same side as the error: the host WRITEs into the endpoint (responder
kinds) or the endpoint WRITEs into the host (requester kinds), a fixed number of bytes written
once without an error on A (the baseline) and once with A's error in the middle. Checks, per
kind: B's work completes OK with every byte right, B's goodput on the wire is within 1 % of
the baseline; A's work ends with exactly the completions the verbs rules predict (the
responder's flush: one FLUSHED completion for each buffer A had when the error came, none for
the buffers posted after it, which stay for A's next connection; the requester's: the failing
request's status, FLUSHED for the rest); A opened again moves data both ways, its next SEND
landing in the first buffer kept. The figures (cycles from A's NAK or failure to the end of its
flush, B's goodput in both runs) go to the log and, when ``ROCE_RESULTS`` names a file, there.

The cocotb test ``reopen_at_once``: A is closed with 40 work requests outstanding (their frames
lost) and set up again at once, without waiting for anything: the set-up waits inside the
endpoint until the old requests have drained, every one of them completes FLUSHED, and a request
posted after the set-up completes OK (none of the old ones is sent on the new connection).
"""

import json
import os

import cocotb
from cocotbext.axi import AxiStreamFrame

from rocegen.gateware.roce.endpoint.config import EndpointConfig
from rocegen.gateware.roce.layouts import CplStatus, QpState, WrOpcode
from rocegen.gateware.roce.responder.resp_layouts import RecvStatus
from rocegen.sim.cocotb.roce_resp import (
    HOST_BASE,
    HOST_QPN,
    MEM,
    MEMORY,
    PARAMS,
    RQ_DEPTH,
    B,
    RespEnv,
    W,
    rkey_of,
    roce_opcode,
    share,
)
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import WcStatus
from rocegen.sim.testing.fuzz import valid_request
from rocegen.sim.testing.roce_env import (
    l2_length,
    now_cycle,
    open_qp,
    qpn,
    wait_cycles,
    wait_low,
    write_onchip,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP
from rocegen.wire.addr import parse_ip
from rocegen.wire.headers import BTH, IPV4, UDP
from rocegen.wire.opcodes import OP_RC_ACKNOWLEDGE, OP_RC_RDMA_WRITE_MIDDLE
from rocegen.wire.pattern import pattern

RESPONDER_KINDS = ("rkey", "range", "length", "sequence")
REQUESTER_KINDS = ("retry", "rnr", "remote", "close", "full")
A, Bq = 0, 1
PMTU = 1024
#: B's work: so many beats of payload (some 24,000 cycles at the line rate), in messages of
#: :data:`MSG_BEATS` beats
B_BEATS = 24_000
MSG_BEATS = 64
#: bytes of each receive buffer of A (a failing SEND is one packet: A's frames take little of
#: the line B shares)
RECV_BYTES = 512
#: receive buffers A gets after its error (kept for its next connection)
KEPT = 8
#: the goodput B keeps while A fails, against the baseline
KEEP = 0.99
#: A's work-request queue (the build's ``wr_depth``); ``full`` posts :data:`GEN_MORE` more
WR_DEPTH = PARAMS.get("wr_depth") or EndpointConfig().wr_depth
GEN_MORE = 16
#: retransmit timeout code of A and B (8.2 us: A's retries run out within B's work)
TIMEOUT = 1
#: A's in ``full`` (131 us): its queue, which fills at the pace B's requests are taken, stays
#: full for longer than B's queued work lasts, so B needs its next requests taken while A's wait
#: at the intake
FULL_TIMEOUT = 5
MAX_CYCLES = 4_000_000


def dest_qp(frame):
    """The BTH destination QP of a RoCEv2 frame, else None."""
    if roce_opcode(frame) is None:
        return None
    return BTH.unpack(frame[l2_length(frame) + IPV4.length + UDP.length:])["dest_qp"]


def psn_of(frame):
    """The BTH PSN of a RoCEv2 frame."""
    return BTH.unpack(frame[l2_length(frame) + IPV4.length + UDP.length:])["psn"]


class Isolation:
    """The testbench: :class:`RespEnv` with a link to the host whose scripts lose A's frames."""

    def __init__(self, dut):
        self.to_nic = Link(name="to NIC")
        self.env = RespEnv(dut, to_nic=self.to_nic)
        self.dut = dut
        self.slices = {k: share(k, 2) for k in (A, Bq)}
        self.psn = {}
        self.figures = []
        #: A's receive buffers posted and not completed, oldest first (wr_ids; RECV_BYTES each)
        self.rq_a = []

    async def start(self):
        await self.env.start()
        for k in (A, Bq):
            await self.open(k)
        # the endpoint's memory B's WRITEs to the host come from (above the responder's
        # region, which the host writes): the test pattern
        self.src = pattern(0, self.msg_bytes)
        base = self.src_at = MEM // 2
        if MEMORY == "onchip":
            await write_onchip(self.dut, W, MEM, base, self.src)
        else:
            self.env.ram.write(base, self.src)

    @property
    def msg_bytes(self):
        return MSG_BEATS * B

    async def open(self, k, timeout=TIMEOUT, **kw):
        self.psn[k] = self.env.rng.getrandbits(24)
        await self.env.open(k, pmtu=PMTU, psn=self.psn[k], region=self.slices[k],
                            timeout=timeout)
        if kw:      # the requester's retry counts of this case
            await open_qp(self.env.ctl, self.env.psn, k, peer_ip=parse_ip(HOST_IP),
                          peer_qpn=HOST_QPN + k, rkey=0x3000 + k, base_va=HOST_BASE + (k << 36),
                          pmtu=PMTU, psn=self.psn[k], udp_sport=0xC200 + k, timeout=timeout,
                          **kw)

    # ------------------------------------------------------------------ B's work, measured
    def b_host_writes(self):
        """B's work as responder: host WRITEs over B's slice, round after round."""
        base, length = self.slices[Bq]
        n = self.msg_bytes
        msgs, data = [], self.env.rng.randbytes(n)
        for i in range(B_BEATS // MSG_BEATS):
            at = base + (i * n) % (length - length % n)
            msgs.append(self.env.post_send(Bq, "WRITE", data, addr=at))
            self.env.shadow[at:at + n] = data
        self.env.mac.poke()
        return msgs

    def b_fpga_writes(self):
        """B's work as requester: WRITEs of the pattern into the host, one after the other,
        posted on the user's port by a task of their own (each post waits until the endpoint
        takes it: A's error starts while most of B's requests are still to be posted)."""
        n = self.msg_bytes
        first = len(self.env.cpl.items)
        count = B_BEATS // MSG_BEATS

        async def post():
            for i in range(count):
                await self.env.wr.send({"wr_id": 0x8000 + i, "qp": Bq, "opcode": WrOpcode.WRITE,
                                        "local_addr": self.src_at, "length": n,
                                        "remote_offset": (i * n) % (4 << 20), "imm": 0})
        return first, count, cocotb.start_soon(post())

    def b_window(self, first_frame, *, inbound):
        """Cycles B's work took on the wire: from its first request's first beat to the first
        beat of its last ACK (host WRITEs), or from its first WRITE's first beat to the last
        beat of its last, less the beats of A's frames sent in between (the endpoint's)."""
        frames = self.env.mac.frames[first_frame:]
        if inbound:
            acks = [f for f, _, fr in frames if roce_opcode(fr) == OP_RC_ACKNOWLEDGE
                    and dest_qp(fr) == HOST_QPN + Bq]
            return acks[-1] - self.b_start
        mine = [(f, last) for f, last, fr in frames if dest_qp(fr) == HOST_QPN + Bq
                and roce_opcode(fr) != OP_RC_ACKNOWLEDGE]
        lo, hi = mine[0][0], mine[-1][1]
        # (less the beats of A's frames in between: the line B shares with them)
        theirs = sum(last - f + 1 for f, last, fr in frames if dest_qp(fr) == HOST_QPN + A
                     and lo <= f <= hi)
        return hi - lo - theirs

    async def run_b(self, kind, fault=None):
        """B's work of the side of ``kind``, with ``fault`` (a coroutine function) started
        when B's first frames are on the wire; returns B's goodput in bytes per cycle."""
        env = self.env
        inbound = kind in RESPONDER_KINDS
        first_frame = len(env.mac.frames)
        first_req = len(env.mac.requests)
        cq0 = len(env.nic.send_cq)
        payload = (B_BEATS // MSG_BEATS) * self.msg_bytes
        if inbound:
            msgs = self.b_host_writes()
        else:
            first, count, posting = self.b_fpga_writes()
        await wait_cycles(W, 500)
        task = cocotb.start_soon(fault()) if fault else None
        if not inbound:
            await posting
        if inbound:
            await env.settle(lambda: not env.nic.send_outstanding(HOST_QPN + Bq),
                             "B's host WRITEs did not complete", max_cycles=MAX_CYCLES)
            done = [c for c in env.nic.send_cq[cq0:] if c.qpn == HOST_QPN + Bq]
            assert len(done) == len(msgs) and all(c.status == WcStatus.SUCCESS for c in done), \
                f"{kind}: B's host WRITEs: {[c.status for c in done][:4]}"
            self.b_start = env.mac.requests[first_req][0]
        else:
            got = await env.cpl.wait_for(first + count, max_cycles=MAX_CYCLES)
            mine = [c for c in got[first:] if c["qp"] == Bq]
            while len(mine) < count:
                got = await env.cpl.wait_for(len(env.cpl.items) + 1, max_cycles=MAX_CYCLES)
                mine = [c for c in got[first:] if c["qp"] == Bq]
            assert [c["status"] for c in mine] == [CplStatus.OK.value] * count, \
                f"{kind}: B's completions {[c['status'] for c in mine][:8]}"
            for i in range(0, count, max(1, count // 8)):
                at = HOST_BASE + (Bq << 36) + (i * self.msg_bytes) % (4 << 20)
                assert env.nic.read_mem(at, self.msg_bytes) == self.src, \
                    f"{kind}: B's WRITE {i} differs at the host"
        if task is not None:
            await task
        if inbound:
            await env.check_memory(Bq, *self.slices[Bq], what=f"{kind}: B's slice")
        return payload / self.b_window(first_frame, inbound=inbound)

    # ---------------------------------------------------------------------- A's errors
    async def responder_error(self, kind):
        """The host's request on A that the endpoint refuses; returns the receive buffers A
        had (wr_ids) and the completion the failing request gives (or None)."""
        env = self.env
        hq = HOST_QPN + A
        base, length = self.slices[A]
        # A's receive queue: full but for the buffers posted after the error
        for j in range(RQ_DEPTH - KEPT - len(self.rq_a)):
            wid = 0x100 + len(self.figures) * RQ_DEPTH + j
            await env.post_recv(A, wid, base + 64 * j, RECV_BYTES)
            self.rq_a.append(wid)
        had, self.rq_a = self.rq_a, []
        await wait_cycles(W, 64)
        self.nak_mark = len(env.mac.frames)
        if kind == "rkey":
            env.nic.post_send(hq, "WRITE", data=bytes(512), remote_addr=base,
                              rkey=0x5100_0000 ^ 0xFFFF00)
        elif kind == "range":
            env.nic.post_send(hq, "WRITE", data=bytes(512), remote_addr=base + length - 256,
                              rkey=rkey_of(A))
        elif kind == "length":          # (more than any buffer of A holds, in one packet)
            env.nic.post_send(hq, "SEND", data=bytes(RECV_BYTES + 200))
        elif kind == "sequence":        # (at the PSN the host's QP sends next: A's ePSN)
            # the NAK answers no request of the host's: it stops on the way there
            self.to_nic.drop_matching(lambda f: dest_qp(f) == hq, count=1)
            sq = env.nic.qps[hq].sq
            frame = valid_request(our_mac=FPGA_MAC, our_ip=FPGA_IP, peer_ip=HOST_IP,
                                  qpn=qpn(A), psn=sq.wire(sq.posted), opcode=OP_RC_RDMA_WRITE_MIDDLE,
                                  payload=bytes(PMTU), udp_sport=0xC2FF)
            env.mac.source.send_nowait(AxiStreamFrame(frame, tuser=0))
        env.mac.poke()
        return had, (had[0], RecvStatus.LENGTH) if kind == "length" else None

    async def requester_error(self, kind):
        """A's own work requests that fail; returns their wr_ids and the first's status."""
        env = self.env
        hq = HOST_QPN + A
        op = WrOpcode.SEND if kind == "rnr" else WrOpcode.WRITE
        offset = (8 << 20) - 32 if kind == "remote" else 0
        if kind in ("retry", "close", "full"):
            self.to_nic.drop_matching(lambda f: dest_qp(f) == hq)
        if kind == "full":
            count = WR_DEPTH + GEN_MORE
            await env.gen.send({"qp": A, "opcode": WrOpcode.WRITE, "length": 64, "count": count,
                                "spacing": 0, "imm": 0, "window": 64 * count})
            return count, None
        if kind == "rnr":
            env.nic.rnr_for(10 ** 6, qpn=hq)
        ids = [0x400 + j for j in range(4)]
        for j, wid in enumerate(ids):
            await env.wr.send({"wr_id": wid, "qp": A, "opcode": op, "local_addr": 0,
                               "length": 64, "remote_offset": offset + 64 * j, "imm": 0})
        if kind == "close":
            await wait_cycles(W, 300)
            await env.ctl.send({"qp": A, "context": CLOSED})
        status = {"retry": CplStatus.RETRY_EXCEEDED, "rnr": CplStatus.RNR_RETRY_EXCEEDED,
                  "remote": CplStatus.REMOTE_ACCESS, "close": CplStatus.FLUSHED}[kind]
        return ids, status

    async def case(self, kind):
        env = self.env
        inbound = kind in RESPONDER_KINDS
        if not inbound:
            await self.open(A, retry_cnt=1, rnr_retry=1,
                            timeout=FULL_TIMEOUT if kind == "full" else TIMEOUT)
        baseline = await self.run_b(kind)
        first_r, first_c = len(env.rcpl.items), len(env.cpl.items)
        made = {}

        async def fault():
            t0 = now_cycle(W)
            if inbound:
                made["ids"], made["first"] = await self.responder_error(kind)
            else:
                made["ids"], made["first"] = await self.requester_error(kind)
            made["t0"] = t0
        with_error = await self.run_b(kind, fault)
        # A's completions: exactly the predicted ones
        if inbound:
            ids, first = made["ids"], made["first"]
            want = [(w, RecvStatus.FLUSHED.value) for w in ids]
            if first is not None:
                want[0] = (first[0], first[1].value)
            kept = [0x9000 + len(self.figures) * KEPT + j for j in range(KEPT)]
            for wid in kept:          # after the error: for A's next connection
                await env.post_recv(A, wid, self.slices[A][0], RECV_BYTES)
            self.rq_a += kept

            def a_done():
                return len([c for c in env.rcpl.items[first_r:] if c["qp"] == A]) >= len(want)
            await env.settle(a_done, f"{kind}: A's receive queue not flushed",
                             max_cycles=MAX_CYCLES)
            await wait_cycles(W, 2000)
            got = [c for c in env.rcpl.items[first_r:] if c["qp"] == A]
            cyc = [t for c, t in zip(env.rcpl.items[first_r:], env.rcpl.cycles[first_r:])
                   if c["qp"] == A]
            assert [(c["wr_id"], c["status"]) for c in got] == want, \
                f"{kind}: A's receive completions {[(c['wr_id'], c['status']) for c in got][:4]}"
            naks = [f for f, _, fr in env.mac.frames[self.nak_mark:]
                    if roce_opcode(fr) == OP_RC_ACKNOWLEDGE and dest_qp(fr) == HOST_QPN + A]
            flush_cycles = cyc[-1] - naks[0] if naks else None
        elif kind == "full":
            count = made["ids"]
            await wait_low(self.dut, self.dut.gen_busy, W, max_cycles=MAX_CYCLES,
                           what="full: the traffic generator's requests for A")
            got = tuple(int(x.value) for x in (self.dut.gen_posted, self.dut.gen_ok,
                                                 self.dut.gen_err))
            assert got == (count, 0, count), \
                f"full: A's {count} requests: (posted, OK, failed) {got}"
            want = [None] * count
            flush_cycles = now_cycle(W) - made["t0"]    # (A's first request to its last failure)
        else:
            ids, status = made["ids"], made["first"]
            want = [(ids[0], status.value)] + [(w, CplStatus.FLUSHED.value) for w in ids[1:]]

            def a_done():
                return len([c for c in env.cpl.items[first_c:] if c["qp"] == A]) >= len(want)
            await env.settle(a_done, f"{kind}: A's work requests did not end",
                             max_cycles=MAX_CYCLES)
            got = [c for c in env.cpl.items[first_c:] if c["qp"] == A]
            cyc = [t for c, t in zip(env.cpl.items[first_c:], env.cpl.cycles[first_c:])
                   if c["qp"] == A]
            assert [(c["wr_id"], c["status"]) for c in got] == want, \
                f"{kind}: A's completions {[(c['wr_id'], c['status']) for c in got]}"
            flush_cycles = cyc[-1] - cyc[0]
            env.nic.rnr_for(0, qpn=HOST_QPN + A)
        self.to_nic.clear_scripts()
        ratio = with_error / baseline
        fig = {"kind": kind, "width": W, "memory": MEMORY,
               "b_bytes_per_cycle": round(with_error, 3),
               "b_baseline_bytes_per_cycle": round(baseline, 3), "b_ratio": round(ratio, 4),
               "a_completions": len(want), "a_flush_cycles": flush_cycles}
        self.figures.append(fig)
        self.dut._log.info(f"isolation {fig}")
        assert ratio >= KEEP, f"{kind}: B kept {ratio:.2%} of its goodput while A failed"
        await self.reopened(kind)

    async def reopened(self, kind):
        """A opened again moves data both ways; its next SEND takes its oldest buffer (one kept
        from before the error)."""
        env = self.env
        await self.open(A)
        first_r, first_c = len(env.rcpl.items), len(env.cpl.items)
        data = env.rng.randbytes(300)
        hq = HOST_QPN + A
        cq0 = len(env.nic.send_cq)
        env.post_send(A, "WRITE", data, addr=self.slices[A][0] + 8192)
        if not self.rq_a:
            await env.post_recv(A, 0xA00, self.slices[A][0], RECV_BYTES)
            self.rq_a.append(0xA00)
        env.post_send(A, "SEND", data)
        env.mac.poke()
        await env.settle(lambda: not env.nic.send_outstanding(hq) and any(
            c["qp"] == A for c in env.rcpl.items[first_r:]), f"{kind}: A after reopening",
            max_cycles=MAX_CYCLES)
        assert all(c.status == WcStatus.SUCCESS for c in env.nic.send_cq[cq0:]
                   if c.qpn == hq), f"{kind}: A's host requests after reopening"
        rc = next(c for c in env.rcpl.items[first_r:] if c["qp"] == A)
        assert (rc["wr_id"], rc["status"], rc["length"]) == \
            (self.rq_a.pop(0), RecvStatus.OK.value, 300), rc
        env.shadow[self.slices[A][0] + 8192:self.slices[A][0] + 8192 + 300] = data
        env.shadow[self.slices[A][0]:self.slices[A][0] + 300] = data
        await env.wr.send({"wr_id": 0xB00, "qp": A, "opcode": WrOpcode.WRITE, "local_addr": 0,
                           "length": 512, "remote_offset": 0, "imm": 0})
        got = await env.cpl.wait_for(first_c + 1, max_cycles=MAX_CYCLES)
        mine = [c for c in got[first_c:] if c["qp"] == A]
        assert mine and (mine[0]["wr_id"], mine[0]["status"]) == (0xB00, CplStatus.OK.value), mine
        await env.check_memory(A, self.slices[A][0] + 8192, 300, what=f"{kind}: A's WRITE")
        await env.check_memory(A, self.slices[A][0], 300, what=f"{kind}: A's SEND")


#: A context write that closes a QP (the connection manager's CLOSE_QP)
CLOSED = {"state": QpState.RESET, "peer_ip": 0, "peer_qpn": 0, "rkey": 0, "base_va": 0,
          "pmtu_log2": 10, "udp_sport": 0, "dscp": 0, "ecn": 0, "ack_every_log2": 4,
          "timeout": 0, "retry_cnt": 7, "rnr_retry": 7}


@cocotb.test()
async def isolation(dut):
    """Every kind in turn on one endpoint (or those the environment variable ``ISOLATION_KINDS``
    names, separated by commas)."""
    kinds = os.environ.get("ISOLATION_KINDS", ",".join(RESPONDER_KINDS + REQUESTER_KINDS))
    tb = Isolation(dut)
    await tb.start()
    for kind in kinds.split(","):
        await tb.case(kind)
    assert tb.env.mac.framecheck.counts["roce"] > 0
    out = os.environ.get("ROCE_RESULTS")
    if out:
        with open(out, "w") as f:
            json.dump(tb.figures, f, indent=1)


@cocotb.test()
async def reopen_at_once(dut):
    """A closed with work outstanding and opened again at once (see the module's text)."""
    tb = Isolation(dut)
    await tb.start()
    env = tb.env
    await tb.open(A, retry_cnt=1, rnr_retry=1)
    hq = HOST_QPN + A
    tb.to_nic.drop_matching(lambda f: dest_qp(f) == hq)
    first = len(env.cpl.items)
    ids = [0x400 + j for j in range(40)]
    for j, wid in enumerate(ids):
        await env.wr.send({"wr_id": wid, "qp": A, "opcode": WrOpcode.WRITE, "local_addr": 0,
                           "length": 1024, "remote_offset": 1024 * j, "imm": 0})
    await wait_cycles(W, 20)
    await env.ctl.send({"qp": A, "context": CLOSED})
    t0 = now_cycle(W)
    tb.to_nic.clear_scripts()
    await tb.open(A)                     # at once: the endpoint holds it while A drains
    waited = now_cycle(W) - t0
    mark = len(env.mac.frames)
    await env.wr.send({"wr_id": 0xB00, "qp": A, "opcode": WrOpcode.WRITE, "local_addr": 0,
                       "length": 512, "remote_offset": 0, "imm": 0})
    await env.cpl.wait_for(first + len(ids) + 1, max_cycles=MAX_CYCLES)
    got = [(c["wr_id"], CplStatus(c["status"]).name) for c in env.cpl.items[first:]
           if c["qp"] == A]
    assert got == [(w, "FLUSHED") for w in ids] + [(0xB00, "OK")], got
    # on the new connection (its PSNs) A sent the one WRITE posted after it (one packet, perhaps
    # more than once), nothing old (frames of the old requests already on their way out may still leave, with
    # the old connection's PSNs)
    psn0 = tb.psn[A]
    sent = [psn_of(fr) for _, _, fr in env.mac.frames[mark:] if dest_qp(fr) == hq]
    new = {p for p in sent if (p - psn0) % (1 << 24) < len(ids) + 1}
    assert new == {psn0}, f"A's PSNs on its new connection (from {psn0:#x}): {sorted(new)}"
    dut._log.info(f"reopen_at_once: the set-up waited {waited} cycles for 40 requests to drain")
