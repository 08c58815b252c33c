"""The ARP resolver: asks for the MAC address of an IPv4 address, again and again, then gives up."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ArpResolver"]


class ArpResolver(wiring.Component):
    """Resolves one IPv4 address at a time for the IPv4 transmitter.

    Parameters
    ----------
    retry_cycles : int
        Cycles to wait for an answer after a request is sent (>= 16).
    retries : int
        Requests sent again before giving up (0..255).

    Ports
    -----
    resolve, wait_ip : In(1), In(32)
        ``resolve`` held high asks for ``wait_ip`` (the transmitter asks only for an address
        that missed in the cache). Taken when the resolver is free and not in the cycle of
        ``failed``; the resolution starts in the next cycle.
    target : Out(32)
        The address being resolved.
    target_hit : In(1)
        The cache holds ``target`` (combinational; registered here, and not counted in the
        first cycle of a resolution).
    request : Out(stream.Signature(32))
        An ARP request to send for ``target``: offered when a resolution starts and again every
        ``retry_cycles`` + 2 cycles after one is taken (up to ``retries`` more times), unless
        the answer came.
    failed : Out(1)
        One-cycle pulse, from a register, when the last wait ended without an answer; the
        resolver is free again from the next cycle.

    Behaviour: the resolution ends (the resolver is free) two cycles after ``target_hit``
    rises. No other backpressure than ``request``'s: the wait counts from its transfer.
    """

    def __init__(self, *, retry_cycles=100_000, retries=3):
        if not isinstance(retry_cycles, int) or retry_cycles < 16:
            raise ValueError(f"retry_cycles must be an integer >= 16, not {retry_cycles!r}")
        if not isinstance(retries, int) or not 0 <= retries <= 255:
            raise ValueError(f"retries must be 0..255, not {retries!r}")
        self.retry_cycles, self.retries = retry_cycles, retries
        super().__init__({
            "resolve": In(1),
            "wait_ip": In(32),
            "target": Out(32),
            "target_hit": In(1),
            "request": Out(stream.Signature(32)),
            "failed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        busy = Signal()
        timer = Signal(range(self.retry_cycles + 1))
        tries = Signal(range(self.retries + 2))
        request_pending = Signal()
        failed = Signal()           # registered: the transmitter's drop depends on it alone
        m.d.sync += failed.eq(0)
        m.d.comb += [self.failed.eq(failed), self.request.valid.eq(request_pending & busy),
                     self.request.payload.eq(self.target)]
        # a resolution starts in the cycle after it is asked for (the match of ``wait_ip``
        # ends in a register)
        start = Signal()
        start_ip = Signal(32)
        m.d.sync += start.eq(0)
        # the match of the target, registered (forced to 0 while the target is new)
        t_hit = Signal()
        m.d.sync += t_hit.eq(self.target_hit)
        with m.If(start):
            m.d.sync += [busy.eq(1), self.target.eq(start_ip), request_pending.eq(1),
                         tries.eq(0), timer.eq(self.retry_cycles), t_hit.eq(0)]
        with m.Elif(~busy):
            # (not in the cycle of ``failed``: the transmitter still asks for the address it
            # is dropping the packet of)
            with m.If(self.resolve & ~failed):
                m.d.sync += [start.eq(1), start_ip.eq(self.wait_ip)]
        with m.Else():
            with m.If(t_hit):
                m.d.sync += [busy.eq(0), request_pending.eq(0)]
            with m.Elif(~request_pending):
                with m.If(timer == 0):
                    with m.If(tries == self.retries):
                        m.d.sync += [busy.eq(0), failed.eq(1)]
                    with m.Else():
                        m.d.sync += [request_pending.eq(1), tries.eq(tries + 1),
                                     timer.eq(self.retry_cycles)]
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += request_pending.eq(0)
        return m
