"""The NIC model as a librdmacm peer (``rocegen.sim.models.rnic.rdma_cm.CmPeer``): two NIC
models connect over QP1 as rdma_connect / rdma_accept do, move data both ways on the QPs the
connection made, the first packet standing in for a lost RTU, and disconnect through time-wait
with every QP given back."""

from rocegen.sim.models.ibcm import Region, unwrap
from rocegen.sim.models.ibcm.cm import State
from rocegen.sim.models.rnic import Rnic
from rocegen.sim.models.rnic.cq import WcStatus
from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.rnic.rdma_cm import ACCESS, CmPeer
from rocegen.wire import ibcm as I

A = ("02:00:00:00:00:01", "10.0.0.1")
B = ("02:00:00:00:00:02", "10.0.0.2")
PORT = 7174                     # rping's
REGION = Region(0x10000, 0x1234, 4096)
TIME_WAIT_NS = 50_000


def peers():
    a = CmPeer(Rnic(*A), qpns=[0x11, 0x12], time_wait_ns=TIME_WAIT_NS, seed=1)
    b = CmPeer(Rnic(*B), qpns=[0x21], ports=[PORT], region=REGION,
               time_wait_ns=TIME_WAIT_NS, seed=2)
    b.nic.register_mr(REGION.addr, REGION.length, REGION.rkey, ACCESS)
    a.nic.register_mr(0x80000, 4096, 0x99, Access.LOCAL_WRITE)
    return a, b


class Wire:
    """Carries frames between the two peers at ``now``; ``drop`` decides which are lost."""

    def __init__(self, a, b, drop=None):
        self.ends = {id(a): b, id(b): a}
        self.peers = (a, b)
        self.drop = drop or (lambda frame: False)
        self.now = 0

    def run(self, sender, frames):
        """Until neither NIC has anything left to send (answers wait for their time)."""
        queue = [(sender, f) for f in frames]
        while True:
            if not queue:
                due = [d for d in (p.nic.next_due() for p in self.peers) if d is not None]
                if not due:
                    return
                self.now = max(self.now, min(due))
                for p in self.peers:
                    queue += [(p, g) for g in p.nic.due(self.now) + p.nic.next_frames(self.now)]
                continue
            src, f = queue.pop(0)
            self.now += 1000
            if self.drop(f):
                continue
            dst = self.ends[id(src)]
            queue += [(dst, g) for g in dst.receive(f, self.now)]
            for p in self.peers:
                queue += [(p, g) for g in p.nic.due(self.now) + p.nic.next_frames(self.now)]


def connect(a, b, wire):
    cid, frames = a.connect(wire.now, dst_ip=B[1], dst_mac=B[0], port=PORT)
    wire.run(a, frames)
    return cid


def write_and_check(a, b, wire, cid, data):
    qpn = a.qps[cid]
    a.nic.post_send(qpn, "WRITE", data=data, remote_addr=REGION.addr, rkey=REGION.rkey,
                    wr_id=7)
    wire.run(a, a.nic.next_frames(wire.now))
    assert bytes(b.nic.memory.read(REGION.addr, len(data))) == data
    assert [c.status for c in a.nic.send_cq.poll()] == [WcStatus.SUCCESS]


def test_connect_move_data_and_disconnect():
    a, b = peers()
    wire = Wire(a, b)
    cid = connect(a, b, wire)
    conn_a = a.cm.connections[cid]
    (conn_b,) = b.cm.connections.values()
    assert conn_a.state == conn_b.state == State.ESTABLISHED
    assert conn_a.peer_region == REGION
    qa, qb = a.nic.qps[a.qps[cid]], b.nic.qps[conn_b.qpn]
    assert (qa.peer_qpn, qb.peer_qpn) == (conn_b.qpn, conn_a.qpn)
    # (each side's REQ or REP states the PSN it expects; each sends from the other's, as
    # Linux's CM sets rq_psn and sq_psn)
    assert (qa.epsn, qb.epsn) == (conn_a.psn, conn_b.psn) and conn_a.psn != conn_b.psn
    write_and_check(a, b, wire, cid, bytes(range(200)))
    # a SEND the other way, into a posted receive buffer
    b.nic.register_mr(0x40000, 4096, 0x77, ACCESS)
    a.nic.post_recv(a.qps[cid], 64, 5)
    b.nic.post_send(conn_b.qpn, "SEND", data=b"hello", wr_id=9)
    wire.run(b, b.nic.next_frames(wire.now))
    (wc,) = a.nic.cq.poll()
    assert (wc.wr_id, wc.status) == (5, WcStatus.SUCCESS)
    # rdma_disconnect: DREQ, DREP, time-wait on both sides, then the QPs are gone
    wire.run(a, a.disconnect(wire.now, cid))
    assert conn_a.state == conn_b.state == State.TIMEWAIT
    wire.now += TIME_WAIT_NS + 1
    assert a.poll(wire.now) == [] and b.poll(wire.now) == []
    assert a.qps == b.qps == {} and not a.nic.qps and not b.nic.qps
    assert a.cm.pool.free_count == 2 and b.cm.pool.free_count == 1


def test_the_first_packet_stands_for_a_lost_rtu():
    a, b = peers()
    rtu = {"lost": 0}

    def drop(frame):
        try:
            mad = unwrap(frame).mad
        except ValueError:
            return False
        if I.MAD_HDR.unpack(mad)["attribute_id"] == I.ATTR_RTU:
            rtu["lost"] += 1
            return True
        return False

    wire = Wire(a, b, drop)
    cid = connect(a, b, wire)
    (conn_b,) = b.cm.connections.values()
    assert rtu["lost"] == 1 and conn_b.state == State.REP_SENT
    assert conn_b.qpn in b.nic.qps                  # readied with the REP, as rdma_accept does
    write_and_check(a, b, wire, cid, b"x" * 100)
    assert conn_b.state == State.ESTABLISHED


def test_a_refused_connect_leaves_no_qp():
    a, b = peers()
    wire = Wire(a, b)
    cid, frames = a.connect(wire.now, dst_ip=B[1], dst_mac=B[0], port=PORT + 1)
    wire.run(a, frames)
    assert cid not in a.cm.connections and a.qps == {} and not a.nic.qps
    assert a.cm.pool.free_count == 2 and b.cm.counters["req_rejected"] == 1


def test_qp_options_go_over_what_the_connection_says():
    a, b = peers()
    a.qp_options = {"window": 8, "timeout": 20, "retry_cnt": 2}
    wire = Wire(a, b)
    cid = connect(a, b, wire)
    sq = a.nic.qps[a.qps[cid]].sq
    assert (sq.window, sq.timeout, sq.retry_cnt) == (8, 20, 2)
    assert sq.rnr_retry == a.cm.connections[cid].rnr_retry_count == 7
    (conn_b,) = b.cm.connections.values()
    assert b.nic.qps[conn_b.qpn].sq.timeout == a.cm.local_ack_timeout == 14    # from the REQ
    write_and_check(a, b, wire, cid, b"w" * 300)
