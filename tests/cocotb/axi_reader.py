"""cocotb testbench of the AXI4 payload reader (sim.payload_tops.AxiReaderTop) on the generated
Verilog, its memory a cocotbext-axi AxiRam (or an AXI slave that answers SLVERR for one region).

Descriptors of every interesting length, from memory and generated, in random places (many
crossing 4 KiB boundaries, which the AxiRam asserts bursts never do); random pauses on AR, R and
the output stream. Every packet must carry the bytes at its local address (or the test pattern),
its descriptor beside it, and ``tuser`` (error) only where the memory answered with an error."""

import json
import os
import random

import cocotb
from amaranth.hdl import Shape
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiBus, AxiRam, AxiSlave, AxiStreamBus, AxiStreamSink

from rocegen.gateware.roce.layouts import PACKET_DESC, WrSource
from rocegen.sim.models.packets import from_beats
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.cocotb_helpers import pauses
from rocegen.wire.pattern import pattern

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
WIDTH = PARAMS["width"]
B = WIDTH // 8
MEM_SIZE = 1 << 16
#: Simulated time within which every packet must have come out.
RECV_TIMEOUT_US = 200


def seed(n):
    return int(os.environ.get("SEED", "5")) + WIDTH + n


def random_desc(rng, local_addr, length, generator):
    desc = {name: rng.getrandbits(Shape.cast(field).width)
            for name, field in PACKET_DESC.members.items() if name != "src"}
    desc.update(local_addr=local_addr, length=length,
                src=WrSource.GENERATOR if generator else rng.choice([WrSource.USER,
                                                                     WrSource.STREAM]))
    return desc


def random_descs(rng, lengths, gen_rate):
    descs = []
    for n in lengths:
        if rng.random() < gen_rate:
            descs.append(random_desc(rng, rng.getrandbits(32) & ~(B - 1), n, True))
        else:
            descs.append(random_desc(rng, B * rng.randrange((MEM_SIZE - n) // B + 1), n, False))
    return descs


def expected_payload(desc, memory):
    addr, n = desc["local_addr"], desc["length"]
    return pattern(addr, n) if desc["src"] == WrSource.GENERATOR else bytes(memory[addr:addr + n])


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.s_desc_valid.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def drive_descs(dut, descs, rng, idle):
    for desc in descs:
        while rng.random() < idle:
            dut.s_desc_valid.value = 0
            await RisingEdge(dut.clk)
        dut.s_desc_data.value = PACKET_DESC.const(desc).as_value().value
        dut.s_desc_valid.value = 1
        while True:
            await RisingEdge(dut.clk)
            if int(dut.s_desc_ready.value):
                break
    dut.s_desc_valid.value = 0


class Output:
    """The packets leaving ``m_axis``, with the descriptor seen on ``m_meta`` at each last beat
    and the clock cycle of every beat."""

    def __init__(self, dut, rng, pause):
        self.dut = dut
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.sink.log.setLevel("WARNING")
        if pause:
            self.sink.set_pause_generator(pauses(rng, pause))
        self.metas = []
        self.beat_cycles = []
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        dut, cycle = self.dut, 0
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            if int(dut.m_axis_tvalid.value) and int(dut.m_axis_tready.value):
                self.beat_cycles.append(cycle)
                if int(dut.m_axis_tlast.value):
                    self.metas.append(meta_dict(PACKET_DESC.from_bits(int(dut.m_meta.value))))

    async def receive(self, count):
        """``count`` packets as ``(payload, error flag of each beat)``; the beats are checked
        against the packet stream rules (thermometer ``tkeep``, a 0-byte packet is one beat with
        ``tkeep`` 0)."""
        out = []
        for n in range(count):
            try:
                f = await with_timeout(self.sink.recv(compact=False), RECV_TIMEOUT_US, "us")
            except TimeoutError:
                raise AssertionError(f"only {n} of {count} packets came out") from None
            beats = len(f.tdata) // B
            assert beats * B == len(f.tdata)
            raw = [(int.from_bytes(bytes(f.tdata[k * B:(k + 1) * B]), "little"),
                    sum(bit << i for i, bit in enumerate(f.tkeep[k * B:(k + 1) * B])),
                    int(k == beats - 1)) for k in range(beats)]
            out.append((from_beats(raw, WIDTH), [f.tuser[k * B] for k in range(beats)]))
        return out


def check(descs, packets, metas, memory, erred=None):
    assert len(packets) == len(descs)
    for n, (d, (payload, tuser), meta) in enumerate(zip(descs, packets, metas)):
        assert payload == expected_payload(d, memory), \
            f"packet {n}: {d['length']} bytes at {d['local_addr']:#x} ({d['src']})"
        want_err = bool(erred and erred[n])
        assert bool(tuser[-1]) == want_err and not any(tuser[:-1]), f"packet {n}: tuser {tuser}"
        assert meta == meta_dict(PACKET_DESC.const(d)), f"packet {n}: descriptor"


@cocotb.test()
async def random_descriptors(dut):
    """AxiRam with pauses on AR and R, idle cycles on descriptors, backpressure on output."""
    rng = random.Random(seed(0))
    await start(dut)
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM_SIZE)
    ram.read_if.ar_channel.set_pause_generator(pauses(rng, 0.3))
    ram.read_if.r_channel.set_pause_generator(pauses(rng, 0.3))
    memory = rng.randbytes(MEM_SIZE)
    ram.write(0, memory)
    out = Output(dut, rng, 0.3)
    edge = [0, 1, B - 1, B, B + 1, 4096]
    lengths = edge * 2 + [rng.randrange(0, 4097) for _ in range(10)]
    lengths += [rng.randrange(0, 3 * B) for _ in range(20)]
    rng.shuffle(lengths)
    descs = random_descs(rng, lengths, 0.3)
    cocotb.start_soon(drive_descs(dut, descs, rng, 0.3))
    packets = await out.receive(len(descs))
    await ClockCycles(dut.clk, 20)
    assert out.sink.empty()
    check(descs, packets, out.metas, memory)
    assert int(dut.read_errors.value) == 0


@cocotb.test()
async def streaming(dut):
    """No pauses anywhere: back-to-back 4 KiB packets from memory leave at one beat per
    cycle."""
    rng = random.Random(seed(1))
    await start(dut)
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM_SIZE)
    memory = rng.randbytes(MEM_SIZE)
    ram.write(0, memory)
    out = Output(dut, rng, 0.0)
    descs = random_descs(rng, [4096] * (3000 // (4096 // B)), 0.0)
    cocotb.start_soon(drive_descs(dut, descs, rng, 0.0))
    packets = await out.receive(len(descs))
    check(descs, packets, out.metas, memory)
    cycles = out.beat_cycles
    rate = len(cycles) / (cycles[-1] - cycles[0] + 1)
    dut._log.info(f"{len(cycles)} beats at {rate:.4f} beats per cycle")
    assert rate >= 0.99, f"{rate:.4f} beats per cycle"


class FaultyMemory:
    """Backing store of an AxiSlave: reads touching ``bad`` raise, which the slave answers with
    SLVERR."""

    def __init__(self, memory, bad):
        self.memory = memory
        self.bad = bad

    async def read(self, address, length):
        for start_, end in self.bad:
            if address < end and start_ < address + length:
                raise OSError(f"read error at {address:#x}")
        return bytes(self.memory[address:address + length])

    async def write(self, address, data):
        raise AssertionError("the reader never writes")


@cocotb.test()
async def read_errors(dut):
    """SLVERR on some words: exactly the packets that read them end with tuser set."""
    rng = random.Random(seed(2))
    await start(dut)
    memory = rng.randbytes(MEM_SIZE)
    bad = [(0x3000, 0x3000 + B), (0x8000 + 5 * B, 0x8000 + 6 * B)]
    AxiSlave(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
             target=FaultyMemory(memory, bad))
    out = Output(dut, rng, 0.3)
    descs = [random_desc(rng, 0x3000 - 2 * B, 4 * B, False),
             random_desc(rng, 0x3000, 1, False),
             random_desc(rng, 0x3000, 0, False),
             random_desc(rng, 0x3000, 2 * B, True),
             random_desc(rng, 0x8000, 6 * B, False),
             random_desc(rng, 0x8000, 5 * B, False)]
    descs += random_descs(rng, [rng.randrange(0, 2000) for _ in range(20)], 0.3)
    erred = [d["src"] != WrSource.GENERATOR and any(
        s < d["local_addr"] + d["length"] and d["local_addr"] < e for s, e in bad) for d in descs]
    assert erred[:6] == [True, True, False, False, True, False]
    cocotb.start_soon(drive_descs(dut, descs, rng, 0.2))
    packets = await out.receive(len(descs))
    await ClockCycles(dut.clk, 5)
    for n, (_, tuser) in enumerate(packets):
        assert bool(tuser[-1]) == erred[n] and not any(tuser[:-1]), f"packet {n}: tuser {tuser}"
    good = [k for k, e in enumerate(erred) if not e]
    check([descs[k] for k in good], [packets[k] for k in good], [out.metas[k] for k in good],
          memory)
    assert int(dut.read_errors.value) == sum(erred)
