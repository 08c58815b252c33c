"""The packet stream: the one stream type every block of rocegen speaks.

A packet stream is an :class:`amaranth.lib.stream.Signature` whose payload is
:func:`packet_layout`:

``data`` (W bits)
    Byte ``i`` of the beat is ``data[8*i : 8*i+8]``; byte 0 of a packet is in the low lane of its
    first beat, as on AXI-Stream.
``keep`` (W/8 bits)
    Which bytes of the beat are part of the packet. Always a *thermometer* code: every beat but
    the last is full (all ones), the last beat has its ``n`` bytes in lanes ``0 .. n-1``. A
    packet with no bytes at all is one beat with ``keep == 0`` and ``last == 1``.
``last``
    Marks the final beat of a packet.
``error``
    Meaningful on the last beat: the packet is damaged (bad FCS, truncated, failed a check made
    at its end) and must be discarded by whoever acts on it. Stages that drop whole packets treat
    ``error`` as a drop request.
``meta``
    Sideband fields describing the packet (parsed headers on receive, headers to build on
    transmit). Constant over all beats of a packet.

W is a power of two from 64 to 512 bits. Handshake as in :mod:`amaranth.lib.stream`: a beat moves
when ``valid`` and ``ready`` are both high; ``valid`` never waits for ``ready``.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream

__all__ = ["WIDTHS", "check_width", "packet_layout", "PacketSignature", "keep_mask",
           "keep_count", "empty_meta", "first_beat", "leading_lanes", "is_packet_stream"]

WIDTHS = (64, 128, 256, 512)


def check_width(width, *, what="width", allowed=WIDTHS):
    """Validate a data width, raising a precise error."""
    if not isinstance(width, int) or isinstance(width, bool):
        raise TypeError(f"{what} must be an integer number of bits, not {width!r}")
    if width not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(str, allowed))} bits, not {width}")
    return width


def empty_meta():
    return data.StructLayout({})


def packet_layout(width, meta=None):
    """Payload layout of a packet stream ``width`` bits wide with ``meta`` sideband."""
    check_width(width)
    return data.StructLayout({
        "data": unsigned(width),
        "keep": unsigned(width // 8),
        "last": unsigned(1),
        "error": unsigned(1),
        "meta": empty_meta() if meta is None else meta,
    })


def PacketSignature(width, meta=None, **kwargs):
    """:class:`amaranth.lib.stream.Signature` of a packet stream."""
    return stream.Signature(packet_layout(width, meta), **kwargs)


def keep_mask(count, lanes):
    """Thermometer ``keep`` with the low ``count`` of ``lanes`` bits set (``count`` may be a Value
    from 0 to ``lanes``)."""
    if isinstance(count, int):
        if not 0 <= count <= lanes:
            raise ValueError(f"count {count} out of 0..{lanes}")
        return Const((1 << count) - 1, lanes)
    count = Value.cast(count)
    return Cat(*(count > i for i in range(lanes)))


def keep_count(keep):
    """Number of bytes in a thermometer ``keep``, as a Value of ``range(lanes + 1)``.

    Finds the one-hot boundary ``keep[i] & ~keep[i+1]`` and encodes it with OR trees, so the
    logic depth is logarithmic in the lane count (not a ripple count)."""
    keep = Value.cast(keep)
    lanes = len(keep)
    edge = [keep[i] & (~keep[i + 1] if i + 1 < lanes else 1) for i in range(lanes)]
    nbits = unsigned(lanes).width
    bits = []
    for b in range(nbits):
        terms = [edge[i] for i in range(lanes) if ((i + 1) >> b) & 1]
        bits.append(Cat(*terms).any() if terms else Const(0, 1))
    return Cat(*bits)


def first_beat(m, s):
    """A signal that is high while the beat offered on packet stream ``s`` is the first of its
    packet (one register, updated in module ``m``'s sync domain)."""
    in_packet = Signal()
    with m.If(s.valid & s.ready):
        m.d.sync += in_packet.eq(~s.payload.last)
    return ~in_packet


def leading_lanes(m, beat, take, width, nbytes, *, count_to=None):
    """The first ``nbytes`` bytes of each packet of a stream, for header checks made at a later
    beat: ``(lanes, idx)``. ``lanes`` (``8 * ceil(nbytes / (width/8))`` bits) holds the packet's
    first beats, the beat offered now (``beat``) in its own place combinationally and the earlier
    ones from registers; ``idx`` is the index of the beat offered now, counting up to
    ``count_to`` (default: the number of beats ``lanes`` holds) and staying there. ``take`` is
    high when ``beat`` moves. Bytes beyond a short packet are the lanes' stale contents."""
    B = width // 8
    nb = -(-nbytes // B)
    top = nb if count_to is None else count_to
    idx = Signal(range(top + 1))
    cap = Signal(nb * width)
    with m.If(take):
        for k in range(nb):
            with m.If(idx == k):
                m.d.sync += cap[k * width:(k + 1) * width].eq(beat.data)
        with m.If(beat.last):
            m.d.sync += idx.eq(0)
        with m.Elif(idx != top):
            m.d.sync += idx.eq(idx + 1)
    lanes = Cat(*(Mux(idx == k, beat.data, cap[k * width:(k + 1) * width]) for k in range(nb)))
    return lanes, idx


def _is_packet_layout(layout):
    return (isinstance(layout, data.StructLayout)
            and set(layout.members) == {"data", "keep", "last", "error", "meta"})


def is_packet_stream(member):
    """Whether ``member`` (a signature member) is a packet stream (:func:`PacketSignature`)."""
    if not (member.is_signature and isinstance(member.signature, stream.Signature)):
        return False
    try:
        layout = data.Layout.cast(member.signature.members["payload"].shape)
    except TypeError:
        return False                # (a plain shape, e.g. a QP index: a record stream)
    return _is_packet_layout(layout)
