"""Reference models of header insertion and removal (any header from the header table)."""

__all__ = ["packetize", "depacketize"]


def packetize(header, values, payload):
    """The bytes a packetizer emits: the packed header, then the payload."""
    return header.pack(**values) + bytes(payload)


def depacketize(header, frame):
    """``(values, payload)`` a depacketizer emits for ``frame``, or ``None`` when it is a runt."""
    frame = bytes(frame)
    if len(frame) < header.length:
        return None
    return header.unpack(frame[:header.length]), frame[header.length:]
