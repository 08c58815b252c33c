"""An AXI4 memory slave for the Amaranth simulator: a byte array behind the AR/R channels (and
optionally AW/W/B) of a master built from :class:`rocegen.gateware.lib.axi.Axi4Signature` channels.

Features for benches: a fixed read latency (cycles from an AR handshake to the first R beat
the slave may offer), many bursts in flight, random AR and R stalls, error responses for chosen
address ranges, and a record of every burst. Protocol rules the master must keep are asserted:
INCR bursts of the full word size that do not cross a 4 KiB boundary, stable AR/AW payloads while
their ``valid`` waits, and W beats matching the AW bursts.
"""

import random
from dataclasses import dataclass

__all__ = ["AxiRam", "Burst", "RESP_OKAY", "RESP_EXOKAY", "RESP_SLVERR", "RESP_DECERR"]

RESP_OKAY, RESP_EXOKAY, RESP_SLVERR, RESP_DECERR = 0, 1, 2, 3
_BURST_INCR = 1


@dataclass
class Burst:
    """One burst as the slave accepted it."""
    addr: int
    beats: int
    id: int
    cycle: int          # cycle of the address handshake (counted from 0 at the start)


class AxiRam:
    """A memory of ``size`` bytes behind an AXI4 slave port ``width`` bits wide.

    ``ar``/``r`` (and ``aw``/``w``/``b`` when given) are the master's channel interfaces (the
    slave drives ``ar.ready``, ``r.valid``, ``r.payload``...). ``mem`` is the backing
    ``bytearray``, byte ``a`` at byte address ``a``; word ``k`` is bytes ``k*W/8 ..`` with byte 0
    in lane 0, as on AXI.

    * ``latency``: an accepted read burst offers its first beat ``latency`` cycles after its AR
      handshake at the earliest (1: in the next cycle); later bursts follow back to back.
    * ``ar_stall`` / ``r_stall``: chance per cycle that ``arready`` is low / that a beat ready to
      go is held back (a beat once offered stays offered until taken, as AXI requires).
    * ``max_bursts``: read bursts accepted but not finished at most (``arready`` low beyond).
    * ``error_ranges``: ``(start, end)`` byte ranges; beats reading a word that overlaps one
      answer SLVERR (zero data). Beats outside the memory answer DECERR.
    * ``bursts`` records every read burst, ``max_in_flight`` the most read bursts accepted and
      not yet finished, ``max_beats_in_flight`` the most beats of those not yet sent,
      ``write_bursts`` every write burst.
    """

    def __init__(self, width, size, *, ar, r, aw=None, w=None, b=None, latency=1, ar_stall=0.0,
                 r_stall=0.0, max_bursts=None, error_ranges=(), seed=0, mem=None):
        if width % 8 or width < 8:
            raise ValueError(f"width must be a whole number of bytes, not {width}")
        if latency < 1:
            raise ValueError(f"latency must be at least 1 cycle, not {latency}")
        if (aw is None) != (w is None) or (aw is None) != (b is None):
            raise ValueError("the write channels aw, w and b go together")
        self.width = width
        self.lanes = width // 8
        self.size_log2 = self.lanes.bit_length() - 1
        self.mem = bytearray(size) if mem is None else mem
        if len(self.mem) != size:
            raise ValueError(f"backing memory of {len(self.mem)} bytes for a {size}-byte slave")
        self.ar, self.r, self.aw, self.w, self.b = ar, r, aw, w, b
        self.latency = latency
        self.ar_stall = ar_stall
        self.r_stall = r_stall
        self.max_bursts = max_bursts
        self.error_ranges = list(error_ranges)
        self.rng = random.Random(seed)
        self.bursts = []
        self.write_bursts = []
        self.max_in_flight = 0
        self.max_beats_in_flight = 0
        self.beats_read = 0

    @classmethod
    def on_bus(cls, bus, width, size, **kwargs):
        """A slave on all five channels of ``bus``, an :class:`Axi4Signature` interface."""
        return cls(width, size, ar=bus.ar, r=bus.r, aw=bus.aw, w=bus.w, b=bus.b, **kwargs)

    # --- memory access --------------------------------------------------------------------------

    def write(self, addr, data):
        self.mem[addr:addr + len(data)] = data

    def read(self, addr, length):
        return bytes(self.mem[addr:addr + length])

    def _resp(self, addr):
        if addr + self.lanes > len(self.mem):
            return RESP_DECERR
        for start, end in self.error_ranges:
            if addr < end and start < addr + self.lanes:
                return RESP_SLVERR
        return RESP_OKAY

    def _check_burst(self, what, a):
        addr, beats = int(a.addr), int(a.len) + 1
        assert int(a.burst) == _BURST_INCR, f"{what}: burst type {int(a.burst)}, not INCR"
        assert int(a.size) == self.size_log2, \
            f"{what}: size {int(a.size)}, not the full {self.lanes}-byte word"
        assert addr % self.lanes == 0, f"{what}: address {addr:#x} not word aligned"
        assert addr // 4096 == (addr + beats * self.lanes - 1) // 4096, \
            f"{what}: burst of {beats} beats at {addr:#x} crosses a 4 KiB boundary"
        return addr, beats

    # --- the slave --------------------------------------------------------------------------------

    async def run(self, ctx):
        """The slave's process (add it with ``processes=[ram.run]``)."""
        reads = []              # [Burst, beats sent]
        r_offer = None          # the R payload offered, if any
        writes = []             # write bursts waiting for their data: [Burst, beats taken]
        b_queue = []            # ids of finished write bursts, for B
        ar_held = aw_held = None
        cycle = 0
        has_write = self.aw is not None
        while True:
            # drive this cycle's outputs
            ar_ready = (not (self.ar_stall and self.rng.random() < self.ar_stall)
                        and (self.max_bursts is None or len(reads) < self.max_bursts))
            ctx.set(self.ar.ready, ar_ready)
            if r_offer is None and reads:
                burst, sent = reads[0]
                if (cycle >= burst.cycle + self.latency
                        and not (self.r_stall and self.rng.random() < self.r_stall)):
                    addr = burst.addr + sent * self.lanes
                    resp = self._resp(addr)
                    data = int.from_bytes(self.read(addr, self.lanes), "little") \
                        if resp == RESP_OKAY else 0
                    r_offer = {"id": burst.id, "data": data, "resp": resp,
                               "last": int(sent + 1 == burst.beats)}
            ctx.set(self.r.valid, r_offer is not None)
            if r_offer is not None:
                ctx.set(self.r.payload, r_offer)
            if has_write:
                ctx.set(self.aw.ready, not (self.ar_stall and self.rng.random() < self.ar_stall))
                ctx.set(self.w.ready, bool(writes))
                b_offered = bool(b_queue)
                ctx.set(self.b.valid, b_offered)
                if b_offered:
                    ctx.set(self.b.payload, {"id": b_queue[0], "resp": RESP_OKAY})
                sampled = await ctx.tick().sample(
                    self.ar.valid, self.ar.payload, self.r.ready, self.aw.valid, self.aw.payload,
                    self.aw.ready, self.w.valid, self.w.payload, self.w.ready, self.b.ready)
                (_, _, ar_valid, ar_p, r_ready, aw_valid, aw_p, aw_ready, w_valid, w_p, w_ready,
                 b_ready) = sampled
            else:
                _, _, ar_valid, ar_p, r_ready = await ctx.tick().sample(
                    self.ar.valid, self.ar.payload, self.r.ready)

            now, cycle = cycle, cycle + 1       # the handshakes below happened in cycle ``now``
            # read address
            if ar_valid:
                if ar_held is not None:
                    assert ar_p.as_value().value == ar_held, "AR payload changed while waiting"
                ar_held = ar_p.as_value().value
                if ar_ready:
                    addr, beats = self._check_burst("AR", ar_p)
                    burst = Burst(addr, beats, int(ar_p.id), now)
                    self.bursts.append(burst)
                    reads.append([burst, 0])
                    self.max_in_flight = max(self.max_in_flight, len(reads))
                    self.max_beats_in_flight = max(self.max_beats_in_flight,
                                                   sum(b.beats - sent for b, sent in reads))
                    ar_held = None
            else:
                assert ar_held is None, "AR valid dropped before its handshake"
            # read data
            if r_offer is not None and r_ready:
                r_offer = None
                self.beats_read += 1
                reads[0][1] += 1
                if reads[0][1] == reads[0][0].beats:
                    reads.pop(0)
            if not has_write:
                continue
            # write address
            if aw_valid:
                if aw_held is not None:
                    assert aw_p.as_value().value == aw_held, "AW payload changed while waiting"
                aw_held = aw_p.as_value().value
                if aw_ready:
                    addr, beats = self._check_burst("AW", aw_p)
                    burst = Burst(addr, beats, int(aw_p.id), now)
                    self.write_bursts.append(burst)
                    writes.append([burst, 0])
                    aw_held = None
            else:
                assert aw_held is None, "AW valid dropped before its handshake"
            # write data
            if w_valid and w_ready:
                burst, taken = writes[0]
                addr = burst.addr + taken * self.lanes
                strb = int(w_p.strb)
                word = int(w_p.data).to_bytes(self.lanes, "little")
                if addr + self.lanes <= len(self.mem):
                    for i in range(self.lanes):
                        if strb >> i & 1:
                            self.mem[addr + i] = word[i]
                writes[0][1] += 1
                assert bool(w_p.last) == (writes[0][1] == burst.beats), \
                    f"WLAST wrong on beat {taken} of a {burst.beats}-beat burst"
                if writes[0][1] == burst.beats:
                    writes.pop(0)
                    b_queue.append(burst.id)
            # write response
            if b_offered and b_ready:
                b_queue.pop(0)
