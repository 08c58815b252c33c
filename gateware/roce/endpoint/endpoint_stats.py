from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stats import StatsBlock
from rocegen.gateware.net.stack import STATS as NET_STATS
from rocegen.gateware.roce.cm.cm import COUNTERS as CM_COUNTERS
from rocegen.gateware.roce.ibcm.ibcm_service import COUNTERS as IBCM_COUNTERS
from rocegen.gateware.roce.read.read_ingress import READ_INGRESS_COUNTERS
from rocegen.gateware.roce.read.read_layouts import READ_COUNTERS
from rocegen.gateware.roce.responder.responder import ATOMIC_COUNTERS, RESP_COUNTERS
from rocegen.gateware.roce.services.rping_client import CLIENT_COUNTERS
from rocegen.gateware.roce.services.rping_server import COUNTERS as RPING_COUNTERS
from rocegen.gateware.roce.services.send_echo import COUNTERS as ECHO_COUNTERS

__all__ = ["EndpointStats", "ROCE_STATS", "STATS", "MOVED_COUNTERS", "PULSE_COUNTERS",
           "WIDE_COUNTERS", "WIDE_BITS"]

#: Counters kept by another block that count many at once (the pattern sink's bytes), read as
#: their values saturated to 32 bits; the last of :data:`ROCE_STATS`.
WIDE_COUNTERS = ("sink_bytes_checked", "sink_bytes_wrong")
#: Bits of the values on :class:`EndpointStats` ``wide``.
WIDE_BITS = 48

#: Counters of the RoCE layers, after the network stack's in the statistics address space.
ROCE_STATS = [
    "roce_rx_packets", "roce_rx_icrc_bad", "roce_rx_drop_short", "roce_rx_drop_opcode",
    "roce_rx_drop_qp", "roce_rx_drop_state", "roce_rx_drop_peer", "roce_rx_drop_pkey",
    "roce_rx_acks", "roce_rx_naks", "roce_rx_cnp",
    "roce_tx_packets", "roce_wr_posted", "roce_cpl_ok", "roce_cpl_error",
    "roce_stale_acks", "roce_seq_naks", "roce_rnr_naks", "roce_error_naks", "roce_ignored_acks",
    "roce_timeouts", "roce_rewinds", "roce_qp_errors",
    "roce_qp_ctl_rejected", "stream_drop_too_long", "stream_drop_error",
] + [f"cm_{name}" for name in CM_COUNTERS] + [
    # (the responder's, after the others so that their addresses stay; zero without it)
    "roce_rx_requests"] + [f"resp_{name}" for name in RESP_COUNTERS] + [
    # (congestion control and pause: zero without them)
    "cc_cnp_dropped", "pfc_rx_pause", "pfc_rx_bad", "pfc_tx_frames",
    # (the READ requester's: zero without it)
    "roce_rx_read_responses"] + [f"rd_{name}" for name in READ_COUNTERS + READ_INGRESS_COUNTERS] + [
    "rd_table_overflow", "rd_done", "rd_reissues", "rd_resend_dropped", "rd_resend_stale",
] + [
    # (the responder's atomics: zero without them)
    f"resp_{name}" for name in ATOMIC_COUNTERS] + [
    # (the IB CM's: zero without it)
    "roce_rx_mads"] + [f"ibcm_{name}" for name in IBCM_COUNTERS] + [
    # (the gateware services': zero without them)
    f"rping_{name}" for name in RPING_COUNTERS] + [
    f"echo_{name}" for name in ECHO_COUNTERS] + [
    f"rping_client_{name}" for name in CLIENT_COUNTERS] + [
    # (the IB CM's services' connections closed for quiet: zero without them)
    "ibcm_idle_closes"] + list(WIDE_COUNTERS)
#: Every counter, in address order.
STATS = NET_STATS + ROCE_STATS
#: Counters of :data:`ROCE_STATS` fed by another block's 32-bit event counter (each move of it
#: counts one) instead of a pulse.
MOVED_COUNTERS = ("stream_drop_too_long", "stream_drop_error")
#: Counters of :data:`ROCE_STATS` fed by a one-bit pulse, in address order.
PULSE_COUNTERS = tuple(name for name in ROCE_STATS
                       if name not in MOVED_COUNTERS and name not in WIDE_COUNTERS)


class EndpointStats(wiring.Component):
    """The endpoint's statistics: a counter per name of :data:`ROCE_STATS`, read in one address
    space with the network stack's counters (:data:`STATS`: the stack's first).

    Ports
    -----
    events : In(data.StructLayout({name: 1 for name in PULSE_COUNTERS}))
        One bit per counter: high in a cycle, that counter counts one event.
    moved : In(data.StructLayout({name: 32 for name in MOVED_COUNTERS}))
        Event counters of another block (counting by at most one per cycle): each cycle in
        which one differs from its value of the cycle before counts one event.
    wide : In(data.StructLayout({name: WIDE_BITS for name in WIDE_COUNTERS}))
        Counters of another block that count by more than one a cycle: read as they are,
        saturated to 32 bits (2^32 - 1 from 2^32 up).
    addr / data : In(range(len(STATS))) / Out(32)
        Read port: ``data`` is the counter ``STATS[addr]`` one cycle after the address.
    net_addr / net_data : Out(range(len(NET_STATS))) / In(32)
        The network stack's statistics read port: ``net_addr`` follows ``addr``
        combinationally, ``net_data`` is expected one cycle after the address.

    Behaviour: counters are 32 bits and saturate (:class:`~rocegen.gateware.lib.stats.StatsBlock`);
    an event in cycle t (a pulse, or a ``moved`` counter's new value) is visible to a read
    addressed in cycle t + 2, a ``wide`` value of cycle t to a read addressed in cycle t. No
    backpressure: every event counts. The answer is chosen by the address registered beside
    the read ports' own.
    """

    def __init__(self):
        super().__init__({
            "events": In(data.StructLayout({name: 1 for name in PULSE_COUNTERS})),
            "moved": In(data.StructLayout({name: 32 for name in MOVED_COUNTERS})),
            "wide": In(data.StructLayout({name: WIDE_BITS for name in WIDE_COUNTERS})),
            "addr": In(range(len(STATS))),
            "data": Out(32),
            "net_addr": Out(range(len(NET_STATS))),
            "net_data": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        counted = [name for name in ROCE_STATS if name not in WIDE_COUNTERS]
        assert ROCE_STATS[len(counted):] == list(WIDE_COUNTERS), "the wide counters come last"
        stats = m.submodules.stats = StatsBlock(counted)
        pulses = {name: self.events[name] for name in PULSE_COUNTERS}
        for name in MOVED_COUNTERS:
            counter = self.moved[name]
            last = Signal.like(counter, name=f"last_{name}")
            m.d.sync += last.eq(counter)
            pulses[name] = counter != last
        m.d.comb += stats.inc.eq(Cat(pulses[name] for name in counted))
        n_net = len(NET_STATS)
        m.d.comb += [self.net_addr.eq(self.addr), stats.addr.eq(self.addr - n_net)]
        # the read ports answer one cycle after the address: pick by the registered address
        roce, wide = Signal(), Signal()
        wide_data = Signal(32)
        first_wide = n_net + len(counted)
        m.d.sync += [roce.eq(self.addr >= n_net), wide.eq(self.addr >= first_wide)]
        with m.Switch(self.addr):
            for k, name in enumerate(WIDE_COUNTERS):
                with m.Case(first_wide + k):
                    v = self.wide[name]
                    m.d.sync += wide_data.eq(Mux(v[32:].any(), 0xFFFF_FFFF, v[:32]))
        m.d.comb += self.data.eq(Mux(wide, wide_data, Mux(roce, stats.data, self.net_data)))
        return m
