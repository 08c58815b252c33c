from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.layouts import WORK_REQUEST, WR_TAGGED, WrSource, check_num_qps
from rocegen.gateware.roce.requester.sched_tree import kept, mux_tree

__all__ = ["WrMerge"]


class WrMerge(wiring.Component):
    """The endpoint's work-request sources merged into the scheduler's one input: the user's
    port, the streaming front end and the traffic generator.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256): a request with ``qp >= num_qps`` names no QP.

    Ports
    -----
    user : In(stream.Signature(WORK_REQUEST))
        The user's requests, tagged :attr:`WrSource.USER` here.
    front, gen : In(stream.Signature(WR_TAGGED))
        The streaming front end's and the generator's requests, tagged by their source.
    bad_full : In(1)
        The completion tracker's queue for requests that name no QP has no room.
    room, room_next : In(num_qps)
        The scheduler's queue room per QP (from registers): for a request offered now, and for
        one more after a request of the QP is queued in this cycle
        (:class:`~rocegen.gateware.roce.requester.scheduler.Scheduler`).
    o : Out(stream.Signature(WR_TAGGED))
        Every request, to the scheduler.

    Behaviour: a round-robin :class:`~rocegen.gateware.lib.stream_arbiter.StreamArbiter` of
    ``user``, ``front`` and ``gen`` (in that order) into a
    :class:`~rocegen.gateware.lib.buffer.StreamRegisterSlice`, which also registers whether the
    request names no QP. Latency: one cycle from an input to ``o``.

    * A QP with a full queue holds nothing but its own source: a source's request takes part in
      the arbitration only when its QP will have room once it reaches ``o`` (``room`` of its
      QP, or ``room_next`` when the slice holds a request of the same QP). So the slice never
      holds a request the scheduler cannot take, and while one QP's queue is full (its peer
      slow, an RNR wait, retries) the other sources' requests for other QPs pass at one per
      cycle. Within one source, requests keep their order: a source whose request waits for
      room waits as a whole (the user's port is one stream; ``RoceEndpoint.wr_room`` tells the
      user which QPs have room).
    * A request that names no QP waits in the slice while ``bad_full`` is high (``o.valid``
      low); the completion tracker drains that queue on its own.
    * The slice breaks the path to the scheduler: ``o.valid`` and ``o.payload`` depend on
      registers and ``bad_full`` only. An input's ``ready`` depends on registers and on its own
      QP number (through ``room``).
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "user": In(stream.Signature(WORK_REQUEST)),
            "front": In(stream.Signature(WR_TAGGED)),
            "gen": In(stream.Signature(WR_TAGGED)),
            "bad_full": In(1),
            "room": In(num_qps),
            "room_next": In(num_qps),
            "o": Out(stream.Signature(WR_TAGGED)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        qbits = (n - 1).bit_length()
        arb = m.submodules.arbiter = StreamArbiter(WR_TAGGED, 3)
        wr_slice = m.submodules.slice = StreamRegisterSlice(
            data.StructLayout({"t": WR_TAGGED, "no_qp": 1}))
        held = wr_slice.o.payload
        held_qp = held.t.wr.qp[:qbits] if qbits else Const(0, 1)
        # room for one more behind the request in the slice, when it is of the same QP
        held_next = kept(m, mux_tree(m, list(self.room_next), held_qp, "held_next"), "held_next")
        sources = [(self.user, self.user.payload, WrSource.USER),
                   (self.front, self.front.payload.wr, None),
                   (self.gen, self.gen.payload.wr, None)]
        for k, (src, wr, tag) in enumerate(sources):
            q = wr.qp[:qbits] if qbits else Const(0, 1)
            own_room = kept(m, mux_tree(m, list(self.room), q, f"room{k}"), f"room{k}")
            same = wr_slice.o.valid & ~held.no_qp & (wr.qp == held.t.wr.qp)
            ok = Signal(name=f"ok{k}")
            m.d.comb += ok.eq((wr.qp >= n) | Mux(same, held_next, own_room))
            if tag is None:
                m.d.comb += arb.i[k].payload.eq(src.payload)
            else:
                m.d.comb += [arb.i[k].payload.wr.eq(wr), arb.i[k].payload.src.eq(tag)]
            m.d.comb += [arb.i[k].valid.eq(src.valid & ok), src.ready.eq(arb.i[k].ready & ok)]
        m.d.comb += [
            wr_slice.i.payload.t.eq(arb.o.payload),
            wr_slice.i.payload.no_qp.eq(arb.o.payload.wr.qp >= self.num_qps),
            wr_slice.i.valid.eq(arb.o.valid), arb.o.ready.eq(wr_slice.i.ready),
        ]
        # a request naming no QP completes through the tracker's own small queue: hold such a
        # request while that queue is full
        hold = self.bad_full & wr_slice.o.payload.no_qp
        m.d.comb += [self.o.payload.eq(wr_slice.o.payload.t),
                     self.o.valid.eq(wr_slice.o.valid & ~hold),
                     wr_slice.o.ready.eq(self.o.ready & ~hold)]
        return m
