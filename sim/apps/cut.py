"""The link of ``rocegen sim serve`` cut while a file says so: a host that vanishes, or one whose
DREQ is lost (:class:`Cut`)."""

from pathlib import Path

from rocegen.sim.models.ibcm.frames import unwrap
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc
from rocegen.wire.headers import BTH, ETH, IPV4, UDP, UDP_PORT_ROCEV2
from rocegen.wire.simwire import udp_dst_port

__all__ = ["Cut"]


class Cut:
    """The link cut both ways while ``path`` exists (looked at with the status, about once a
    second of wall time): a host that vanishes. It begins at the first RoCEv2 request on an RC
    QP that the FPGA sends once the file is seen (that request is lost, so the FPGA always has
    one outstanding when the host goes: its QP's retries run out), and ends when the file is
    gone. Meanwhile every frame is dropped both ways, ARP and the connection managers' too (a
    host that is gone answers nothing): those from the FPGA after its capture (the capture shows
    what the port sent), those to it before. A file whose first word is ``dreq`` cuts less:
    while it exists, only the CM's DREQs to the FPGA are dropped (a host whose one DREQ is
    lost), and ``rocegen sim serve``'s lossy links lose nothing (:meth:`lossless`): with a lost
    frame the host's last ACK could be lost too, and the FPGA's QP would then fail on its
    unanswered request (the peer's QP is gone) instead of going quiet. ``counters`` (the status
    file's ``cut``): ``armed`` and ``active`` (0 or 1), ``cuts`` begun, frames
    ``dropped_to_fpga`` and ``dropped_from_fpga``, the cycles (counted as ``cycles``) the last
    cut began and ended; ``dreq`` (0 or 1) and ``dropped_dreqs``."""

    def __init__(self, path):
        self.path = path
        self.counters = {"armed": 0, "active": 0, "cuts": 0, "dropped_to_fpga": 0,
                         "dropped_from_fpga": 0, "began": None, "ended": None, "dreq": 0,
                         "dropped_dreqs": 0}

    def look(self, cycle):
        """The file looked at again in cycle ``cycle``."""
        c = self.counters
        try:
            words = Path(self.path).read_text().split()[:1] if self.path else None
        except FileNotFoundError:
            words = None
        there = words is not None
        c["dreq"] = int(words == ["dreq"])
        if there and not c["dreq"] and not c["active"]:
            c["armed"] = 1
        elif not there and (c["active"] or c["armed"]):
            if c["active"]:
                c["ended"] = cycle
            c["armed"] = c["active"] = 0

    def lossless(self):
        """Whether the lossy links must lose nothing now: while the file says ``dreq``."""
        return bool(self.counters["dreq"])

    def from_fpga(self, frame, cycle):
        """Whether ``frame`` from the FPGA is dropped (the cut begins at an armed request)."""
        c = self.counters
        if c["armed"] and _rc_request(frame):
            c.update(armed=0, active=1, began=cycle, cuts=c["cuts"] + 1)
        if c["active"]:
            c["dropped_from_fpga"] += 1
        return bool(c["active"])

    def to_fpga(self, frame):
        """Whether ``frame``, to the FPGA, is dropped."""
        c = self.counters
        if c["active"]:
            c["dropped_to_fpga"] += 1
            return True
        if c["dreq"] and _is_dreq(frame):
            c["dropped_dreqs"] += 1
            return True
        return False


def _is_dreq(frame):
    """Whether ``frame`` carries a CM DREQ to QP1."""
    try:
        mad = unwrap(frame).mad
    except ValueError:
        return False
    return I.MAD_HDR.unpack(mad)["attribute_id"] == I.ATTR_DREQ


def _rc_request(frame):
    """Whether ``frame`` is a RoCEv2 request (not an acknowledge) on an RC QP (not QP1's
    MADs)."""
    if udp_dst_port(frame) != UDP_PORT_ROCEV2:
        return False
    at = ETH.length + IPV4.length + UDP.length
    if len(frame) < at + BTH.length:
        return False
    bth = BTH.unpack(frame[at:at + BTH.length])
    return bth["dest_qp"] != 1 and opc.is_request(bth["opcode"])
