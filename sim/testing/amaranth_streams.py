"""Drive and collect packet streams in the Amaranth simulator, with random idle cycles and
random backpressure."""

import enum
import random

from amaranth.lib import data

from rocegen.sim.models.packets import Packet, from_beats, to_beats

__all__ = ["StreamDriver", "StreamCollector", "HandshakeMonitor", "OfferMonitor", "meta_dict",
           "delivery_watchdog",
           "send_records",
           "write_word", "mem_write_watcher"]


def meta_dict(value):
    """A sampled ``data.Const`` of a StructLayout -> nested ``dict`` of ints (enumeration
    fields as their integer values)."""
    if isinstance(value, data.Const):
        return {name: meta_dict(value[name]) for name in value.shape().members}
    if isinstance(value, enum.Enum):
        return int(value.value)
    return int(value)


class StreamDriver:
    """Sends :class:`Packet` s on a packet stream. ``idle`` is the chance of an idle cycle
    before each beat (``gaps="anywhere"``) or only before each packet's first beat
    (``gaps="between"``, for sinks such as a MAC transmitter that must not starve mid-packet)."""

    def __init__(self, stream, width, *, idle=0.0, seed=0, gaps="anywhere"):
        if gaps not in ("anywhere", "between"):
            raise ValueError(f"gaps must be 'anywhere' or 'between', not {gaps!r}")
        self.stream = stream
        self.width = width
        self.idle = idle
        self.gaps = gaps
        self.rng = random.Random(seed)

    async def send(self, ctx, packets):
        for pkt in packets:
            beats = to_beats(pkt.data, self.width)
            for n, (d, keep, last) in enumerate(beats):
                may_idle = n == 0 or self.gaps == "anywhere"
                while may_idle and self.idle and self.rng.random() < self.idle:
                    ctx.set(self.stream.valid, 0)
                    await ctx.tick()
                ctx.set(self.stream.payload, {
                    "data": d, "keep": keep, "last": last,
                    "error": int(pkt.error and bool(last)), "meta": pkt.meta,
                })
                ctx.set(self.stream.valid, 1)
                await ctx.tick().until(self.stream.ready)
        ctx.set(self.stream.valid, 0)


class StreamCollector:
    """Receives packets from a packet stream; ``backpressure`` is the chance that ``ready`` is
    low in a cycle. Records the cycle of every accepted beat in ``beat_cycles``, per packet the
    cycles of its first and last beats in ``spans``, and in ``starved`` the cycles it was
    ready inside a packet (after its first beat, before its last) without a beat: what a MAC
    that must send a frame without a pause would have underrun on."""

    def __init__(self, stream, width, *, backpressure=0.0, seed=1):
        self.stream = stream
        self.width = width
        self.backpressure = backpressure
        self.rng = random.Random(seed)
        self.packets = []
        self.beat_cycles = []
        self.spans = []
        self.starved = 0
        self.cycle = 0
        self._first = None
        self._beats = []
        self._meta = None

    async def run(self, ctx):
        s = self.stream
        while True:
            ready = not (self.backpressure and self.rng.random() < self.backpressure)
            ctx.set(s.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(s.valid, s.payload)
            self.cycle += 1
            if not (valid and ready):
                self.starved += bool(ready and self._beats)
                continue
            self.beat_cycles.append(self.cycle)
            if not self._beats:
                self._first = self.cycle
            meta = meta_dict(payload.meta)
            if self._beats and meta != self._meta:
                raise AssertionError(f"meta changed inside a packet: {self._meta} -> {meta}")
            self._meta = meta
            self._beats.append((payload.data, payload.keep, payload.last))
            if payload.last:
                self.packets.append(Packet(from_beats(self._beats, self.width), meta,
                                           bool(payload.error)))
                self.spans.append((self._first, self.cycle))
                self._beats = []


class HandshakeMonitor:
    """Records the cycle of every beat that moves on ``stream`` (``valid`` and ``ready`` high),
    counted like :class:`StreamCollector` counts its cycles, so the two can be compared;
    ``last_only``: of a packet stream's last beats only."""

    def __init__(self, stream, *, last_only=False):
        self.stream = stream
        self.last_only = last_only
        self.cycles = []

    async def run(self, ctx):
        s = self.stream
        cycle = 0
        last = s.payload.last if self.last_only else s.valid
        async for _, _, v, r, end in ctx.tick().sample(s.valid, s.ready, last):
            cycle += 1
            if v and r and end:
                self.cycles.append(cycle)


class OfferMonitor:
    """Checks the stream rule on packet stream ``stream``: a beat offered (``valid``) and not
    taken (``ready`` low) is offered again in the next cycle, its data, ``keep``, ``last`` and
    ``error`` unchanged. Raises on the first cycle that breaks it; ``held`` counts the cycles
    a beat was held over, so that a test can show the rule was exercised."""

    def __init__(self, stream):
        self.stream = stream
        self.held = 0

    async def run(self, ctx):
        s = self.stream
        pending = None
        cycle = 0
        while True:
            # (awaited one tick at a time: an assertion raised inside ``async for`` over
            # ``sample`` would surface as the generator's error, not as this one)
            _, _, v, r, d, k, last, err = await ctx.tick().sample(
                s.valid, s.ready, s.payload.data, s.payload.keep, s.payload.last,
                s.payload.error)
            cycle += 1
            beat = (d, k, last, err)
            if pending is not None:
                if not v or beat != pending:
                    raise AssertionError(f"cycle {cycle}: a beat offered and not taken was "
                                         f"{'withdrawn' if not v else 'changed'}")
                self.held += 1
            pending = beat if v and not r else None


def delivery_watchdog(col, count, sent, deadline):
    """A testbench that waits until ``col`` (a :class:`StreamCollector`) holds ``count``
    packets and ``sent()`` (the packets the input has taken) is ``count``, then 5 cycles more;
    an ``AssertionError`` after ``deadline`` cycles. For a block that may drop packets or parts
    of them, whose input's progress the caller counts."""
    async def watchdog(ctx):
        for _ in range(deadline):
            if len(col.packets) >= count and sent() == count:
                break
            await ctx.tick()
        else:
            raise AssertionError(f"{sent()} of {count} sent, {len(col.packets)} received "
                                 f"after {deadline} cycles")
        await ctx.tick().repeat(5)
    return watchdog


async def send_records(ctx, port, records, rng=None, idle=0.0):
    """Send ``records`` (payload values) one per transfer on the record stream ``port``, with
    chance ``idle`` of an idle cycle before each (``rng`` draws it)."""
    for record in records:
        while idle and rng.random() < idle:
            ctx.set(port.valid, 0)
            await ctx.tick()
        ctx.set(port.payload, record)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


def write_word(image, width, write):
    """Apply a word write (``addr`` in words, ``data``, byte enables ``be``; lane 0 at the
    lowest address) of a ``width``-bit memory to the bytearray ``image``."""
    B = width // 8
    for lane in range(B):
        if write.be >> lane & 1:
            image[write.addr * B + lane] = write.data >> 8 * lane & 0xFF


def mem_write_watcher(port, image, width):
    """A process that applies every word write ``port`` (a memory write stream: ``addr``,
    ``data``, ``be``) transfers to ``image`` (it only watches: ``ready`` is driven elsewhere)."""
    async def watch(ctx):
        async for _, _, valid, ready, w in ctx.tick().sample(port.valid, port.ready,
                                                             port.payload):
            if valid and ready:
                write_word(image, width, w)
    return watch
