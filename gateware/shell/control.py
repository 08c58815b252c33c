"""How a board top drives the core: its addresses, the counter watcher of the status LEDs, the
AXI4-Lite register block, and the tie-off of the ports a board leaves unused."""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.endpoint.regs import AxiLiteRegs
from rocegen.gateware.shell.stats_watch import StatsWatch

__all__ = ["cycles_for", "tie_off", "core_control"]


def cycles_for(seconds, clock_hz):
    """Whole clock cycles in ``seconds`` at ``clock_hz`` (at least 1)."""
    if not isinstance(clock_hz, (int, float)) or isinstance(clock_hz, bool) or clock_hz <= 0:
        raise ValueError(f"clock frequency must be a positive number of Hz, not {clock_hz!r}")
    return max(1, round(seconds * clock_hz))


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


def core_control(m, endpoint, *, mac, ip, watch_groups, axil):
    """The control and status side of a board top's endpoint, in module ``m``: the endpoint's
    addresses, the status LEDs' counter watcher and, with ``axil``, the AXI4-Lite register
    block. Returns ``(watch, regs, used)``: the :class:`StatsWatch` (submodule
    ``stats_watch``) of ``watch_groups``, the :class:`~rocegen.gateware.roce.endpoint.regs.AxiLiteRegs`
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
