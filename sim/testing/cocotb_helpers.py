"""Pieces shared by the cocotb testbenches (they run inside the simulator process)."""

from cocotb.triggers import ClockCycles, RisingEdge
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocegen.gateware.net.stack import STATS
from rocegen.sim.models.net.netstack import normalise

__all__ = ["pauses", "frame_bytes", "read_stats", "read_settled_stats", "compare_responses"]


def pauses(rng, p):
    """Pause generator for cocotbext-axi sources and sinks: paused with probability ``p``."""
    while True:
        yield int(rng.random() < p)


def frame_bytes(f):
    """The bytes of an ``AxiStreamFrame`` that its ``tkeep`` marks."""
    if f.tkeep:
        return bytes(b for b, k in zip(f.tdata, f.tkeep) if k)
    return bytes(f.tdata)


async def read_stats(dut, names=STATS, *, block=None):
    """Counters of a statistics block (``stats_addr``/``stats_data``) by name: ``names`` (by
    default every counter of the stack's block), each read at its address in ``block``, the
    block's whole list of counter names in address order (by default ``names`` itself)."""
    block = list(names if block is None else block)
    values = {}
    for name in names:
        if name not in block:
            raise ValueError(f"{name!r} is not a counter of the block")
        dut.stats_addr.value = block.index(name)
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        values[name] = int(dut.stats_data.value)
    return values


async def read_settled_stats(dut, names=STATS, *, block=None, max_reads=1000):
    """:func:`read_stats` once the counters have stopped moving: read again until two
    reads in a row agree. The counters are read one after another, so a request still on its
    way through the endpoint could be counted in one counter read late and not in another read
    early; two equal reads in a row are the values of one moment (each counter held still from
    its first read to its second, and those intervals overlap). Raises ``AssertionError`` after
    ``max_reads`` reads without two equal ones."""
    last = await read_stats(dut, names, block=block)
    for _ in range(max_reads):
        now = await read_stats(dut, names, block=block)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the counters {list(names)} kept moving over {max_reads} reads")


def _kind(frame):
    return frame[12:14] + (frame[23:24] if frame[12:14] == b"\x08\x00" else b"")


def compare_responses(expected, got):
    """Assert that the endpoint's responses ``got`` are the model's ``expected`` ones. ARP
    replies and IP replies take different paths, so they are compared per kind (EtherType and
    IP protocol), in order within a kind, after :func:`normalise`; scapy must also agree that
    every UDP datagram's lengths are consistent."""
    exp_n = [normalise(x) for x in expected]
    got_n = [normalise(x) for x in got]
    for k in {_kind(x) for x in exp_n + got_n}:
        e = [x for x in exp_n if _kind(x) == k]
        g = [x for x in got_n if _kind(x) == k]
        assert g == e, f"responses of kind {k.hex()} differ: {len(g)} vs {len(e)} frames"
        for x in g:
            p = Ether(x)
            if p.haslayer(UDP):
                assert p[UDP].len == p[IP].len - 20 <= len(p[IP])


async def read_qp_stats(dut, qp, names, only=None):
    """The per-QP counters of QP ``qp`` (``qp_stats_qp`` / ``qp_stats_sel`` /
    ``qp_stats_data``), by name: ``names`` lists every counter in address order (for example
    ``endpoint.QP_COUNTERS``), ``only`` the ones to read (default all)."""
    values = {}
    dut.qp_stats_qp.value = qp
    for k, name in enumerate(names):
        if only is not None and name not in only:
            continue
        dut.qp_stats_sel.value = k
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        values[name] = int(dut.qp_stats_data.value)
    return values


class Capture:
    """The cocotb side of a :class:`~rocegen.sim.testing.capture.StreamCapture` ring: ``ring`` is the
    ring's instance under the top (for example ``dut.mac_cap``), ``count`` and ``rd`` its top
    level ports, ``fields`` the (name, bits) of an entry's payload in bit order.

    :meth:`take` reads every entry written since the last call (one VPI read per entry) and
    hands the ring its new read pointer, so the ring never fills while its reader keeps up with
    the frames: it is called whenever ``count`` or the frame counter changed, never per cycle.
    """

    def __init__(self, ring, count, rd, fields, depth):
        self.mem = ring.cap_mem
        self.count = count
        self.rd = rd
        self.depth = depth
        self.fields = []
        at = 0
        for name, bits in fields:
            self.fields.append((name, at, (1 << bits) - 1))
            at += bits
        self.cycle_at = at
        self._next = int(count.value)
        rd.value = self._next & 0xFFFF_FFFF

    def take(self):
        """The new entries: a list of dicts of the payload's fields plus ``cycle`` (the value of
        the ring's cycle counter at the entry's handshake)."""
        end = int(self.count.value)
        out = []
        n = (end - self._next) & 0xFFFF_FFFF
        if n > self.depth:
            raise AssertionError(f"capture ring overrun: {n} entries unread, {self.depth} held")
        for k in range(n):
            raw = self.mem[(self._next + k) % self.depth].value.to_unsigned()
            entry = {name: (raw >> at) & mask for name, at, mask in self.fields}
            entry["cycle"] = raw >> self.cycle_at
            out.append(entry)
        self._next = end
        self.rd.value = end
        return out
