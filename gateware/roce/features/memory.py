"""The endpoint's local memory: the payload buffer or the AXI4 master, and the payload
reader."""

from amaranth.lib import wiring

from rocegen.gateware.lib.memport import mem_write_layout
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory

__all__ = ["MemoryFeature"]


class MemoryFeature(Feature):
    """Local memory (:class:`~rocegen.gateware.roce.memory.payload_memory.PayloadMemory`).

    Parameters
    ----------
    cfg : EndpointConfig
        ``width``, ``memory``, ``mem_bytes``, ``responder`` / ``reads`` (their write
        ports) and ``atomics`` (the reader executes the responder's atomics).

    Ports
    -----
    ``mem_w`` (on-chip memory: word writes into the payload buffer) or ``axi`` (AXI4 memory).
    With the rping client, its writes (``writes.i[1]``) take turns with ``mem_w``'s
    (round-robin, one write a cycle).

    Behaviour
    ---------
    The streaming front end writes its messages in; the payload reader reads the packets the
    descriptors name, for the packet builder (the scheduler's, and with READs, the READ
    responses' and the selective reissues', through the responder feature's arbiter). The
    responder's and the READ requester's writes reach it through their features.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.mem = PayloadMemory(cfg.width, cfg.memory, cfg.mem_bytes, responder=cfg.responder,
                                 reads=cfg.reads, atomics=cfg.atomics)
        #: with the rping client: its writes beside the user's (on-chip; its input 1)
        self.writes = None
        if cfg.rping_client_port is not None:
            self.writes = StreamArbiter(mem_write_layout(cfg.width, self.mem.word_addr_bits), 2)

    @property
    def port_name(self):
        """``"mem_w"`` or ``"axi"``."""
        return "mem_w" if self.cfg.memory == "onchip" else "axi"

    def members(self):
        return {self.port_name: self.mem.signature.members[self.port_name]}

    def connect(self, m, ep):
        """The front end's writes, the reader's output (without READs: straight to the
        register before the builder) and the user's memory port."""
        mem, req = self.mem, ep.features.requester
        wiring.connect(m, req.front.mem, mem.wr)
        m.d.comb += req.front.mem_durable.eq(mem.durable)
        if not self.cfg.reads:
            wiring.connect(m, mem.o, req.rd_reg.i)
        ext = self.port_name
        if self.writes is None:
            wiring.connect(m, wiring.flipped(getattr(ep, ext)), getattr(mem, ext))
        else:
            arb = m.submodules.mem_writes = self.writes
            wiring.connect(m, wiring.flipped(ep.mem_w), arb.i[0])
            wiring.connect(m, arb.o, mem.mem_w)
