"""Figures of the standard RDMA connection manager: the IB CM's passive side on QP1.

The blocks as an endpoint with ``rdma_cm_ports`` builds them
(:class:`~rocegen.gateware.roce.features.ibcm.IbCmFeature`: ``IbCmService(width,
**ibcm_params(cfg))`` and ``IbCmQps(num_qps, reads=..., max_rd_atomic=...)``), for the
responder builds a librdmacm peer connects to (``EndpointConfig(width, num_qps,
responder=True, rdma_cm_ports=(7174,))``: a connection per QP, READs on, the REPs' regions
read per QP) at W = 64 (156.25 MHz) and W = 512 (322.265625 MHz), 8 and 256 QPs:

* size: Yosys figures (:func:`rocegen.tools.synth.synthesize`, ``synth_xilinx -family xcup``,
  mapped for area, as ``bench_synth`` and ``bench_atomics`` map their blocks; LUTs,
  flip-flops, block RAM, LUT levels) of ``IbCmService`` at each point, of ``IbCmQps`` at 8
  and 256 QPs, and of the services at 8 QPs (``RpingServer`` and ``RpingClient`` at W = 64
  and 512, ``SendEcho``,
  ``ServicePorts`` for two services). Results come from the synthesis result cache when an
  earlier run synthesized the same netlist. What the IB CM adds to a whole endpoint is not
  measured here: a core's Yosys run takes 3 to 6 minutes (``docs/resources.md``), two per
  point, past this script's budget.
* latency: ``IbCmService`` in the Amaranth simulator, fed one REQ made by the reference
  model's active side (``IbCm.connect``), wrapped in a RoCEv2 frame by the reference model
  (``sim.models.ibcm.wrap``) and handed on as RoCE's ICRC check does (IPv4 header first, ICRC
  removed), a beat a cycle; ``o`` always ready, the QP pool answering at once (``qp_req``
  taken in the cycle it is offered, the grant offered the next, as ``IbCmQps`` does when
  idle). The figure: cycles from the cycle the REQ's last beat is taken on ``i`` to the cycle
  the REP's first beat leaves on ``o``.
* rate: K connections set up and torn down as a host does back to back: its K REQs, then an
  RTU for each REP (as each REP comes), then its K DREQs (each answered by a DREP), each
  datagram offered a beat a cycle as soon as the ingress queue has room for it (fewer than
  ``queue`` MADs in it, so none is dropped; the drop counter is checked). Cycles from the first
  REQ's first beat on ``i`` to the last DREP's last beat on ``o``, both counted; connections
  per second at the endpoint's clock and cycles per connection. And the bound the time-wait
  sets when each connection keeps its QP through it: ``num_qps / time_wait`` connections per
  second, for the endpoint's default time-wait and for ``rdma_cm_time_wait_us=500`` (each as
  the passive side counts it: rounded up to 4.096 us ticks).

Every reply is checked before a figure is kept: its kind (REP, DREP), the UD packet around it
(the reference model's QP1 egress, PSNs counting), its destination, and what the host model
makes of it (an RTU for each REP, the connection disconnected by each DREP); the counters
(``established``, QPs opened and closed, drops) must say the same.

Run: python -m bench.bench_rdma_cm [--json FILE] [--quick] [--no-synth] [--no-sim]
(``bench/rdma_cm.json`` holds the published figures; ``--quick``: the rate with fewer
connections at 256 QPs and no synthesis of the 256-QP blocks.)
"""

import argparse
import time
import warnings
from collections import Counter
from pathlib import Path

from bench.bench_synth import git_revision, write_rows
from rocegen.gateware.roce.endpoint.config import EndpointConfig
from rocegen.gateware.roce.features.ibcm import IbCmFeature, ibcm_params
from rocegen.gateware.roce.features.services import ServicesFeature
from rocegen.gateware.roce.ibcm.ibcm_closer import IbCmCloser
from rocegen.gateware.roce.ibcm.ibcm_layouts import TICK_NS
from rocegen.gateware.roce.ibcm.ibcm_qps import IbCmQps
from rocegen.gateware.roce.ibcm.ibcm_service import COUNTERS, IbCmService
from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.gateware.roce.services.service_ports import ServicePorts
from rocegen.sim.models.ibcm import IbCm, QpPool, wrap
from rocegen.sim.models.ibcm.qp1 import egress
from rocegen.sim.models.icrc import ICRC_LEN
from rocegen.sim.models.packets import from_beats, to_beats
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.tools.synth import synthesize
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I

ROOT = Path(__file__).resolve().parent.parent
#: the TCP port listened on (rping's)
PORT = 7174
#: the rping server's port in the rping points (PORT is then the other connections')
RPING_PORT = 7175
#: (W, QPs) of every figure
POINTS = ((64, 8), (64, 256), (512, 8), (512, 256))
#: connections set up and torn down per rate run, by QPs (``--quick``: the second)
RATE_K = {8: (8, 8), 256: (64, 16)}
#: the time-waits of the bound, in microseconds (None: the endpoint's default)
TIME_WAITS_US = (None, 500)
FIGURES = ("lut_total", "lut", "lut_as_memory", "ff", "carry", "bram36", "bram18", "lut_levels")


def rping_config(width, num_qps, echo=False):
    """An endpoint with the rping server on :data:`RPING_PORT` beside :data:`PORT` (``echo``:
    and the SEND echo on :data:`PORT`)."""
    return EndpointConfig(width=width, num_qps=num_qps, responder=True,
                          rdma_cm_ports=(PORT, RPING_PORT), rping_port=RPING_PORT,
                          echo_port=PORT if echo else None)


def rping_client_config(width, num_qps):
    """An endpoint with the rping client of a host's :data:`RPING_PORT` (pings of 3968
    bytes, the largest the default slices hold at W = 512)."""
    return EndpointConfig(width=width, num_qps=num_qps, responder=True, rdma_cm_ports=(PORT,),
                          rping_client_port=RPING_PORT, rping_client_size=3968)


def endpoint_config(width, num_qps, time_wait_us=None):
    """The endpoint configuration of a point: a responder build listening on :data:`PORT`."""
    return EndpointConfig(width=width, num_qps=num_qps, responder=True, rdma_cm_ports=(PORT,),
                          rdma_cm_time_wait_us=time_wait_us)


def service(cfg):
    """``IbCmService`` as :class:`~rocegen.gateware.roce.features.ibcm.IbCmFeature` builds it."""
    return IbCmService(cfg.width, **ibcm_params(cfg))


def rping_server(cfg):
    """``RpingServer`` as :class:`~rocegen.gateware.roce.features.rping.RpingFeature` builds it
    (``cfg`` with ``rping_port``; a word address of 2^32 bytes' memory)."""
    return ServicesFeature(cfg, 32 - (cfg.width // 8).bit_length() + 1).rping


def qp_block(cfg):
    """``IbCmQps`` as :class:`~rocegen.gateware.roce.features.ibcm.IbCmFeature` builds it."""
    return IbCmQps(cfg.num_qps, reads=cfg.reads, max_rd_atomic=cfg.max_rd_atomic)


def idle_block(width, num_qps):
    """``IbCmIdle`` as :class:`~rocegen.gateware.roce.features.ibcm.IbCmFeature` builds it with
    the SEND echo on :data:`PORT` (the default ``service_idle_us``; 16 MiB of memory, so that
    the services' slices of 256 QPs fit)."""
    cfg = EndpointConfig(width=width, num_qps=num_qps, responder=True, mem_bytes=1 << 24,
                         rdma_cm_ports=(PORT,), echo_port=PORT)
    return IbCmFeature(cfg).idle


# ---- size


def designs(quick=False):
    """``[(name, description, factory)]`` of the blocks synthesized (``quick``: 8 QPs only)."""
    out = []
    for width, qps in POINTS:
        if not (quick and qps > 8):
            out.append((f"ibcm_service_w{width}_{qps}qp", f"IbCmService, W = {width}, {qps} QPs",
                        lambda w=width, q=qps: service(endpoint_config(w, q))))
    for qps in (8, 256):
        if not (quick and qps > 8):
            out.append((f"ibcm_qps_{qps}qp", f"IbCmQps, {qps} QPs, READs",
                        lambda q=qps: qp_block(endpoint_config(64, q))))
    # the connections it closes (the user's, the failed, the quiet ones) and the quiet watch
    for qps in (8, 256):
        if not (quick and qps > 8):
            out.append((f"ibcm_closer_{qps}qp", f"IbCmCloser, {qps} QPs",
                        lambda q=qps: IbCmCloser(q)))
            out.append((f"ibcm_idle_{qps}qp", f"IbCmIdle, {qps} QPs, a window of 10 s at "
                        f"322 MHz", lambda q=qps: idle_block(512, q)))
    # the rping server and the ports it shares with the user's logic
    for width in (64, 512):
        out.append((f"rping_server_w{width}_8qp", f"RpingServer, W = {width}, 8 QPs",
                    lambda w=width: rping_server(rping_config(w, 8))))
    for width in (64, 512):
        out.append((f"rping_client_w{width}_8qp",
                     f"RpingClient, W = {width}, 8 QPs, pings of 3968 bytes",
                     lambda w=width: ServicesFeature(rping_client_config(w, 8),
                                                     32 - (w // 8).bit_length() + 1).client))
    out.append(("send_echo_w512_8qp", "SendEcho, W = 512, 8 QPs",
                lambda: ServicesFeature(rping_config(512, 8, echo=True), 26).echo))
    out.append(("service_ports_8qp", "ServicePorts, 8 QPs, two services",
                lambda: ServicePorts(8, 16, 2)))
    return out


def synth_figures(quick=False):
    """The Yosys figures of :func:`designs`, a row each."""
    rows, revision = [], git_revision()
    for name, description, factory in designs(quick):
        print(f"{name}: {description} ...", flush=True)
        r = synthesize(factory(), top="top", workdir=ROOT / "build" / "synth" / f"rdma_cm_{name}",
                       cache=True, label=f"rdma-cm-{name}")
        print(f"  {r['lut_total']:,} LUTs, {r['ff']:,} FF, {r['bram36']} RAMB36 + "
              f"{r['bram18']} RAMB18, {r['lut_levels']} LUT levels "
              f"({r['synth_seconds']:.0f} s{', cached' if r['cached'] else ''})", flush=True)
        rows.append({"kind": "size", "name": name, "description": description,
                     "revision": revision, "yosys": r["yosys"], "cached": r["cached"],
                     "synth_seconds": round(r["synth_seconds"], 1),
                     **{k: r[k] for k in FIGURES}})
    return rows


# ---- latency and rate


# ---- the simulation

#: the host's and the FPGA's addresses (IPv4, MAC), the host's first QP number and CA GUID
HOST_IP, FPGA_IP = 0x0A000001, 0x0A000002
HOST_MAC, FPGA_MAC = 0x02_00_00_00_00_01, 0x02_00_00_00_00_02
HOST_QPN, HOST_GUID = 0x10000, 0x0002C90300001111
#: the region the REPs advertise (``region``: the same for every QP here)
REGION = {"addr": 0x1000, "rkey": 0x1234, "length": 0x10000}


class BenchError(AssertionError):
    """A run that did not go as it must: no figure is reported from it."""


class CmHarness:
    """``IbCmService`` of ``cfg`` in the Amaranth simulator, stepped a cycle at a time by one
    testbench (:meth:`step`): it drives ``i`` a beat a cycle from the datagram being sent,
    keeps ``o``, ``qp_free`` and ``qp_set`` ready, answers ``qp_req`` from a
    :class:`QpPool` of the endpoint's QPs (taken at once, the grant offered the next cycle) and
    records, by cycle (counted from 0, the first cycle :meth:`step` runs): each datagram's
    first and last beat on ``i`` (``in_first``, ``in_last``), the MADs that left the ingress
    queue (``left``), each packet out (``replies``: first and last cycle, bytes, ``meta``) and
    the counter strobes (``counts``). The host is the reference model's active side
    (``host``), its MADs wrapped by the reference model's framing."""

    def __init__(self, cfg):
        self.cfg, self.width = cfg, cfg.width
        self.dut = service(cfg)
        self.pool = QpPool(range(QPN_BASE, QPN_BASE + cfg.num_qps))
        self.host = IbCm(pool=QpPool(range(HOST_QPN, HOST_QPN + 256)), local_ip=HOST_IP,
                         ca_guid=HOST_GUID, seed=cfg.width + cfg.num_qps)
        self.cycle = self.psn = self.started = self.left = 0
        self.beats, self.in_first, self.in_last, self.replies = [], [], [], []
        self.counts = Counter()
        self._out, self._grant, self._req_ready, self._first = [], None, False, False
        d = self.dut
        self._names = ["i_valid", "i_ready", "i_last", "q_valid", "q_ready", "q_last",
                       "o_valid", "o_payload", "req_valid", "grant_ready", "free_valid",
                       "free_qpn", "set_valid", "set_open", *COUNTERS]
        q = d.ingress.o
        self._signals = [d.i.valid, d.i.ready, d.i.payload.last, q.valid, q.ready,
                         q.payload.last, d.o.valid, d.o.payload, d.qp_req.valid,
                         d.qp_grant.ready, d.qp_free.valid, d.qp_free.payload, d.qp_set.valid,
                         d.qp_set.payload.open, *(getattr(d, c) for c in COUNTERS)]

    def now(self):
        """The simulated time in ns, for the host model."""
        return int(self.cycle * 1e9 / self.cfg.clk_hz)

    def run(self, body):
        """Simulate ``body`` (an async function of the testbench's context returning a dict);
        returns its dict."""
        result = {}

        async def tb(ctx):
            d = self.dut
            for port in (d.o, d.qp_free, d.qp_set):
                ctx.set(port.ready, 1)
            ctx.set(d.local_ip, FPGA_IP)
            ctx.set(d.region, REGION)
            result.update(await body(ctx))
        run_sim(self.dut, testbenches=[tb])
        return result

    async def step(self, ctx):
        """One cycle: the inputs set, the outputs sampled at the clock edge and recorded."""
        d = self.dut
        beat = self.beats[0] if self.beats else None
        ctx.set(d.i.valid, beat is not None)
        if beat is not None:
            ctx.set(d.i.payload.data, beat[0])
            ctx.set(d.i.payload.keep, beat[1])
            ctx.set(d.i.payload.last, beat[2])
        self._req_ready = self._grant is None
        ctx.set(d.qp_req.ready, self._req_ready)
        ctx.set(d.qp_grant.valid, self._grant is not None)
        if self._grant is not None:
            ctx.set(d.qp_grant.payload, self._grant)
        _, _, *values = await ctx.tick().sample(*self._signals)
        self._record(dict(zip(self._names, values)))
        self.cycle += 1

    def _record(self, s):
        if s["i_valid"] and s["i_ready"]:
            if self._first:
                self.in_first.append(self.cycle)
                self._first = False
            self.beats.pop(0)
            if s["i_last"]:
                self.in_last.append(self.cycle)
        self.left += s["q_valid"] and s["q_ready"] and s["q_last"]
        if s["o_valid"]:
            p = s["o_payload"]
            self._out.append((p.data, p.keep, p.last))
            if p.last:
                first = self.cycle - len(self._out) + 1
                self.replies.append((first, self.cycle, from_beats(self._out, self.width),
                                     meta_dict(p.meta)))
                self._out = []
        self._pool(s)
        for c in COUNTERS:
            self.counts[c] += s[c]

    def _pool(self, s):
        """The QP pool's side of the cycle sampled."""
        if self._grant is not None and s["grant_ready"]:
            self._grant = None
        elif self._req_ready and s["req_valid"]:
            q = self.pool.allocate()
            self._grant = {"ok": int(q is not None), "qpn": q or 0}
        if s["free_valid"]:
            self.pool.free(s["free_qpn"])
        if s["set_valid"]:
            self.counts["qp_opened" if s["set_open"] else "qp_closed"] += 1

    def datagram(self, mad):
        """``mad`` from the host's QP1 as RoCE's ICRC check hands it on: the reference
        model's frame without its Ethernet header and ICRC (BTH PSNs counting)."""
        frame = wrap(mad, src_mac=HOST_MAC, dst_mac=FPGA_MAC, src_ip=HOST_IP, dst_ip=FPGA_IP,
                     psn=self.psn)
        self.psn += 1
        end = H.ETH.length + H.IPV4.unpack(frame[H.ETH.length:])["total_length"] - ICRC_LEN
        return frame[H.ETH.length:end]

    async def send(self, ctx, mad):
        """Offer ``mad``'s datagram on ``i`` once the one before is in and the ingress queue
        holds fewer than ``queue`` MADs; returns when its first beat is offered."""
        while self.beats or self.started - self.left >= self.dut.ingress.queue:
            await self.step(ctx)
        self.beats = to_beats(self.datagram(mad), self.width)
        self._first = True
        self.started += 1

    async def reply(self, ctx, n, attr):
        """Reply ``n`` (counted from 0) once it has left, checked: a UD SEND_ONLY from QP1 to
        the host's QP1, PSN ``n``, its MAD of attribute ``attr``. Returns the MAD."""
        while len(self.replies) <= n:
            await self.step(ctx)
        _, _, payload, meta = self.replies[n]
        mad = payload[I.UD_OUT.length:]
        want, udp = egress(mad, dst_ip=HOST_IP, dst_qp=I.QP1, pkey=I.DEFAULT_PKEY, psn=n)
        attr_got = I.MAD_HDR.unpack(mad)["attribute_id"] if len(mad) == I.MAD_LENGTH else None
        if payload != want or meta["udp"]["dst_ip"] != udp["dst_ip"] or attr_got != attr:
            raise BenchError(f"reply {n}: attribute {attr_got!r}, not {attr:#x}, or not the "
                             f"UD packet of its MAD")
        return mad

    def answer(self, mad, name):
        """What the host makes of a reply ``mad``: its answers; the host's last event must be
        ``name``."""
        outs = self.host.receive(self.now(), mad, src_ip=FPGA_IP)
        if not self.host.events or self.host.events[-1][0] != name:
            raise BenchError(f"the host's last event is {self.host.events[-1:]}, not {name}")
        return outs

    async def one_request(self, ctx):
        """One REQ; its REP checked; ``cycles`` from its last beat in to the REP's first out."""
        _, (req,) = self.host.connect(self.now(), dst_ip=FPGA_IP, port=PORT)
        await self.send(ctx, req.mad)
        rep = await self.reply(ctx, 0, I.ATTR_REP)
        (rtu,) = self.answer(rep, "established")
        if I.MAD_HDR.unpack(rtu.mad)["attribute_id"] != I.ATTR_RTU:
            raise BenchError("the host did not answer the REP with an RTU")
        return {"cycles": self.replies[0][0] - self.in_last[0]}

    async def connections(self, ctx, k):
        """``k`` REQs, an RTU for each REP, ``k`` DREQs and their DREPs, checked; ``cycles``
        from the first REQ's first beat to the last DREP's last beat, both counted."""
        cids = []
        for _ in range(k):
            cid, (req,) = self.host.connect(self.now(), dst_ip=FPGA_IP, port=PORT)
            cids.append(cid)
            await self.send(ctx, req.mad)
        for n in range(k):
            (rtu,) = self.answer(await self.reply(ctx, n, I.ATTR_REP), "established")
            await self.send(ctx, rtu.mad)
        for cid in cids:
            (dreq,) = self.host.disconnect(self.now(), cid)
            await self.send(ctx, dreq.mad)
        for n in range(k, 2 * k):
            if self.answer(await self.reply(ctx, n, I.ATTR_DREP), "disconnected"):
                raise BenchError("the host answered a DREP")
        end = self.replies[-1][1]
        while self.counts["rx_mads"] < 3 * k and self.cycle < end + 4 * self.cfg.num_qps:
            await self.step(ctx)
        self._check_counts(k)
        return {"cycles": end - self.in_first[0] + 1, "mads_in": len(self.in_last),
                "replies": len(self.replies)}

    def _check_counts(self, k):
        """The counters after ``k`` connections set up and torn down."""
        want = {"qp1_mads": 3 * k, "rx_mads": 3 * k, "tx_mads": 2 * k, "established": k,
                "qp_opened": k, "qp_closed": k, "qp1_drop_overflow": 0, "req_rejected": 0,
                "rtu_unknown": 0, "dreq_unknown": 0}
        got = {c: self.counts[c] for c in want}
        if got != want or len(self.replies) != 2 * k or self.pool.free_count != \
                self.cfg.num_qps - k:
            raise BenchError(f"counters {got}, not {want}; {len(self.replies)} replies; "
                             f"{self.pool.free_count} QPs free")


def latency(width, num_qps):
    """Cycles from a REQ's last beat taken on ``i`` to its REP's first beat on ``o``, one REQ
    into an idle ``IbCmService`` of the point; a row."""
    h = CmHarness(endpoint_config(width, num_qps))
    got = h.run(h.one_request)
    print(f"  latency W = {width}, {num_qps} QPs: {got['cycles']} cycles", flush=True)
    return {"kind": "latency", "name": f"latency_w{width}_{num_qps}qp", "width": width,
            "connections": num_qps, "clk_hz": h.cfg.clk_hz, "req_to_rep_cycles": got["cycles"],
            "req_to_rep_ns": round(got["cycles"] * 1e9 / h.cfg.clk_hz, 1),
            "sim_cycles": h.cycle}


def rate(width, num_qps, k):
    """``k`` connections set up and torn down back to back through ``IbCmService``; a row."""
    h = CmHarness(endpoint_config(width, num_qps))
    got = h.run(lambda ctx: h.connections(ctx, k))
    cycles, f = got["cycles"], h.cfg.clk_hz
    row = {"kind": "rate", "name": f"rate_w{width}_{num_qps}qp", "width": width,
           "connections": num_qps, "k": k, "clk_hz": f, "cycles": cycles,
           "cycles_per_connection": round(cycles / k, 1),
           "connections_per_second": round(k / (cycles / f)), "mads_in": got["mads_in"],
           "replies": got["replies"], "sim_cycles": h.cycle}
    print(f"  rate W = {width}, {num_qps} QPs, {k} connections: {cycles} cycles, "
          f"{row['cycles_per_connection']} per connection, "
          f"{row['connections_per_second']:,} connections/s", flush=True)
    return row


def time_wait_bounds():
    """Rows: ``num_qps / time_wait`` for each QP count and time-wait, the time-wait as the
    passive side built for the endpoint counts it (rounded up to ticks)."""
    rows = []
    for wait_us in TIME_WAITS_US:
        for qps in sorted({q for _, q in POINTS}):
            passive = service(endpoint_config(64, qps, wait_us)).core.cm
            held_s = passive.time_wait_ticks * TICK_NS / 1e9
            rows.append({"kind": "time_wait_bound", "name": f"time_wait_{qps}qp_"
                         f"{'default' if wait_us is None else f'{wait_us}us'}",
                         "connections": qps, "time_wait_ns": passive.time_wait_ns,
                         "time_wait_held_ns": passive.time_wait_ticks * TICK_NS,
                         "connections_per_second": round(qps / held_s, 1)})
    return rows


# ---- the table


def _size_lines(rows):
    out = ["| design | LUTs | LUT as memory | FF | RAMB36 | RAMB18 | LUT levels | Yosys |",
           "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        out.append(f"| {r['description']} | {r['lut_total']:,} | {r['lut_as_memory']:,} | "
                   f"{r['ff']:,} | {r['bram36']} | {r['bram18']} | {r['lut_levels']} | "
                   f"{r['synth_seconds']:.0f} s{' (cached)' if r['cached'] else ''} |")
    return out


def _sim_lines(lat, rates):
    by = {(r["width"], r["connections"]): r for r in rates}
    out = ["| W, clock | connections | REQ to REP | K | cycles | cycles per connection | "
           "connections/s |", "|---|--:|--:|--:|--:|--:|--:|"]
    for r in lat:
        q = by.get((r["width"], r["connections"]))
        tail = (f"{q['k']} | {q['cycles']:,} | {q['cycles_per_connection']} | "
                f"{q['connections_per_second']:,}" if q else " | | | ")
        out.append(f"| {r['width']}, {r['clk_hz'] / 1e6:g} MHz | {r['connections']} | "
                   f"{r['req_to_rep_cycles']} cycles ({r['req_to_rep_ns']} ns) | {tail} |")
    return out


def _bound_lines(rows):
    out = ["| QPs | time-wait (held) | connections/s at most |", "|--:|--:|--:|"]
    for r in rows:
        out.append(f"| {r['connections']} | {r['time_wait_ns'] / 1e3:g} us "
                   f"({r['time_wait_held_ns'] / 1e3:g} us) | {r['connections_per_second']:,} |")
    return out


def table(rows):
    """The figures of ``rows`` as Markdown tables (lines)."""
    kind = lambda k: [r for r in rows if r["kind"] == k]  # noqa: E731
    out = []
    if kind("size"):
        out += _size_lines(kind("size")) + [""]
    if kind("latency"):
        out += _sim_lines(kind("latency"), kind("rate")) + [""]
    out += _bound_lines(kind("time_wait_bound"))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--quick", action="store_true", help="fewer connections in the 256-QP rate "
                    "runs, no synthesis of the 256-QP blocks")
    ap.add_argument("--no-synth", action="store_true", help="no Yosys run")
    ap.add_argument("--no-sim", action="store_true", help="no simulation")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message=r".* created but never used")
    t0 = time.time()
    rows = [] if args.no_synth else synth_figures(args.quick)
    if not args.no_sim:
        rows += [latency(w, q) for w, q in POINTS]
        rows += [rate(w, q, RATE_K[q][args.quick]) for w, q in POINTS]
    rows += time_wait_bounds()
    print("\n".join(["", *table(rows)]))
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
