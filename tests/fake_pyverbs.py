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

In a process of its own (the host agent that ``rocegen-host connect`` starts), a package
directory on ``PYTHONPATH`` whose ``pyverbs/__init__.py`` is :data:`SHIM` stands for the real one.
"""

import os
import signal
import threading
import time
import types

__all__ = ["modules", "Verbs", "UseAfterFree", "LOCAL_IP", "SHIM", "CLOSE_SECONDS"]

LOCAL_IP = "10.0.0.1"
CLOSE_SECONDS = 0.05
#: ``pyverbs/__init__.py`` of a stand-in package: replaces itself with the fake (crashing on a
#: use after free), the repository's root on ``sys.path``.
SHIM = ("import sys\n"
        "from tests.fake_pyverbs import modules\n"
        "sys.modules.update(modules(crash=True))\n")


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
        IBV_ATOMIC_HCA=1, IBV_ATOMIC_GLOB=2)

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
    }
    top = module("pyverbs", state=state, __path__=[], **subs)
    return {"pyverbs": top, **{f"pyverbs.{k}": m for k, m in subs.items()}}
