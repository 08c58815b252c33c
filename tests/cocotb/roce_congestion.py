"""cocotb testbench of the endpoint's congestion management (the test top
:class:`~rocegen.sim.testing.roce_tops.EndpointTop` of a build with ``dcqcn=True`` or ``pfc``)
and of the responder's CNPs, against the host NIC model (:class:`~rocegen.sim.models.rnic.Rnic`,
:data:`IDEAL`, strict) behind the MAC model (:class:`~rocegen.sim.testing.roce_env.MacModel`,
no line-rate budget and no backpressure: the endpoint's own pacing is what the wire shows): the
scenarios of ``tests/test_cocotb_congestion.py``. Two cocotb tests:

``scenarios``
    The scenarios listed in ``CONG_SCENARIOS`` (JSON), one after the other on one simulator;
    what each produced goes to the file ``ROCE_RESULTS`` (JSON, a list in the same order). In
    each, QP 0 sends RDMA WRITEs of ``length`` bytes (local address 0, remote offsets
    ``(k % 64) * length``) to a fresh host whose QP :data:`HOST_QPN` expects PSN 0, as fast as
    the endpoint lets it: the testbench keeps :data:`BACKLOG` work requests outstanding (posting the
    next one when one completes). A scenario is a dict:

    ``name``
        For messages.
    ``cycles``
        Its length, from its start (cycle 0: the cycle QP 0 is opened).
    ``pmtu``, ``length``
        QP 0's path MTU and the WRITEs' length.
    ``cc_cfg``
        (builds with DCQCN) The reaction point's configuration (every field of
        :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG`), written at cycle 0 after
        a configuration with the bypass has put every QP back to its initial state.
    ``tc_cfg``
        (builds with DCQCN or PFC) The traffic class
        (:data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG`) written before cycle 0.
    ``cnp_at``
        A CNP from the host for QP 0 is queued on the MAC's receive port at this cycle
        (tagged with the build's VLAN, if any).
    ``frame_at``
        ``[cycle, frame as hex]``: another frame from the host, queued likewise.
    ``tc_at``
        ``[cycle, traffic class]``: a ``tccfg`` write at that cycle.
    ``pause_at``
        ``[[cycle, level], ...]`` (builds with ``pfc="mac"``): ``pause_rx`` set to ``level``
        from that cycle (it is 0 at cycle 0).

    QP 0's context: DSCP 26, ECN ECT(0) (``0b10``), an AckReq every 8 packets, no retransmit
    timeout. After ``cycles`` the testbench stops posting, lifts the limiter (bypass) and releases
    the pause, and waits for every work request's completion (all must be OK) and for the links
    to empty. A result holds ``name``, ``frames`` (``[first, last, frame as hex]`` of every
    frame the endpoint sent in ``[0, cycles]``, by the cycles of its first and last beat on the
    MAC), ``rates`` (builds with DCQCN: QP 0's rate read on ``cc_rate``, ``[cycle, rate]`` at
    cycle 0 and at every change up to ``cycles``), ``marks`` (``cnp``: the cycle the CNP was
    queued; ``cnp_in``: of its last beat into the endpoint; ``frame`` and ``frame_in`` likewise;
    ``tc``: of the ``tccfg`` write; ``pause``: ``[cycle, level]`` of each ``pause_rx`` change),
    ``posted`` (work requests) and ``host`` (the host's counters). Every cycle is counted from
    the scenario's start, as :func:`~rocegen.sim.testing.roce_env.now_cycle` counts them
    (the capture rings' stamps and ``rx_last_cycle`` with the offset of
    :func:`~rocegen.sim.testing.roce_env.cycle_offset`).

``responder_cnps``
    (A responder build) The run ``CNP_RUN`` (JSON: ``interval``, ``writes``, ``size``,
    ``spacing``, ``pmtu``, ``psn``): the host (strict) WRITEs ``writes`` messages of ``size``
    bytes into the endpoint's QP 0, one every ``spacing`` cycles, every packet ECN CE
    (``ecn=0b11``), its first PSN ``psn``; the notification point's interval is set to
    ``interval`` cycles through ``respcnp`` first. Once every WRITE completed at the host and
    200 cycles more have passed, the result goes to ``ROCE_RESULTS``: ``frames`` (every frame
    the endpoint sent: ``[first, last, frame as hex]``), ``host`` (the host's counters),
    ``qp_cnp_rx`` (the CNPs its QP took), ``outstanding`` (its work requests still
    outstanding) and ``stats`` (the rise of the endpoint's ``resp_cnp_*`` counters).
"""

import json
import os

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge, ValueChange

from rocegen.gateware.roce.cc.dcqcn_layouts import DCQCN_CONFIG
from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.layouts import COMPLETION, TRAFFIC_CONFIG, WORK_REQUEST, CplStatus, WrOpcode
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.gateware.roce.responder.resp_layouts import CNP_CONFIG
from rocegen.sim.models.rnic import IDEAL, Rnic
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.roce_env import (
    MacModel,
    RecordCollector,
    RecordDriver,
    cycle_offset,
    now_cycle,
    open_qp,
    qpn,
    start_clock,
    wait_cycles,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC, cnp_frame
from rocegen.wire.addr import parse_ip

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
W = PARAMS["width"]
VLAN = PARAMS.get("vlan")
#: The host's QP that QP 0 sends to, and the R_Key of its region.
HOST_QPN = 0x21
RKEY = 0x1234
#: Work requests the testbench keeps outstanding on QP 0: enough that the queue never runs dry
#: between a completion and the next post, few enough that it drains quickly after a scenario.
BACKLOG = 8
#: Cycles given to a configuration with the bypass to put every QP back to its initial state
#: (it is in force a few cycles after it is taken; the engine visits each QP every ``num_qps``
#: cycles).
REINIT = 64
MAX_CYCLES = 2_000_000
CNP_STATS = ("resp_cnp_sent", "resp_cnp_suppressed", "resp_cnp_dropped")


class CountingMac(MacModel):
    """The MAC model, counting the frames it queues on ``s_axis`` (:attr:`queued`): the n-th
    is the n-th the test top's ``rx_frames`` counts."""

    queued = 0

    def _to_endpoint(self, frame):
        self.queued += 1
        super()._to_endpoint(frame)


class CongEnv:
    """The endpoint, the MAC model and the record streams of the congestion builds."""

    def __init__(self, dut):
        self.dut = dut
        self.has_cc = hasattr(dut, "cccfg_valid")
        self.has_tc = hasattr(dut, "tccfg_valid")
        self.has_pause = hasattr(dut, "pause_rx")
        #: frame number on ``s_axis`` -> (mark name, scenario start) still awaited
        self.awaited = {}
        self.marks = {}

    async def start(self):
        dut = self.dut
        await start_clock(dut, W)
        self.mac = CountingMac(dut, W, Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=IDEAL,
                                            vlan=VLAN))
        self.ctl = RecordDriver(dut, "qpctl", CONTEXT_WRITE)
        self.psn = RecordDriver(dut, "qppsn", PSN_WRITE)
        self.wr = RecordDriver(dut, "wr", WORK_REQUEST)
        self.cpl = RecordCollector(dut, "cpl", COMPLETION, width=W)
        self.cc = RecordDriver(dut, "cccfg", DCQCN_CONFIG) if self.has_cc else None
        self.tc = RecordDriver(dut, "tccfg", TRAFFIC_CONFIG) if self.has_tc else None
        dut.s_msg_axis_tvalid.value = 0
        dut.stats_addr.value = 0
        dut.gen_valid.value = 0
        if self.has_cc:
            dut.cc_qp.value = 0
        if self.has_pause:
            dut.pause_rx.value = 0
        if hasattr(dut, "memw_valid"):
            dut.memw_valid.value = 0
        await ClockCycles(dut.clk, 2)
        self.offset = await cycle_offset(dut, W)
        cocotb.start_soon(self._watch_rx())

    async def _watch_rx(self):
        """The cycle of the last beat of each awaited frame into the endpoint."""
        dut = self.dut
        while True:
            await ValueChange(dut.rx_frames)
            n = int(dut.rx_frames.value)
            if n in self.awaited:
                name, t0 = self.awaited.pop(n)
                self.marks[name] = int(dut.rx_last_cycle.value) + self.offset - t0

    def to_endpoint(self, frame, name, t0):
        """Queue ``frame`` on ``s_axis``; its last beat's cycle becomes mark ``name``."""
        self.mac.to_endpoint(frame)
        self.awaited[self.mac.queued] = (name, t0)

    async def cc_config(self, cfg):
        """Every QP back to its initial state (a configuration with the bypass), then
        ``cfg``."""
        await self.cc.send({**cfg, "bypass": 1})
        await ClockCycles(self.dut.clk, REINIT)
        await self.cc.send(cfg)


async def edge_at(t):
    """Wait for the rising edge that starts cycle ``t`` (:func:`now_cycle` numbering); values
    written then are seen by the design from that cycle on."""
    await wait_cycles(W, t - now_cycle(W) - 1)
    while now_cycle(W) < t:
        await RisingEdge(cocotb.top.clk)


async def follow_rate(dut, rates, t0, stop):
    """QP 0's rate on ``cc_rate`` at the scenario's start and at every change, until ``stop``
    is set."""
    rates.append((0, int(dut.cc_rate.value)))
    while not stop:
        await ValueChange(dut.cc_rate)
        rates.append((now_cycle(W) - t0, int(dut.cc_rate.value)))


async def scenario(env, sc):
    dut, mac = env.dut, env.mac
    pmtu, length = sc.get("pmtu", 256), sc.get("length", 4096)
    await mac.drained()
    nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=IDEAL, vlan=VLAN)
    nic.create_qp(HOST_QPN, peer_qpn=qpn(0), peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                  pmtu=pmtu)
    nic.register_mr(0, 64 * length, RKEY)
    mac.nic = nic
    if env.has_tc and "tc_cfg" in sc:
        await env.tc.send(sc["tc_cfg"])
    if env.has_pause:
        dut.pause_rx.value = 0
    await open_qp(env.ctl, env.psn, 0, peer_ip=parse_ip(HOST_IP), peer_qpn=HOST_QPN, rkey=RKEY,
                  base_va=0, pmtu=pmtu, psn=0, udp_sport=0xC123, dscp=26, ecn=0b10,
                  ack_every_log2=3)
    mac.clear_sent()
    if env.has_cc:
        await env.cc_config(sc["cc_cfg"])
    t0 = now_cycle(W)
    end = t0 + sc["cycles"]
    env.marks = marks = {}
    first_frame, first_cpl = len(mac.frames), len(env.cpl.items)
    rates, stop = [], []
    if env.has_cc:
        cocotb.start_soon(follow_rate(dut, rates, t0, stop))
    posted = [0]

    async def feed():
        while now_cycle(W) < end:
            done = len(env.cpl.items) - first_cpl
            if posted[0] - done >= BACKLOG:
                env.cpl.event.clear()
                await env.cpl.event.wait()
                continue
            k = posted[0]
            await env.wr.send({"wr_id": k, "qp": 0, "opcode": WrOpcode.WRITE, "local_addr": 0,
                               "length": length, "remote_offset": (k % 64) * length, "imm": 0})
            posted[0] += 1
    feeder = cocotb.start_soon(feed())
    events = []
    if "cnp_at" in sc:
        events.append((sc["cnp_at"], "cnp", None))
    if "frame_at" in sc:
        events.append((sc["frame_at"][0], "frame", bytes.fromhex(sc["frame_at"][1])))
    if "tc_at" in sc:
        events.append((sc["tc_at"][0], "tc", sc["tc_at"][1]))
    for at, level in sc.get("pause_at", ()):
        events.append((at, "pause", level))
    for at, kind, arg in sorted(events, key=lambda e: e[0]):
        await edge_at(t0 + at)
        now = now_cycle(W) - t0
        if kind == "cnp":
            marks["cnp"] = now
            env.to_endpoint(cnp_frame(qpn(0), VLAN), "cnp_in", t0)
        elif kind == "frame":
            marks["frame"] = now
            env.to_endpoint(arg, "frame_in", t0)
        elif kind == "tc":
            await env.tc.send(arg)
            marks["tc"] = now
        else:
            dut.pause_rx.value = arg
            marks.setdefault("pause", []).append((now, arg))
    await edge_at(end)
    stop.append(True)
    # the rest of the work requests, fast
    await feeder
    if env.has_cc:
        await env.cc.send({**sc["cc_cfg"], "bypass": 1})
    if env.has_pause:
        dut.pause_rx.value = 0
    await env.cpl.wait_for(first_cpl + posted[0], max_cycles=MAX_CYCLES)
    bad = [c for c in env.cpl.items[first_cpl:] if c["status"] != CplStatus.OK.value]
    assert not bad, f"work requests failed: {bad[:3]}"
    await mac.drained()
    missing = [name for name, _ in env.awaited.values()]
    assert not missing, f"frames never taken by the endpoint: {missing}"
    frames = [(f - t0, last - t0, frame.hex()) for f, last, frame in mac.frames[first_frame:]
              if last <= end]
    return {"name": sc["name"], "frames": frames,
            "rates": [r for r in rates if r[0] <= sc["cycles"]], "marks": marks,
            "posted": posted[0], "host": dict(nic.counters)}


def write_results(results):
    with open(os.environ["ROCE_RESULTS"], "w") as f:
        json.dump(results, f)


@cocotb.test()
async def scenarios(dut):
    """The scenarios of ``CONG_SCENARIOS``; results to ``ROCE_RESULTS``."""
    plan = json.loads(os.environ["CONG_SCENARIOS"])
    env = CongEnv(dut)
    await env.start()
    results = []
    for n, sc in enumerate(plan):
        try:
            out = await scenario(env, sc)
        except Exception as e:      # (the failure names its scenario; later ones do not run)
            raise AssertionError(f"scenario {sc.get('name', n)}: {e}") from e
        dut._log.info(f"scenario {out['name']}: {len(out['frames'])} frames, "
                      f"{out['posted']} work requests")
        results.append(out)
        write_results(results)         # (what ran, should one fail)


@cocotb.test()
async def responder_cnps(dut):
    """The run of ``CNP_RUN`` on a responder build; its result to ``ROCE_RESULTS``."""
    from rocegen.sim.cocotb.roce_resp import HOST_QPN as RESP_HOST_QPN
    from rocegen.sim.cocotb.roce_resp import RespEnv, rkey_of, share
    run = json.loads(os.environ["CNP_RUN"])
    env = RespEnv(dut, peer="ideal")
    await env.start()
    nic, mac = env.nic, env.mac
    nic.create_qp(RESP_HOST_QPN, peer_qpn=qpn(0), peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                  epsn=run["psn"], pmtu=run["pmtu"], ecn=0b11)
    await env.open(0, pmtu=run["pmtu"], psn=run["psn"], region=share(0, 1), host=False)
    host = nic.qps[RESP_HOST_QPN]
    cnp = RecordDriver(dut, "respcnp", CNP_CONFIG)
    await cnp.send({"interval": run["interval"]})
    before = await read_stats(dut, CNP_STATS, block=STATS)
    first = len(mac.frames)
    for k in range(run["writes"]):
        mac.post_send(RESP_HOST_QPN, "WRITE", data=bytes(range(run["size"])),
                      remote_addr=256 * k, rkey=rkey_of(0))
        await wait_cycles(W, run["spacing"])
    await env.settle(lambda: not nic.send_outstanding(), "the host's WRITEs")
    await ClockCycles(dut.clk, 200)
    after = await read_stats(dut, CNP_STATS, block=STATS)
    bits = len(dut.stats_data)
    write_results({
        "frames": [(f, last, frame.hex()) for f, last, frame in mac.frames[first:]],
        "host": dict(nic.counters), "host_qpn": RESP_HOST_QPN, "qp_cnp_rx": host.cnp_rx,
        "outstanding": nic.send_outstanding(),
        "stats": {k: (after[k] - before[k]) % (1 << bits) for k in CNP_STATS}})
