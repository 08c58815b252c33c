"""Host side of the connection manager: 64-byte datagrams to the FPGA's UDP port 17185 over an
ordinary UDP socket, replies awaited with a timeout and retries.

The datagram layout is the one header table's ``CM`` (:mod:`rocegen.wire.cm` packs and
unpacks it), so this client is byte-compatible with the existing host tools and FPGA endpoints.

A reply belongs to a request when it is a reply (``ack_valid``), names the same request type,
and echoes the request's ``loc_qpn`` and ``loc_psn`` in its ``rem_qpn`` / ``rem_psn``. Anything
else arriving on the socket is ignored. A request is sent again when no reply came within
``timeout`` seconds, ``retries`` times; an OPEN_QP that needed a retry may have been taken twice
by the FPGA (the first reply lost), so the client waits one more timeout for late replies and
closes the QP numbers they name other than the one it keeps.

An FPGA with the RC responder names each QP's memory region in its OPEN_QP reply (R_Key, base,
length: :func:`rocegen.wire.cm.region`; all zero without the responder), and one with the pattern
sink answers QUERY with the sink's counters (:meth:`CmClient.query`). A host that does RDMA READ
states its READ depths in OPEN_QP (bytes 56-57, :func:`rocegen.wire.cm.with_read_depths`), and an
FPGA that knows them states its own in the ACK (0: not stated, one READ at a time).

One client may serve several threads: a lock keeps one request (with its replies) at a time on
the socket.
"""

import os
import socket
import threading
import time

from rocegen.wire import cm as M

__all__ = ["CmClient", "CmError"]


class CmError(Exception):
    """A request the FPGA refused or did not answer. ``kind``: ``"timeout"`` (no reply after
    every retry), ``"no_qp"`` (no free QP), ``"nak"`` (refused: illegal, not the owner, or a
    host outside the allowed subnet), ``"error"`` (ERROR reply)."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


_ACKS = {M.ACK_NO_QP: ("no_qp", "no free QP on the FPGA (NO_QP)"),
         M.ACK_NAK: ("nak", "the FPGA refused the request (NAK: an illegal request, a QP "
                     "owned by another host, or a host outside the FPGA's allowed subnet)"),
         M.ACK_ERROR: ("error", "the FPGA answered ERROR")}


class CmClient:
    """Talks to the connection manager at ``fpga_ip``:``port`` from a UDP socket bound to
    ``bind``:``listen_port`` (0: any free port; the port goes in every request's
    ``listening_port``, where the FPGA sends its replies)."""

    def __init__(self, fpga_ip, port=M.CM_PORT, *, listen_port=0, bind="0.0.0.0", timeout=0.5,
                 retries=4):
        if not 1 <= port <= 65535:
            raise ValueError(f"connection-manager port must be 1..65535, not {port}")
        if timeout <= 0 or retries < 0:
            raise ValueError("timeout must be > 0 and retries >= 0")
        self.fpga = (fpga_ip, port)
        self.timeout = timeout
        self.retries = retries
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.bind((bind, listen_port))
        except OSError as e:
            self.sock.close()
            raise CmError("bind", f"cannot listen on UDP {bind}:{listen_port}: {e.strerror}") from None
        self.listen_port = self.sock.getsockname()[1]
        #: requests sent (retries included) and replies matched
        self.sent = 0
        self.replies = 0
        self._lock = threading.RLock()

    def close(self):
        self.sock.close()

    def send_raw(self, payload):
        """Send one datagram as it is (test traffic, or anything a test wants to send)."""
        self.sock.sendto(payload, self.fpga)
        self.sent += 1

    def traffic(self, fpga_qpn, dma_length, n_transfers, frequency=0, *, write=True, imm=False,
                window_log2=0, read=False, atomic=None):
        """Start the FPGA's traffic generator on ``fpga_qpn`` (no reply is sent); ``read``: a
        run of RDMA READs of our region; ``atomic`` (``"FETCH_ADD"``, ``"COMPARE_SWAP"``): a run
        of RDMA atomics on it (:func:`rocegen.wire.cm.traffic`)."""
        with self._lock:
            self.send_raw(M.traffic(fpga_qpn, dma_length, n_transfers, frequency, write=write,
                                    imm=imm, window_log2=window_log2, read=read, atomic=atomic,
                                    listening_port=self.listen_port))

    def request(self, req_type, *, read_depths=None, raw=False, **fields):
        """Send a request and return the fields of its ACK reply (with ``raw``: ``(fields,
        bytes)``); :class:`CmError` otherwise. ``read_depths``: ``(rd_atomic, rd_depth)`` stated
        in bytes 56-57."""
        with self._lock:
            return self._request(req_type, read_depths, raw, fields)

    def _request(self, req_type, read_depths, raw, fields):
        fields.setdefault("listening_port", self.listen_port)
        payload = M.request(req_type, **fields)
        if read_depths is not None:
            payload = M.with_read_depths(payload, *read_depths)
        key = (req_type, fields.get("loc_qpn", 0), fields.get("loc_psn", 0))
        reply, tries = None, 0
        while reply is None and tries <= self.retries:
            self.send_raw(payload)
            tries += 1
            reply = self._wait(key, self.timeout, raw=True)
        if reply is None:
            raise CmError("timeout", f"no reply from the FPGA at {self.fpga[0]}:{self.fpga[1]} "
                          f"after {self.retries + 1} tries {self.timeout:g} s apart (is it up, "
                          f"and is UDP port {self.listen_port} reachable from it?)")
        reply, data = reply
        if tries > 1 and req_type == M.REQ_OPEN_QP:
            self._close_duplicates(key, reply)
        if reply["ack_type"] != M.ACK_ACK:
            kind, text = _ACKS.get(reply["ack_type"],
                                   ("error", f"unknown reply type {reply['ack_type']}"))
            raise CmError(kind, text)
        return (reply, data) if raw else reply

    def _wait(self, key, timeout, raw=False):
        """The reply that matches ``key`` within ``timeout`` seconds (its fields; with ``raw``,
        ``(fields, bytes)``), or None."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data, _ = self.sock.recvfrom(2048)
            except TimeoutError:
                return None
            except ConnectionRefusedError:      # ICMP unreachable of an earlier datagram
                continue
            if len(data) != M.DATAGRAM_BYTES:
                continue
            f = M.unpack(data)
            if f["ack_valid"] and (f["req_type"], f["rem_qpn"], f["rem_psn"]) == key:
                self.replies += 1
                return (f, data) if raw else f

    def _close_duplicates(self, key, kept):
        while (late := self._wait(key, self.timeout)) is not None:
            if late["ack_type"] == M.ACK_ACK and late["loc_qpn"] != kept["loc_qpn"]:
                try:
                    self.request(M.REQ_CLOSE_QP, loc_qpn=key[1], loc_psn=key[2],
                                 rem_qpn=late["loc_qpn"])
                except CmError:
                    pass

    def open_qp(self, *, qpn, psn, rkey, vaddr, ip, pmtu=None, timeout=None, retry_cnt=None,
                rnr_retry=None, read_depths=None):
        """OPEN_QP for our QP ``qpn`` (first PSN we expect ``psn``, memory ``rkey``/``vaddr``, our
        RoCE address ``ip`` as an integer); the extension bytes only when given. Returns
        ``(fpga_qpn, fpga_first_psn)``."""
        r = self.open(qpn=qpn, psn=psn, rkey=rkey, vaddr=vaddr, ip=ip, pmtu=pmtu,
                      timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                      read_depths=read_depths)
        return r["fpga_qpn"], r["fpga_psn"]

    def open(self, *, qpn, psn, rkey, vaddr, ip, pmtu=None, timeout=None, retry_cnt=None,
             rnr_retry=None, read_depths=None):
        """:meth:`open_qp`, returning a dict: ``fpga_qpn``, ``fpga_psn`` and the QP's memory
        region on the FPGA, ``rkey``, ``base``, ``length`` (all 0 from an FPGA without the
        responder). ``read_depths``: ours, ``(rd_atomic, rd_depth)``, stated in the request;
        the dict then also holds the FPGA's, ``rd_atomic`` and ``rd_depth`` (0: not stated)."""
        ext = {}
        if pmtu is not None:
            ext["pmtu_code"] = M.pmtu_code(pmtu)
        if timeout is not None:
            if not 1 <= timeout <= 31:
                raise ValueError(f"timeout code must be 1..31, not {timeout}")
            ext["timeout_code"] = timeout
        if retry_cnt is not None or rnr_retry is not None:
            ext.update(M.retry_byte(7 if retry_cnt is None else retry_cnt,
                                    7 if rnr_retry is None else rnr_retry))
        r, data = self.request(M.REQ_OPEN_QP, read_depths=read_depths, raw=True, loc_qpn=qpn,
                               loc_psn=psn, loc_rkey=rkey, loc_vaddr=vaddr, loc_ip=ip, **ext)
        fpga_rkey, base, length = M.region(r)
        out = {"fpga_qpn": r["loc_qpn"], "fpga_psn": r["loc_psn"], "rkey": fpga_rkey,
               "base": base, "length": length}
        if read_depths is not None:
            out["rd_atomic"], out["rd_depth"] = M.read_depths(data)
        return out

    def send_qp_info(self, *, qpn, psn, fpga_qpn, rkey, vaddr, ip, read_depths=None):
        """SEND_QP_INFO to the FPGA's QP ``fpga_qpn`` (open, ours): our QP ``qpn`` (first PSN
        ``psn``, which this request does not change), address ``ip`` (an integer) and the
        memory the FPGA's QP works on from now, R_Key ``rkey`` at ``vaddr`` (its WRITEs, READs
        and atomics of test traffic go there). ``read_depths``: ours, as in :meth:`open` (the
        ACK sets the QP's READ limit again from them)."""
        self.request(M.REQ_SEND_QP_INFO, read_depths=read_depths, loc_qpn=qpn, loc_psn=psn,
                     loc_rkey=rkey, loc_vaddr=vaddr, loc_ip=ip, rem_qpn=fpga_qpn)

    def query(self, *, qpn=0, psn=None):
        """QUERY: the FPGA's pattern sink counters ``(checked, wrong)`` (bytes compared with the
        test pattern of their address, bytes that differed; both only grow). ``qpn``/``psn``
        go in ``loc_*`` (the reply echoes them; ``psn`` default: a fresh number).
        :class:`CmError` ``"timeout"`` when the FPGA has no pattern sink (it drops QUERY)."""
        if psn is None:
            psn = int.from_bytes(os.urandom(3), "big")
        with self._lock:
            return self._query(qpn, psn)

    def _query(self, qpn, psn):
        fields = {"loc_qpn": qpn, "loc_psn": psn, "listening_port": self.listen_port}
        payload = M.request(M.REQ_QUERY, **fields)
        key = (M.REQ_QUERY, qpn, psn)
        for _ in range(self.retries + 1):
            self.send_raw(payload)
            reply = self._wait(key, self.timeout, raw=True)
            if reply is not None:
                f, raw = reply
                if f["ack_type"] != M.ACK_ACK:
                    kind, text = _ACKS.get(f["ack_type"],
                                           ("error", f"unknown reply type {f['ack_type']}"))
                    raise CmError(kind, text)
                return M.query_counts(raw)
        raise CmError("timeout", f"no answer to QUERY from the FPGA at {self.fpga[0]}:"
                      f"{self.fpga[1]} after {self.retries + 1} tries (built without the "
                      f"pattern sink?)")

    def close_qp(self, *, qpn, psn, fpga_qpn):
        """CLOSE_QP of the FPGA's QP ``fpga_qpn`` (ours is ``qpn``, first PSN ``psn``)."""
        self.request(M.REQ_CLOSE_QP, loc_qpn=qpn, loc_psn=psn, rem_qpn=fpga_qpn)
