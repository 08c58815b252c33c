"""An AXI4 write slave for the Amaranth simulator that tells the data written from the data
acknowledged: a byte array behind the AW/W/B channels of a master built from
:class:`rocegen.gateware.lib.axi.Axi4Signature` channels.

As a DDR4 controller behaves for the benches: write responses come back in order a random
number of cycles after a burst's data (``b_latency``), ``awready``/``wready`` drop at random
(``aw_stall``/``w_stall``), a response due may be held back (``b_stall``). ``mem`` holds every
byte written (as W beats are taken); ``acked`` holds only the bytes of bursts whose write
response the master has taken, which is what a reader may rely on. Protocol rules the master
must keep are asserted: INCR bursts of the full word size that do not cross a 4 KiB boundary,
AW payloads stable and ``awvalid`` held while waiting, WLAST on a burst's last beat only. A
response once offered stays offered until taken (``bready``), as AXI requires of the slave.
"""

import random

from rocegen.sim.models.memory.axi_ram import Burst

__all__ = ["AxiWriteMemory"]

_BURST_INCR = 1


class AxiWriteMemory:
    """A ``size``-byte memory behind the write channels ``aw``, ``w``, ``b`` (the master's
    interfaces: the slave drives ``aw.ready``, ``w.ready``, ``b.valid``, ``b.payload``) of a
    ``width``-bit AXI4 port. Byte ``a`` at byte address ``a``; word ``k`` is bytes
    ``k*W/8 ..``, byte 0 in lane 0.

    * ``b_latency``: ``(lo, hi)`` cycles from the cycle a burst has both its address and its
      last data beat to the first cycle its response may be offered (random, at least 1;
      responses never overtake one another).
    * ``aw_stall`` / ``w_stall`` / ``b_stall``: chance per cycle that ``awready`` / ``wready``
      is low / that a due response is held back one more cycle.
    * ``on_ack(cycle, burst)``: called after each response is taken, ``acked`` updated.
    * ``write_bursts``: every burst as accepted; ``responses``: ``(cycle, burst)`` per response
      taken; ``max_unacked``: the most bursts accepted and not yet answered.
    """

    def __init__(self, width, size, *, aw, w, b, b_latency=(1, 1), aw_stall=0.0, w_stall=0.0,
                 b_stall=0.0, seed=0, on_ack=None):
        if width % 8 or width < 8:
            raise ValueError(f"width must be a whole number of bytes, not {width}")
        lo, hi = b_latency
        if not 1 <= lo <= hi:
            raise ValueError(f"b_latency must be (lo, hi) with 1 <= lo <= hi, not {b_latency}")
        self.width, self.lanes = width, width // 8
        self.size_log2 = self.lanes.bit_length() - 1
        self.mem = bytearray(size)
        self.acked = bytearray(size)
        self.aw, self.w, self.b = aw, w, b
        self.b_latency = b_latency
        self.aw_stall, self.w_stall, self.b_stall = aw_stall, w_stall, b_stall
        self.rng = random.Random(seed)
        self.on_ack = on_ack
        self.write_bursts = []
        self.responses = []
        self.max_unacked = 0

    def _check_burst(self, a):
        addr, beats = int(a.addr), int(a.len) + 1
        assert int(a.burst) == _BURST_INCR, f"AW: burst type {int(a.burst)}, not INCR"
        assert int(a.size) == self.size_log2, \
            f"AW: size {int(a.size)}, not the full {self.lanes}-byte word"
        assert addr % self.lanes == 0, f"AW: address {addr:#x} not word aligned"
        assert addr // 4096 == (addr + beats * self.lanes - 1) // 4096, \
            f"AW: burst of {beats} beats at {addr:#x} crosses a 4 KiB boundary"
        return addr, beats

    def _ack(self, burst):
        end = min(burst.addr + burst.beats * self.lanes, len(self.mem))
        self.acked[burst.addr:end] = self.mem[burst.addr:end]

    async def run(self, ctx):
        """The slave's process (add it with ``processes=[model.run]``)."""
        bursts = []             # address taken, data not complete: [Burst, beats taken]
        beats = []              # W beats taken ahead of their burst's address
        answers = []            # [due cycle, Burst], in order
        unacked = 0
        aw_held = None
        offer = False
        cycle = 0
        while True:
            ctx.set(self.aw.ready, not (self.aw_stall and self.rng.random() < self.aw_stall))
            ctx.set(self.w.ready, not (self.w_stall and self.rng.random() < self.w_stall))
            offer = offer or (bool(answers) and answers[0][0] <= cycle and
                              not (self.b_stall and self.rng.random() < self.b_stall))
            ctx.set(self.b.valid, offer)
            if offer:
                ctx.set(self.b.payload, {"id": answers[0][1].id, "resp": 0})
            _, _, aw_v, aw_r, aw_p, w_v, w_r, w_p, b_r = await ctx.tick().sample(
                self.aw.valid, self.aw.ready, self.aw.payload, self.w.valid, self.w.ready,
                self.w.payload, self.b.ready)
            now, cycle = cycle, cycle + 1
            if aw_v:
                value = aw_p.as_value().value
                assert aw_held is None or aw_held == value, "AW payload changed while waiting"
                aw_held = value
                if aw_r:
                    addr, n = self._check_burst(aw_p)
                    burst = Burst(addr, n, int(aw_p.id), now)
                    self.write_bursts.append(burst)
                    bursts.append([burst, 0])
                    unacked += 1
                    self.max_unacked = max(self.max_unacked, unacked)
                    aw_held = None
            else:
                assert aw_held is None, "AW valid dropped before its handshake"
            if w_v and w_r:
                beats.append((int(w_p.data), int(w_p.strb), int(w_p.last)))
            # W beats written in order into the bursts whose addresses came
            while bursts and beats:
                burst, k = bursts[0]
                data, strb, last = beats.pop(0)
                assert last == (k == burst.beats - 1), \
                    f"WLAST {last} on beat {k} of a {burst.beats}-beat burst"
                addr = burst.addr + k * self.lanes
                word = data.to_bytes(self.lanes, "little")
                for j in range(self.lanes):
                    if strb >> j & 1 and addr + j < len(self.mem):
                        self.mem[addr + j] = word[j]
                bursts[0][1] += 1
                if k == burst.beats - 1:
                    bursts.pop(0)
                    due = now + self.rng.randint(*self.b_latency)
                    answers.append([max(due, answers[-1][0]) if answers else due, burst])
            if offer and b_r:
                offer = False
                burst = answers.pop(0)[1]
                unacked -= 1
                self._ack(burst)
                self.responses.append((now, burst))
                if self.on_ack is not None:
                    self.on_ack(now, burst)
