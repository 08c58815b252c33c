"""The rping client in gateware (:class:`RpingClient`) against its reference model
(:mod:`rocegen.sim.models.services.rping_client`), in closed loop with a host's ``rping -s``
written here from rping's server loop (it parses each advertisement from the FPGA's memory as
the SEND carries it, READs ``start_buf``, checks it is rping's ping, WRITEs it back, SENDs its
go-ahead). Every input stream has random idle cycles and every output random backpressure;
every event the block takes goes to the model too, and every receive buffer, memory write,
work request and disconnect the block offers must be the model's next one, the counters the
model's. Connections run one after the other on several QPs, some with faults: a byte of the
WRITE changed, a go-ahead of 8 bytes, the host disconnecting, a SEND failing, a second
connection while one runs, an R_Key rewritten in the responder's table."""

import random
from collections import deque
from dataclasses import dataclass
from functools import partial

import pytest

from rocegen.gateware.roce.services.rping_check import LATENCY
from rocegen.gateware.roce.services.rping_client import CLIENT_COUNTERS, RpingClient
from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.rping import ADV_BYTES, RecvPost, WorkRequest, ping_data, unpack_adv
from rocegen.sim.models.services.rping_client import (
    COUNTERS,
    ClientKind,
    ClientMemory,
    MemWrite,
    RpingClientService,
)
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim, shared
from rocegen.wire.verbs import CplStatus, WrOpcode
from tests.tiers import full
from tests.unit.services.standin import StreamBench


@dataclass(frozen=True)
class Conn:
    """One connection: its QP, and its fault at ping ``at``: None, ``"flip"`` (a byte of the
    WRITE changed), ``"short"`` (a go-ahead of 8 bytes), ``"close"`` (the host disconnects
    instead of its go-ahead), ``"status"`` (the SEND completes in error), ``"busy"`` (another
    QP opened for the client meanwhile), ``"rkey"`` (the QP's R_Key rewritten before)."""
    qp: int
    fault: str | None = None
    at: int = 0


class Host:
    """The host's ``rping -s`` and the endpoint around the client (see the module)."""

    def __init__(self, layout, rkeys, rng):
        self.lay, self.rng = layout, rng
        self.rkeys = list(rkeys)
        self.mem = bytearray(rng.randbytes(layout.base + layout.num_qps * layout.bytes_per_qp))
        self.events, self.cpls, self.recv_cpls = deque(), deque(), deque()
        self.snoops, self.cfgs = deque(), deque()
        self.posted = {k: 0 for k in range(layout.num_qps)}
        self.conn, self.pings, self.pending = None, 0, 0
        self.after_cfg = None           # an open waiting for its R_Key write
        self.read = []                  # what the server READ, ping by ping

    def start(self, conn):
        self.conn, self.pings = conn, 0
        if conn.fault == "rkey":
            self.rkeys[conn.qp] = self.rng.randrange(1 << 32)
            self.cfgs.append((conn.qp, self.rkeys[conn.qp]))
            self.after_cfg = (conn.qp, True)
        else:
            self.events.append((conn.qp, True))
        if conn.fault == "busy":
            other = (conn.qp + 1) % self.lay.num_qps
            self.events.append((other, True))

    def wrote(self, w):
        """A word write of the client's, taken."""
        n = self.lay.word
        for i in range(n):
            if w.be >> i & 1:
                self.mem[w.word * n + i] = w.data[i]

    def post_recv(self, p):
        self.posted[p.qp] += 1

    def _go_ahead(self, qp, length=ADV_BYTES, status=RecvStatus.OK, after=0):
        self.recv_cpls.append({"qp": qp, "wr_id": ClientKind.RECV, "status": status,
                               "length": length, "opcode": 0, "after": after})

    def post_wr(self, wr):
        """The client's SEND: the server receives its advertisement and acts."""
        c, lay = self.conn, self.lay
        assert wr.opcode == WrOpcode.SEND and wr.length == ADV_BYTES, wr
        if c is None or wr.qp != c.qp:
            return
        fault = c.fault if self.pings == c.at else None
        status = CplStatus.REMOTE_OP if fault == "status" else CplStatus.OK
        self.cpls.append((wr.qp, wr.wr_id, status))
        if status != CplStatus.OK:
            return
        buf, rkey, size = unpack_adv(self.mem[wr.local_addr:wr.local_addr + ADV_BYTES])
        assert rkey == self.rkeys[wr.qp] and size == lay.size, (rkey, size)
        if wr.wr_id == ClientKind.READ_ADV:
            assert buf == lay.start_addr(wr.qp)
            got = bytes(self.mem[buf:buf + size])
            assert got == ping_data(self.pings, size), (self.pings, got)
            self.read.append(got)
            if fault == "close":
                self._close(wr.qp)
            else:
                self._go_ahead(wr.qp, 8 if fault == "short" else ADV_BYTES)
            return
        assert buf == lay.rdma_addr(wr.qp)
        data = bytearray(self.read[-1][:self.read[-1].index(0) + 1])    # strlen + 1
        if fault == "flip":
            data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
        n = lay.word
        self.pending += -(-len(data) // n)
        for k in range(0, len(data), n):
            chunk = bytes(data[k:k + n])
            self.mem[buf + k:buf + k + len(chunk)] = chunk
            self.snoops.append(((buf + k) // n, bytes(self.mem[buf + k:buf + k + n]),
                                (1 << len(chunk)) - 1))
        self._go_ahead(wr.qp, after=self.pending)
        self.pings += 1

    def _close(self, qp):
        """The QP's connection ends: its receive buffers flushed, then closed."""
        for _ in range(self.posted[qp]):
            self._go_ahead(qp, 0, RecvStatus.FLUSHED)
        self.posted[qp] = 0
        self.events.append((qp, False))

    def disconnect(self, qp):
        """The client asked for the disconnect of ``qp``: the CM closes it."""
        self._close(qp)


class Bench(StreamBench):
    def __init__(self, dut, layout, count, script, seed, idle=0.3, backpressure=0.3):
        self.dut, self.lay, self.script = dut, layout, deque(script)
        self.rng = random.Random(seed)
        self.host = Host(layout, dut.rkeys, self.rng)
        self.model = RpingClientService(layout, count, list(dut.rkeys))
        self.expect = {k: deque() for k in ("recv", "mem_w", "wr", "disconnect")}
        self.strobes = dict.fromkeys(CLIENT_COUNTERS, 0)
        self.idle, self.backpressure = idle, backpressure
        self.snooped = self.quiet = 0
        self.done = 0

    def took(self, kind, item):
        m, h = self.model, self.host
        if kind == "event":
            qp, is_open = item
            a = m.opened(qp) if is_open else m.closed(qp)
        elif kind == "cpl":
            a = m.completion(*item)
        else:
            if item["status"] == RecvStatus.OK:
                h.posted[item["qp"]] -= 1
            a = m.recv_completion(item["qp"], item["wr_id"], item["status"], item["length"])
        self.expect["recv"].extend([a.recv] if a.recv else [])
        self.expect["mem_w"].extend(a.writes)
        self.expect["wr"].extend([a.wr] if a.wr else [])
        self.expect["disconnect"].extend([a.disconnect] if a.disconnect is not None else [])

    def offerable(self, kind, item):
        return kind != "recv" or self._recv_ready(item)

    def _recv_ready(self, item):
        # a completion needs a buffer posted (not a FLUSHED one), and its payload's writes
        # seen LATENCY cycles before
        return (item["status"] != RecvStatus.OK or self.host.posted[item["qp"]] > 0) and \
            self.snooped >= item["after"] and self.quiet >= LATENCY + 2

    async def inputs(self, ctx):
        """The responder's writes (the server's WRITEs) and the table's R_Key writes."""
        d, h = self.dut, self.host
        while True:
            go = bool(h.snoops) and self.rng.random() >= self.idle
            cfg = bool(h.cfgs) and not go
            if go:
                word, data, be = h.snoops[0]
                ctx.set(d.resp_w.payload, {"addr": word, "data": int.from_bytes(data, "little"),
                                           "be": be})
            if cfg:
                qp, rkey = h.cfgs[0]
                ctx.set(d.cfg_w.payload, {"qp": qp, "config": {"mr": {"rkey": rkey}}})
            ctx.set(d.resp_w.valid, go)
            ctx.set(d.cfg_w.valid, cfg)
            await ctx.tick()
            self.quiet = 0 if go else self.quiet + 1
            if go:
                self.model.written(*h.snoops.popleft())
                self.snooped += 1
            if cfg:
                self.model.rkey_written(*h.cfgs.popleft())
                if h.after_cfg:
                    h.events.append(h.after_cfg)
                    h.after_cfg = None

    async def count(self, ctx):
        async for _, _, *values in ctx.tick().sample(*(getattr(self.dut, n)
                                                       for n in CLIENT_COUNTERS)):
            for name, v in zip(CLIENT_COUNTERS, values, strict=True):
                self.strobes[name] += v

    def _idle(self):
        h = self.host
        return not (any(self.expect.values()) or h.events or h.cpls or h.recv_cpls or h.snoops
                    or h.cfgs or h.after_cfg)

    async def main(self, ctx):
        still, last = 0, None
        while True:
            await ctx.tick()
            if self.model.qp is None and self._idle():
                if not self.script:
                    break
                self.host.start(self.script.popleft())
                self.done += 1
            now = (len(self.script), sum(map(len, self.expect.values())), self.snooped,
                   len(self.host.read))
            still = still + 1 if now == last else 0
            last = now
            assert still < 3000, f"no progress for 3000 cycles: {self.expect}"
        for _ in range(20):
            await ctx.tick()

    def run(self):
        d, h = self.dut, self.host
        w = self.lay.word
        drives = ((d.opened, "event", h.events, lambda e: {"qp": e[0], "open": e[1]}),
                  (d.cpl, "cpl", h.cpls,
                   lambda c: {"qp": c[0], "wr_id": c[1], "status": c[2].value}),
                  (d.recv_cpl, "recv", h.recv_cpls,
                   lambda c: {k: int(v) for k, v in c.items() if k != "after"}))
        collects = (
            (d.recv, "recv", lambda p: RecvPost(**meta_dict(p)), h.post_recv),
            (d.mem_w, "mem_w", lambda p: MemWrite(int(p.addr), int(p.data).to_bytes(w, "little"),
                                                  int(p.be)), h.wrote),
            (d.wr, "wr", _wr, h.post_wr),
            (d.disconnect, "disconnect", int, h.disconnect))
        run_sim(d, testbenches=[self.main], processes=[
            *(partial(self.drive, port=p, kind=k, queue=q, payload=f) for p, k, q, f in drives),
            *(partial(self.collect, port=p, name=n, convert=c, act=a) for p, n, c, a in collects),
            self.inputs, self.count])
        assert self.strobes == self.model.counters
        return self.model.counters


def _wr(p):
    p = meta_dict(p)
    assert p["imm"] == 0 and p["remote_offset"] == 0, p
    return WorkRequest(p["qp"], p["wr_id"], WrOpcode(p["opcode"]), p["local_addr"], p["length"])


def bench(width, size, count, script, seed, *, num_qps=4, base=0, bytes_per_qp=None):
    a = max(16, width // 8)
    need = 3 * a + 2 * (-(-size // a) * a)
    bytes_per_qp = bytes_per_qp or 1 << (need - 1).bit_length()
    layout = ClientMemory(num_qps, base, bytes_per_qp, size, width)
    end = base + num_qps * bytes_per_qp
    addr_width = max(4, (end - 1).bit_length() - (width // 8).bit_length() + 1)
    rkeys = tuple(0x1000 + 0x111 * k for k in range(num_qps))
    dut = shared(RpingClient, num_qps, width=width, addr_width=addr_width, base=base,
                 bytes_per_qp=bytes_per_qp, size=size, count=count, rkeys=rkeys)
    return Bench(dut, layout, count, script, seed)


@pytest.mark.parametrize("width, size", [(64, 100), (512, 100), full(64, 4096), full(512, 4096),
                                         full(128, 26)])
def test_pings_run_to_the_end_on_one_qp_after_another(width, size):
    b = bench(width, size, 3, [Conn(0), Conn(2), Conn(1), Conn(3)], seed=width + size)
    counts = b.run()
    assert counts == {**dict.fromkeys(COUNTERS, 0), "pings": 12, "done": 4}, counts
    assert b.host.read == [ping_data(p, size) for p in range(3)] * 4


FAULTS = [Conn(1, "flip", 1), Conn(2, "short", 0), Conn(0, "close", 2), Conn(3, "status", 1),
          Conn(1, "busy", 0), Conn(2, "rkey", 0), Conn(0, "flip", 0), Conn(3)]


@pytest.mark.parametrize("width, seed", [(64, 1), (256, 2), full(512, 3), full(64, 4)])
def test_faults_end_the_client_as_the_model_says(width, seed):
    b = bench(width, 40, 3, FAULTS, seed=seed, base=2 * max(16, width // 8) * 4)
    counts = b.run()
    want = {**dict.fromkeys(COUNTERS, 0), "mismatch": 2, "bogus": 1, "ended": 1,
            "bad_status": 1, "busy": 1, "done": 3, "pings": 1 + 2 + 1 + 3 + 3 + 3}
    assert counts == want, counts


def test_parameters_are_checked():
    common = {"width": 64, "addr_width": 16, "base": 0, "bytes_per_qp": 256, "size": 26,
              "count": 1, "rkeys": (1,)}
    raises(ValueError, r"count must be an integer 1\.\.99999",
           lambda: RpingClient(1, **{**common, "count": 0}))
    raises(ValueError, r"bytes_per_qp must be a power of two of at least 112 bytes",
           lambda: RpingClient(1, **{**common, "bytes_per_qp": 64}))
    raises(ValueError, r"base must be a multiple of 16",
           lambda: RpingClient(1, **{**common, "base": 8}))
    raises(ValueError, r"rkeys must hold 2 R_Keys", lambda: RpingClient(2, **common))
    raises(ValueError, r"size must be an integer 26\.\.65535",
           lambda: RpingClient(1, **{**common, "size": 20}))
    raises(ValueError, r"outside local memory",
           lambda: RpingClient(1, **{**common, "addr_width": 4}))
