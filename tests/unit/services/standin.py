"""The endpoint around an rping server, in plain Python: its local memory, each QP's requester
and responder as the server sees them through its ports, and an rping client
(:class:`~rocegen.sim.models.services.rping.RpingClient`) as the peer of each connection.

The server's outputs go in through :meth:`Endpoint.post_recv`, :meth:`Endpoint.write_rkey` and
:meth:`Endpoint.post_wr`; :meth:`Endpoint.step` does one thing the network and the peers do (a
work request executed, a client's SEND received, a connection ended or started); what the
server takes comes out of the queues ``events`` (open/close), ``cpls``, ``recv_cpls`` and, for
the gateware, ``snoops`` (the responder's word writes into local memory; a receive completion
is offered only after the writes of its payload, ``after``)."""

from collections import deque
from dataclasses import dataclass, field

from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.rping import ADV_BYTES, MemoryRegion, RpingClient, pack_adv
from rocegen.wire.verbs import CplStatus, WrOpcode

__all__ = ["ClientSpec", "Endpoint", "StreamBench"]


@dataclass(frozen=True)
class ClientSpec:
    """One connection's client: ``rping -c -S size -C count -V``, lying about its sizes
    (``adv_size``, ``write_adv_size``) or misbehaving (``rogue``): ``"short"`` sends 8 bytes
    instead of its first advertisement, ``"long"`` 20, ``"double"`` its first advertisement
    twice (the second received while the server's READ is outstanding), ``"badkey"`` names an
    R_Key it has not registered."""
    size: int
    count: int
    adv_size: int | None = None
    write_adv_size: int | None = None
    rogue: str | None = None


@dataclass
class _Conn:
    spec: ClientSpec
    client: RpingClient
    inbox: deque = field(default_factory=deque)     # the client's SENDs not yet received


class Endpoint:
    """The stand-in (see the module): ``layout`` the server's :class:`RpingMemory`,
    ``scripts`` QP -> the :class:`ClientSpec` s of its connections, one after the other."""

    def __init__(self, layout, scripts, rng, *, mem_bytes=None):
        self.layout, self.rng = layout, rng
        self.word = layout.width // 8
        size = mem_bytes or -(-(layout.end + 4 * layout.align) // self.word) * self.word
        self.mem = bytearray(rng.randbytes(size))
        self.scripts = {qp: deque(specs) for qp, specs in scripts.items()}
        self.rkeys = [0] * layout.num_qps
        self.recvq = {qp: deque() for qp in scripts}
        self.sendq = {qp: deque() for qp in scripts}
        self.conns = {}                         # qp -> _Conn while connected
        self.finished = []                      # (qp, spec, client) of every connection ended
        self.events, self.cpls, self.recv_cpls, self.snoops = deque(), deque(), deque(), deque()
        self.snooped = 0                        # snoop writes made so far
        self.taken = {qp: 0 for qp in scripts}  # deliveries to the server not yet taken

    # ---- what the server does ----

    def post_recv(self, p):
        assert (p.addr, p.length) == (self.layout.recv_addr(p.qp), ADV_BYTES), p
        self.recvq[p.qp].append(p)

    def write_rkey(self, w):
        self.rkeys[w.qp] = w.rkey

    def post_wr(self, wr):
        self._check_local(wr)
        # the R_Key is the QP context's when the request is taken (the RETH is built from it)
        self.sendq[wr.qp].append((wr, self.rkeys[wr.qp]))

    def _check_local(self, wr):
        """The server's requests stay in their QP's slice, at word-aligned addresses."""
        lay = self.layout
        if wr.opcode == WrOpcode.SEND:
            assert wr.local_addr == lay.send_addr(wr.qp) and wr.length in (0, ADV_BYTES), wr
        else:
            assert wr.opcode in (WrOpcode.READ, WrOpcode.WRITE), wr
            assert wr.local_addr == lay.buf_addr(wr.qp) and 1 <= wr.length <= lay.max_size, wr
        assert wr.local_addr % self.word == 0, wr

    # ---- what the server takes ----

    def took(self, qp):
        """The server took a delivery of ``qp`` (an event or a completion)."""
        if qp in self.taken:
            self.taken[qp] -= 1

    def _deliver(self, queue, qp, item):
        queue.append(item)
        self.taken[qp] += 1

    # ---- the network and the peers ----

    def idle(self):
        """Nothing left to do: every script run, every delivery taken."""
        return (not any(self.scripts.values()) and not self.conns
                and not any(self.taken.values()))

    def step(self):
        """Does one of the things that can be done now, chosen at random; False if none."""
        moves = []
        for qp in self.scripts:
            conn = self.conns.get(qp)
            if conn is None:
                if self.scripts[qp] and not self.taken[qp]:
                    moves.append((self._connect, qp))
                continue
            # (a client that sends twice: the server takes both SENDs before its READ runs)
            if self.sendq[qp] and not (conn.spec.rogue == "double" and
                                       (conn.inbox or self.taken[qp])):
                moves.append((self._execute, qp))
            if conn.inbox and self.recvq[qp]:
                moves.append((self._receive, qp))
            # (a client's disconnect comes after the server took what came before it)
            if conn.client.result is not None and not self.taken[qp]:
                moves.append((self._disconnect, qp))
        if not moves:
            return False
        move, qp = self.rng.choice(moves)
        move(qp)
        return True

    def _connect(self, qp):
        spec = self.scripts[qp].popleft()
        r = self.rng
        start = MemoryRegion(r.randrange(1 << 47) & ~0xFFF, r.randrange(1 << 32),
                             bytearray(spec.size))
        rdma = MemoryRegion(start.addr + (1 << 20), r.randrange(1 << 32), bytearray(spec.size))
        client = RpingClient(spec.size, spec.count, start=start, rdma=rdma,
                             adv_size=spec.adv_size, write_adv_size=spec.write_adv_size)
        conn = self.conns[qp] = _Conn(spec, client)
        self._deliver(self.events, qp, ("open", qp))
        first = client.connected()
        if spec.rogue == "short":
            first = first[:8]
        elif spec.rogue == "long":
            first = first + bytes(4)
        elif spec.rogue == "badkey":
            first = pack_adv(start.addr, start.rkey ^ 1, spec.size)
        conn.inbox.append(first)
        if spec.rogue == "double":
            conn.inbox.append(first)

    def _execute(self, qp):
        """The QP's oldest work request, executed at the peer and completed."""
        wr, rkey = self.sendq[qp].popleft()
        client = self.conns[qp].client
        status = CplStatus.OK
        local = slice(wr.local_addr, wr.local_addr + wr.length)
        if wr.opcode == WrOpcode.READ:
            got = client.remote_read(wr.remote_offset, rkey, wr.length)
            if got is None:
                status = CplStatus.REMOTE_ACCESS
            else:
                self.mem[local] = got
        elif wr.opcode == WrOpcode.WRITE:
            if not client.remote_write(wr.remote_offset, rkey, bytes(self.mem[local])):
                status = CplStatus.REMOTE_ACCESS
        else:
            nxt = client.received(wr.length)
            if nxt is not None:
                self.conns[qp].inbox.append(nxt)
        if status != CplStatus.OK:
            client.fail(f"the server's {wr.opcode.name} failed: {status.name}")
        self._deliver(self.cpls, qp, (qp, wr.wr_id, status))

    def _receive(self, qp):
        """The client's oldest SEND lands in the QP's oldest receive buffer."""
        conn = self.conns[qp]
        payload = conn.inbox.popleft()
        buf = self.recvq[qp].popleft()
        status = RecvStatus.OK
        if len(payload) > buf.length:
            status = RecvStatus.LENGTH
            conn.client.fail("cq completion failed status (remote invalid request)")
        else:
            self._write(buf.addr, payload)
        self._deliver(self.recv_cpls, qp, {"qp": qp, "wr_id": buf.wr_id, "status": status,
                                           "length": len(payload) if status == RecvStatus.OK else 0,
                                           "after": self.snooped})

    def _write(self, addr, payload):
        """The responder's word writes of ``payload`` at byte ``addr``: into memory, and
        offered to the server's snoop."""
        self.mem[addr:addr + len(payload)] = payload
        w = self.word
        for word in range(addr // w, -(-(addr + len(payload)) // w)):
            be = sum(1 << i for i in range(w) if addr <= word * w + i < addr + len(payload))
            self.snoops.append((word, bytes(self.mem[word * w:(word + 1) * w]), be))
            self.snooped += 1

    def write_elsewhere(self):
        """A write of the responder where no advertisement lives: a send slot, the bytes after
        a slice's buffer, before or after the slices."""
        lay, r = self.layout, self.rng
        a = lay.align
        qp = r.randrange(lay.num_qps)
        spots = [lay.send_addr(qp)]
        tail = lay.buf_addr(qp) + -(-lay.max_size // a) * a
        if tail + a <= lay.recv_addr(qp) + lay.bytes_per_qp:
            spots.append(tail)
        if lay.base >= a:
            spots.append(lay.base - a)
        if lay.base >= lay.bytes_per_qp:           # where a slot would be, slices before
            spots.append(lay.base - r.randrange(1, lay.base // lay.bytes_per_qp + 1) * lay.bytes_per_qp)
        if lay.end + a <= len(self.mem):
            spots.append(lay.end)
        self._write(r.choice(spots), r.randbytes(r.randrange(1, a + 1)))

    def _disconnect(self, qp):
        """The client ended (done or failed): the connection closes, the QP's work flushes."""
        conn = self.conns.pop(qp)
        self.finished.append((qp, conn.spec, conn.client))
        self._deliver(self.events, qp, ("close", qp))
        while self.recvq[qp]:
            buf = self.recvq[qp].popleft()
            self._deliver(self.recv_cpls, qp, {"qp": qp, "wr_id": buf.wr_id,
                                               "status": RecvStatus.FLUSHED, "length": 0,
                                               "after": self.snooped})
        while self.sendq[qp]:
            wr, _ = self.sendq[qp].popleft()
            self._deliver(self.cpls, qp, (qp, wr.wr_id, CplStatus.FLUSHED))


# ---- the reference model in the server's place ----

def model_event(server, ep, kind, item):
    """Hands a delivery the server takes (``kind``: ``"event"``, ``"cpl"`` or ``"recv"``, the
    item as queued) to the model ``server``; returns its :class:`Actions`. A receive's 16
    bytes are those its slot holds in local memory when it is taken."""
    if kind == "event":
        name, qp = item
        return server.opened(qp) if name == "open" else server.closed(qp)
    if kind == "cpl":
        return server.completion(*item)
    addr = ep.layout.recv_addr(item["qp"])
    return server.recv_completion(item["qp"], item["wr_id"], item["status"], item["length"],
                                  bytes(ep.mem[addr:addr + ADV_BYTES]),
                                  is_send=item.get("opcode", 0) == 0)


def apply(ep, actions):
    """The model's actions, done on the stand-in in their order."""
    if actions.recv is not None:
        ep.post_recv(actions.recv)
    if actions.rkey is not None:
        ep.write_rkey(actions.rkey)
    if actions.wr is not None:
        ep.post_wr(actions.wr)


def run_model(server, ep, rng, *, max_moves=1_000_000):
    """Runs the stand-in with the model as the server until everything is done: each move
    either a step of the stand-in or a delivery taken by the server, at random."""
    queues = {"event": ep.events, "cpl": ep.cpls, "recv": ep.recv_cpls}
    for _ in range(max_moves):
        ready = [k for k, q in queues.items() if q]
        if rng.random() < 0.5 and ep.step():
            continue
        if not ready:
            if not ep.step():
                assert ep.idle(), "the stand-in and the server wait for each other"
                return
            continue
        kind = rng.choice(ready)
        item = queues[kind].popleft()
        qp = item[1] if kind == "event" else item[0] if kind == "cpl" else item["qp"]
        ep.took(qp)
        apply(ep, model_event(server, ep, kind, item))
    raise AssertionError("no end after max_moves")


def expected_end(spec, max_size):
    """How a connection of ``spec`` ends against the server: ``(client result, the counter of
    its service's end)``."""
    if spec.rogue == "double":
        return "Received bogus data, size 0", "bad_event"
    if spec.rogue == "long":
        return "cq completion failed status (remote invalid request)", "bad_status"
    if spec.rogue == "badkey":
        return "the server's READ failed: REMOTE_ACCESS", "bad_status"
    read_size = spec.size if spec.adv_size is None else spec.adv_size
    write_size = read_size if spec.write_adv_size is None else spec.write_adv_size
    if spec.rogue == "short" or not 1 <= read_size <= max_size or \
            not read_size <= write_size <= max_size:
        return "Received bogus data, size 0", "bad_adv"
    return "ok", "ended"


class StreamBench:
    """The stream side of a service's closed-loop bench: :meth:`drive` offers the items of a
    queue on an input (random idle cycles, ``idle``; an item only when :meth:`offerable`
    says so), each taken item to ``took(kind, item)``; :meth:`collect` takes an output (random
    backpressure, ``backpressure``), each offer compared with the next of ``expect[name]``
    and handed to ``act``. The bench sets ``rng``, ``idle``, ``backpressure``, ``expect`` and
    ``took``."""

    def offerable(self, kind, item):
        """Whether ``item`` (the head of input ``kind``'s queue) may be offered now."""
        return True

    async def drive(self, ctx, port, kind, queue, payload):
        while True:
            if not queue or self.rng.random() < self.idle or not self.offerable(kind, queue[0]):
                ctx.set(port.valid, 0)
                await ctx.tick()
                continue
            item = queue[0]
            ctx.set(port.payload, payload(item))
            ctx.set(port.valid, 1)
            while not (await ctx.tick().sample(port.ready))[2]:
                pass
            queue.popleft()
            self.took(kind, item)
            ctx.set(port.valid, 0)

    async def collect(self, ctx, port, name, convert, act):
        while True:
            ready = self.rng.random() >= self.backpressure
            ctx.set(port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
            if valid and ready:
                got = convert(payload)
                assert self.expect[name], f"the block offers {got} on {name}, the model nothing"
                want = self.expect[name].popleft()
                assert got == want, (name, got, want)
                act(want)
