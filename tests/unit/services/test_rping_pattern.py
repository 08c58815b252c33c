"""The words of rping's ping buffer in gateware (:class:`RpingPattern`, with the text and letter
helpers a fill or a check steps with) against ``ping_data`` of the rping model, byte for byte:
pings whose numbers have one to five digits (9 -> 10, 99999 the last), sizes from rping's
smallest, at W = 64 and 512 (the five-digit numbers at one of them)."""

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.services.rping_layouts import RPING_TEXT
from rocegen.gateware.roce.services.rping_pattern import (
    RpingPattern,
    first_letter,
    next_letter,
    next_text,
)
from rocegen.sim.models.services.rping import ping_data
from rocegen.sim.testing.harness import raises, run_sim
from tests.tiers import full


class Stepper(wiring.Component):
    """The pattern with a text register stepped to the next ping (``step``) and the letter
    of the word (``letter`` from the first word's, stepped with ``advance``)."""

    def __init__(self, width, size):
        self.pattern = RpingPattern(width, size)
        super().__init__({"step": In(1), "restart": In(1), "advance": In(1),
                          "word": In(range(self.pattern.words)), "data": Out(width),
                          "be": Out(width // 8), "number": Out(17)})

    def elaborate(self, platform):
        m = Module()
        p = m.submodules.p = self.pattern
        text, new = Signal(RPING_TEXT, init={"nd": 1}), Signal(RPING_TEXT)
        letter = Signal(6)
        next_text(m, text, new)
        with m.If(self.step):
            m.d.sync += text.eq(new)
        with m.If(self.restart):
            m.d.sync += letter.eq(first_letter(m, text))
        with m.Elif(self.advance):
            m.d.sync += letter.eq(next_letter(letter, self.pattern.width))
        m.d.comb += [p.text.eq(text), p.word.eq(self.word), p.letter.eq(letter),
                     self.data.eq(p.data), self.be.eq(p.be)]
        return m


def _number(text):
    return sum(int(text.digits[k]) * 10 ** k for k in range(5))


@pytest.mark.parametrize("width,size", [(64, 26), (64, 100), (512, 26), (512, 4096),
                                        full(128, 65535), full(256, 1000)])
def test_every_word_of_every_ping_is_rpings(width, size):
    dut = Stepper(width, size)
    nbytes = width // 8
    pings = [0, 1, 2, 9, 10, 57, 58, 99, 100, 999, 1000]
    if (width, size) == (64, 26):   # (the numbers up to five digits, stepped 100k times)
        pings += [9999, 10000, 99998, 99999]

    async def bench(ctx):
        ping = 0
        for want in pings:
            while ping < want:      # (the text steps one ping at a time)
                ctx.set(dut.step, 1)
                await ctx.tick()
                ping += 1
            ctx.set(dut.step, 0)
            ctx.set(dut.restart, 1)
            await ctx.tick()
            ctx.set(dut.restart, 0)
            exp = ping_data(ping, size)
            for w in range(dut.pattern.words):
                ctx.set(dut.word, w)
                got = ctx.get(dut.data).to_bytes(nbytes, "little")
                be = ctx.get(dut.be)
                chunk = exp[w * nbytes:(w + 1) * nbytes]
                assert be == (1 << len(chunk)) - 1, (ping, w, be)
                assert got[:len(chunk)] == chunk, (ping, w, got, chunk)
                ctx.set(dut.advance, 1)
                await ctx.tick()
                ctx.set(dut.advance, 0)

    # (the steps between pings: 100k cycles, only where the numbers grow a digit)
    run_sim(dut, testbenches=[bench], deadline_cycles=None)


def test_bad_size():
    raises(ValueError, r"size must be an integer 26\.\.65535", lambda: RpingPattern(64, 25))
    raises(ValueError, r"width", lambda: RpingPattern(48, 100))
