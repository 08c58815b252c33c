import gc
import random

import pytest

from rocegen.gateware.roce.memory.payload_ram import PayloadRam
from rocegen.sim.testing.harness import run_sim


@pytest.mark.parametrize("width, size", [(64, 512), (128, 256 * 16), (256, 2048), (512, 4096)])
def test_random_reads_and_writes(width, size):
    """Random byte-enabled writes and reads in the same cycles, compared with a byte array: a
    read gives the word one cycle after ``en``, as it was before a write in the same cycle."""
    B = width // 8
    words = size // B
    rng = random.Random(width)
    dut = PayloadRam(width, size)
    assert dut.addr_width == words.bit_length() - 1
    model = bytearray(size)
    checked = []

    async def tb(ctx):
        rd, wr = dut.rd, dut.wr
        for cycle in range(1500):
            # first third: mostly writes, to fill the memory; then both at once
            write = rng.random() < (0.9 if cycle < 500 else 0.5)
            read = rng.random() < (0.2 if cycle < 500 else 0.6)
            w_addr, r_addr = rng.randrange(words), rng.randrange(words)
            if read and rng.random() < 0.3:
                r_addr = w_addr                                   # read-during-write
            w_data = rng.getrandbits(width)
            be = rng.choice([(1 << B) - 1, rng.getrandbits(B), 0])
            ctx.set(wr.payload, {"addr": w_addr, "data": w_data, "be": be})
            ctx.set(wr.valid, write)
            ctx.set(rd.addr, r_addr)
            ctx.set(rd.en, read)
            assert ctx.get(wr.ready) == 1
            want = bytes(model[r_addr * B:(r_addr + 1) * B])
            await ctx.tick()
            # the read register was loaded at this edge
            if read:
                got = ctx.get(rd.data).to_bytes(B, "little")
                assert got == want, f"cycle {cycle}: word {r_addr}"
                checked.append(r_addr)
            if write:
                data = w_data.to_bytes(B, "little")
                for i in range(B):
                    if be >> i & 1:
                        model[w_addr * B + i] = data[i]

    run_sim(dut, testbenches=[tb])
    assert len(checked) > 500 and len(set(checked)) > words // 2
    assert any(model)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters():
    with pytest.raises(ValueError, match="width must be one of"):
        PayloadRam(48, 1024)
    with pytest.raises(TypeError, match="size_bytes must be an integer"):
        PayloadRam(64, 1024.0)
    with pytest.raises(ValueError, match=r"at least 16 words \(128 bytes at 64 bits\)"):
        PayloadRam(64, 64)
    with pytest.raises(ValueError, match="power of two"):
        PayloadRam(512, 3 * 4096)
    assert PayloadRam(512, 1024).addr_width == 4
    assert PayloadRam(64, 1 << 20).addr_width == 17
    gc.collect()
