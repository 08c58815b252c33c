"""RoCEv2 invariant CRC (ICRC): :class:`IcrcInsert` appends it on transmit, :class:`IcrcCheck`
verifies and strips it on receive.

The ICRC (InfiniBand Annex A17, RoCEv2) is the Ethernet CRC-32 of
``8 x 0xFF | IP header | UDP | BTH | extension headers | payload | pad`` with the variant fields
(IPv4 TOS, TTL and header checksum, or IPv6 traffic class, flow label and hop limit; the UDP
checksum; BTH byte 4) set to ones in the copy that is summed, sent least significant byte first
as the last 4 bytes of the IP datagram. :mod:`rocegen.sim.models.icrc` is the reference model.

Where the blocks sit
--------------------
Both blocks see whole frames: the stream starts ``offset`` bytes before the IP header (the
Ethernet header and any VLAN tags, which the ICRC does not cover) and ends with the IP datagram.
The default ``offset=14`` is an untagged Ethernet frame: on transmit the requester builds the
whole frame (Ethernet + IP + UDP + BTH headers in one
:class:`~rocegen.gateware.lib.packetizer.Packetizer`) and :class:`IcrcInsert` goes right after it,
*before* the padding to the 60-byte Ethernet minimum (:class:`~rocegen.gateware.lib.pad.Pad`, the
MAC), since a BTH-only packet (SEND_ONLY of 0 bytes: 54 bytes + ICRC = 58) needs padding *after*
its ICRC. ``offset=18`` suits one 802.1Q
tag and ``offset=0`` a stream that starts at the IP header (the datagram between
:class:`~rocegen.gateware.net.ipv4_tx.Ipv4Tx` and :class:`~rocegen.gateware.net.eth_tx.EthTx`).

The datagram's end is the packet's end: neither block reads the IP length. The input of
:class:`IcrcCheck` must therefore not carry Ethernet padding (trim the frame to the IP total
length first); a padded frame fails the check. The fixed positions of the masked fields assume
IPv4 without options (IHL 5, as RoCEv2 sends) or a plain IPv6 header followed by UDP.

How the CRC is pipelined
------------------------
A beat of ``B = W/8`` bytes advances the CRC state ``s`` as ``A**B . s  XOR  D . beat``
(:class:`~rocegen.gateware.lib.crc.Crc32`). The data term ``D . beat`` (up to 271 inputs per state
bit at 512 bits) is reduced by registered XOR trees; only ``A**B . s`` (at most 21 state bits per
bit) and the last few partial sums stay in the feedback loop. The bytes before ``offset`` enter
as zeros and the state starts at the ICRC seed (the state after the 8 x 0xFF prefix, 0xDEBB20E3)
rewound over ``offset`` zero bytes, so no byte needs shifting. Bytes after the end of a packet
also enter as zeros, so the state after the last beat is the state after the packet advanced
over ``z = (B - n) mod B`` zero bytes (``n`` bytes in the last beat):

* :class:`IcrcInsert` rewinds it by ``z`` bytes with ``A**-z``, a 32x32 matrix chosen by ``z``
  two cycles early, so the rewind is one AND-XOR tree behind the state loop, in its cycle;
* :class:`IcrcCheck` compares it with the CRC residue advanced over ``z`` zero bytes, one of
  ``B`` constants chosen by ``z`` a cycle early.

The pipeline has three stages at every width from 64 to 512 bits: the input mask and the first
XOR tree; the state loop (and the rewind, on transmit); the back end (the ICRC's merge into the
last beat, or the compare and the stripping of the ICRC). Every stage's estimated depth in
6-input LUTs is in ``logic_levels`` (at 512 bits: input mask and XOR tree 3, state loop 2, then
on transmit the rewind 3 in the loop's stage and the merge 2, on receive the compare and strip
5), within the cores' budget of 8 levels at 322 MHz on UltraScale+; the depth Yosys maps is in
``docs/performance.md`` ("ICRC").

Flow control
------------
The pipeline never stalls: ``i.ready`` is a register, high while the beats in flight plus those
queued in an output :class:`~rocegen.gateware.lib.fifo.PacketFifo` (``queue_depth`` beats,
cut-through; and, in :class:`IcrcCheck`, the output register slice) leave room for more.
:class:`IcrcInsert`'s ``o`` is its queue's output with the queue's bypass: while the queue is
empty, the pipeline's last stage offers its beat on ``o`` in its cycle; a beat not taken stays
offered from the queue's read port, and the beats behind it are read in the cycle they are
written, so a packet leaves a beat a cycle either way (the transmit side needs steady frames).
:class:`IcrcCheck`'s ``o`` is an output register slice that
takes a beat from the pipeline directly while the queue is empty (a packet may leave that way
from its first beat, or switch to the queue and stay on it), one cycle after the pipeline's
last stage instead of the queue's two; a beat whose successor is already in the stage before
(and is not a beat of ICRC bytes only) goes there from the compare without being held back.
In :class:`IcrcCheck`, ``i.ready``'s next value counts a beat as taken in every cycle
``i.ready`` is high (a bound: it may fall a cycle early when the input idles), so that
``i.valid``, at the end of the receive layers' logic, does not reach it.
So ``i.ready`` does not depend on ``o.ready`` and no enable
fans out to the pipeline registers (the beats' data wait in a block-RAM delay line written and
read every cycle; the other pipeline fields have neither reset nor enable, so they can map to
shift-register LUTs).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import RegisterSlice
from rocegen.gateware.lib.crc import Crc32
from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.stream import PacketSignature, check_width, empty_meta, keep_count
from rocegen.wire.headers import BTH, IPV4, IPV6, UDP

__all__ = ["IcrcInsert", "IcrcCheck", "ICRC_BYTES", "ICRC_SEED", "IP_VERSIONS", "icrc_mask"]

#: Length of the ICRC.
ICRC_BYTES = 4
#: CRC state (reflected convention of :class:`~rocegen.gateware.lib.crc.Crc32`) after the 8 x 0xFF
#: prefix: 0xDEBB20E3.
ICRC_SEED = Crc32.step_int(Crc32.INIT, (1 << 64) - 1, 8)
IP_VERSIONS = (4, 6)
#: Inputs of a LUT on the target (UltraScale+ LUT6), for the depth estimates.
LUT_INPUTS = 6
#: Inputs one registered XOR stage reduces (two LUT levels).
XOR_GROUP = LUT_INPUTS ** 2


def icrc_mask(ip_version):
    """Bits set to one in the CRC's copy of the datagram, as bytes from the IP header on:
    IP header, UDP header and BTH, taken from the header table."""
    if ip_version == 4:
        ip = IPV4.pack(dscp=0x3F, ecn=0x3, ttl=0xFF, checksum=0xFFFF)
    elif ip_version == 6:
        ip = IPV6.pack(traffic_class=0xFF, flow_label=0xFFFFF, hop_limit=0xFF)
    else:
        raise ValueError(f"ip_version must be one of {IP_VERSIONS}, not {ip_version!r}")
    return ip + UDP.pack(checksum=0xFFFF) + BTH.pack(fecn=1, becn=1, resv6=0x3F)


def lut_levels(inputs, per=LUT_INPUTS):
    """Depth of a tree of ``per``-input LUTs computing a function of ``inputs`` inputs."""
    levels = 0
    while inputs > 1:
        inputs = -(-inputs // per)
        levels += 1
    return levels


def _chunks(items, size):
    """``items`` split into the fewest runs of at most ``size``, of near-equal lengths."""
    count = max(1, -(-len(items) // size))
    step = -(-len(items) // count) if items else 0
    return [items[k:k + step] for k in range(0, len(items), step)] if items else []


def _xor(terms):
    return Cat(*terms).xor() if terms else Const(0, 1)


def _rom(bits, index):
    """The bit ``bits[index]`` of a constant table (a function of ``index`` alone)."""
    if all(b == bits[0] for b in bits):
        return Const(bits[0], 1)
    return Const(sum(b << k for k, b in enumerate(bits)), len(bits)).bit_select(index, 1)


def _reg(m, value, name, shape=None):
    """A reset-less register of ``value`` (a pipeline delay-line element)."""
    sig = Signal(len(value) if shape is None else shape, name=name, reset_less=True)
    m.d.sync += sig.eq(value)
    return sig


def _advance(m, slot, name, skip=()):
    """Register every field of the pipeline slot ``slot`` (a dict): ``v`` (valid) with reset,
    the rest reset-less."""
    out = {}
    for key, value in slot.items():
        if key in skip:
            continue
        if key == "v":
            out[key] = Signal(name=f"{name}_v")
            m.d.sync += out[key].eq(value)
        elif key == "meta":
            out[key] = _reg(m, value, f"{name}_meta", value.shape())
        else:
            out[key] = _reg(m, value, f"{name}_{key}")
    return out


class _IcrcPipeline(wiring.Component):
    """Shared front end: input register with the CRC's masked copy of each beat, registered XOR
    trees, the state accumulator; then a subclass back end, and the output queue."""

    #: Most beats one accepted input beat can add to the queue.
    _MAX_INC = 1
    #: ``o`` is an output register slice that the pipeline feeds directly while the queue is
    #: empty (one cycle less), rather than the queue's read port. Not for a block whose output
    #: must stay steady (a beat a cycle inside a packet, the transmit side's promise): a packet
    #: that meets a full slice goes on through the queue, two cycles behind.
    _OUTPUT_BYPASS = False
    #: The output queue's bypass (:class:`~rocegen.gateware.lib.fifo.PacketFifo`): while the
    #: queue is empty, a beat leaves in the cycle the pipeline's last stage gives it (two
    #: cycles less); a beat not taken stays offered from the queue's read port and the beats
    #: behind it follow one cycle behind the pipeline, so a packet still leaves steadily.
    _QUEUE_BYPASS = False
    #: Bytes beyond the IP + UDP + BTH headers that a packet must have.
    _EXTRA_MIN = 0
    #: ``i.ready``'s next value counts a beat in every cycle ``i.ready`` is high, not only in
    #: those a beat is taken: not from ``i.valid`` (for a back end whose input never adds a
    #: beat, ``straddle`` constant 0).
    _READY_FROM_BOUND = False

    def __init__(self, width, meta, offset, ip_version, ports):
        check_width(width)
        if meta is not None and not isinstance(meta, data.Layout):
            raise TypeError(f"meta must be a data.Layout or None, not {meta!r}")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError(f"offset must be an integer number of bytes, not {offset!r}")
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset}")
        if ip_version not in IP_VERSIONS or isinstance(ip_version, bool):
            raise ValueError(f"ip_version must be one of {IP_VERSIONS}, not {ip_version!r}")
        self.width = width
        self.meta = empty_meta() if meta is None else meta
        self.offset = offset
        self.ip_version = ip_version
        B = width // 8
        mask = icrc_mask(ip_version)
        self._mask = mask
        #: Shortest packet that is a RoCEv2 packet (shorter ones leave with ``error``).
        self.min_length = offset + len(mask) + self._EXTRA_MIN
        #: Beat index at which the beat counter saturates.
        self._idx_top = -(-self.min_length // B)

        # XOR tree plan: reduce the data terms until the loop (state taps + partials) fits in
        # two LUT levels
        eqs = Crc32.equations(B)
        state_max = max(len(s) for s, _ in eqs)
        partials = max(len(d) for _, d in eqs)
        self._xor_stages = 0
        mask = lut_levels(2 + (self._idx_top).bit_length())
        levels = {"keep count (beside the first XOR tree)": 1 + lut_levels(B // 2)}
        while self._xor_stages == 0 or state_max + partials > XOR_GROUP:
            self._xor_stages += 1
            tree = lut_levels(min(partials, XOR_GROUP))
            if self._xor_stages == 1:
                levels["input mask and data XOR tree 1"] = mask + tree
            else:
                levels[f"data XOR tree {self._xor_stages}"] = tree
            partials = -(-partials // XOR_GROUP)
        # (+1: the restart select after a last beat)
        levels["state loop (A^B s + partials)"] = lut_levels(state_max + partials + 1)
        levels.update(self._back_levels(B))
        #: Estimated depth in 6-input LUTs of each pipeline stage's logic (registers between).
        self.logic_levels = levels
        #: Pipeline registers from the input to the output queue.
        self.stages = self._xor_stages + 1 + self._back_stages()
        # in flight: the pipeline, the queue's two-cycle latency and one spare beat per input
        depth = 2
        while depth < self.stages + 3 + 2 * self._MAX_INC:
            depth *= 2
        #: Beats of the output queue.
        self.queue_depth = depth
        super().__init__({
            "i": In(PacketSignature(width, self.meta)),
            "o": Out(PacketSignature(width, self.meta)),
            **ports,
        })

    def _crc_copy(self, m, data_, keep, idx):
        """The beat as the CRC sees it: bytes before ``offset`` zero, masked bits one, bytes
        outside ``keep`` zero."""
        B = self.width // 8
        out = []
        # (a sum of products over the beat indices, which exclude each other, rather than a
        # chain of multiplexers: each bit is a function of its data and keep bits and the
        # index alone, one LUT, whatever the number of beats the masks cover)
        at = [idx == k for k in range(self._idx_top)]
        for j in range(B):
            zero = [at[k] for k in range(self._idx_top) if k * B + j < self.offset]
            bits = []
            for b in range(8):
                ones = [at[k] for k in range(self._idx_top)
                        if 0 <= k * B + j - self.offset < len(self._mask)
                        and (self._mask[k * B + j - self.offset] >> b) & 1]
                d = data_[8 * j + b] & keep[j]
                if zero:
                    d = d & ~Cat(*zero).any()
                if ones:
                    d = d | (keep[j] & Cat(*ones).any())
                bits.append(d)
            out.append(Cat(*bits))
        return Cat(*out)

    def _short(self, last, keep, idx):
        """The packet ending with this beat (beat ``idx``) is shorter than :attr:`min_length`."""
        B = self.width // 8
        terms = []
        for k in range(self._idx_top):
            need = self.min_length - k * B          # bytes this beat must have, >= 1
            terms.append((idx == k) if need > B else ((idx == k) & ~keep[need - 1]))
        return last & Cat(*terms).any() if terms else Const(0, 1)

    # ---- structure ----

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        i = self.i
        p = i.payload

        ready = Signal(init=1)
        accept = Signal()
        m.d.comb += [i.ready.eq(ready), accept.eq(i.valid & ready)]

        idx = Signal(range(self._idx_top + 1))          # beat index in the packet, saturating
        with m.If(accept):
            with m.If(p.last):
                m.d.sync += idx.eq(0)
            with m.Elif(idx != self._idx_top):
                m.d.sync += idx.eq(idx + 1)

        # the beats' data go around the CRC stages through a block-RAM delay line, written
        # every cycle with the input and read so that each beat's data meet it again at the
        # accumulator stage (W bits of shift-register LUTs saved; the pipeline never stalls, so
        # the delay is fixed)
        lag = self._xor_stages          # read address = write address - lag
        ddepth = 4
        while ddepth < lag + 2:
            ddepth *= 2
        dmem = m.submodules.data_delay = Memory(shape=self.width, depth=ddepth, init=[],
                                                attrs={"ram_style": "block"})
        dw = dmem.write_port()
        dr = dmem.read_port(domain="sync")
        wptr = Signal(range(ddepth))
        m.d.sync += wptr.eq(wptr + 1)
        m.d.comb += [dw.addr.eq(wptr), dw.data.eq(p.data), dw.en.eq(1),
                     dr.addr.eq((wptr - lag)[:len(wptr)]), dr.en.eq(1)]

        # the XOR stages over the data terms; the first takes the CRC's copy of the input beat
        # (the mask is one LUT level in front of its tree)
        gaps = Signal(B, name="in_gaps")        # bytes missing from the beat, top lane first
        m.d.comb += gaps.eq(Cat(*(~p.keep[j] for j in reversed(range(B)))))
        s = {"v": accept, "keep": p.keep, "last": p.last, "err": p.error, "meta": p.meta,
             "short": self._short(p.last, p.keep, idx),
             "z": keep_count(gaps)[:(B - 1).bit_length()]}
        cd = Signal(self.width, name="in_crc_copy")
        m.d.comb += cd.eq(self._crc_copy(m, p.data, p.keep, idx))
        eqs = Crc32.equations(B)
        terms = [[cd[j] for j in d_taps] for _, d_taps in eqs]
        for n in range(self._xor_stages):
            regs = []
            per_bit = []
            for bit_terms in terms:
                chunks = _chunks(bit_terms, XOR_GROUP)
                per_bit.append(len(chunks))
                regs.extend(_xor(c) for c in chunks)
            part = _reg(m, Cat(*regs), f"x{n + 1}_part")
            pos = 0
            terms = []
            for count in per_bit:
                terms.append([part[pos + k] for k in range(count)])
                pos += count
            prev = s
            s = _advance(m, s, f"x{n + 1}")
        pre = s
        z_early = prev["z"]         # the z of the beat that reaches ``pre`` in the next cycle

        # the state loop: state after each beat; reset to the start state after a last beat
        start = Crc32.zeros_int(ICRC_SEED, -self.offset)
        acc = Signal(32, init=start)
        nxt = Cat(*(_xor([acc[j] for j in s_taps] + part_terms)
                    for (s_taps, _), part_terms in zip(eqs, terms, strict=True)))
        with m.If(pre["v"]):
            with m.If(pre["last"]):
                m.d.sync += acc.eq(start)
            with m.Else():
                m.d.sync += acc.eq(nxt)
        s = _advance(m, pre, "acc")
        s["d"] = dr.data                # the data of the beat at this stage (see above)

        w, absorbed, straddle = self._back(m, pre, s, accept, z_early, nxt)

        # output queue and flow control
        # (block RAM from W = 256 on: a few beats of W bits would take W/14 * 8 LUTs of
        # distributed RAM)
        q = m.submodules.queue = PacketFifo(self.width, self.queue_depth, self.meta,
                                            store_and_forward=False, drop_errors=False,
                                            overflow="wait", bypass=self._QUEUE_BYPASS,
                                            ram_style="block" if self.width >= 256 else None)
        m.d.comb += [
            q.i.payload.data.eq(w["d"]),
            q.i.payload.keep.eq(w["keep"]),
            q.i.payload.last.eq(w["last"]),
            q.i.payload.error.eq(w["err"]),
        ]
        if self._OUTPUT_BYPASS:
            self._output_slice(m, q, w)
        else:
            m.d.comb += [q.i.valid.eq(w["v"]), q.i.payload.meta.eq(w["meta"])]
            wiring.connect(m, q.o, wiring.flipped(self.o))

        # beats accepted (plus ICRC beats to come) and not yet sent on ``o``
        top = self.queue_depth + 2 * self._MAX_INC
        outstanding = Signal(range(top + 1))
        inc = accept + straddle
        dec = (self.o.valid & self.o.ready) + absorbed
        after = Signal(range(top + 1))
        m.d.comb += after.eq(outstanding + inc - dec)
        m.d.sync += outstanding.eq(after)
        if self._READY_FROM_BOUND:
            # (at least ``after``, so the queue still never overflows; exact while ``i.ready`` is
            # low, so it rises again as soon as there is room)
            bound = Signal(range(top + 1))
            m.d.comb += bound.eq(outstanding + ready - dec)
            m.d.sync += ready.eq(bound + self._MAX_INC <= self.queue_depth)
        else:
            m.d.sync += ready.eq((after + self._MAX_INC <= self.queue_depth) & ~straddle)
        return m

    def _output_slice(self, m, q, w):
        """``o`` from an output register slice fed by the pipeline while the queue is empty."""
        # the output register slice: a beat goes into it straight from the pipeline while the
        # queue is empty and the slice takes it, else through the queue behind the beats before
        # it (the queue's read data and the pipeline's beat meet in the slice's one multiplexer
        # per bit)
        # (per packet: a packet's beats may go beside the queue from its first on, or from any
        # on through the queue, never back; the metadata are its first beat's)
        out = m.submodules.output = RegisterSlice(self.width, self.meta)
        beside = Signal()
        w_first = Signal(init=1)
        was_beside = Signal()
        meta_hold = Signal(self.meta)
        m.d.comb += [
            beside.eq(Mux(w_first, q.empty, was_beside) & out.i.ready),
            q.i.payload.meta.eq(Mux(w_first, w["meta"].as_value(), meta_hold.as_value())),
        ]
        with m.If(w["v"]):
            m.d.sync += [w_first.eq(w["last"]), was_beside.eq(beside)]
            with m.If(w_first):
                m.d.sync += meta_hold.eq(w["meta"])
        m.d.comb += [
            q.i.valid.eq(w["v"] & ~beside),
            out.i.valid.eq(Mux(beside, w["v"], q.o.valid)),
            out.i.payload.eq(Mux(beside, q.i.payload.as_value(), q.o.payload.as_value())),
            q.o.ready.eq(out.i.ready),
        ]
        direct = w.get("direct")
        if direct is not None:
            # a beat straight from the compare stage, in a cycle nothing is held (so ``w``
            # offers nothing and the beats before it have left it): the queue is empty and the
            # slice takes it, and the packet's beats before it (if any) went beside the queue
            m.d.comb += direct["room"].eq(q.empty & out.i.ready & (w_first | was_beside))
            with m.If(direct["v"]):
                m.d.sync += [w_first.eq(direct["last"]), was_beside.eq(1)]
                with m.If(w_first):
                    m.d.sync += meta_hold.eq(direct["meta"])
                m.d.comb += [
                    out.i.valid.eq(1),
                    out.i.payload.data.eq(direct["d"]),
                    out.i.payload.keep.eq(direct["keep"]),
                    out.i.payload.last.eq(direct["last"]),
                    out.i.payload.error.eq(direct["err"]),
                    out.i.payload.meta.eq(Mux(w_first, direct["meta"].as_value(),
                                              meta_hold.as_value())),
                ]
        wiring.connect(m, out.o, wiring.flipped(self.o))


class IcrcInsert(_IcrcPipeline):
    """Append the RoCEv2 ICRC to each packet.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata of the packets, passed through.
    offset : int
        Bytes in front of the IP header, not covered by the ICRC: 14 (default) for an untagged
        Ethernet frame, 18 with one 802.1Q tag, 0 for a stream that starts at the IP header.
        See the module documentation for why 14 is the default.
    ip_version : 4 or 6
        Which fields are masked: IPv4 (IHL 5) TOS, TTL and header checksum, or IPv6 traffic
        class, flow label and hop limit; then UDP checksum and BTH byte 4.

    Ports
    -----
    i : In(PacketSignature(width, meta))
        Frames: ``offset`` bytes, then the IP datagram without its ICRC (IP header, UDP, BTH,
        extension headers, payload, pad). The IP and UDP lengths must already count the 4 ICRC
        bytes; the block changes no header.
    o : Out(PacketSignature(width, meta))
        The same frames with the 4 ICRC bytes after the last byte, least significant first
        (``zlib.crc32(...).to_bytes(4, "little")``). Masked fields are masked only in the CRC's
        copy: every input byte leaves unchanged.

    Behaviour
    ---------
    * Byte order: lane order as on the wire (byte 0 in lane 0). The ICRC ends at any byte: it
      fills lanes ``n .. n+3`` of the last beat (``n`` bytes), or, when ``n > W/8 - 4``, the
      lanes left in it and the start of one extra beat.
    * Latency: :attr:`latency` cycles (2 + the XOR stages: 3 at every width 64..512) from the
      cycle the last beat of a packet is accepted to the cycle its last output beat is first
      offered, when the output is not held off (its queue is empty, so the beats pass beside
      it); one more when the ICRC needs an extra beat. After a beat ``o`` did not take, the
      beats follow one cycle later until the queue is empty again.
    * Throughput: one beat per cycle sustained over back-to-back packets while ``o.ready`` is
      high; the only idle input cycle is the one right after a last beat whose ICRC needs an
      extra beat (that cycle carries the extra beat).
    * Backpressure: ``i.ready`` is a register (see the module documentation): the pipeline runs
      freely into a cut-through queue of :attr:`queue_depth` beats, and ``i.ready`` drops when
      the beats in flight and queued would not leave room for one more beat and its ICRC beat.
      ``o`` comes from the pipeline's last stage (registers) while the queue is empty, else
      from the queue's read port (``o.ready`` drives its read enable combinationally), so that
      a packet leaves steadily (a beat in every cycle ``o`` takes one); put a
      :class:`~rocegen.gateware.lib.buffer.RegisterSlice` behind it to register both.
    * ``error`` of the input's last beat goes to the output's last beat. A packet shorter than
      :attr:`min_length` (``offset`` + IP + UDP + BTH headers) is not a RoCEv2 packet: it still
      gets 4 bytes appended but leaves with ``error`` set.
    * Pipeline depth estimates are in :attr:`logic_levels`.
    """

    _MAX_INC = 2
    _QUEUE_BYPASS = True

    def __init__(self, width, meta=None, *, offset=14, ip_version=4):
        super().__init__(width, meta, offset, ip_version, {})
        #: Cycles from a packet's last input beat to its last output beat (no extra beat).
        self.latency = self.stages

    def _back_stages(self):
        return 1           # rewind and merge

    @staticmethod
    def _back_levels(B):
        return {
            "rewind matrix select (beside the XOR tree)": lut_levels((B - 1).bit_length()),
            # 32 AND-XOR pairs, after the state loop in the accumulator's cycle: that stage's
            # depth is the two added
            "rewind (after the state loop)": 1 + lut_levels(-(-32 // 3)),
            # lane byte = kept data, or ICRC byte k where lane == n + k: two 6-input halves
            "merge the ICRC into the last beat": 2,
        }

    def _back(self, m, pre, s, accept, z_early, nxt):
        B = self.width // 8
        p = self.i.payload
        straddle_in = Signal()
        m.d.comb += straddle_in.eq(accept & p.last & p.keep[B - ICRC_BYTES])

        # rewind matrix A**-z, chosen a cycle before the accumulator's (from the z of the beat
        # that reaches it next), so that the rewind runs on the loop's next state in the
        # accumulator's cycle and the ICRC is a register beside the last beat
        mats = []
        for z in range(B):
            value = 0
            for row, taps in enumerate(Crc32.zeros_equations(-z)):
                for col in taps:
                    value |= 1 << (32 * row + col)
            mats.append(value)
        # each matrix bit is a function of z alone: from W = 256 on a block-RAM ROM of B words
        # of 1024 bits read with z (saves a LUT and a flip-flop per matrix bit), below it a ROM
        # of B bits per matrix bit in LUTs, registered
        if B >= 32:
            rom = m.submodules.rewind_rom = Memory(shape=32 * 32, depth=B, init=mats,
                                                   attrs={"ram_style": "block"})
            rp = rom.read_port(domain="sync")
            m.d.comb += [rp.addr.eq(z_early), rp.en.eq(1)]
            mat = rp.data
        else:
            mat = Signal(32 * 32, name="rewind_matrix", reset_less=True)
            m.d.sync += mat.eq(Cat(*(_rom([(v >> bit) & 1 for v in mats], z_early)
                                     for bit in range(32 * 32))))

        # rewind: the state after the packet's last byte (from the loop's next state, in the
        # accumulator's cycle)
        rewound = Cat(*((mat[32 * row:32 * row + 32] & nxt).xor() for row in range(32)))
        u = s
        crc = _reg(m, ~rewound, "rw_icrc")       # the ICRC, byte 0 first on the wire

        # merge: ICRC bytes into lanes n .. n+3 of the last beat, spilling into lanes B..B+3
        keep = u["keep"]

        def kept(x):        # keep extended: lanes below 0 are kept, lanes from B on are not
            return Const(1, 1) if x < 0 else (keep[x] if x < B else Const(0, 1))

        at = Signal(B + 1, name="rw_end")          # one-hot: at[x] when n == x
        m.d.comb += at.eq(Cat(*(kept(x - 1) & ~kept(x) for x in range(B + 1))))
        merged = []
        for lane in range(B + ICRC_BYTES):
            byte = Const(0, 8)
            for k in range(ICRC_BYTES):
                if 0 <= lane - k <= B:
                    byte = byte | (crc[8 * k:8 * k + 8] & at[lane - k].replicate(8))
            if lane < B:
                byte = Mux(keep[lane], u["d"][8 * lane:8 * lane + 8], byte)
            merged.append(byte)
        ext_keep = Cat(*(kept(lane - ICRC_BYTES) for lane in range(B + ICRC_BYTES)))
        straddle = keep[B - ICRC_BYTES]
        bad = u["err"] | u["short"]

        w = {
            "v": Signal(name="mg_v"),
            "d": Signal(self.width, name="mg_d", reset_less=True),
            "keep": Signal(B, name="mg_keep", reset_less=True),
            "last": Signal(name="mg_last", reset_less=True),
            "err": Signal(name="mg_err", reset_less=True),
            "meta": Signal(self.meta, name="mg_meta", reset_less=True),
        }
        tail_pending = Signal()
        tail_d = Signal(8 * ICRC_BYTES, reset_less=True)
        tail_keep = Signal(ICRC_BYTES, reset_less=True)
        tail_err = Signal(reset_less=True)
        lo = 8 * ICRC_BYTES
        m.d.sync += w["d"][lo:].eq(Cat(*merged[ICRC_BYTES:B]))
        with m.If(u["v"]):
            m.d.sync += [
                w["v"].eq(1),
                w["d"][:lo].eq(Cat(*merged[:ICRC_BYTES])),
                w["keep"].eq(ext_keep[:B]),           # all ones on a beat that is not last
                w["last"].eq(u["last"] & ~straddle),
                w["err"].eq(u["last"] & ~straddle & bad),
                w["meta"].eq(u["meta"]),
                tail_pending.eq(u["last"] & straddle),
                tail_d.eq(Cat(*merged[B:])),
                tail_keep.eq(ext_keep[B:]),
                tail_err.eq(bad),
            ]
        with m.Elif(tail_pending):
            m.d.sync += [
                w["v"].eq(1),
                w["d"][:lo].eq(tail_d),
                w["keep"].eq(tail_keep),
                w["last"].eq(1),
                w["err"].eq(tail_err),
                tail_pending.eq(0),
            ]
        with m.Else():
            m.d.sync += w["v"].eq(0)

        return w, Const(0, 1), straddle_in


class IcrcCheck(_IcrcPipeline):
    """Check and strip the RoCEv2 ICRC of each packet.

    Parameters
    ----------
    width, meta, offset, ip_version
        As for :class:`IcrcInsert`.

    Ports
    -----
    i : In(PacketSignature(width, meta))
        Frames: ``offset`` bytes, then the IP datagram ending in its ICRC. The packet must end
        where the datagram ends: no Ethernet padding (trim it first; a padded frame fails).
    o : Out(PacketSignature(width, meta))
        The same frames without the last 4 bytes. ``error`` is set on the last beat when the
        ICRC is wrong, when the packet is shorter than :attr:`min_length` (``offset`` + IP + UDP
        + BTH + ICRC), or when the input's last beat had ``error``; a store-and-forward FIFO
        behind it drops such packets. A packet of 4 bytes or fewer leaves as an empty packet
        (one beat, ``keep == 0``) with ``error`` set.
    icrc_bad : Out(1)
        One-cycle strobe per packet whose ICRC is wrong or which is too short to carry one,
        :attr:`bad_latency` cycles after its last beat is accepted (it does not wait for
        ``o``).

    Behaviour
    ---------
    * Latency: the last output beat of a packet is first offered :attr:`latency` cycles (3 + the
      XOR stages: 4 at every width 64..512) after its last input beat is accepted, if the output
      is not held off, when a beat of it had to be held back. A beat is held back at the
      compare in case the next one holds nothing but ICRC bytes (then the held beat becomes the
      last, and leaves merged with it, one cycle less), unless that next beat is already in the
      stage before (the pipeline never stalls, so it comes next) and is not such a beat, or
      it is a last beat itself: then, with no beat held, it goes from the compare straight
      into the output slice when the queue is empty, the slice takes it, and the packet's beats
      before it went that way too (else it is held like any other). So a packet whose beats
      come back to back, or of one beat (at W = 512 an ACK with its IPv4 and UDP headers, or a
      READ request), leaves ``latency - 1`` cycles after its last beat, when the output takes
      it.
    * Throughput: one beat per cycle sustained over back-to-back packets; the block never idles
      its input while ``o.ready`` is high. A packet whose last beat holds only ICRC bytes leaves
      one beat shorter.
    * Backpressure: as for :class:`IcrcInsert` (``i.ready`` is a register), but ``o`` is an
      output :class:`~rocegen.gateware.lib.buffer.RegisterSlice` (every output a register,
      ``o.ready`` ends in it), fed by the pipeline directly while the cut-through queue of
      :attr:`queue_depth` beats is empty and the slice takes the beat: a packet may leave that
      way from its first beat, or go on through the queue (and stay on it) when the slice is
      full. So a packet may pause inside when ``o`` has been held.
    * Byte order: lane order as on the wire; bytes other than the ICRC leave unchanged.
    """

    _EXTRA_MIN = ICRC_BYTES
    _OUTPUT_BYPASS = True
    _READY_FROM_BOUND = True

    def __init__(self, width, meta=None, *, offset=14, ip_version=4):
        super().__init__(width, meta, offset, ip_version, {"icrc_bad": Out(1)})
        #: Cycles from a packet's last input beat to its last output beat (one less when none of
        #: its beats is held back: back to back, or of one beat).
        self.latency = self.stages + 1
        #: Cycles from a packet's last input beat to its ``icrc_bad`` strobe.
        self.bad_latency = self.stages - 1

    def _back_stages(self):
        return 1           # compare and hold (the emit is combinational, into the queue)

    @staticmethod
    def _back_levels(B):
        return {
            "residue select (beside the loop)": lut_levels((B - 1).bit_length()),
            # the compare, 32 XOR pairs and the short flag; then hold it, or emit it merged
            # into the held beat
            "compare and strip the ICRC (hold, emit)": 1 + lut_levels(-(-33 // 3)) + 2,
        }

    def _back(self, m, pre, s, accept, z_early, nxt):
        B = self.width // 8
        fin = _reg(m, nxt, "acc_fin")       # the state after the beat at this stage
        # the residue advanced over the z zero bytes that followed the packet in its last beat
        table = [Crc32.zeros_int(Crc32.RESIDUE, z) for z in range(B)]
        expect = _reg(m, Cat(*(_rom([(v >> bit) & 1 for v in table], pre["z"])
                               for bit in range(32))), "expect")
        x = s
        bad = Signal(name="cmp_bad")
        m.d.comb += [bad.eq((fin != expect) | s["short"]),
                     self.icrc_bad.eq(x["v"] & x["last"] & bad)]

        # hold one beat back: when the next beat holds only ICRC bytes (n <= 4), the held beat
        # becomes the last one and loses the ICRC bytes it carries
        h = {
            "v": Signal(name="hold_v"),
            "d": Signal(self.width, name="hold_d", reset_less=True),
            "keep": Signal(B, name="hold_keep", reset_less=True),
            "last": Signal(name="hold_last", reset_less=True),
            "err": Signal(name="hold_err", reset_less=True),
            "meta": Signal(self.meta, name="hold_meta", reset_less=True),
        }
        w = {k: (Signal(name="out_v") if k == "v" else Signal(v.shape(), name=f"out_{k}"))
             for k, v in h.items()}
        x_fail = x["err"] | bad
        only_icrc = ~x["keep"][ICRC_BYTES]                 # n <= 4
        # a beat leaves at once, when nothing is held and it can go beside the queue into the
        # output slice (``room``, from ``_output_slice``), if it has nothing to be held back
        # for: it is a last beat, or the next beat is already in the stage before (``pre``:
        # the pipeline never stalls, so it comes next) and is not a last beat of ICRC bytes only
        room = Signal(name="direct_room")
        direct = Signal(name="direct")
        next_known = pre["v"] & ~(pre["last"] & ~pre["keep"][ICRC_BYTES])
        m.d.comb += direct.eq(x["v"] & (x["last"] | next_known) & ~h["v"] & room)
        emit = h["v"] & (h["last"] | x["v"])
        merge = Signal()
        m.d.comb += merge.eq(x["v"] & x["last"] & only_icrc & h["v"] & ~h["last"])
        m.d.comb += [
            w["v"].eq(emit),
            w["d"].eq(h["d"]),
            w["meta"].eq(h["meta"]),
            w["keep"].eq(Mux(merge, Cat(Const(-1, B - ICRC_BYTES).as_unsigned(),
                                        x["keep"][:ICRC_BYTES]), h["keep"])),
            w["last"].eq(h["last"] | merge),
            w["err"].eq(Mux(merge, x_fail, h["err"])),
        ]
        with m.If(x["v"] & ~merge & ~direct):
            m.d.sync += [
                h["v"].eq(1),
                h["d"].eq(x["d"]),
                h["keep"].eq(Mux(x["last"], x["keep"][ICRC_BYTES:], x["keep"])),
                h["last"].eq(x["last"]),
                h["err"].eq(x["last"] & x_fail),
                h["meta"].eq(x["meta"]),
            ]
        with m.Elif(emit):
            m.d.sync += h["v"].eq(0)

        w["direct"] = {"room": room, "v": direct, "d": x["d"],
                       "keep": Mux(x["last"], x["keep"][ICRC_BYTES:], x["keep"]),
                       "last": x["last"], "err": x["last"] & x_fail, "meta": x["meta"]}
        return w, merge, Const(0, 1)
