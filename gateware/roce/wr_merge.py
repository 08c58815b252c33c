from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.layouts import WORK_REQUEST, WR_TAGGED, WrSource, check_num_qps

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
    o : Out(stream.Signature(WR_TAGGED))
        Every request, to the scheduler.

    Behaviour: a round-robin :class:`~rocegen.gateware.lib.stream_arbiter.StreamArbiter` of
    ``user``, ``front`` and ``gen`` (in that order) into a
    :class:`~rocegen.gateware.lib.buffer.StreamRegisterSlice`, which also registers whether the
    request names no QP. A request that names no QP waits in the slice while ``bad_full`` is
    high (``o.valid`` low); others pass. Latency: one cycle from an input to ``o``. The slice
    breaks both paths: ``o.valid`` and ``o.payload`` depend on registers and ``bad_full`` only,
    the inputs' ``ready`` on registers only (no combinational round trip from a source through
    the scheduler).
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "user": In(stream.Signature(WORK_REQUEST)),
            "front": In(stream.Signature(WR_TAGGED)),
            "gen": In(stream.Signature(WR_TAGGED)),
            "bad_full": In(1),
            "o": Out(stream.Signature(WR_TAGGED)),
        })

    def elaborate(self, platform):
        m = Module()
        arb = m.submodules.arbiter = StreamArbiter(WR_TAGGED, 3)
        m.d.comb += [
            arb.i[0].payload.wr.eq(self.user.payload),
            arb.i[0].payload.src.eq(WrSource.USER),
            arb.i[0].valid.eq(self.user.valid),
            self.user.ready.eq(arb.i[0].ready),
        ]
        wiring.connect(m, wiring.flipped(self.front), arb.i[1])
        wiring.connect(m, wiring.flipped(self.gen), arb.i[2])
        wr_slice = m.submodules.slice = StreamRegisterSlice(
            data.StructLayout({"t": WR_TAGGED, "no_qp": 1}))
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
