"""A fake ``pyverbs`` (rdma-core's Python bindings) for testing :class:`rocegen.host.nic.VerbsNic`
on a machine without an RDMA device: the modules, classes and functions it imports, as modules
built here (:func:`modules`), to put in ``sys.modules``.

Device ``fake0`` with one port whose GID 0 holds the IPv4 address :data:`LOCAL_IP`, offering
atomics as a ConnectX does (``atomic_caps`` ``IBV_ATOMIC_HCA``; ``state.atomic_caps`` changes
it). Its objects record what is done to them in a :class:`Verbs` (``modules()["pyverbs"].state``):
the QP attributes each state change was given, the access flags of every memory region, the
work requests posted (each QP's ``posted``; a send work request keeps what
``set_wr_rdma`` / ``set_wr_atomic`` set), and every use of an object after it was destroyed
(``misuse``), which in the C library would touch freed memory. A CQ destroyed while a poll of
it is under way counts too. With ``crash``, such a use says so on stderr and kills the process
with SIGSEGV as the C library would (for an agent in its own process); else it raises
:class:`UseAfterFree`.

Destroying the device context takes :data:`CLOSE_SECONDS` (a real device's close is not
instant), so a thread that still polls while the NIC is closed meets the destroyed CQ every
time rather than by chance.

librdmacm (``pyverbs.cmid``, ``pyverbs.librdmacm_enums``) is there for the active side of an RC
connection on an event channel, as :class:`rocegen.host.nic.VerbsNic` uses it: the FPGA on the
other end is a script (``state.cm_peer``, :data:`CM_PEER`: whether the address resolves, which
device routes it, whether the REQ gets a REP, a REJ or nothing, the REP's QP, PSN, READ depths,
RNR retry count and private data), and every call is recorded in ``state.cm`` as ``(call,
details)``: the CM ID made, the addresses resolved, the connection parameters, each
``init_qp_attr``, ``establish``, ``disconnect``, ``destroy_id``, ``destroy_channel``, events
acknowledged. The QP attributes ``init_qp_attr`` gives are those the kernel's CM derives from
the REP (``cm_init_qp_*_attr``); a QP's ``modify`` calls are recorded in ``state.modify`` (its
number, the state, the mask and every attribute), and a state change out of RESET -> INIT ->
RTR -> RTS order raises. An event used after it was acknowledged counts as a use after free.

In a process of its own (the host agent that ``rocegen-host connect`` starts), a package
directory on ``PYTHONPATH`` whose ``pyverbs/__init__.py`` is :data:`SHIM` stands for the real one.
"""

import collections
import enum
import os
import signal
import threading
import time
import types

__all__ = ["modules", "Verbs", "UseAfterFree", "LOCAL_IP", "SHIM", "CLOSE_SECONDS", "CM_PEER",
           "REP_REGION", "CM_EVENTS"]

LOCAL_IP = "10.0.0.1"
CLOSE_SECONDS = 0.05
#: ``pyverbs/__init__.py`` of a stand-in package: replaces itself with the fake (crashing on a
#: use after free), the repository's root on ``sys.path``.
SHIM = ("import sys\n"
        "from tests.fake_pyverbs import modules\n"
        "sys.modules.update(modules(crash=True))\n")


#: The region the scripted FPGA's REP carries by default: (addr, rkey, length).
REP_REGION = (0x4000_0000, 0x00C0FFEE, 1 << 20)


def _rep_data(addr, rkey, length):
    """196 bytes of REP private data: the region (rocegen.wire.ibcm.REGION's layout: addr 8,
    rkey 4, length 4, big-endian), then zeros."""
    return (addr.to_bytes(8, "big") + rkey.to_bytes(4, "big") + length.to_bytes(4, "big")).ljust(
        196, b"\0")


#: What the scripted FPGA does (``state.cm_peer`` starts as a copy): ``resolves`` (the address
#: resolves), ``device`` (the device librdmacm routes through), ``answer`` (``"REP"``, ``"REJ"``
#: or ``"none"``), the REP's ``qpn`` (of the first REQ; the next ones count up), ``psn``,
#: ``responder_resources``, ``initiator_depth``, ``rnr_retry``, ``private_data``; ``path_mtu``
#: (IB MTU code of the route), ``sq_psn`` (the starting PSN the kernel's CM chose for us),
#: ``timeout`` (the local ACK timeout it derives from the path).
CM_PEER = {"resolves": True, "device": "fake0", "answer": "REP", "qpn": 0x2A, "psn": 0xABCDE,
           "responder_resources": 8, "initiator_depth": 4, "rnr_retry": 6,
           "private_data": _rep_data(*REP_REGION), "path_mtu": 3, "sq_psn": 0x5A5A5,
           "timeout": 18}
#: ``enum rdma_cm_event_type`` (rdma_cma.h), in order.
CM_EVENTS = ("ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
             "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
             "DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR",
             "ADDR_CHANGE", "TIMEWAIT_EXIT")


class UseAfterFree(AssertionError):
    """A verbs object used after it was destroyed."""


class PyverbsError(Exception):
    pass


class Verbs:
    """What the fake device saw."""

    def __init__(self, crash):
        self.crash = crash
        self.lock = threading.Lock()
        self.misuse = []            # what was used after it was destroyed
        self.closed = []            # the kinds of object destroyed, in order
        self.rtr, self.rts = [], []     # the QPAttr of each to_rtr / to_rts, as dicts
        self.mr_access = []             # the access flags of each MR registered
        self.atomic_caps = 1            # what query_device says: IBV_ATOMIC_HCA
        self.polls = 0
        self.modify = []                # each QP.modify: {"qpn", "state", "mask", attributes}
        self.cm = []                    # librdmacm calls: (call, details)
        self.cm_peer = dict(CM_PEER)

    def freed(self, what):
        with self.lock:
            self.misuse.append(what)
        if self.crash:
            os.write(2, f"fake pyverbs: {what}: SIGSEGV\n".encode())
            os.kill(os.getpid(), signal.SIGSEGV)
        raise UseAfterFree(what)


class _Obj:
    kind = "object"

    def __init__(self, state):
        self._state, self._closed = state, False

    def _use(self, what):
        if self._closed:
            self._state.freed(f"{what} of a destroyed {self.kind}")

    def close(self):
        if not self._closed:
            self._closed = True
            with self._state.lock:
                self._state.closed.append(self.kind)


def modules(*, crash=False):
    """The fake's modules by name (``pyverbs`` and the submodules VerbsNic imports), with a
    fresh :class:`Verbs` as ``pyverbs.state``."""
    state = Verbs(crash)

    # (libibverbs' values: enum ibv_access_flags, ibv_wr_opcode, ibv_wc_opcode, ibv_atomic_cap)
    enums = types.SimpleNamespace(
        IBV_QPT_RC=2, IBV_ACCESS_LOCAL_WRITE=1, IBV_ACCESS_REMOTE_WRITE=2,
        IBV_ACCESS_REMOTE_READ=4, IBV_ACCESS_REMOTE_ATOMIC=8, IBV_QPS_RESET=0, IBV_QPS_INIT=1,
        IBV_QPS_RTR=2, IBV_QPS_RTS=3, IBV_QPS_ERR=6, IBV_QP_STATE=1, IBV_WC_SUCCESS=0,
        IBV_WC_WITH_IMM=2, IBV_WC_COMP_SWAP=3, IBV_WC_FETCH_ADD=4, IBV_WC_RECV=128,
        IBV_WC_RECV_RDMA_WITH_IMM=129, IBV_WR_RDMA_WRITE=0, IBV_WR_RDMA_WRITE_WITH_IMM=1,
        IBV_WR_SEND=2, IBV_WR_SEND_WITH_IMM=3, IBV_WR_RDMA_READ=4, IBV_WR_ATOMIC_CMP_AND_SWP=5,
        IBV_WR_ATOMIC_FETCH_AND_ADD=6, IBV_SEND_SIGNALED=2, IBV_ATOMIC_NONE=0,
        IBV_ATOMIC_HCA=1, IBV_ATOMIC_GLOB=2, IBV_QP_ACCESS_FLAGS=8, IBV_QP_PKEY_INDEX=16,
        IBV_QP_PORT=32, IBV_QP_AV=128, IBV_QP_PATH_MTU=256, IBV_QP_TIMEOUT=512,
        IBV_QP_RETRY_CNT=1024, IBV_QP_RNR_RETRY=2048, IBV_QP_RQ_PSN=4096,
        IBV_QP_MAX_QP_RD_ATOMIC=8192, IBV_QP_MIN_RNR_TIMER=32768, IBV_QP_SQ_PSN=65536,
        IBV_QP_DEST_QPN=1048576, IBV_QP_MAX_DEST_RD_ATOMIC=131072)

    class Device:
        name = b"fake0"

    def get_device_list():
        return [Device()]

    class Context(_Obj):
        kind = "context"

        def __init__(self, name):
            super().__init__(state)
            self.name = name

        def query_port(self, port):
            self._use("query_port")
            return types.SimpleNamespace(gid_tbl_len=2)

        def query_gid(self, port, index):
            self._use("query_gid")
            if index != 0:
                raise PyverbsError(f"no GID at index {index}")
            a, b, c, d = (int(x) for x in LOCAL_IP.split("."))
            return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"

        def query_device(self):
            self._use("query_device")
            return types.SimpleNamespace(max_qp_init_rd_atom=16, max_qp_rd_atom=16,
                                         atomic_caps=state.atomic_caps)

        def close(self):
            if not self._closed:
                time.sleep(CLOSE_SECONDS)
            super().close()

    class PD(_Obj):
        kind = "PD"

        def __init__(self, ctx):
            super().__init__(state)
            ctx._use("PD()")

    class CQ(_Obj):
        kind = "CQ"

        def __init__(self, ctx, depth):
            super().__init__(state)
            ctx._use("CQ()")
            self._polling = 0

        def poll(self, num_entries=1):
            self._use("poll")
            with state.lock:
                state.polls += 1
                self._polling += 1
            try:
                time.sleep(0.0002)          # a poll takes a while: long enough to be caught
                self._use("poll")
            finally:
                with state.lock:
                    self._polling -= 1
            return 0, []

        def close(self):
            if self._polling:
                state.freed("a CQ destroyed while a poll of it was under way")
            super().close()

    class MR(_Obj):
        kind = "MR"
        _next = [0x10_0000]

        def __init__(self, pd, length, access):
            super().__init__(state)
            pd._use("MR()")
            self.buf, self.length = MR._next[0], length
            MR._next[0] += (length + 0xFFFF) & ~0xFFFF
            self.lkey, self.rkey = 0x100 + self.buf % 97, 0x200 + self.buf % 89
            self.access = access
            self._mem = bytearray(length)
            with state.lock:
                state.mr_access.append(access)

        def read(self, length, offset):
            self._use("read")
            return bytes(self._mem[offset:offset + length])

        def write(self, data, length, offset):
            self._use("write")
            self._mem[offset:offset + length] = data[:length]

    class QPCap:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class QPInitAttr(QPCap):
        pass

    class QPAttr:
        def __init__(self, qp_state=0, port_num=1):
            self.qp_state, self.port_num = qp_state, port_num
            self.timeout = self.retry_cnt = self.rnr_retry = None

    class QP(_Obj):
        kind = "QP"
        _next = [0x11]

        def __init__(self, pd, init_attr):
            super().__init__(state)
            pd._use("QP()")
            init_attr.scq._use("QP()")
            self.qp_num = QP._next[0]
            QP._next[0] += 1
            self.qp_state = enums.IBV_QPS_RESET
            self.posted = []

        def _record(self, to, attr):
            self._use(f"to_{to}")
            got = {k: v for k, v in vars(attr).items()}
            with state.lock:
                getattr(state, to).append(got)

        def to_rtr(self, attr):
            self._record("rtr", attr)
            self.qp_state = enums.IBV_QPS_RTR

        def to_rts(self, attr):
            self._record("rts", attr)
            self.qp_state = enums.IBV_QPS_RTS

        def post_recv(self, wr):
            self._use("post_recv")
            self.posted.append(wr)

        def post_send(self, wr):
            self._use("post_send")
            self.posted.append(wr)

        def query(self, mask):
            self._use("query")
            return types.SimpleNamespace(qp_state=self.qp_state), None

        def modify(self, attr, mask):
            self._use("modify")
            order = {enums.IBV_QPS_RESET: enums.IBV_QPS_INIT, enums.IBV_QPS_INIT: enums.IBV_QPS_RTR,
                     enums.IBV_QPS_RTR: enums.IBV_QPS_RTS}
            if not mask & enums.IBV_QP_STATE or order.get(self.qp_state) != attr.qp_state:
                raise PyverbsError(f"QP {self.qp_num:#x}: no change from state {self.qp_state} "
                                   f"to {attr.qp_state} (mask {mask:#x})")
            with state.lock:
                state.modify.append({"qpn": self.qp_num, "state": attr.qp_state, "mask": mask,
                                     **vars(attr)})
            self.qp_state = attr.qp_state

    class GID:
        def __init__(self, text):
            self.text = text

        def __str__(self):
            return self.text

    class GlobalRoute:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class AHAttr(GlobalRoute):
        pass

    class SGE:
        def __init__(self, addr, length, lkey):
            self.addr, self.length, self.lkey = addr, length, lkey

    class RecvWR:
        def __init__(self, wr_id=0, num_sge=0, sg=None):
            self.wr_id, self.num_sge, self.sg = wr_id, num_sge, sg

    class SendWR(RecvWR):
        def __init__(self, wr_id=0, opcode=0, num_sge=0, sg=None, send_flags=0, imm_data=0):
            super().__init__(wr_id, num_sge, sg)
            self.opcode, self.send_flags, self.imm_data = opcode, send_flags, imm_data
            self.rdma = self.atomic = None

        def set_wr_rdma(self, rkey, addr):
            self.rdma = (rkey, addr)

        def set_wr_atomic(self, rkey, addr, compare_add, swap=0):
            self.atomic = (rkey, addr, compare_add, swap)

    cm_mods = _cm_modules(state, enums, QPAttr, _Obj)

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        return m

    subs = {
        "enums": module("pyverbs.enums", **vars(enums)),
        "cq": module("pyverbs.cq", CQ=CQ),
        "device": module("pyverbs.device", Context=Context, get_device_list=get_device_list),
        "pd": module("pyverbs.pd", PD=PD),
        "pyverbs_error": module("pyverbs.pyverbs_error", PyverbsError=PyverbsError),
        "mr": module("pyverbs.mr", MR=MR),
        "qp": module("pyverbs.qp", QP=QP, QPCap=QPCap, QPInitAttr=QPInitAttr, QPAttr=QPAttr),
        "addr": module("pyverbs.addr", GID=GID, AHAttr=AHAttr, GlobalRoute=GlobalRoute),
        "wr": module("pyverbs.wr", SGE=SGE, RecvWR=RecvWR, SendWR=SendWR),
        **{k: module(f"pyverbs.{k}", **attrs) for k, attrs in cm_mods.items()},
    }
    top = module("pyverbs", state=state, __path__=[], **subs)
    return {"pyverbs": top, **{f"pyverbs.{k}": m for k, m in subs.items()}}


def _cm_modules(state, enums, QPAttr, Obj):
    """The contents of ``pyverbs.librdmacm_enums`` and ``pyverbs.cmid`` (their names: dicts)."""
    port_space = enum.IntEnum("rdma_port_space", {"RDMA_PS_IPOIB": 0x0002, "RDMA_PS_TCP": 0x0106,
                                                  "RDMA_PS_UDP": 0x0111, "RDMA_PS_IB": 0x013F})
    event_type = enum.IntEnum("rdma_cm_event_type",
                              {f"RDMA_CM_EVENT_{n}": k for k, n in enumerate(CM_EVENTS)})
    ev = {n: event_type[f"RDMA_CM_EVENT_{n}"] for n in CM_EVENTS}

    def record(call, **details):
        with state.lock:
            state.cm.append((call, details))

    class AddrInfo:
        def __init__(self, src=None, dst=None, src_service=None, dst_service=None, port_space=0,
                     flags=0):
            self.src, self.dst, self.dst_service = src, dst, dst_service
            self.src_service, self.port_space, self.flags = src_service, port_space, flags

        def close(self):
            pass

    class ConnParam:
        def __init__(self, resources=1, depth=1, flow_control=0, retry=5, rnr_retry=5, srq=0,
                     qp_num=0, data_len=0):
            self.responder_resources, self.initiator_depth = resources, depth
            self.flow_control, self.retry_count, self.rnr_retry_count = flow_control, retry, rnr_retry
            self.srq, self.qp_num = srq, qp_num

    class CMEventChannel(Obj):
        kind = "event channel"

        def __init__(self):
            super().__init__(state)
            self.events = collections.deque()

        def close(self):
            if not self._closed:
                record("destroy_channel")
            super().close()

    class CMEvent(Obj):
        kind = "CM event"

        def __init__(self, channel):
            super().__init__(state)
            channel._use("rdma_get_cm_event")
            if not channel.events:
                raise AssertionError("rdma_get_cm_event would wait for ever: no event is coming")
            self._type, self._data = channel.events.popleft()

        @property
        def event_type(self):
            self._use("event_type")
            return self._type

        @property
        def private_data(self):
            self._use("private_data")
            return self._data

        def event_str(self):
            self._use("event_str")
            return self._type.name

        def ack_cm_event(self):
            self._use("ack_cm_event")
            record("ack", event=self._type.name)
            self.close()

    class CMID(Obj):
        kind = "CMID"

        def __init__(self, creator=None, qp_init_attr=None, pd=None,
                     port_space=port_space.RDMA_PS_TCP, listen_id=None):
            super().__init__(state)
            self.channel, self.param = creator, None
            record("create_id", port_space=int(port_space), channel=creator is not None)

        def _event(self, name, data=b""):
            self.channel.events.append((ev[name], data))

        @property
        def dev_name(self):
            self._use("dev_name")
            return state.cm_peer["device"]

        def resolve_addr(self, rai, timeout_ms=2000):
            self._use("resolve_addr")
            record("resolve_addr", src=rai.src, dst=rai.dst, dst_service=rai.dst_service,
                   port_space=int(rai.port_space), timeout_ms=timeout_ms)
            self._event("ADDR_RESOLVED" if state.cm_peer["resolves"] else "ADDR_ERROR")

        def resolve_route(self, timeout_ms=2000):
            self._use("resolve_route")
            record("resolve_route", timeout_ms=timeout_ms)
            self._event("ROUTE_RESOLVED")

        def connect(self, param=None):
            self._use("connect")
            self.param = param
            with state.lock:    # the FPGA's QPs are numbered from the script's, one per REQ
                self.fpga_qpn = state.cm_peer["qpn"] + sum(c == "connect" for c, _ in state.cm)
            record("connect", **vars(param))
            peer = state.cm_peer
            if peer["answer"] == "REP":
                self._event("CONNECT_RESPONSE", peer["private_data"])
            else:
                self._event("REJECTED" if peer["answer"] == "REJ" else "UNREACHABLE")

        def init_qp_attr(self, qp_state):
            self._use("init_qp_attr")
            record("init_qp_attr", qp_state=qp_state)
            return _kernel_qp_attr(qp_state, state.cm_peer, self.fpga_qpn, self.param, enums,
                                   QPAttr)

        def establish(self):
            self._use("establish")
            record("establish")

        def disconnect(self):
            self._use("disconnect")
            record("disconnect")
            self._event("DISCONNECTED")

        def close(self):
            if not self._closed:
                record("destroy_id")
            super().close()

    return {"librdmacm_enums": {"rdma_port_space": port_space, "rdma_cm_event_type": event_type},
            "cmid": {"AddrInfo": AddrInfo, "ConnParam": ConnParam, "CMEventChannel": CMEventChannel,
                     "CMEvent": CMEvent, "CMID": CMID}}


def _kernel_qp_attr(qp_state, peer, fpga_qpn, param, e, QPAttr):
    """``(QPAttr, mask)`` as the kernel's CM gives them to the active side once the REP of
    ``peer`` (from its QP ``fpga_qpn``) answered the connection parameters ``param``
    (``cm_init_qp_init_attr``, ``_rtr_attr``, ``_rts_attr``)."""
    attr = QPAttr(qp_state=qp_state)
    if qp_state == e.IBV_QPS_INIT:
        attr.qp_access_flags = e.IBV_ACCESS_REMOTE_WRITE | (
            e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
            if peer["initiator_depth"] else 0)
        attr.pkey_index = 0
        return attr, e.IBV_QP_STATE | e.IBV_QP_ACCESS_FLAGS | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
    if qp_state == e.IBV_QPS_RTR:
        attr.path_mtu, attr.dest_qp_num, attr.rq_psn = peer["path_mtu"], fpga_qpn, peer["psn"]
        attr.max_dest_rd_atomic, attr.min_rnr_timer = peer["initiator_depth"], 0
        return attr, (e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                      | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    attr.sq_psn, attr.timeout = peer["sq_psn"], peer["timeout"]
    attr.retry_cnt, attr.rnr_retry = param.retry_count, peer["rnr_retry"]
    attr.max_rd_atomic = peer["responder_resources"]
    return attr, (e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                  | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)
