"""How the host RNIC model answers (:class:`Behaviour`; :data:`IDEAL`, the kinder peer), and the
AETH credit codes of its ACKs."""

import dataclasses
from dataclasses import dataclass

__all__ = ["Behaviour", "IDEAL", "CREDITS", "credit_code"]


#: IBTA 9.7.5.1.2: AETH credit code n (0..30) advertises at least ``CREDITS[n]`` receive WQEs
CREDITS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
           1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)


def credit_code(wqes):
    """The AETH credit code advertising ``wqes`` receive WQEs: the largest code whose count
    is not more than ``wqes``."""
    code = 0
    while code + 1 < len(CREDITS) and CREDITS[code + 1] <= wqes:
        code += 1
    return code


@dataclass(frozen=True)
class Behaviour:
    """How the NIC answers (see the module documentation); every default is a ConnectX's.

    ``credits``: ``"rq"`` (the receive WQEs posted), ``"none"`` (0x1F) or ``"random"``.
    ``ack_every``: an ACK after this many packets executed (``None``: only on AckReq).
    ``ack_timer_ns``: the longest a pending ACK of an AckReq packet waits (0: sent at once).
    ``response_ns``: ``(lo, hi)`` delay of every answer, drawn uniformly. ``min_frame``: shortest
    frame taken, bytes before the FCS. ``mtu``: largest IP packet taken (``None``: no limit).
    ``max_msg``: largest RETH DMA length (``None``: no limit). ``dup_ack``, ``ghost_ack``,
    ``runt``, ``oversize``: fault probabilities per ACK sent; ``oversize_len``: ``(lo, hi)``
    IP length of an oversize frame. ``seed``: of the random choices.
    """
    credits: str = "rq"
    ack_every: int | None = 16
    ack_timer_ns: float = 1000.0
    response_ns: tuple = (300.0, 1200.0)
    min_frame: int = 60
    mtu: int | None = 4200
    max_msg: int | None = 1 << 31
    dup_ack: float = 0.0
    ghost_ack: float = 0.0
    runt: float = 0.0
    oversize: float = 0.0
    oversize_len: tuple = (9001, 9600)
    seed: int = 0

    def __post_init__(self):
        if self.credits not in ("rq", "none", "random"):
            raise ValueError(f"credits must be 'rq', 'none' or 'random', not {self.credits!r}")
        if self.ack_every is not None and (not isinstance(self.ack_every, int)
                                           or self.ack_every < 1):
            raise ValueError(f"ack_every must be None or an integer >= 1, not {self.ack_every!r}")
        if not self.ack_timer_ns >= 0:
            raise ValueError(f"ack_timer_ns must be >= 0, not {self.ack_timer_ns!r}")
        for name in ("response_ns", "oversize_len"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"{name} must be a range (lo, hi) with 0 <= lo <= hi, not "
                                 f"{getattr(self, name)!r}")
        if not isinstance(self.min_frame, int) or not 0 <= self.min_frame <= 60:
            raise ValueError(f"min_frame must be 0..60 bytes, not {self.min_frame!r}")
        if self.mtu is not None and not 68 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be None or 68..65535 bytes, not {self.mtu!r}")
        if self.max_msg is not None and not 0 <= self.max_msg <= 0xFFFFFFFF:
            raise ValueError(f"max_msg must be None or 0..2^32-1, not {self.max_msg!r}")
        for name in ("dup_ack", "ghost_ack", "runt", "oversize"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be a probability in [0, 1], not "
                                 f"{getattr(self, name)!r}")

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


#: The kind peer of earlier versions of this model: an ACK (credit code 0x1F) for every AckReq
#: packet, at once; no port MTU, no message size limit, frames down to the Ethernet header.
IDEAL = Behaviour(credits="none", ack_every=None, ack_timer_ns=0.0, response_ns=(0.0, 0.0),
                  min_frame=0, mtu=None, max_msg=None)
