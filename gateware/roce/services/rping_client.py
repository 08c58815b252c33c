"""An rping client in gateware: the FPGA pings a host's ``rping -s``."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature, check_addr_width, mem_write_layout
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.layouts import WORK_REQUEST, WrOpcode, check_num_qps
from rocegen.gateware.roce.responder.resp_layouts import RECV_POST, RESP_CONFIG_WRITE, RecvOpcode
from rocegen.gateware.roce.services.rping_check import RpingCheck
from rocegen.gateware.roce.services.rping_fill import RpingFill
from rocegen.gateware.roce.services.rping_layouts import (
    ADV_BYTES,
    RPING_TEXT,
    ClientKind,
    ClientPhase,
)
from rocegen.gateware.roce.services.rping_pattern import next_text
from rocegen.gateware.roce.services.service_events import service_members, take_event
from rocegen.gateware.roce.services.service_layouts import SERVICE_EVENT, EvKind

__all__ = ["RpingClient", "CLIENT_COUNTERS", "MAX_COUNT"]

#: The counter strobes (the model's counters).
CLIENT_COUNTERS = ("pings", "done", "ended", "mismatch", "bogus", "bad_status", "busy")
#: The most pings a connection runs: five decimal digits.
MAX_COUNT = 99_999


def _int(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer {lo}..{hi}, not {value!r}")
    return value


class RpingClient(wiring.Component):
    """The client side of librdmacm's rping (``rping -c -S size -C count -V``) on the QP of the
    FPGA's connection to a host's ``rping -s``, one connection at a time, with the FPGA's
    local memory as its buffers. ``rocegen.sim.models.services.rping_client`` is its reference
    model: what the client does for each event is stated there; this block does the same.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256).
    width : int
        W bits of local memory (64..512).
    addr_width : int
        Word-address bits of local memory (1..32).
    base : int
        Byte address of QP 0's slice: a multiple of ``A`` = max(16, W/8).
    bytes_per_qp : int
        Bytes of each QP's slice (a power of two): QP ``k``'s is ``base + k * bytes_per_qp``.
        It holds the receive slot (16 bytes) at 0, the RDMA_READ_ADV advertisement at ``A``,
        the RDMA_WRITE_ADV one at ``2 * A``, ``start_buf`` at ``3 * A``, ``rdma_buf`` after it
        (``size`` rounded up to ``A``): ``3 * A + 2 * that`` bytes at most ``bytes_per_qp``.
        The slices end inside local memory.
    size : int
        The ping's bytes (rping's ``-S``: 26..65535).
    count : int
        Pings a connection runs before the client disconnects (1..99999).
    rkeys : sequence of int
        Each QP's R_Key in the responder's table as built (its region must hold the slice, for
        READ and WRITE): what the advertisements state; ``cfg_w`` follows later writes.

    Ports
    -----
    opened : In(stream.Signature(QP_SERVICE))
        The client's QPs opened (the FPGA's connection to the host's rping port established)
        and closed.
    recv, recv_cpl : Out(RECV_POST), In(RECV_COMPLETION) streams
        The receive slot (16 bytes, wr_id ``ClientKind.RECV``) and its completions.
    wr, cpl : Out(WORK_REQUEST), In(COMPLETION) streams
        The SENDs of the advertisements (16 bytes, wr_id their ``ClientKind``; ``imm`` and
        ``remote_offset`` 0) and their completions.
    mem_w : Out(MemWriteSignature(width, addr_width))
        The advertisements and each ping's ``start_buf``
        (:class:`~rocegen.gateware.roce.services.rping_fill.RpingFill`); a SEND is posted only
        after the writes before it are taken (on-chip memory: readable from then).
    resp_w : In(stream.Signature(mem_write_layout(W, addr_width), always_ready=True))
        Every word the responder writes (its write port's handshakes): the server's WRITE into
        ``rdma_buf`` is checked there (:class:`~rocegen.gateware.roce.services.rping_check.RpingCheck`).
    cfg_w : In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True))
        The writes of the responder's table: each QP's R_Key kept (a copy: 32 bits a QP).
    disconnect : Out(stream.Signature(8))
        The QP whose connection the client ends (after ``count`` pings, on an error, or a
        second connection while one runs): to the IB CM's DREQ.
    pings, done, ended, mismatch, bogus, bad_status, busy : Out(1)
        Strobes, high for one cycle when the model counts that counter.

    Behaviour
    ---------
    One event at a time, ``opened`` first, then ``cpl``, then ``recv_cpl``. An event taken in
    cycle t is decided in t + 1 (the state is in registers, the R_Key read from the copy, the
    event's QP compared and a receive's length checked as it is taken);
    the fill it asks for runs from t + 2 (two advertisements and the ping's words, one a
    cycle), then its receive buffer, SEND and disconnect are offered from registers; the next
    event is taken the cycle after the last is taken. The check's verdict holds the writes
    up to 4 cycles before it is read (a receive completion comes later than that after the
    payload writes before it). Backpressure on any output holds the client.
    """

    def __init__(self, num_qps, *, width, addr_width, base, bytes_per_qp, size, count, rkeys):
        self.num_qps = check_num_qps(num_qps)
        self.width = check_width(width)
        self.addr_width = check_addr_width(addr_width)
        self.fill = RpingFill(width, addr_width, size)
        self.check = RpingCheck(width, addr_width, size)
        a = self.fill.align
        self.base = _int("base", base, 0, (1 << 32) - 1)
        if base % a:
            raise ValueError(f"base must be a multiple of {a} bytes, not {base}")
        self.bytes_per_qp = _int("bytes_per_qp", bytes_per_qp, 1, 1 << 32)
        need = 3 * a + 2 * self.fill.buf_bytes
        if bytes_per_qp & (bytes_per_qp - 1) or bytes_per_qp < need:
            raise ValueError(f"bytes_per_qp must be a power of two of at least {need} bytes "
                             f"(pings of {size} bytes), not {bytes_per_qp}")
        end, limit = base + num_qps * bytes_per_qp, min((1 << addr_width) * (width // 8), 1 << 32)
        if end > limit:
            raise ValueError(f"the QPs' slices end at byte {end:#x}, outside local memory "
                             f"({limit:#x} bytes)")
        self.size = size
        self.count = _int("count", count, 1, MAX_COUNT)
        self.rkeys = tuple(rkeys)
        if len(self.rkeys) != num_qps:
            raise ValueError(f"rkeys must hold {num_qps} R_Keys, not {len(self.rkeys)}")
        for r in self.rkeys:
            _int("each R_Key", r, 0, (1 << 32) - 1)
        super().__init__({
            **service_members(),
            "mem_w": Out(MemWriteSignature(width, addr_width)),
            "resp_w": In(stream.Signature(mem_write_layout(width, addr_width), always_ready=True)),
            "cfg_w": In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True)),
            "disconnect": Out(stream.Signature(8)),
            **{name: Out(1) for name in CLIENT_COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        fill, check = m.submodules.fill, m.submodules.check = self.fill, self.check
        wiring.connect(m, fill.w, wiring.flipped(self.mem_w))
        m.d.comb += [check.snoop.valid.eq(self.resp_w.valid),
                     check.snoop.payload.eq(self.resp_w.payload)]
        rkeys = m.submodules.rkeys = Memory(shape=32, depth=self.num_qps, init=self.rkeys)
        cw = self.cfg_w.payload
        rk_w = rkeys.write_port()
        m.d.comb += [rk_w.addr.eq(cw.qp), rk_w.data.eq(cw.config.mr.rkey),
                     rk_w.en.eq(self.cfg_w.valid & (cw.qp < self.num_qps))]
        rk_r = rkeys.read_port(transparent_for=(rk_w,))

        ev = Signal(SERVICE_EVENT)
        d = _Decision(self, m, ev)
        pend = {k: Signal(name=f"pend_{k}") for k in ("recv", "wr", "disc")}
        strobes = {name: Signal(name=f"count_{name}") for name in CLIENT_COUNTERS}
        m.d.sync += [getattr(self, name).eq(s) for name, s in strobes.items()]
        with m.FSM():
            with m.State("TAKE"):
                d.precompute()
                with m.If(take_event(m, self, ev, (rk_r,))):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                d.decide(rk_r.data)
                m.d.comb += [s.eq(d.count[name]) for name, s in strobes.items()]
                m.d.sync += [pend["recv"].eq(d.do_recv), pend["wr"].eq(d.do_wr),
                             pend["disc"].eq(d.do_disc), self.recv.payload.eq(d.recv),
                             self.wr.payload.eq(d.wr), self.disconnect.payload.eq(d.disc_qp)]
                m.next = "TAKE"
                with m.If(d.do_fill):
                    m.next = "FILL"
                with m.Elif(d.do_recv | d.do_wr | d.do_disc):
                    m.next = "ISSUE"
            with m.State("FILL"):
                m.d.comb += fill.job.valid.eq(1)
                with m.If(fill.job.ready):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If(self._issue(m, pend)):
                    m.next = "TAKE"
        return m

    def _issue(self, m, p):
        """Offers the pending outputs; returns whether none is left after this cycle."""
        outs = {"recv": self.recv, "wr": self.wr, "disc": self.disconnect}
        left = {}
        for k, o in outs.items():
            m.d.comb += o.valid.eq(p[k])
            left[k] = p[k] & ~o.ready
            m.d.sync += p[k].eq(left[k])
        return ~(left["recv"] | left["wr"] | left["disc"])


class _Decision:
    """What the client does for the event ``ev`` (its decide stage), combinationally: the
    outputs (``recv``, ``wr``, ``disc_qp`` when ``do_recv``, ``do_wr``, ``do_disc``), the fill
    (``do_fill``, its job written into the fill's register), the check's arming, the state's
    update and the counters (``count``)."""

    def __init__(self, client, m, ev):
        self.c, self.m, self.ev = client, m, ev
        self.qp = Signal(8)
        self.phase = Signal(ClientPhase)
        self.ping = Signal(range(client.count))
        self.text = Signal(RPING_TEXT)
        self.do_recv, self.do_wr, self.do_disc, self.do_fill = (Signal(name=n) for n in (
            "do_recv", "do_wr", "do_disc", "do_fill"))
        self.recv, self.wr, self.disc_qp = Signal(RECV_POST), Signal(WORK_REQUEST), Signal(8)
        self.count = {name: Signal(name=f"decide_{name}") for name in CLIENT_COUNTERS}
        self.mine, self.bogus, self.last = Signal(), Signal(), Signal()

    def _addresses(self, qp):
        """The connection's addresses for QP ``qp``, one adder each: the slice's byte address,
        the advertisements' (by :class:`ClientKind`), the slice's and ``rdma_buf``'s word
        addresses."""
        c = self.c
        s, b = c.bytes_per_qp.bit_length() - 1, _log2(c.width // 8)
        a, buf = c.fill.align, c.fill.buf_bytes
        return {"slice": c.base + (qp << s),
                ClientKind.READ_ADV: c.base + a + (qp << s),
                ClientKind.WRITE_ADV: c.base + 2 * a + (qp << s),
                "slice_w": (c.base >> b) + (qp << (s - b)),
                "rdma_w": ((c.base + 3 * a + buf) >> b) + (qp << (s - b))}

    def precompute(self):
        """In the cycle an event is taken: whether it is the connection's QP's (``mine``) and,
        for a receive completion, whether it is bogus (another length, not a SEND, not the
        receive slot's), registered beside the event (the decision then needs fewer levels)."""
        m, c = self.m, self.c
        o, cp, r = c.opened.payload, c.cpl.payload, c.recv_cpl.payload
        qp = Mux(c.opened.valid, o.qp, Mux(c.cpl.valid, cp.qp, r.qp))
        m.d.sync += [self.mine.eq((self.phase != ClientPhase.OFF) & (qp == self.qp)),
                     self.bogus.eq((r.wr_id != ClientKind.RECV.value) |
                                   (r.opcode != RecvOpcode.SEND) | (r.length != ADV_BYTES))]

    def decide(self, rkey):
        m, ev = self.m, self.ev
        mine = self.mine
        regs = self.regs = {k: Signal(32, name=f"conn_{getattr(k, 'name', k)}")
                            for k in self._addresses(ev.qp)}
        m.d.comb += [self.disc_qp.eq(self.qp),
                     self.recv.qp.eq(self.qp), self.recv.wr_id.eq(ClientKind.RECV.value),
                     self.recv.addr.eq(regs["slice"]), self.recv.length.eq(ADV_BYTES),
                     self.wr.qp.eq(self.qp), self.wr.opcode.eq(WrOpcode.SEND),
                     self.wr.length.eq(ADV_BYTES)]
        with m.Switch(ev.kind):
            with m.Case(EvKind.OPEN):
                self._open(rkey)
            with m.Case(EvKind.CLOSE):
                with m.If(mine):
                    self._end("ended", disconnect=False)
            with m.Case(EvKind.CPL):
                with m.If(mine & ~ev.ok):
                    self._status()
            with m.Case(EvKind.RECV):
                with m.If(mine):
                    self._recv()

    def _open(self, rkey):
        m, ev, c = self.m, self.ev, self.c
        job = c.fill.job.payload
        with m.If(self.phase != ClientPhase.OFF):
            m.d.comb += [self.count["busy"].eq(1), self.do_disc.eq(1), self.disc_qp.eq(ev.qp)]
        with m.Else():
            new = self._addresses(ev.qp)
            start = RPING_TEXT.const({"digits": [0] * 5, "nd": 1, "start": 0})
            m.d.sync += [self.qp.eq(ev.qp), self.phase.eq(ClientPhase.READ_ADV),
                         self.ping.eq(0), self.last.eq(c.count == 1), self.text.eq(start),
                         *(self.regs[k].eq(v) for k, v in new.items()),
                         job.slice.eq(new["slice_w"]), job.rkey.eq(rkey), job.adverts.eq(1),
                         job.text.eq(start)]
            m.d.comb += [self.do_fill.eq(1), self.do_recv.eq(1),
                         self.recv.qp.eq(ev.qp), self.recv.addr.eq(new["slice"]),
                         self.wr.qp.eq(ev.qp), self.do_wr.eq(1),
                         self.wr.wr_id.eq(ClientKind.READ_ADV.value),
                         self.wr.local_addr.eq(new[ClientKind.READ_ADV])]

    def _send(self, kind):
        """The SEND of the connection's advertisement ``kind``."""
        self.m.d.comb += [self.do_wr.eq(1), self.wr.wr_id.eq(kind.value),
                          self.wr.local_addr.eq(self.regs[kind])]

    def _end(self, counter, disconnect=True):
        m = self.m
        m.d.sync += self.phase.eq(ClientPhase.OFF)
        m.d.comb += [self.count[counter].eq(1), self.do_disc.eq(disconnect)]

    def _status(self):
        with self.m.If(self.ev.flushed):
            self._end("ended", disconnect=False)
        with self.m.Else():
            self._end("bad_status")

    def _recv(self):
        m, ev, c = self.m, self.ev, self.c
        check, job = c.check.arm, c.fill.job.payload
        with m.If(~ev.ok):
            self._status()
        with m.Elif(self.bogus):
            self._end("bogus")
        with m.Elif(self.phase == ClientPhase.READ_ADV):
            m.d.comb += [self.do_recv.eq(1), check.valid.eq(1),
                         check.payload.rdma.eq(self.regs["rdma_w"]),
                         check.payload.text.eq(self.text)]
            m.d.sync += self.phase.eq(ClientPhase.WRITE_ADV)
            self._send(ClientKind.WRITE_ADV)
        with m.Elif(~c.check.ok):
            self._end("mismatch")
        with m.Elif(self.last):
            m.d.comb += self.count["pings"].eq(1)
            self._end("done")
        with m.Else():
            new = Signal(RPING_TEXT)
            next_text(m, self.text, new)
            m.d.comb += [self.count["pings"].eq(1), self.do_recv.eq(1), self.do_fill.eq(1)]
            m.d.sync += [self.ping.eq(self.ping + 1), self.last.eq(self.ping + 2 == c.count),
                         self.text.eq(new),
                         self.phase.eq(ClientPhase.READ_ADV),
                         job.slice.eq(self.regs["slice_w"]), job.adverts.eq(0),
                         job.text.eq(new)]
            self._send(ClientKind.READ_ADV)


def _log2(n):
    return n.bit_length() - 1
