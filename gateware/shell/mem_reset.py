"""Reset sequencing of an external memory behind an AXI clock converter: the core's clock domain
on one side, the memory controller's user clock on the other."""

from amaranth.hdl import ClockDomain, ClockSignal, DomainRenamer, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.level_sync import LevelSync
from rocegen.gateware.lib.reset_sync import ResetSync

__all__ = ["MemResetControl"]


class MemResetControl(wiring.Component):
    """Resets of the path core -> AXI clock converter -> memory controller, and of the core itself.

    AXI infrastructure (the clock converter, the controller's AXI port) must have both ends of
    every AXI connection in reset together: whenever one side is reset, the other is too, the
    two resets overlapping. So one request resets both sides: ``arst``, or the controller not
    calibrated (``calib`` low). Both AXI resets are asserted at once (asynchronously, without a
    clock edge) and each is released synchronously to its own clock, ``hold`` cycles after the
    request has gone (plus the 3 cycles of its reset synchronizer). The core's reset is released
    last, once both AXI sides are out of reset, so the core never offers a request to a side
    still in reset and never sees a response from before its reset.

    Clock domains: ``core_domain`` (the core's clock; ``core_aresetn``, ``core_rst`` and
    ``calib_done`` are synchronous to it) and ``mem_domain`` (the memory controller's user clock;
    ``mem_aresetn`` is synchronous to it). Neither domain's reset signal is used: the component
    makes the resets. Its flip-flops run in local domains reset by its two reset synchronizers
    (submodules ``rst_sync_core`` / ``rst_sync_mem``, flip-flops with ``ASYNC_REG``), and the
    signals crossing between the clocks go through two-flip-flop synchronizers (``cdc0`` /
    ``cdc1``); both kinds carry their timing exceptions, which a build writes into the
    constraints.

    Ports
    -----
    ``arst`` : In(1)
        Reset request, asynchronous to both clocks (CPU_RESET, the MAC's resets, the memory
        controller's user-clock reset...); both sides stay in reset while it is high.
    ``calib`` : In(1)
        The memory controller has calibrated (asynchronous level); both sides stay in reset
        while it is low.
    ``mem_aresetn`` : Out(1)
        Active-low AXI reset of the memory side (the controller's AXI port and the converter's
        master side), synchronous to ``mem_domain``; low after configuration.
    ``core_aresetn`` : Out(1)
        Active-low AXI reset of the converter's slave side, synchronous to ``core_domain``.
    ``core_rst`` : Out(1)
        Active-high reset of the core, synchronous to ``core_domain``; high after
        configuration.
    ``calib_done`` : Out(1)
        ``calib`` synchronized to ``core_domain`` (2 to 3 cycles late), whatever the resets:
        for a status LED.

    Latency: with ``arst`` low and ``calib`` high, ``mem_aresetn`` rises ``hold + 4`` cycles of
    the memory clock after the later of the two, ``core_aresetn`` ``hold + 4`` cycles of the
    core clock after it, and ``core_rst`` falls 1 to 4 core cycles after the later of
    ``core_aresetn`` rising and ``mem_aresetn`` rising (its synchronizer). A request asserts
    all three resets at once.

    Parameters
    ----------
    core_domain, mem_domain : str
        The two clock domains (different names).
    hold : int
        Cycles each AXI reset stays asserted after the request has gone, counted in its own
        clock (16..65536). With the default 64, each side is in reset for at least 16 cycles of
        the other's clock as long as the clocks differ by less than a factor 4.
    """

    def __init__(self, *, core_domain="sync", mem_domain="ui", hold=64):
        for name, value in (("core_domain", core_domain), ("mem_domain", mem_domain)):
            if not isinstance(value, str) or not value:
                raise TypeError(f"{name} must be a clock domain name, not {value!r}")
        if core_domain == mem_domain:
            raise ValueError(f"core_domain and mem_domain must differ, both are {core_domain!r}")
        if not isinstance(hold, int) or isinstance(hold, bool) or not 16 <= hold <= 65536:
            raise ValueError(f"hold must be an integer 16..65536 (cycles), not {hold!r}")
        self.core_domain = core_domain
        self.mem_domain = mem_domain
        self.hold = hold
        super().__init__({
            "arst": In(1), "calib": In(1),
            "mem_aresetn": Out(1), "core_aresetn": Out(1), "core_rst": Out(1),
            "calib_done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        request = Signal()
        m.d.comb += request.eq(self.arst | ~self.calib)

        # each side: reset synchronizer, then `hold` cycles of its own clock
        released = {}
        for side, domain in (("core", self.core_domain), ("mem", self.mem_domain)):
            rs = m.submodules[f"rst_sync_{side}"] = ResetSync(domain)
            cd = ClockDomain(f"{side}_hold", async_reset=True, local=True)
            m.domains += cd
            m.d.comb += [rs.arst.eq(request), cd.clk.eq(ClockSignal(domain)), cd.rst.eq(rs.rst)]
            count = Signal(range(self.hold + 1), name=f"{side}_count")
            aresetn = Signal(name=f"{side}_aresetn")          # 0 (in reset) while rs.rst
            with m.If(count == self.hold):
                m.d[cd.name] += aresetn.eq(1)
            with m.Else():
                m.d[cd.name] += count.eq(count + 1)
            released[side] = aresetn
        m.d.comb += [self.core_aresetn.eq(released["core"]),
                     self.mem_aresetn.eq(released["mem"])]

        # the core: out of reset once both sides are (the memory side seen through a
        # synchronizer that the core side's reset clears)
        mem_seen = m.submodules.mem_ready_sync = DomainRenamer("core_hold")(LevelSync())
        m.d.comb += mem_seen.i.eq(released["mem"])
        core_rst = Signal(init=1)
        m.d.core_hold += core_rst.eq(~(released["core"] & mem_seen.o))
        m.d.comb += self.core_rst.eq(core_rst)

        # calibration status for an LED, in a domain no reset reaches
        m.domains.calib_cdc = cd_calib = ClockDomain("calib_cdc", reset_less=True, local=True)
        m.d.comb += cd_calib.clk.eq(ClockSignal(self.core_domain))
        calib_sync = m.submodules.calib_sync = DomainRenamer("calib_cdc")(LevelSync())
        m.d.comb += [calib_sync.i.eq(self.calib), self.calib_done.eq(calib_sync.o)]
        return m
