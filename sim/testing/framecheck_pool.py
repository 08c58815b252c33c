"""The independent frame check of :mod:`rocegen.sim.testing.framecheck` off the simulation's
critical path: a :class:`FrameCheckPool` has the interface of
:class:`~rocegen.sim.testing.framecheck.FrameChecker` (``request``, ``check``, ``counts``,
``seconds``, ``summary``) and hands every frame to one worker process that runs a
``FrameChecker``, so scapy's few milliseconds a frame run beside the simulator instead of
inside it.

Behaviour
    Frames are taken as ``bytes`` and tagged request or check; they reach the worker in the order
    they were given, so a connection-manager reply is checked after the request it answers, and
    frame numbers and failure messages are those of the inline checker. Frames are sent in
    batches of up to :data:`BATCH` frames (one pipe write and one pickle per batch); the worker
    answers each batch with its counts, its seconds and the first failure, if any.

    :meth:`FrameCheckPool.drain` (and reading :attr:`~FrameCheckPool.counts`,
    :attr:`~FrameCheckPool.seconds` or :meth:`~FrameCheckPool.summary`) sends what is queued and
    waits until the worker has checked every frame given so far. A failure found by the worker
    is raised as :class:`~rocegen.sim.testing.framecheck.FrameCheckError` with the inline
    message by the next ``request``/``check`` after the worker reported it, and by every
    ``drain`` (it stays raised: a bad frame fails the testbench at the latest when the run ends or
    the counts are read). After a failure the worker checks no further frame.

    The worker is a plain ``python -m rocegen.sim.testing.framecheck_pool`` child (no fork of the
    simulator process, no multiprocessing bootstrap inside cocotb) reading batches from its
    standard input: it exits when that pipe closes, so it never outlives the simulator, however
    that ends. :meth:`FrameCheckPool.close` drains and stops it; pools still open at interpreter
    exit are closed then. A worker that dies is reported as ``RuntimeError``.

    Backpressure: the pipe holds a bounded number of batches; when the worker falls that far
    behind, sending the next batch waits for it (:attr:`~FrameCheckPool.wait_seconds` counts the
    simulator's waits on the pool, ``drain`` included).

:func:`make_framecheck` gives the pool with ``ROCEGEN_FRAMECHECK=pool``, the inline checker
with ``ROCEGEN_FRAMECHECK=inline`` (a failure then raises at the frame itself), and by default
(``auto``) the pool only when a core is free for the worker: the pool pays off only when the
worker runs on a core the simulator does not need (on a machine whose cores are all busy it was
measured slower than the inline check).
"""

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections import Counter

from rocegen.sim.testing.framecheck import FrameChecker, FrameCheckError

__all__ = ["FrameCheckPool", "make_framecheck", "core_free", "usable_cores", "BATCH", "MODES"]

#: frames sent to the worker in one message
BATCH = 64
#: the values of ``ROCEGEN_FRAMECHECK``: ``auto`` (the default), ``pool`` or ``inline``
MODES = ("auto", "pool", "inline")

_REQUEST, _CHECK = 0, 1
_LEN = struct.Struct(">I")
_live = weakref.WeakSet()


def make_framecheck(name="endpoint", mode=None, *, region_acks=False):
    """A frame checker named ``name``: a :class:`FrameCheckPool` for ``mode="pool"``, a
    :class:`~rocegen.sim.testing.framecheck.FrameChecker` for ``mode="inline"``; ``auto`` takes
    the pool only when a core is free for its worker (see :func:`core_free`): on a machine whose
    cores are all busy the worker only takes CPU time from the simulator, and the pool is slower
    than checking inline. ``mode`` defaults to ``ROCEGEN_FRAMECHECK`` from the environment, else
    ``auto``."""
    mode = mode or os.environ.get("ROCEGEN_FRAMECHECK") or "auto"
    if mode not in MODES:
        raise ValueError(f"ROCEGEN_FRAMECHECK must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "auto":
        mode = "pool" if core_free() else "inline"
    return FrameChecker(name, region_acks=region_acks) if mode == "inline" else \
        FrameCheckPool(name, region_acks=region_acks)


def usable_cores():
    """The cores this process may run on (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def core_free():
    """Whether the machine has a core to spare for the worker: at least two cores this process
    may run on, and a one-minute load average at least one below their number."""
    cores = usable_cores()
    return cores >= 2 and os.getloadavg()[0] <= cores - 1


def _python():
    """The Python interpreter to run the worker with: inside a simulator ``sys.executable`` may
    be the simulator itself, cocotb names the interpreter in ``PYGPI_PYTHON_BIN``."""
    exe = os.environ.get("PYGPI_PYTHON_BIN") or sys.executable
    if not exe or not os.access(exe, os.X_OK):
        raise RuntimeError(f"no Python interpreter to run the frame check worker ({exe!r})")
    return exe


def _write(stream, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _read(stream):
    """One message, or ``None`` at the end of the stream."""
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    data = stream.read(_LEN.unpack(head)[0])
    return pickle.loads(data)


class FrameCheckPool:
    """See the module documentation. ``name`` prefixes the error messages and the summary, as
    :class:`~rocegen.sim.testing.framecheck.FrameChecker`'s ``name`` does."""

    def __init__(self, name="endpoint", *, region_acks=False):
        self.name = name
        #: seconds the caller waited on the pool (full pipe, drain): the check's share of the
        #: simulation's wall time
        self.wait_seconds = 0.0
        self._batch = []
        self._sent = 0                  # batches sent
        self._done = 0                  # batches the worker answered
        self._counts = Counter()
        self._seconds = 0.0
        self._error = None              # message of the first failure
        self._dead = None               # why the worker stopped answering
        self._closed = False
        self._cond = threading.Condition()
        self._proc = subprocess.Popen(
            [_python(), "-m", "rocegen.sim.testing.framecheck_pool", name,
             *(["--region-acks"] if region_acks else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self._reader = threading.Thread(target=self._read_results, daemon=True,
                                        name=f"framecheck {name}")
        self._reader.start()
        _live.add(self)

    # ------------------------------------------------------------------ FrameChecker interface
    def request(self, frame):
        """Note a frame sent to the endpoint (checked in order with the frames from it)."""
        self._put(_REQUEST, frame)

    def check(self, frame):
        """Queue one frame the endpoint sent for the check. Raises
        :class:`~rocegen.sim.testing.framecheck.FrameCheckError` when the worker has reported
        a failure (of this frame or an earlier one)."""
        self._put(_CHECK, frame)

    @property
    def counts(self):
        """The frames checked by kind, ``frames`` in all, once every frame given so far is
        checked (see :meth:`drain`)."""
        self.drain()
        return Counter(self._counts)

    @property
    def seconds(self):
        """Seconds the worker spent checking the frames given so far (after :meth:`drain`)."""
        self.drain()
        return self._seconds

    def summary(self):
        """One line: the frames checked, by kind (after :meth:`drain`)."""
        counts = self.counts
        kinds = ", ".join(f"{counts[k]} {k}" for k in sorted(counts) if k != "frames")
        return (f"{self.name}: {counts['frames']} frames rebuilt by scapy and identical"
                + (f" ({kinds})" if kinds else ""))

    # ----------------------------------------------------------------------------- the pool
    def drain(self):
        """Send the queued frames and wait until the worker has checked all of them; raise the
        first failure found."""
        self._flush()
        t0 = time.perf_counter()
        with self._cond:
            while self._done < self._sent and self._dead is None and self._error is None:
                self._cond.wait()
        self.wait_seconds += time.perf_counter() - t0
        self._raise()

    def close(self):
        """Drain, stop the worker and wait for it to exit; raises a failure found on the way.
        Closing again does nothing."""
        if self._closed:
            return
        try:
            self.drain()
        finally:
            self._stop()

    @property
    def running(self):
        """Whether the worker process is alive."""
        return self._proc.poll() is None

    def _stop(self):
        self._closed = True
        _live.discard(self)
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._reader.join(timeout=30)
        self._proc.stdout.close()

    def _put(self, tag, frame):
        if self._closed:
            raise RuntimeError(f"{self.name}: the frame check pool is closed")
        self._raise()
        self._batch.append((tag, bytes(frame)))
        if len(self._batch) >= BATCH:
            self._flush()

    def _flush(self):
        if not self._batch or self._closed:
            return
        batch, self._batch = self._batch, []
        if self._error is not None or self._dead is not None:
            return                      # the worker checks nothing more; _raise says why
        t0 = time.perf_counter()
        try:
            with self._cond:
                self._sent += 1
            _write(self._proc.stdin, batch)
        except OSError as e:
            with self._cond:
                self._dead = self._dead or f"cannot send frames to it: {e}"
        self.wait_seconds += time.perf_counter() - t0

    def _raise(self):
        if self._error is not None:
            raise FrameCheckError(self._error)
        if self._dead is not None:
            raise RuntimeError(f"{self.name}: the frame check worker stopped: {self._dead}")

    def _read_results(self):
        out = self._proc.stdout
        while True:
            try:
                msg = _read(out)
            except Exception as e:      # a torn message: the worker died mid-write
                msg, why = None, f"unreadable answer ({type(e).__name__}: {e})"
            else:
                why = None
            with self._cond:
                if msg is None:
                    if self._done < self._sent and self._error is None:
                        code = self._proc.wait()
                        self._dead = why or f"exit status {code} with frames unchecked"
                    self._cond.notify_all()
                    return
                done, counts, seconds, error = msg
                self._done, self._counts, self._seconds = done, Counter(counts), seconds
                if error is not None and self._error is None:
                    self._error = error
                self._cond.notify_all()


def _close_all():
    for pool in list(_live):
        try:
            pool.close()
        except (FrameCheckError, RuntimeError) as e:
            print(f"frame check at exit: {e}", file=sys.stderr)


atexit.register(_close_all)


# -------------------------------------------------------------------------------- the worker

def _worker(name, inp, out, region_acks=False):
    """Check the batches read from ``inp`` with one ``FrameChecker`` (``region_acks`` its own);
    answer each with ``(batches done, counts, seconds, first failure)``; return at the end of
    ``inp``."""
    checker = FrameChecker(name, region_acks=region_acks)
    done, error = 0, None
    while (batch := _read(inp)) is not None:
        for tag, frame in batch if error is None else ():
            try:
                if tag == _CHECK:
                    checker.check(frame)
                else:
                    checker.request(frame)
            except FrameCheckError as e:
                error = str(e)
                break
            except Exception as e:      # a fault of the checker itself: report, do not hide
                error = (f"{name}: frame {checker.counts['frames'] + 1}: the check itself "
                         f"failed: {type(e).__name__}: {e}")
                break
        done += 1
        _write(out, (done, dict(checker.counts), checker.seconds, error))


if __name__ == "__main__":
    # the answers go out on a private copy of stdout; anything printed goes to stderr
    _answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _worker(sys.argv[1] if len(sys.argv) > 1 else "endpoint", sys.stdin.buffer, _answers,
            region_acks="--region-acks" in sys.argv[2:])
