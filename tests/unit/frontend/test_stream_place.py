"""Ring placement of the streaming front end, driven as the front end drives it (messages
stored for a few cycles, then held until completed in order): a message granted room never
wraps, never lands on a word of a message still held and never exceeds the in-flight limit;
placement follows on from the previous message; an idle empty ring restarts at word 0."""

import random

import pytest

from rocegen.gateware.roce.frontend.stream_place import RingPlacer
from rocegen.sim.testing.harness import raises, run_sim


@pytest.mark.parametrize("eager", [0.5, 0.95])
@pytest.mark.parametrize("ring_words,message_words,max_inflight", [
    (64, 8, 4), (100, 7, 16), (40, 20, 2), (1000, 64, 8), (16, 16, 1), (70, 10, 64)])
def test_placement_properties(ring_words, message_words, max_inflight, eager):
    """``eager``: the chance a message begins as soon as there is room, and that it is of the
    largest size."""
    R, M, N = ring_words, message_words, max_inflight
    rng = random.Random(R + M + int(100 * eager))
    dut = RingPlacer(R, M, N)
    seen = {"placed": 0, "wrapped": 0, "restarts": 0}

    async def tb(ctx):
        held = []               # [start, words written, words held, commit cycle, done cycle]
        current = None          # the message being stored: [start, skip, words, cycles left]
        last_end = 0
        idle = pause = 0        # pause: cycles without a new message (the ring drains)
        for cycle in range(6000):
            pause = max(0, pause - 1) if pause or rng.random() > 0.01 else 40
            # what the space counts show in this cycle: commits from two cycles before on,
            # completions from the cycle after
            counted = [h for h in held if h[3] <= cycle - 2 and (h[4] is None or h[4] >= cycle)]
            ctx.set(dut.used, sum(h[2] for h in counted))
            ctx.set(dut.inflight, len(counted))
            start, skip, room = ctx.get(dut.start), ctx.get(dut.skip), ctx.get(dut.room)
            live = [h for h in held if h[4] is None]
            if not live and current is None and idle >= 4:
                assert room and start == 0 and skip == 0, "an idle empty ring must restart"
                seen["restarts"] += last_end != 0
            commit = None
            if current is None and room and not pause and rng.random() < eager:
                assert start + M <= R, "a message would wrap"
                assert len(live) < N, "too many messages in flight"
                for h in live:
                    assert max(start, h[0]) >= min(start + M, h[0] + h[1]), "overlaps a held message"
                if any(h[2] for h in live):     # (else the ring is empty: it may restart at 0)
                    # right after the previous message, or at 0 if it does not fit before the end
                    wrap = last_end > R - M
                    assert (start, skip) == ((0, R - last_end) if wrap else (last_end, 0))
                    seen["wrapped"] += wrap
                words = M if rng.random() < eager else rng.randrange(M + 1)
                current = [start, skip, words, rng.choice([0, 0, 0, 1, 3])]
            if current is not None:
                if current[3] == 0:
                    s, k, words, _ = current
                    commit = {"pos": s + words - 1 if words else s, "write": int(words > 0)}
                    held.append([s, words, k + words, cycle, None])
                    last_end = s + words
                    seen["placed"] += 1
                    current = None
                else:
                    current[3] -= 1
            ctx.set(dut.commit.valid, commit is not None)
            if commit:
                ctx.set(dut.commit.payload, commit)
            # completions, in order, of messages counted (their size can be given back)
            live = [h for h in held if h[4] is None]
            if live and live[0][3] <= cycle - 3 and rng.random() < 0.25:
                live[0][4] = cycle
            held = [h for h in held if h[4] is None or h[4] >= cycle - 2]
            busy = commit or current is not None or any(h[4] is None for h in held)
            idle = 0 if busy or rng.random() < 0.02 else idle + 1
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert seen["placed"] > 300 and seen["restarts"] > 3, seen
    assert seen["wrapped"] > 5 or N == 1, seen       # (one in flight: never placed after another)


def test_parameters_are_checked():
    raises(ValueError, "message_words", lambda: RingPlacer(8, 9, 4))
    raises(ValueError, "max_inflight", lambda: RingPlacer(8, 4, 0))
    raises(TypeError, "ring_words", lambda: RingPlacer(8.5, 4, 4))
