"""The host side of ``rocegen sim serve``: what sits on the far end of the simulated FPGA's
Ethernet port, in plain Python with real sockets.

A bench host has one Ethernet port with one MAC and IPv4 address, behind which two things
answer: the operating system's network stack (ARP, and ordinary UDP sockets such as a host
tool's connection-manager socket) and the RDMA NIC (RoCEv2 on UDP 4791). :class:`HostSide`
plays that port:

* **Tunnel** (the operating system's part). A UDP socket on ``listen:cm_port`` (default
  127.0.0.1:17185) takes the datagrams a host tool sends; each becomes an Ethernet/IPv4/UDP frame
  from the host's addresses to the FPGA's connection-manager port. Frames the FPGA sends to the
  host's IP that are UDP but not RoCEv2 (the connection manager's replies) are delivered as
  datagrams to ``listen`` at the destination port they name, from a socket bound to their source
  port when that port is free (0x8765 for replies), so a tool sees what it would see on a bench.
  ARP requests for the host's IP are answered here, as the host's kernel would.
* **TAP** (instead of the tunnel, with ``tap``): the host's kernel is the operating system's
  part. Every FPGA frame goes to the TAP interface (ARP, ICMP, the connection manager's replies,
  and the RoCEv2 frames too with ``roce="tap"``, the default) and every frame the kernel or a
  program on the interface sends on it goes to the FPGA, so tools in the interface's network
  namespace reach the FPGA at its own address, and a RoCE peer using the host's own sockets on
  the interface (a packet socket, a soft-RoCE device) gets the FPGA's RoCEv2 frames. With
  ``roce="wire"`` the RoCEv2 frames go to the wire instead, as without a TAP.
* **VLAN** (with ``vlan``): the FPGA's port is a tagged (trunk) port of that 802.1Q VLAN and
  everything on this side an untagged (access) port, as a switch would join them: frames from
  the FPGA must carry the tag (others are dropped and counted in ``vlan_drop``) and lose it
  (padded again to 60 bytes) before the tunnel, the TAP or the wire sees them; frames to the
  FPGA get it (priority ``pcp``).
* **Wire** (the RDMA NIC's part). A TCP listener on ``listen:wire_port`` takes any number of
  connections (a hub: every FPGA frame not taken by the tunnel goes to every connection; each
  connection's frames go to the FPGA). The framing on a connection (a length before each frame,
  and a time record in the FPGA's time before each frame from the FPGA) is
  :mod:`rocegen.wire.simwire`'s, which the host agent's simulated NIC uses too.

Nothing here depends on the simulator: :meth:`HostSide.from_fpga` takes a frame the FPGA sent,
:meth:`HostSide.poll` returns the frames for the FPGA that arrived on the sockets.
"""

import errno
import os
import selectors
import socket
import struct
import time

from rocegen.sim.models.net.checksum import internet_checksum, udp_checksum
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import (
    ARP,
    ETH,
    ETH_VLAN,
    ETHERTYPE_ARP,
    ETHERTYPE_IPV4,
    ETHERTYPE_VLAN,
    IP_PROTO_UDP,
    IPV4,
    UDP,
    UDP_PORT_ROCEV2,
)
from rocegen.wire.simwire import (
    MAX_FRAME,
    TIME_RECORD,
    WIRE_PORT,
    FpgaTime,
    FrameReader,
    encode_frame,
    encode_time,
    udp_dst_port,
)

__all__ = ["HostSide", "FrameReader", "FpgaTime", "encode_frame", "encode_time", "udp_frame",
           "open_tap", "vlan_tag", "vlan_untag", "MAX_FRAME", "COUNTERS", "TIME_RECORD",
           "ROCE_PATHS", "Pace"]

#: Seconds a wire connection may refuse to take a frame before it is closed.
SEND_TIMEOUT = 10.0
#: What :attr:`HostSide.counters` counts.
COUNTERS = ("tunnel_rx", "tunnel_tx", "tunnel_tx_failed", "arp_answered", "wire_rx", "wire_tx",
            "wire_no_peer", "wire_bad_length", "wire_connects", "wire_disconnects", "tap_rx",
            "tap_tx", "vlan_drop")
#: Where :class:`HostSide` sends the FPGA's RoCEv2 frames when it has a TAP.
ROCE_PATHS = ("tap", "wire")
_TUNSETIFF = 0x400454CA
_IFF_TAP, _IFF_NO_PI = 0x0002, 0x1000


class Pace:
    """Keeps a simulation's clock from running ahead of the wall clock: at most ``us_per_s``
    microseconds of simulated time per second of wall time, the simulated clock at ``mhz``.
    A host in a virtual machine that is slow to answer (or that another process starves) then
    has at least that much wall time before the FPGA's timers run out, however fast the
    simulator runs while it waits.

    :meth:`wait` is told the cycles just simulated and returns the seconds to wait (for the host,
    say) before simulating more: 0 while the simulation is behind the pace. What a simulation
    slower than the pace saves does not pile up: it may then run ahead by at most ``slack``
    seconds' worth of cycles. ``clock`` is the wall clock (``time.monotonic``)."""

    def __init__(self, us_per_s, mhz, *, slack=0.05, clock=time.monotonic):
        if not us_per_s > 0 or not mhz > 0:
            raise ValueError(f"a pace needs positive microseconds per second and MHz, not "
                             f"{us_per_s!r} and {mhz!r}")
        self.rate = us_per_s * mhz              # simulated cycles per wall second, at most
        self.slack = slack
        self.clock = clock
        self.due = clock()                      # wall time the cycles so far may end at

    def wait(self, cycles):
        now = self.clock()
        self.due = max(self.due + cycles / self.rate, now - self.slack)
        return max(0.0, self.due - now)


def open_tap(name):
    """Attach to the TAP interface ``name`` (made beforehand, for example by ``ip tuntap add``);
    returns its non-blocking file descriptor: each read is one frame, each write sends one."""
    import fcntl
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def vlan_tag(frame, vid, pcp=0):
    """An untagged Ethernet frame with an 802.1Q tag of VLAN ``vid`` (priority ``pcp``) inserted
    after its addresses."""
    eth = ETH.unpack(frame[:ETH.length])
    return ETH_VLAN.pack(dst=eth["dst"], src=eth["src"], tpid=ETHERTYPE_VLAN, pcp=pcp, dei=0,
                         vid=vid, ethertype=eth["ethertype"]) + bytes(frame[ETH.length:])


def vlan_untag(frame, vid):
    """The frame without its 802.1Q tag, padded to 60 bytes, if it carries exactly one tag of
    VLAN ``vid``; else None."""
    if len(frame) < ETH_VLAN.length:
        return None
    eth = ETH_VLAN.unpack(frame[:ETH_VLAN.length])
    if eth["tpid"] != ETHERTYPE_VLAN or eth["vid"] != vid or eth["ethertype"] == ETHERTYPE_VLAN:
        return None
    out = ETH.pack(dst=eth["dst"], src=eth["src"], ethertype=eth["ethertype"]) + \
        bytes(frame[ETH_VLAN.length:])
    return out + bytes(max(0, 60 - len(out)))


def udp_frame(src_mac, dst_mac, src_ip, dst_ip, sport, dport, payload, ident=1):
    """An Ethernet/IPv4/UDP frame (addresses as integers) with both checksums, DF, TTL 64,
    padded to the 60-byte minimum."""
    udp_len = UDP.length + len(payload)
    udp = UDP.pack(src_port=sport, dst_port=dport, length=udp_len, checksum=0) + payload
    udp = udp[:6] + struct.pack(">H", udp_checksum(src_ip, dst_ip, udp)) + udp[8:]
    ip = IPV4.pack(version=4, ihl=5, total_length=IPV4.length + udp_len, identification=ident,
                   df=1, ttl=64, protocol=IP_PROTO_UDP, src=src_ip, dst=dst_ip)
    ip = ip[:10] + struct.pack(">H", internet_checksum(ip)) + ip[12:]
    frame = ETH.pack(dst=dst_mac, src=src_mac, ethertype=ETHERTYPE_IPV4) + ip + udp
    return frame + bytes(max(0, 60 - len(frame)))


class HostSide:
    """The bench host's Ethernet port (see the module documentation).

    ``fpga_mac``/``fpga_ip``/``fpga_cm_port``: where tunnelled datagrams go. ``host_mac``/
    ``host_ip``: the host's addresses (the tunnel's datagrams come from them; the FPGA's frames
    to them that are not RoCEv2 are the tunnel's). ``listen``: the address the sockets bind to
    (loopback by default; never anything that is not on this machine). ``cm_port``/
    ``wire_port``: 0 picks a free port (see :attr:`cm_port` / :attr:`wire_port` afterwards).
    ``tap``: the TAP interface to use instead of the tunnel; ``roce``: where RoCEv2 frames go
    with it (:data:`ROCE_PATHS`). ``vlan``/``pcp``: the FPGA port's 802.1Q VLAN (see the module
    documentation).
    """

    def __init__(self, *, fpga_mac, fpga_ip, fpga_cm_port=17185, host_mac, host_ip,
                 listen="127.0.0.1", cm_port=17185, wire_port=WIRE_PORT, tap=None, roce="tap",
                 vlan=None, pcp=0, log=print):
        if roce not in ROCE_PATHS:
            raise ValueError(f"roce must be one of {', '.join(ROCE_PATHS)}, not {roce!r}")
        if vlan is not None and (isinstance(vlan, bool) or not isinstance(vlan, int)
                                 or not 1 <= vlan <= 4094):
            raise ValueError(f"vlan must be a VLAN ID 1..4094, not {vlan!r}")
        if not isinstance(pcp, int) or not 0 <= pcp <= 7:
            raise ValueError(f"pcp must be a priority 0..7, not {pcp!r}")
        self.roce = roce
        self.vlan, self.pcp = vlan, pcp
        self.fpga_mac, self.fpga_ip = parse_mac(fpga_mac), parse_ip(fpga_ip)
        self.host_mac, self.host_ip = parse_mac(host_mac), parse_ip(host_ip)
        self.fpga_cm_port = fpga_cm_port
        self.listen = listen
        self.log = log
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._ident = 0
        self._sel = selectors.DefaultSelector()
        self.tap = None
        self.tunnel = None
        self.cm_port = None
        if tap is not None:
            self.tap = open_tap(tap)
            self._sel.register(self.tap, selectors.EVENT_READ, "tap")
        else:
            self.tunnel = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.tunnel.bind((listen, cm_port))
            self.tunnel.setblocking(False)
            self.cm_port = self.tunnel.getsockname()[1]
            self._sel.register(self.tunnel, selectors.EVENT_READ, "tunnel")
        self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((listen, wire_port))
        self.server.listen(8)
        self.server.setblocking(False)
        self.wire_port = self.server.getsockname()[1]
        self._sel.register(self.server, selectors.EVENT_READ, "accept")
        self.peers = {}                 # socket -> FrameReader
        self._reply_socks = {}          # UDP source port -> socket bound to it (or None)

    # ---------------------------------------------------------------- to the FPGA

    def poll(self, timeout=0.0):
        """Frames for the FPGA that arrived on the sockets (waiting at most ``timeout`` s for the
        first), tagged with the VLAN if there is one."""
        out = self._poll(timeout)
        if self.vlan is None:
            return out
        return [vlan_tag(f, self.vlan, self.pcp) for f in out]

    def _poll(self, timeout):
        out = []
        for key, _ in self._sel.select(timeout):
            what = key.data
            if what == "tunnel":
                out += self._tunnel_rx()
            elif what == "tap":
                out += self._tap_rx()
            elif what == "accept":
                self._accept()
            else:
                out += self._peer_rx(key.fileobj)
        return out

    def _tunnel_rx(self):
        out = []
        while True:
            try:
                payload, (_, sport) = self.tunnel.recvfrom(65535)
            except BlockingIOError:
                return out
            except OSError as e:          # ICMP port unreachable of an earlier send, and such
                if e.errno in (errno.ECONNREFUSED, errno.EAGAIN):
                    continue
                raise
            self.counters["tunnel_rx"] += 1
            self._ident = self._ident % 0xFFFF + 1
            out.append(udp_frame(self.host_mac, self.fpga_mac, self.host_ip, self.fpga_ip, sport,
                                 self.fpga_cm_port, payload, self._ident))

    def _tap_rx(self):
        out = []
        while True:
            try:
                frame = os.read(self.tap, 65536)
            except BlockingIOError:
                return out
            if len(frame) >= ETH.length:
                self.counters["tap_rx"] += 1
                out.append(frame + bytes(max(0, 60 - len(frame))))

    def _accept(self):
        try:
            conn, addr = self.server.accept()
        except BlockingIOError:
            return
        conn.settimeout(SEND_TIMEOUT)     # a peer that stops reading is dropped, never waited on
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peers[conn] = FrameReader(times=False)
        self._sel.register(conn, selectors.EVENT_READ, "peer")
        self.counters["wire_connects"] += 1
        self.log(f"wire: {addr[0]}:{addr[1]} connected ({len(self.peers)} on the segment)")

    def _peer_rx(self, conn):
        try:
            data = conn.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            self._drop_peer(conn, "disconnected")
            return []
        try:
            frames = self.peers[conn].feed(data)
        except ValueError as e:
            self.counters["wire_bad_length"] += 1
            self._drop_peer(conn, f"closed: {e}")
            return []
        self.counters["wire_rx"] += len(frames)
        return frames

    def _drop_peer(self, conn, why):
        self._sel.unregister(conn)
        del self.peers[conn]
        conn.close()
        self.counters["wire_disconnects"] += 1
        self.log(f"wire: a connection {why} ({len(self.peers)} on the segment)")

    # ---------------------------------------------------------------- from the FPGA

    def from_fpga(self, frame, time=None):
        """Take a frame the FPGA sent (``time``: its :class:`FpgaTime`, or a tuple of the same,
        told to the wire connections before it); return the frames answered at once (ARP replies
        for the host's IP), which go back to the FPGA."""
        if len(frame) < ETH.length:
            return []
        if self.vlan is not None:
            frame = vlan_untag(frame, self.vlan)
            if frame is None:
                self.counters["vlan_drop"] += 1
                return []
            return [vlan_tag(f, self.vlan, self.pcp) for f in self._from_fpga(frame, time)]
        return self._from_fpga(frame, time)

    def _from_fpga(self, frame, time):
        if self.tap is not None:
            return self._from_fpga_tap(frame, time)
        eth = ETH.unpack(frame[:ETH.length])
        body = frame[ETH.length:]
        if eth["ethertype"] == ETHERTYPE_ARP and len(body) >= ARP.length:
            arp = ARP.unpack(body[:ARP.length])
            if arp["oper"] == 1 and arp["tpa"] == self.host_ip:
                self.counters["arp_answered"] += 1
                reply = ARP.pack(htype=1, ptype=ETHERTYPE_IPV4, hlen=6, plen=4, oper=2,
                                 sha=self.host_mac, spa=self.host_ip, tha=arp["sha"],
                                 tpa=arp["spa"])
                out = ETH.pack(dst=arp["sha"], src=self.host_mac, ethertype=ETHERTYPE_ARP) + reply
                return [out + bytes(60 - len(out))]
        elif eth["ethertype"] == ETHERTYPE_IPV4 and len(body) >= IPV4.length + UDP.length:
            ip = IPV4.unpack(body[:IPV4.length])
            if ip["dst"] == self.host_ip and ip["protocol"] == IP_PROTO_UDP and ip["ihl"] == 5:
                udp = UDP.unpack(body[IPV4.length:IPV4.length + UDP.length])
                if udp["dst_port"] != UDP_PORT_ROCEV2:
                    end = IPV4.length + max(UDP.length, min(udp["length"], ip["total_length"] - 20))
                    self._deliver(udp["src_port"], udp["dst_port"],
                                  bytes(body[IPV4.length + UDP.length:end]))
                    return []
        self._to_peers(frame, time)
        return []

    def _from_fpga_tap(self, frame, time):
        """With a TAP, every frame goes to it (the host's kernel answers ARP, ICMP, UDP; a RoCE
        peer on the interface takes RoCEv2), but RoCEv2 goes to the wire with ``roce="wire"``."""
        if self.roce == "wire" and udp_dst_port(frame) == UDP_PORT_ROCEV2:
            self._to_peers(frame, time)
        else:
            try:
                os.write(self.tap, frame)
                self.counters["tap_tx"] += 1
            except OSError:
                self.counters["tunnel_tx_failed"] += 1
        return []

    def _deliver(self, sport, dport, payload):
        sock = self._reply_socks.get(sport, 0)
        if sock == 0:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                sock.bind((self.listen, sport))
            except OSError:
                sock.close()
                sock = None             # the port is taken here: reply from the tunnel's socket
            self._reply_socks[sport] = sock
        try:
            (sock or self.tunnel).sendto(payload, (self.listen, dport))
            self.counters["tunnel_tx"] += 1
        except OSError:
            self.counters["tunnel_tx_failed"] += 1

    def _to_peers(self, frame, time=None):
        if not self.peers:
            self.counters["wire_no_peer"] += 1
            return
        data = (encode_time(*time) if time is not None else b"") + encode_frame(frame)
        for conn in list(self.peers):
            try:
                conn.sendall(data)
            except OSError:
                self._drop_peer(conn, "lost")
        self.counters["wire_tx"] += 1

    def close(self):
        for conn in list(self.peers):
            self._drop_peer(conn, "closed by the FPGA side")
        for sock in [self.tunnel, self.server, *(s for s in self._reply_socks.values() if s)]:
            if sock is not None:
                sock.close()
        if self.tap is not None:
            os.close(self.tap)
        self._sel.close()
