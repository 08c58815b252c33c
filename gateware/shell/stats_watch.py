"""Watcher of a few statistics counters, for the status LEDs."""

from amaranth.hdl import Array, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StatsWatch"]


class StatsWatch(wiring.Component):
    """Watches a few counters of a statistics read port (``stats_addr`` in, ``stats_data`` out
    one cycle later, as :class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` has) and reports
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
