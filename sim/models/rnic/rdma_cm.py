"""The NIC model with librdmacm on its host: RDMA CM connections over QP1 (the IB CM of
:mod:`rocegen.sim.models.ibcm`) whose QPs are the NIC model's own.

:class:`CmPeer` stands where a testbench would put the :class:`~rocegen.sim.models.rnic.Rnic`
alone: every frame goes through :meth:`CmPeer.receive`; a MAD to QP1 goes to the CM, any other
frame to the NIC. When a connection is established (an RTU sent or received, or the first
packet on a passive QP) its QP is created in the NIC as librdmacm's ``rdma_connect`` /
``rdma_accept`` leave it: connected to the peer's QP and address, receiving from the peer's
starting PSN and sending from ours, at the path MTU of the REQ, with the READ depths
negotiated, the local ACK timeout and the retry counts of the REQ, and REMOTE_WRITE,
REMOTE_READ and REMOTE_ATOMIC access. When the connection ends (time-wait over, or refused
after it was made) the QP is destroyed. Time is the caller's, in nanoseconds as for the NIC
(the CM takes whole ones: a fraction is dropped).
"""

from rocegen.sim.models.ibcm.cm import IbCm, State
from rocegen.sim.models.ibcm.frames import unwrap, wrap
from rocegen.sim.models.ibcm.pool import QpPool
from rocegen.sim.models.rnic.memory import Access
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire.addr import format_ip, format_mac, parse_ip, parse_mac

__all__ = ["CmPeer", "ACCESS"]

#: The QP access librdmacm's examples ask for (``rping``: local write, remote read and write).
ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC


class CmPeer:
    """``nic`` (a :class:`~rocegen.sim.models.rnic.Rnic`) with a CM whose QP numbers are
    ``qpns``; ``ca_guid``, ``ports`` (listened TCP ports) and any other keyword are
    :class:`~rocegen.sim.models.ibcm.IbCm`'s. :attr:`cm` is the CM, :attr:`qps` maps each
    connection's local communication ID to the NIC QP made for it. :attr:`qp_options` (a dict,
    empty unless given) holds keywords of the NIC's ``create_qp`` for every QP made from then
    on, over what the connection says (a requester window, or the QP's own local ACK timeout and
    retry counts, as a librdmacm user sets them on its QP). A testbench drives it as it drives
    the NIC (:meth:`receive`, :meth:`due`, :meth:`next_due`; every other attribute is the
    NIC's)."""

    def __init__(self, nic, *, qpns, ca_guid=0x0002C90300000001, ports=(), qp_options=None,
                 **cm_kwargs):
        self.nic = nic
        self.qp_options = dict(qp_options or {})
        self.cm = IbCm(pool=QpPool(qpns), local_ip=parse_ip(nic.ip), ca_guid=ca_guid,
                       ports=ports, **cm_kwargs)
        self.qps = {}
        self._macs = {}             # peer IPv4 (integer) -> MAC (integer), from their frames
        self._seen = 0              # CM events acted on

    # ---- the API

    def connect(self, now, *, dst_ip, dst_mac, port, private_data=b"", path_mtu=None):
        """``rdma_connect`` to ``dst_ip`` (dotted string) port ``port``, whose MAC is
        ``dst_mac``: returns ``(local_comm_id, frames)`` (``(None, [])`` with no QP free)."""
        ip = parse_ip(dst_ip)
        self._macs[ip] = parse_mac(dst_mac)
        cid, out = self.cm.connect(int(now), dst_ip=ip, port=port, private_data=private_data,
                                   path_mtu=path_mtu)
        return cid, self._frames(out)

    def disconnect(self, now, local_comm_id):
        """``rdma_disconnect``: the frames of the DREQ."""
        return self._frames(self.cm.disconnect(int(now), local_comm_id))

    def destroy(self, now, local_comm_id):
        """``rdma_destroy_id`` of a connection being closed (the CM's
        :meth:`~rocegen.sim.models.ibcm.IbCm.destroy`): the frames it sends."""
        return self._frames(self.cm.destroy(int(now), local_comm_id))

    def receive(self, frame, now):
        """One frame from the wire: the frames sent in answer (the CM's, or the NIC's)."""
        frame = bytes(frame)
        try:
            f = unwrap(frame)
        except ValueError:
            f = None
        if f is None or f.dst_ip != self.cm.local_ip:
            qpn = _dest_qp(frame)
            waiting = [c for c in self.cm.connections.values()
                       if c.state == State.REP_SENT and c.qpn == qpn]
            if waiting:             # the first packet on a QP whose REP went counts as the RTU
                self.cm.data_seen(int(now), qpn)
            return self.nic.receive(frame, now)
        self._macs[f.src_ip] = f.src_mac
        return self._frames(self.cm.receive(int(now), f.mad, src_ip=f.src_ip))

    def poll(self, now):
        """The CM's timers due at ``now``: the frames they send."""
        return self._frames(self.cm.poll(int(now)))

    def next_deadline(self):
        """When :meth:`poll` next has something to do (None: nothing waits)."""
        return self.cm.next_deadline()

    # ---- standing where the NIC would: its timers with the CM's, everything else its own

    def due(self, now):
        """The NIC's answers due at ``now`` (:meth:`~rocegen.sim.models.rnic.Rnic.due`), then
        the frames of the CM's timers due then (:meth:`poll`)."""
        return self.nic.due(now) + self.poll(now)

    def next_due(self):
        """The earliest time :meth:`due` has something to do: the NIC's or the CM's (None:
        nothing waits)."""
        times = [t for t in (self.nic.next_due(), self.next_deadline()) if t is not None]
        return min(times, default=None)

    @property
    def strict(self):
        """The NIC's :attr:`~rocegen.sim.models.rnic.Rnic.strict`."""
        return self.nic.strict

    @strict.setter
    def strict(self, value):
        self.nic.strict = value

    def __getattr__(self, name):
        """Any other attribute is the NIC's (its work requests, completions, log ...)."""
        nic = self.__dict__.get("nic")
        if nic is None:
            raise AttributeError(name)
        return getattr(nic, name)

    # ---- the NIC's QPs

    def _frames(self, outgoing):
        out = [wrap(o.mad, src_mac=parse_mac(self.nic.mac), dst_mac=self._macs[o.dst_ip],
                    src_ip=self.cm.local_ip, dst_ip=o.dst_ip) for o in outgoing]
        self._sync_qps()
        return out

    def _sync_qps(self):
        """A NIC QP for each connection that knows its peer (passive: from its REP on, as
        ``rdma_accept`` readies the QP before the REP leaves; active: from the REP), none for a
        connection forgotten (time-wait over, refused, given up)."""
        for cid, conn in self.cm.connections.items():
            if cid not in self.qps and conn.state in (State.REP_SENT, State.ESTABLISHED):
                self._create(cid, conn)
        for cid in [c for c in self.qps if c not in self.cm.connections]:
            self.nic.destroy_qp(self.qps.pop(cid))

    def _create(self, cid, conn):
        options = dict(
            peer_qpn=conn.peer_qpn, peer_ip=format_ip(conn.peer_ip),
            # (each side's message states the PSN it expects: we send from the peer's, as
            # Linux's CM sets a QP's sq_psn and rq_psn)
            peer_mac=format_mac(self._macs[conn.peer_ip]), epsn=conn.psn, sq_psn=conn.peer_psn,
            pmtu=I.mtu_bytes(conn.path_mtu), timeout=conn.local_ack_timeout,
            retry_cnt=conn.retry_count, rnr_retry=conn.rnr_retry_count, access=ACCESS,
            max_rd_atomic=max(1, conn.initiator_depth),
            max_dest_rd_atomic=conn.responder_resources)
        self.nic.create_qp(conn.qpn, **{**options, **self.qp_options})
        self.qps[cid] = conn.qpn


def _dest_qp(frame):
    """The BTH's DestQP of an untagged IPv4 / UDP 4791 frame, else None."""
    at = H.ETH.length + H.IPV4.length + H.UDP.length
    if len(frame) < at + H.BTH.length or H.ETH.unpack(frame)["ethertype"] != H.ETHERTYPE_IPV4:
        return None
    ip = H.IPV4.unpack(frame[H.ETH.length:])
    udp = H.UDP.unpack(frame[H.ETH.length + H.IPV4.length:])
    if ip["ihl"] != 5 or ip["protocol"] != H.IP_PROTO_UDP or \
            udp["dst_port"] != H.UDP_PORT_ROCEV2:
        return None
    return H.BTH.unpack(frame[at:])["dest_qp"]
