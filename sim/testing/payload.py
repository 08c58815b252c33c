"""Reference of the payload readers (on-chip and AXI4): what a packet descriptor makes them
send, and random descriptors for tests."""

from amaranth.hdl import Shape

from rocegen.gateware.roce.layouts import PACKET_DESC, WrSource
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.wire.pattern import pattern

__all__ = ["random_desc", "expected_packet", "edge_lengths"]


def random_desc(rng, local_addr, length, generator):
    """A descriptor with random fields but the ones the reader acts on."""
    desc = {name: rng.getrandbits(Shape.cast(field).width)
            for name, field in PACKET_DESC.members.items() if name != "src"}
    desc.update(local_addr=local_addr, length=length,
                src=WrSource.GENERATOR if generator else rng.choice([WrSource.USER,
                                                                     WrSource.STREAM]))
    return desc


def expected_packet(desc, memory):
    """What a reader must send for ``desc``: bytes of ``memory`` (addresses wrapping around its
    size) or the test pattern."""
    addr, length = desc["local_addr"], desc["length"]
    if desc["src"] == WrSource.GENERATOR:
        payload = pattern(addr, length)
    else:
        size = len(memory)
        payload = bytes(memory[(addr + i) % size] for i in range(length))
    return Packet(payload, meta_dict(PACKET_DESC.const(desc)), False)


def edge_lengths(width):
    """Payload lengths around the beat size, and a full 4096-byte packet."""
    B = width // 8
    return [0, 1, B - 1, B, B + 1, 4096]
