"""A SEND echo in gateware: the service librdmacm's ``rdma_client`` example talks to."""

from amaranth.hdl import Module, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.layouts import (
    WrOpcode,
    check_num_qps,
)
from rocegen.gateware.roce.services.service_events import service_members, take_event
from rocegen.gateware.roce.services.service_layouts import SERVICE_EVENT, EvKind

__all__ = ["SendEcho", "EchoPhase", "EchoKind", "COUNTERS"]

#: The counter strobes: messages echoed, and why services ended (the model's counters).
COUNTERS = ("echoes", "ended", "bad_status", "bad_event")


class EchoPhase(enum.Enum, shape=2):
    """Where a QP's echo is (the model's ``EchoPhase``)."""
    OFF = 0
    RECV = 1
    ECHO = 2


class EchoKind(enum.Enum, shape=1):
    """The work request ID of each request the echo posts (the model's ``EchoKind``)."""
    RECV = 0
    ECHO = 1


class SendEcho(wiring.Component):
    """A SEND echo on every QP of its port: each message a peer SENDs is SENT back, as
    librdmacm's ``examples/rdma_server.c`` answers ``rdma_client``.
    ``rocegen.sim.models.services.echo`` is its reference model: what it does for each event
    is stated there; this block does the same, event by event.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256).
    width : int
        The local memory's word, W bits (64..512).
    base : int
        Byte address of the first QP's slice of local memory, a multiple of W/8.
    bytes_per_qp : int
        Bytes of each QP's slice (a power of two, W/8 .. 2^30): QP ``k``'s receive buffer is
        its whole slice, at ``base + k * bytes_per_qp``; the longest message echoed.

    Ports
    -----
    opened : In(stream.Signature(QP_SERVICE))
        QPs of the echo's port opened (the service starts) and closed (it ends).
    recv : Out(stream.Signature(RECV_POST))
        Receive buffers: the QP's slice, wr_id ``EchoKind.RECV``.
    recv_cpl : In(stream.Signature(RECV_COMPLETION))
        Their completions.
    wr : Out(stream.Signature(WORK_REQUEST))
        The echoes: SENDs of the slice's first ``length`` bytes, wr_id ``EchoKind.ECHO``.
    cpl : In(stream.Signature(COMPLETION))
        Their completions.
    echoes, ended, bad_status, bad_event : Out(1)
        Strobes, high for one cycle when the model counts that counter (the cycle after the
        event's decision): ``echoes`` when an echo is posted.

    Behaviour
    ---------
    One event at a time, ``opened`` first, then ``cpl``, then ``recv_cpl``. An event taken in
    cycle t (an event of a QP outside the table is taken and dropped) is decided in t + 1 (the
    QP's phase read and written back in per-QP memory, 2 bits a QP), its receive buffer or
    echo offered from t + 2 from a register; the next event is taken the cycle after it is
    taken (t + 2 without one). Backpressure on ``recv`` or ``wr`` holds the echo.
    """

    def __init__(self, num_qps, *, width, base, bytes_per_qp):
        self.num_qps = check_num_qps(num_qps)
        self.width = check_width(width)
        word = width // 8
        for name, v in (("base", base), ("bytes_per_qp", bytes_per_qp)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be an integer, not {v!r}")
        if base < 0 or base % word or base + num_qps * bytes_per_qp > 1 << 32:
            raise ValueError(f"base must be a multiple of {word} bytes whose slices end within "
                             f"2^32 bytes, not {base}")
        if not word <= bytes_per_qp <= 1 << 30 or bytes_per_qp & (bytes_per_qp - 1):
            raise ValueError(f"bytes_per_qp must be a power of two from {word} to 2^30, not "
                             f"{bytes_per_qp}")
        self.base, self.bytes_per_qp = base, bytes_per_qp
        super().__init__({**service_members(), **{name: Out(1) for name in COUNTERS}})

    def elaborate(self, platform):
        m = Module()
        phases = m.submodules.phases = Memory(shape=EchoPhase, depth=self.num_qps, init=[])
        ph_w = phases.write_port()
        ph_r = phases.read_port(transparent_for=(ph_w,))
        ev = Signal(SERVICE_EVENT)
        new, write, do_recv, do_wr = Signal(EchoPhase), Signal(), Signal(), Signal()
        count = {name: Signal(name=f"decide_{name}") for name in COUNTERS}
        m.d.sync += [getattr(self, name).eq(s) for name, s in count.items()]
        with m.FSM():
            with m.State("TAKE"):
                with m.If(take_event(m, self, ev, (ph_r,))):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                self._decide(m, ev, ph_r.data, new, write, do_recv, do_wr, count)
                m.d.comb += [ph_w.addr.eq(ev.qp), ph_w.data.eq(new), ph_w.en.eq(write)]
                self._latch(m, ev, do_recv, do_wr)
                m.next = "TAKE"
                with m.If(do_recv | do_wr):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                with m.If((~self.recv.valid | self.recv.ready) & (~self.wr.valid | self.wr.ready)):
                    m.next = "TAKE"
                with m.If(self.recv.ready):
                    m.d.sync += self.recv.valid.eq(0)
                with m.If(self.wr.ready):
                    m.d.sync += self.wr.valid.eq(0)
        return m

    def _decide(self, m, ev, phase, new, write, do_recv, do_wr, count):
        """The decision for event ``ev`` of a QP in ``phase``: its next phase (``new``, written
        when ``write``), a receive buffer or an echo, the counter."""
        def end(counter):
            m.d.comb += [new.eq(EchoPhase.OFF), write.eq(1), count[counter].eq(1)]

        live = phase != EchoPhase.OFF
        with m.Switch(ev.kind):
            with m.Case(EvKind.OPEN):
                m.d.comb += [new.eq(EchoPhase.RECV), write.eq(1), do_recv.eq(1)]
            with m.Case(EvKind.CLOSE):
                with m.If(live):
                    end("ended")
            with m.Case(EvKind.RECV, EvKind.CPL):
                recv = ev.kind == EvKind.RECV
                want = (recv & (ev.wr_id == EchoKind.RECV.value) & ev.is_send &
                        (phase == EchoPhase.RECV)) | \
                    (~recv & (ev.wr_id == EchoKind.ECHO.value) & (phase == EchoPhase.ECHO))
                with m.If(~live):
                    pass
                with m.Elif(~ev.ok):
                    with m.If(ev.flushed):
                        end("ended")
                    with m.Else():
                        end("bad_status")
                with m.Elif(~want):
                    end("bad_event")
                with m.Elif(recv):
                    m.d.comb += [new.eq(EchoPhase.ECHO), write.eq(1), do_wr.eq(1),
                                 count["echoes"].eq(1)]
                with m.Else():
                    m.d.comb += [new.eq(EchoPhase.RECV), write.eq(1), do_recv.eq(1)]

    def _latch(self, m, ev, do_recv, do_wr):
        """The decision's outputs into the registers they are offered from."""
        addr = Signal(32)
        m.d.comb += addr.eq(self.base + (ev.qp << (self.bytes_per_qp.bit_length() - 1)))
        r, w = self.recv.payload, self.wr.payload
        m.d.sync += [self.recv.valid.eq(do_recv), self.wr.valid.eq(do_wr),
                     r.qp.eq(ev.qp), r.wr_id.eq(EchoKind.RECV.value), r.addr.eq(addr),
                     r.length.eq(self.bytes_per_qp),
                     w.qp.eq(ev.qp), w.wr_id.eq(EchoKind.ECHO.value), w.opcode.eq(WrOpcode.SEND),
                     w.local_addr.eq(addr), w.length.eq(ev.length), w.remote_offset.eq(0),
                     w.imm.eq(0)]
