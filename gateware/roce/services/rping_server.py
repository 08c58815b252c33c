"""An rping server in gateware: the service librdmacm's ``rping -c`` talks to."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import check_addr_width, mem_write_layout
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.layouts import (
    RKEY_WRITE,
    WORK_REQUEST,
    WrOpcode,
    check_num_qps,
)
from rocegen.gateware.roce.responder.resp_layouts import (
    RECV_POST,
)
from rocegen.gateware.roce.services.rping_layouts import ADV_BYTES, RPING_QP, Phase, WrKind
from rocegen.gateware.roce.services.service_events import service_members, take_event
from rocegen.gateware.roce.services.service_layouts import SERVICE_EVENT, EvKind

__all__ = ["RpingServer", "COUNTERS"]

#: The counter strobes: pings done, and why services ended (the model's counters).
COUNTERS = ("pings", "ended", "bad_adv", "bad_status", "bad_event")

#: The longest message a work request carries (its length field is 31 bits).
_MAX_LENGTH = (1 << 31) - 1


def _int(name, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return value


class RpingServer(wiring.Component):
    """The server side of librdmacm's rping (``examples/rping.c``) on every QP of rping's port,
    as ``rping -s -P`` serves its connections, with the FPGA's local memory as its buffers.
    ``rocegen.sim.models.services.rping`` is its reference model: the protocol, and what the
    server does for each event, are stated there; this block does the same, event by event.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256): QP indices 0 .. num_qps - 1.
    width : int
        The local memory's word, W bits (64..512): of ``adv_w``.
    addr_width : int
        The local memory's word-address bits (1..32): of ``adv_w``.
    base : int
        Byte address of the first QP's slice of local memory: a multiple of ``A`` =
        max(16, W/8).
    bytes_per_qp : int
        Bytes of each QP's slice, a power of two above ``2 * A``. QP ``k``'s slice starts at
        ``base + k * bytes_per_qp``: its receive slot (16 bytes) at offset 0, its send slot
        (the go-ahead's 16 bytes, never written here) at ``A``, its ``rdma_buf`` at ``2 * A``.
        The slices end inside local memory (at most ``2^addr_width * W/8`` and 2^32 bytes).
    max_size : int
        The largest ping (1 .. ``bytes_per_qp - 2 * A``): a larger advertisement is refused.

    Ports
    -----
    opened : In(stream.Signature(QP_SERVICE))
        QPs of rping's port opened (a new connection: the service starts) and closed (it ends).
    recv : Out(stream.Signature(RECV_POST))
        Receive buffers: each QP's receive slot, 16 bytes, wr_id ``WrKind.RECV``.
    recv_cpl : In(stream.Signature(RECV_COMPLETION))
        Their completions.
    wr : Out(stream.Signature(WORK_REQUEST))
        The READs, WRITEs and SENDs; wr_id is the :class:`WrKind`, ``imm`` 0. A READ or
        WRITE's ``remote_offset`` is the advertised address (the IB CM opens its QPs with
        base address 0).
    cpl : In(stream.Signature(COMPLETION))
        Their completions (each QP's in the order posted).
    rkey : Out(stream.Signature(RKEY_WRITE))
        The R_Key the QP's READ or WRITE about to be posted names: the advertisement's, for the
        QP context's ``rkey`` (the requester puts the context's R_Key in each RETH, the first
        packet's and those it sends again). The READ or WRITE is offered on ``wr`` only after
        its R_Key write is taken, and no other READ or WRITE of the QP is outstanding then.
    adv_w : In(stream.Signature(mem_write_layout(W, addr_width), always_ready=True))
        Every word the responder writes into local memory (its write port's handshakes): the
        writes into a QP's receive slot are kept (16 bytes a QP), and an advertisement's bytes
        are read from there when its receive completes (the responder offers a completion only
        once its payload is written). So the server needs no read port of local memory.
    pings, ended, bad_adv, bad_status, bad_event : Out(1)
        Strobes, high for one cycle when the model counts that counter (the cycle after the
        event's decision).

    Behaviour
    ---------
    One event at a time, ``opened`` first, then ``cpl``, then ``recv_cpl`` (an event's actions
    lead to the next events of its QP, so none waits for ever). An event taken in cycle t
    (its ``ready`` high; an event of a QP outside the table is taken and dropped) is decided
    in t + 1 (the QP's state read and written back in per-QP memory: 35 bits a QP, and the
    receive slot's 128), its receive buffer and R_Key write offered from t + 2 together, its
    work request after the R_Key write is taken; the next event is taken the cycle after the
    last of them is taken (t + 2 without any). ``ready`` of an input depends on the ``valid``
    of those before it. Outputs come from registers; backpressure on any holds the server.

    Byte order: the advertisement (buf u64, rkey u32, size u32) is big-endian, byte 0 of the
    receive slot in lane 0 of its word. ``adv_w`` is always taken.
    """

    def __init__(self, num_qps, *, width, addr_width, base, bytes_per_qp, max_size):
        self.num_qps = check_num_qps(num_qps)
        self.width = check_width(width)
        self.addr_width = check_addr_width(addr_width)
        self.align = a = max(ADV_BYTES, width // 8)
        self.base = _int("base", base)
        if base < 0 or base % a:
            raise ValueError(f"base must be a multiple of {a} bytes, not {base}")
        self.bytes_per_qp = _int("bytes_per_qp", bytes_per_qp)
        if bytes_per_qp <= 2 * a or bytes_per_qp & (bytes_per_qp - 1):
            raise ValueError(f"bytes_per_qp must be a power of two above {2 * a}, "
                             f"not {bytes_per_qp}")
        self.max_size = _int("max_size", max_size)
        if not 1 <= max_size <= min(bytes_per_qp - 2 * a, _MAX_LENGTH):
            raise ValueError(f"max_size must be 1..{bytes_per_qp - 2 * a}, not {max_size}")
        end = base + num_qps * bytes_per_qp
        limit = min((1 << addr_width) * (width // 8), 1 << 32)
        if end > limit:
            raise ValueError(f"the QPs' slices end at byte {end:#x}, outside local memory "
                             f"({limit:#x} bytes)")
        super().__init__({
            **service_members(),
            "rkey": Out(stream.Signature(RKEY_WRITE)),
            "adv_w": In(stream.Signature(mem_write_layout(width, addr_width), always_ready=True)),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        states = m.submodules.states = Memory(shape=RPING_QP, depth=n, init=[])
        advs = m.submodules.advs = Memory(shape=8 * ADV_BYTES, depth=n, init=[])
        adv_wp = self._snoop(m, advs)
        st_w = states.write_port()
        st_r = states.read_port(transparent_for=(st_w,))
        adv_r = advs.read_port(transparent_for=(adv_wp,))

        ev = Signal(SERVICE_EVENT)
        d = _Decision(self, m, ev)
        pend = {k: Signal(name=f"pend_{k}") for k in ("recv", "rkey", "wr")}
        strobes = {name: Signal(name=f"count_{name}") for name in COUNTERS}
        m.d.sync += [getattr(self, name).eq(s) for name, s in strobes.items()]
        with m.FSM():
            with m.State("TAKE"):
                with m.If(take_event(m, self, ev, (st_r, adv_r))):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                d.decide(st_r.data, adv_r.data)
                m.d.comb += [st_w.addr.eq(ev.qp), st_w.data.eq(d.state), st_w.en.eq(d.write)]
                m.d.comb += [s.eq(d.count[name]) for name, s in strobes.items()]
                self._latch(m, d, pend)
                m.next = "TAKE"
                with m.If(d.do_recv | d.do_rkey | d.do_wr):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If(self._issue(m, pend)):
                    m.next = "TAKE"
        return m

    def _snoop(self, m, advs):
        """The write port of the receive slots: the responder's writes into them."""
        word = self.width // 8
        w = self.adv_w.payload
        first = self.base // word
        end = first + self.num_qps * self.bytes_per_qp // word
        rel = Signal(self.addr_width)
        m.d.comb += rel.eq(w.addr - first)
        shift = (self.bytes_per_qp // word).bit_length() - 1
        wp = advs.write_port(granularity=8)
        inside = (w.addr >= first) & (w.addr < end)
        if word >= ADV_BYTES:               # the slot is the low 16 bytes of one word
            hit = rel[:shift] == 0
            m.d.comb += [wp.data.eq(w.data[:8 * ADV_BYTES]), wp.en.eq(w.be[:ADV_BYTES])]
        else:                               # W = 64: the slot is two words
            half = rel[0]
            hit = rel[1:shift] == 0
            m.d.comb += [wp.data.eq(Cat(w.data, w.data)),
                         wp.en.eq(Cat(w.be & ~half.replicate(word), w.be & half.replicate(word)))]
        m.d.comb += wp.addr.eq(rel >> shift)
        with m.If(~(self.adv_w.valid & inside & hit)):
            m.d.comb += wp.en.eq(0)
        return wp

    def _latch(self, m, d, p):
        """The decision's outputs into the registers they are offered from (``p``: which are
        pending)."""
        m.d.sync += [p["recv"].eq(d.do_recv), p["rkey"].eq(d.do_rkey), p["wr"].eq(d.do_wr),
                     self.recv.payload.eq(d.recv), self.rkey.payload.eq(d.rkey),
                     self.wr.payload.eq(d.wr)]

    def _issue(self, m, p):
        """Offers the pending outputs (the work request after the R_Key write); returns whether
        none is left after this cycle."""
        m.d.comb += [self.recv.valid.eq(p["recv"]), self.rkey.valid.eq(p["rkey"]),
                     self.wr.valid.eq(p["wr"] & ~p["rkey"])]
        left = {"recv": p["recv"] & ~self.recv.ready, "rkey": p["rkey"] & ~self.rkey.ready,
                "wr": p["wr"] & ~(self.wr.valid & self.wr.ready)}
        m.d.sync += [p[k].eq(v) for k, v in left.items()]
        return ~(left["recv"] | left["rkey"] | left["wr"])


class _Decision:
    """What the server does for the event ``ev`` (its decide stage): the QP's new state
    (``state``, written when ``write``), the outputs (``recv``, ``rkey``, ``wr`` when
    ``do_recv``, ``do_rkey``, ``do_wr``) and the counter (``count``), combinationally."""

    def __init__(self, server, m, ev):
        self.s, self.m, self.ev = server, m, ev
        self.state, self.write = Signal(RPING_QP), Signal()
        self.do_recv, self.do_rkey, self.do_wr = Signal(), Signal(), Signal()
        self.recv, self.rkey, self.wr = Signal(RECV_POST), Signal(RKEY_WRITE), Signal(WORK_REQUEST)
        self.count = {name: Signal(name=f"decide_{name}") for name in COUNTERS}

    def decide(self, st, adv):
        m, ev, s = self.m, self.ev, self.s
        a = s.align
        slice_addr = Signal(32)
        m.d.comb += slice_addr.eq(s.base + (ev.qp << (s.bytes_per_qp.bit_length() - 1)))
        self.send_addr, self.buf_addr = slice_addr + a, slice_addr + 2 * a
        m.d.comb += [
            self.recv.qp.eq(ev.qp), self.recv.wr_id.eq(WrKind.RECV.value),
            self.recv.addr.eq(slice_addr), self.recv.length.eq(ADV_BYTES),
            self.rkey.qp.eq(ev.qp), self.wr.qp.eq(ev.qp), self.state.eq(st),
        ]
        with m.Switch(ev.kind):
            with m.Case(EvKind.OPEN):
                m.d.comb += [self.state.eq(0), self.state.phase.eq(Phase.READ_ADV),
                             self.write.eq(1), self.do_recv.eq(1)]
            with m.Case(EvKind.CLOSE):
                with m.If(st.phase != Phase.OFF):
                    self._end("ended")
            with m.Case(EvKind.RECV):
                with m.If(st.phase != Phase.OFF):
                    self._recv(st, adv)
            with m.Case(EvKind.CPL):
                with m.If(st.phase != Phase.OFF):
                    self._cpl(st)

    def _end(self, counter, abort=False):
        """The QP's service ends, counted; ``abort``: with the 0-byte SEND."""
        m = self.m
        m.d.comb += [self.state.eq(0), self.write.eq(1), self.count[counter].eq(1)]
        if abort:
            self._send(WrKind.ABORT, 0)

    def _end_status(self):
        """An event with an error status: FLUSHED ends the service, any other is an error."""
        with self.m.If(self.ev.flushed):
            self._end("ended")
        with self.m.Else():
            self._end("bad_status")

    def _send(self, kind, length):
        self.m.d.comb += [self.do_wr.eq(1), self.wr.wr_id.eq(kind.value),
                          self.wr.opcode.eq(WrOpcode.SEND), self.wr.local_addr.eq(self.send_addr),
                          self.wr.length.eq(length)]

    def _recv(self, st, adv):
        """A receive completion of a QP in service: an advertisement, or the end."""
        m, ev, s = self.m, self.ev, self.s
        byte = [adv.word_select(i, 8) for i in range(ADV_BYTES)]
        buf, rkey, size = (Cat(*reversed(byte[lo:hi])) for lo, hi in ((0, 8), (8, 12), (12, 16)))
        writing = st.phase == Phase.WRITE_ADV
        waiting = (st.phase == Phase.READ_ADV) | writing
        bad_size = (size == 0) | (size > s.max_size) | (writing & (size < st.length))
        with m.If(~ev.ok):
            self._end_status()
        with m.Elif((ev.wr_id != WrKind.RECV.value) | ~ev.is_send | ~waiting):
            self._end("bad_event", abort=True)
        with m.Elif((ev.length != ADV_BYTES) | bad_size):
            self._end("bad_adv", abort=True)
        with m.Else():
            m.d.comb += [self.do_recv.eq(1), self.do_rkey.eq(1), self.rkey.rkey.eq(rkey),
                         self.do_wr.eq(1), self.write.eq(1), self.wr.local_addr.eq(self.buf_addr),
                         self.wr.remote_offset.eq(buf)]
            with m.If(writing):
                m.d.comb += [self.wr.wr_id.eq(WrKind.WRITE.value), self.wr.opcode.eq(WrOpcode.WRITE),
                             self.wr.length.eq(st.length), self.state.phase.eq(Phase.WRITING)]
            with m.Else():
                m.d.comb += [self.wr.wr_id.eq(WrKind.READ.value), self.wr.opcode.eq(WrOpcode.READ),
                             self.wr.length.eq(size), self.state.phase.eq(Phase.READING),
                             self.state.length.eq(size)]

    def _cpl(self, st):
        """A work request's completion of a QP in service."""
        m, ev = self.m, self.ev
        read_done = (ev.wr_id == WrKind.READ.value) & (st.phase == Phase.READING) & ~st.go_out
        write_done = (ev.wr_id == WrKind.WRITE.value) & (st.phase == Phase.WRITING) & ~st.go_out
        with m.If(~ev.ok):
            self._end_status()
        with m.Elif((ev.wr_id == WrKind.GO.value) & st.go_out):
            m.d.comb += [self.write.eq(1), self.state.go_out.eq(0)]
        with m.Elif(read_done | write_done):
            self._send(WrKind.GO, ADV_BYTES)
            m.d.comb += [self.write.eq(1), self.state.go_out.eq(1),
                         self.state.phase.eq(Phase.WRITE_ADV)]
            with m.If(write_done):
                m.d.comb += [self.state.phase.eq(Phase.READ_ADV), self.count["pings"].eq(1)]
        with m.Else():
            self._end("bad_event", abort=True)

