"""Board-level glue shared by the board top levels: reset synchronizers, status LEDs, a watcher of
the endpoint's statistics counters, and the tie-off of core ports a board leaves unused.

Everything here is portable Amaranth (no vendor primitives), so it is simulated in the unit
tests like the core; the vendor IP and primitives are instantiated by the board files.
"""

from amaranth.hdl import Array, ClockDomain, ClockSignal, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.regs import AxiLiteRegs

__all__ = ["ResetSync", "LevelSync", "StatsWatch", "StatusLeds", "Stretch", "tie_off", "is_packet_stream",
           "cycles_for", "core_control"]


def cycles_for(seconds, clock_hz):
    """Whole clock cycles in ``seconds`` at ``clock_hz`` (at least 1)."""
    if not isinstance(clock_hz, (int, float)) or isinstance(clock_hz, bool) or clock_hz <= 0:
        raise ValueError(f"clock frequency must be a positive number of Hz, not {clock_hz!r}")
    return max(1, round(seconds * clock_hz))


class ResetSync(wiring.Component):
    """Reset synchronizer: asserts ``rst`` at once when ``arst`` rises (asynchronously, even
    without a clock) and releases it ``stages`` rising edges of the clock of ``domain`` after
    ``arst`` falls, so that the reset of that domain ends synchronously.

    ``rst`` is the output of the last of ``stages`` flip-flops with an asynchronous preset
    (``ASYNC_REG`` set so that the tools place them together and the timing constraints find
    them: the board constraints cut the timing paths to their preset pins). It is high out of
    configuration.

    Parameters
    ----------
    domain : str
        The clock domain whose clock releases the reset (typically the domain the output resets).
    stages : int
        Flip-flops in the chain, 2 or more.
    """

    def __init__(self, domain="sync", stages=3):
        if not isinstance(domain, str) or not domain:
            raise TypeError(f"domain must be a clock domain name, not {domain!r}")
        if not isinstance(stages, int) or isinstance(stages, bool) or stages < 2:
            raise ValueError(f"stages must be an integer of at least 2, not {stages!r}")
        self.domain = domain
        self.stages = stages
        super().__init__({"arst": In(1), "rst": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.rst_sync = cd = ClockDomain("rst_sync", async_reset=True, local=True)
        m.d.comb += [cd.clk.eq(ClockSignal(self.domain)), cd.rst.eq(self.arst)]
        chain = [Signal(init=1, name=f"stage{i}", attrs={"ASYNC_REG": "TRUE"})
                 for i in range(self.stages)]
        m.d.rst_sync += chain[0].eq(0)
        for prev, cur in zip(chain, chain[1:]):
            m.d.rst_sync += cur.eq(prev)
        m.d.comb += self.rst.eq(chain[-1])
        return m


class LevelSync(wiring.Component):
    """Two-flip-flop synchronizer of a slow level signal ``i`` (from another clock domain or a
    pin) into the ``sync`` domain: ``o`` follows ``i`` 2 to 3 cycles later. The flip-flops are
    named ``cdc0`` / ``cdc1`` and carry ``ASYNC_REG``; the board constraints cut the timing
    paths into ``cdc0``. Only for levels that stay put for many cycles (status, buttons): a
    multi-bit value or a pulse needs a handshake instead.
    """

    def __init__(self, init=0):
        self.init = init
        super().__init__({"i": In(1), "o": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cdc0 = Signal(init=self.init, name="cdc0", attrs={"ASYNC_REG": "TRUE"})
        cdc1 = Signal(init=self.init, name="cdc1", attrs={"ASYNC_REG": "TRUE"})
        m.d.sync += [cdc0.eq(self.i), cdc1.eq(cdc0)]
        m.d.comb += self.o.eq(cdc1)
        return m


class Stretch(wiring.Component):
    """Pulse stretcher for an LED: ``o`` is high from the cycle after a cycle with ``i`` high
    until ``cycles`` cycles after the last such cycle, so that single-cycle events stay visible.

    Parameters
    ----------
    cycles : int
        Length of the stretched pulse in cycles of the ``sync`` domain (1 or more).
    """

    def __init__(self, cycles):
        if not isinstance(cycles, int) or isinstance(cycles, bool) or cycles < 1:
            raise ValueError(f"cycles must be a positive integer, not {cycles!r}")
        self.cycles = cycles
        super().__init__({"i": In(1), "o": Out(1)})

    def elaborate(self, platform):
        m = Module()
        left = Signal(range(self.cycles + 1))
        with m.If(self.i):
            m.d.sync += left.eq(self.cycles)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        m.d.comb += self.o.eq(left != 0)
        return m


class StatsWatch(wiring.Component):
    """Watches a few counters of a statistics read port (``stats_addr`` in, ``stats_data`` out
    one cycle later, as :class:`~rocegen.gateware.roce.endpoint.RoceEndpoint` has) and reports
    which of them changed.

    The watcher drives ``stats_addr`` and reads the counters in turn, one per cycle, round robin
    over every address of every group. It keeps the last value read of each; ``changed[g]`` is
    high for one cycle when a counter of group ``g`` is read with a value other than the one read
    before (the first reading after reset compares against 0, the counters' value after reset).
    A counter is thus looked at every ``N`` cycles (``N`` = number of watched addresses), which
    is fine for LEDs; counting bursts of events between two readings is not its purpose.

    Parameters
    ----------
    groups : sequence of sequences of int
        Counter addresses per group (a counter may not appear twice).
    addr_shape : shape
        Shape of ``stats_addr`` (that of the read port it drives).
    data_width : int
        Width of ``stats_data``.
    shared : bool
        The read port is shared with other logic (a register block): the watcher gets the
        ``grant`` input and uses the port only in cycles where ``grant`` is high. In a cycle
        without it the watcher stays at its counter and ignores ``stats_data`` of the next
        cycle, so it never compares a value read for someone else.

    Ports
    -----
    ``stats_addr`` : ``Out(addr_shape)``, ``stats_data`` : ``In(data_width)``, ``changed`` :
    ``Out(len(groups))``; with ``shared``, ``grant`` : ``In(1)``. Latency: a change is reported
    2 cycles after the address of the counter is driven (read latency plus the compare
    register), at most ``N + 2`` granted cycles after the counter changed.
    """

    def __init__(self, groups, addr_shape, data_width=32, *, shared=False):
        groups = [list(g) for g in groups]
        if not groups or any(not g for g in groups):
            raise ValueError("groups must be a non-empty list of non-empty address lists")
        flat = [a for g in groups for a in g]
        if any(not isinstance(a, int) or isinstance(a, bool) or a < 0 for a in flat):
            raise TypeError(f"counter addresses must be non-negative integers, not {flat!r}")
        if len(set(flat)) != len(flat):
            raise ValueError(f"a counter address appears twice in {groups!r}")
        self.groups = groups
        self.shared = bool(shared)
        self._addrs = flat
        self._group_of = [g for g, grp in enumerate(groups) for _ in grp]
        members = {
            "stats_addr": Out(addr_shape),
            "stats_data": In(data_width),
            "changed": Out(len(groups)),
        }
        if self.shared:
            members["grant"] = In(1)
        super().__init__(members)
        if max(flat) >= 1 << len(self.stats_addr):
            raise ValueError(f"counter address {max(flat)} does not fit stats_addr "
                             f"({len(self.stats_addr)} bits)")

    def elaborate(self, platform):
        m = Module()
        n = len(self._addrs)
        idx = Signal(range(n))                      # counter addressed this cycle
        idx_d = Signal(range(n))                    # counter whose value is on stats_data
        valid_d = Signal()                          # stats_data holds a counter (not after reset)
        addrs = Array(Const(a, len(self.stats_addr)) for a in self._addrs)
        masks = Array(Const(1 << g, len(self.groups)) for g in self._group_of)
        last = Array(Signal(len(self.stats_data), name=f"last{i}") for i in range(n))
        grant = self.grant if self.shared else 1
        m.d.comb += self.stats_addr.eq(addrs[idx])
        with m.If(grant):
            with m.If(idx == n - 1):
                m.d.sync += idx.eq(0)
            with m.Else():
                m.d.sync += idx.eq(idx + 1)
        m.d.sync += [idx_d.eq(idx), valid_d.eq(grant)]
        changed = Signal(len(self.groups))
        m.d.sync += changed.eq(0)
        with m.If(valid_d):
            m.d.sync += last[idx_d].eq(self.stats_data)
            with m.If(last[idx_d] != self.stats_data):
                m.d.sync += changed.eq(masks[idx_d])
        m.d.comb += self.changed.eq(changed)
        return m


class StatusLeds(wiring.Component):
    """The four status LEDs every board shows, plus a heartbeat of the core clock.

    Inputs (``link``, ``clear`` may be asynchronous: they are synchronized inside; the others
    are synchronous to ``sync``):

    ``link``
        The MAC's receive side is up (CMAC aligned / PCS block lock).
    ``qp_open``
        At least one QP is open.
    ``tx``, ``rx``
        A beat moved on the MAC transmit / receive port (one-cycle pulses).
    ``error``
        Something went wrong (one-cycle pulse): a bad frame, a bad ICRC, a NAK, a completion in
        error, a MAC underrun.
    ``clear``
        Clears the sticky error LED (a push button).

    Outputs: ``led_link``, ``led_qp``, ``led_traffic`` (each beat lights it for ``blink``
    cycles), ``led_error`` (sticky from the first error until ``clear`` or reset), and
    ``led_heartbeat``, which toggles every ``heartbeat`` cycles (it blinks while the core clock
    runs, so a dark core with a lit link LED means the core is held in reset).
    """

    def __init__(self, *, blink, heartbeat):
        for name, v in (("blink", blink), ("heartbeat", heartbeat)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive number of cycles, not {v!r}")
        self.blink = blink
        self.heartbeat = heartbeat
        super().__init__({
            "link": In(1), "qp_open": In(1), "tx": In(1), "rx": In(1), "error": In(1),
            "clear": In(1),
            "led_link": Out(1), "led_qp": Out(1), "led_traffic": Out(1), "led_error": Out(1),
            "led_heartbeat": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.link_sync = link_sync = LevelSync()
        m.submodules.clear_sync = clear_sync = LevelSync()
        m.d.comb += [link_sync.i.eq(self.link), clear_sync.i.eq(self.clear)]
        link, clear = link_sync.o, clear_sync.o
        m.submodules.traffic = traffic = Stretch(self.blink)
        m.d.comb += traffic.i.eq(self.tx | self.rx)
        err = Signal()
        with m.If(self.error):
            m.d.sync += err.eq(1)
        with m.Elif(clear):
            m.d.sync += err.eq(0)
        beat = Signal(range(self.heartbeat))
        toggle = Signal()
        with m.If(beat == self.heartbeat - 1):
            m.d.sync += [beat.eq(0), toggle.eq(~toggle)]
        with m.Else():
            m.d.sync += beat.eq(beat + 1)
        m.d.comb += [
            self.led_link.eq(link),
            self.led_qp.eq(self.qp_open),
            self.led_traffic.eq(traffic.o),
            self.led_error.eq(err),
            self.led_heartbeat.eq(toggle),
        ]
        return m


def _is_packet_layout(layout):
    return (isinstance(layout, data.StructLayout)
            and set(layout.members) == {"data", "keep", "last", "error", "meta"})


def tie_off(m, component, used):
    """Give every port of ``component`` not named in ``used`` a harmless constant: streams into
    it never offer a beat (``valid`` 0), streams out of it are always taken (``ready`` 1), other
    inputs are 0, other outputs are left unread. Returns the names tied off.

    Board tops use it for the core ports they do not connect (the user's work-request and
    memory-write ports, the generator's start port...), so that ports added to the core later
    are tied off too instead of being left undriven."""
    tied = []
    for name, member in component.signature.members.items():
        if name in used:
            continue
        port = getattr(component, name)
        if member.is_port:
            if member.flow == In:
                m.d.comb += port.eq(0)
        elif isinstance(member.signature, stream.Signature):
            if member.flow == In:
                m.d.comb += port.valid.eq(0)
            else:
                m.d.comb += port.ready.eq(1)
        else:
            raise TypeError(f"cannot tie off port {name!r} of {type(component).__name__}: "
                            f"{member.signature!r} is neither a plain port nor a stream")
        tied.append(name)
    return tied


def is_packet_stream(member):
    """Whether ``member`` (a signature member) is a packet stream
    (:func:`~rocegen.gateware.lib.stream.PacketSignature`)."""
    return (member.is_signature and isinstance(member.signature, stream.Signature)
            and _is_packet_layout(data.Layout.cast(member.signature.members["payload"].shape)))


def core_control(m, endpoint, *, mac, ip, watch_groups, axil):
    """The control and status side of a board top's endpoint, in module ``m``: the endpoint's
    addresses, the status LEDs' counter watcher and, with ``axil``, the AXI4-Lite register
    block. Returns ``(watch, regs, used)``: the :class:`StatsWatch` (submodule
    ``stats_watch``) of ``watch_groups``, the :class:`~rocegen.gateware.roce.regs.AxiLiteRegs`
    (submodule ``regs``; ``None`` without ``axil``) whose ``s_axil_*`` slave port the caller
    connects to a master, and the endpoint ports used here (for :func:`tie_off`).

    Without ``axil`` the addresses ``mac`` / ``ip`` are constants and the watcher has the
    statistics read port alone. With ``axil`` (the endpoint built with ``qp_info=True``) the
    register block drives the addresses (``mac`` / ``ip`` are their reset values) and owns the
    per-QP read ports; the statistics read port is shared: the block has it while it reads
    (``reading``), the watcher every other cycle (``grant``). Both only read, so neither
    disturbs traffic nor the other's values."""
    shape, width = endpoint.stats_addr.shape(), len(endpoint.stats_data)
    watch = m.submodules.stats_watch = StatsWatch(watch_groups, shape, width, shared=axil)
    used = {"local_mac", "local_ip", "stats_addr", "stats_data"}
    m.d.comb += watch.stats_data.eq(endpoint.stats_data)
    if not axil:
        m.d.comb += [endpoint.local_mac.eq(mac), endpoint.local_ip.eq(ip),
                     endpoint.stats_addr.eq(watch.stats_addr)]
        return watch, None, used
    if "qp_info_qp" not in endpoint.signature.members:
        raise ValueError("the register block reads the QP table: build the endpoint with "
                         "qp_info=True")
    regs = m.submodules.regs = AxiLiteRegs(endpoint.config, mac=mac, ip=ip, settings=True)
    members = endpoint.signature.members
    for name, member in regs.signature.members.items():
        if name.startswith("s_axil_") or name in ("reading", "stats_addr", "stats_data"):
            continue
        if member.is_signature:                     # tc_cfg, cc_cfg: the run-time settings
            wiring.connect(m, getattr(regs, name), getattr(endpoint, name))
            used.add(name)
        elif member.flow == Out:
            m.d.comb += getattr(endpoint, name).eq(getattr(regs, name))
            used.add(name)
        elif name in members:
            m.d.comb += getattr(regs, name).eq(getattr(endpoint, name))
            used.add(name)
        # a status the endpoint does not have (no generator, no connection manager) reads 0
    m.d.comb += [regs.stats_data.eq(endpoint.stats_data), watch.grant.eq(~regs.reading)]
    with m.If(regs.reading):
        m.d.comb += endpoint.stats_addr.eq(regs.stats_addr)
    with m.Else():
        m.d.comb += endpoint.stats_addr.eq(watch.stats_addr)
    return watch, regs, used
