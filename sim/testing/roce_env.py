"""cocotb side of the RoCE endpoint testbenches: the endpoint's MAC port wired to the host NIC model
(:class:`~rocegen.sim.models.rnic.Rnic`), record-stream drivers for work requests, QP control
and the traffic generator, and a completion collector.

The MAC takes frames in the test top itself (:class:`~rocegen.sim.testing.roce_tops.EndpointTop`, ring
``mac_cap``): ``tready`` follows, cycle by cycle,

* an optional line-rate budget: a Xilinx CMAC at 100 Gb/s takes a frame of ``n`` bytes in the time
  of ``n + 24`` bytes on the line (FCS 4, preamble and SFD 8, inter-frame gap 12); the budget
  grows by ``line_gbps / 8 / clock`` bytes per cycle and is charged per beat;
* optional random backpressure (probability per cycle).

The cocotb side wakes once per frame out of the endpoint (and at the cycles its links deliver a
frame), never per beat or per cycle: the simulator runs the endpoint at Verilator's speed
between frames. Every frame goes to the NIC model in strict mode; its answers (ARP replies,
ACKs) go back through ``s_axis``. Frame times are recorded in cycles, for goodput figures.

The NIC model is given the time (:meth:`~rocegen.sim.models.rnic.Rnic.receive` with ``now`` in
nanoseconds of simulated time): its answers leave when its behaviour says (response delays,
coalesced ACKs), and the loop also wakes at the cycle the model's next answer is due.

The NIC model's requester (the host WRITEs and SENDs into the endpoint:
:meth:`~rocegen.sim.models.rnic.Rnic.post_send`, or :meth:`MacModel.post_send`, which also wakes
the loop) is pumped by the same loop: the host's transmit line towards the endpoint carries its
answers and the requester's packets (:meth:`~rocegen.sim.models.rnic.Rnic.next_frames`, one at
a time), one frame after the other at the line rate (a frame of ``n`` bytes takes the time of
``n + 24`` bytes, ``n`` at least 60; without a line rate, its beats at one a cycle), a frame of
each kind in turn while both wait (an answer waits behind at most one request: a 4 KiB
request's 0.34 us at 100 Gb/s, within the answers' own response delay). The line time is
counted in fractions of a cycle: a frame that waited starts where the one before it ended,
although the loop wakes on whole cycles. A frame goes to ``s_axis`` (through the ``from_nic``
link when one is set) when its line time starts, at the latest in the cycle after. The loop
wakes when the line is free again and at the requester's timers (retransmit timeout, end of an
RNR wait: :meth:`~rocegen.sim.models.rnic.Rnic.next_due` covers them). :attr:`MacModel.requests` records
the line time of each requester packet.

Optionally a faulty link (:class:`~rocegen.sim.models.fabric.link.Link`) sits in each direction:
``to_nic`` between the endpoint's MAC and the NIC model, ``from_nic`` between the NIC model's
answers and ``s_axis``. A frame the link corrupted is given to the NIC model with its strict
checks off (a real NIC drops it on its checksum or ICRC), and the NIC model's log entries it
causes are kept in :attr:`MacModel.corrupt_log`. Without links (the default) every frame
reaches the NIC model in the cycle its last beat is taken, and the answers are queued on
``s_axis`` at once.

The RoCE data frames the endpoint sends (RC SEND and RDMA WRITE packets) are counted, and
those whose (destination QP, PSN) was sent before are counted as retransmissions.

Every frame out of the endpoint also goes through :class:`~rocegen.sim.testing.framecheck.FrameChecker`
(:attr:`MacModel.framecheck`), which rebuilds it with scapy and fails the testbench when the bytes
differ; the host's frames (the NIC model's answers and :meth:`MacModel.to_endpoint`) are noted
there so that connection-manager replies are checked against the requests they answer. When a
core is free (or with ``ROCEGEN_FRAMECHECK=pool``) the check runs in a worker process beside the
simulator (:mod:`rocegen.sim.testing.framecheck_pool`), in the order the frames came, and a
failure fails the testbench at the next frame after the worker found it, when the counts are read,
or when the testbench's test ends (the worker is stopped then, after every frame is checked).
Otherwise (``ROCEGEN_FRAMECHECK=inline``) each frame is checked where it is taken.
"""

import math
import random
from collections import deque

import cocotb
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Event, FallingEdge, First, Lock, RisingEdge, Timer, ValueChange
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rocegen.gateware.lib.memport import mem_write_layout
from rocegen.gateware.lib.records import pack, unpack
from rocegen.gateware.roce.layouts import COMPLETION, QPN_BASE, WORK_REQUEST, QpState
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import IDEAL, Behaviour
from rocegen.sim.testing.cocotb_helpers import Capture
from rocegen.sim.testing.framecheck_pool import make_framecheck
from rocegen.sim.testing.roce_tops import LINE_OVERHEAD, MAC_CAPTURE, capture_depth
from rocegen.wire.headers import (
    BTH,
    ETH,
    ETH_VLAN,
    ETHERTYPE_IPV4,
    ETHERTYPE_VLAN,
    IP_PROTO_UDP,
    IPV4,
    UDP,
    UDP_PORT_ROCEV2,
)
from rocegen.wire.opcodes import OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, OP_RC_SEND_FIRST

__all__ = ["board_clock_mhz", "period_ps", "now_cycle", "MacModel", "XgmiiMacModel", "RecordDriver",
           "RecordCollector",
           "start_clock", "wait_cycles", "wait_low", "wait_until", "cycle_offset", "MacFrames",
           "open_qp", "qpn", "write_onchip", "peer_behaviour", "PEERS",
           "roce_data_key", "is_ipv4", "link_pair", "FAULTS", "timeout_code", "LINE_OVERHEAD",
           "l2_length", "AETH_SENT"]

#: fixed point of the capture ring's line-rate budget (bytes per cycle times 2**16)
CREDIT_ONE = 1 << 16


def board_clock_mhz(width):
    """The clock a W-bit datapath runs at on the boards: the CMAC's 322.266 MHz at 512 bits,
    the 10G XGMII clock (156.25 MHz) at 64 bits, in proportion otherwise."""
    return {512: 322.265625, 256: 322.265625, 128: 322.265625, 64: 156.25}[width]


def period_ps(width):
    """The simulator's clock period: the board clock's, rounded to an even number of
    picoseconds (figures use :func:`board_clock_mhz` itself)."""
    return 2 * round(1e6 / board_clock_mhz(width) / 2)


def now_cycle(width):
    """The number of the clock edge the simulation is at (the same in every coroutine)."""
    return int(get_sim_time("ps")) // period_ps(width)


async def start_clock(dut, width):
    cocotb.start_soon(Clock(dut.clk, period_ps(width), unit="ps").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def wait_cycles(width, cycles):
    """Let ``cycles`` clock cycles pass without waking Python at each edge."""
    if cycles > 0:
        await Timer(cycles * period_ps(width), unit="ps")


async def wait_low(dut, signal, width, *, max_cycles, what):
    """Wait until ``signal`` is 0, waking only when it changes; fail with ``what`` after
    ``max_cycles`` cycles."""
    deadline = now_cycle(width) + max_cycles
    while int(signal.value):
        left = deadline - now_cycle(width)
        if left <= 0:
            raise AssertionError(f"{what}: still busy after {max_cycles} cycles")
        await First(FallingEdge(signal), Timer(left * period_ps(width), unit="ps"))


async def cycle_offset(dut, width):
    """What to add to a cycle of the test top's ``cycle`` counter (the capture rings' stamps)
    to number it as :func:`now_cycle` does: a beat taken at an edge is stamped with the cycle
    in which it was offered. Takes one clock edge."""
    await RisingEdge(dut.clk)
    return now_cycle(width) - int(dut.cycle.value)


class MacFrames:
    """The frames out of the test top's MAC capture ring (``mac_cap``), put together from its
    beats; :attr:`beats` counts the beats taken."""

    def __init__(self, dut, width):
        self.cap = Capture(dut.mac_cap, dut.mac_count, dut.mac_rd, MAC_CAPTURE(width),
                           capture_depth(width))
        self.bytes = width // 8
        self.beats = 0
        self._buf, self._first = bytearray(), None

    def take(self):
        """The frames completed since the last call: ``(first, last, frame, aborted)`` with the
        ring's cycle stamps of the first and last beat and ``aborted`` for ``tuser`` on the
        last beat."""
        out = []
        for beat in self.cap.take():
            self.beats += 1
            if self._first is None:
                self._first = beat["cycle"]
            self._buf += beat["data"].to_bytes(self.bytes, "little")[:bin(beat["keep"]).count("1")]
            if beat["last"]:
                out.append((self._first, beat["cycle"], bytes(self._buf), bool(beat["user"])))
                self._buf, self._first = bytearray(), None
        return out


class MacModel:
    """The MAC and the host NIC on the far side of it (see the module documentation).

    ``to_nic`` / ``from_nic``: optional :class:`~rocegen.sim.models.fabric.link.Link` of each direction
    (``None``: a perfect link without delay). They may be replaced between runs, when
    :attr:`in_flight` is 0. :attr:`bytes_per_cycle` (the line-rate budget, ``None`` for none)
    and :attr:`backpressure` may be changed at any time. ``cm_regions``: the endpoint's
    connection manager states regions (a build with the responder; the frame check's
    ``region_acks``).
    """

    def __init__(self, dut, width, nic, *, line_gbps=None, backpressure=0.0, seed=0, pcap=None,
                 to_nic=None, from_nic=None, cm_regions=False):
        for name, link in (("to_nic", to_nic), ("from_nic", from_nic)):
            if link is not None and not isinstance(link, Link):
                raise TypeError(f"{name} must be a Link or None, not {link!r}")
        self.dut = dut
        self.width = width
        self.nic = nic
        self.to_nic = to_nic
        self.from_nic = from_nic
        self._hw = False
        self._bytes_per_cycle = None
        self._backpressure = 0.0
        self.bytes_per_cycle = (line_gbps * 1e9 / 8 / (board_clock_mhz(width) * 1e6)
                                if line_gbps else None)
        self.backpressure = backpressure
        self.seed = random.Random(seed).getrandbits(32) | 1
        self.pcap = pcap
        #: callables called with every frame the host puts on the endpoint's line (the NIC
        #: model's answers, its requester's packets, :meth:`to_endpoint`), in that order
        self.taps = []
        self.cycle = 0
        #: (first cycle, last cycle, frame bytes) of every frame the endpoint sent
        self.frames = []
        #: (start, end) of every frame's time on the MAC, in cycles: with a line rate, it starts
        #: when its first beat is taken or when the line is free, whichever is later, and ends
        #: after its line time or after its last beat, whichever is later
        self.line = []
        self.tx_beats = 0
        #: RoCE data frames (RC SEND / RDMA WRITE packets) the endpoint sent
        self.roce_frames = 0
        #: how many of them carried a (destination QP, PSN) sent before
        self.retransmitted = 0
        #: indices in :attr:`frames` of the retransmissions
        self.retransmissions = []
        #: the NIC model's log entries caused by frames the ``to_nic`` link corrupted
        self.corrupt_log = []
        #: (start, end) of the line time, in cycles, of every packet of the NIC model's requester
        #: (the host's RDMA WRITEs and SENDs to the endpoint), as it left the host
        self.requests = []
        self._answers = deque()         # the NIC model's answers waiting for the host's line
        self._host_free = 0.0           # the cycle from which the host's line is free
        self._host_backlog = False      # a frame waited while the line was busy
        self._requester_turn = False    # whose frame the host's line takes next when both wait
        #: every frame out of the endpoint is rebuilt by scapy and compared byte for byte, and
        #: every connection-manager reply with the spec's encoding (a mismatch fails the testbench);
        #: in a worker process beside the simulator when a core is free for it, or with
        #: ``ROCEGEN_FRAMECHECK=pool`` (:mod:`rocegen.sim.testing.framecheck_pool`)
        self.framecheck = make_framecheck(region_acks=cm_regions)
        #: set whenever a frame left the endpoint or a link delivered one
        self.event = Event()
        self._sent = set()
        self._wake = Event()
        self._attach()
        cocotb.start_soon(self._run())

    def _attach(self):
        """Drive the endpoint's MAC input (``s_axis``)."""
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(self.dut, "s_axis"), self.dut.clk,
                                      self.dut.rst)
        self.source.log.setLevel("WARNING")      # not a line per frame

    @property
    def bytes_per_cycle(self):
        """The line-rate budget in bytes per cycle (``None``: the MAC takes a beat every cycle)."""
        return self._bytes_per_cycle

    @bytes_per_cycle.setter
    def bytes_per_cycle(self, value):
        self._bytes_per_cycle = value
        self._configure()

    @property
    def backpressure(self):
        """Chance that the MAC holds ``tready`` low in a cycle."""
        return self._backpressure

    @backpressure.setter
    def backpressure(self, value):
        if not 0 <= value < 1:
            raise ValueError(f"backpressure must be a probability in [0, 1), not {value!r}")
        self._backpressure = value
        self._configure()

    def _configure(self):
        if not self._hw:
            return
        dut = self.dut
        bpc = self._bytes_per_cycle
        dut.mac_credit_step.value = max(1, round(bpc * CREDIT_ONE)) if bpc else 0
        dut.mac_bp_threshold.value = min(round(self._backpressure * 65536), 65535)
        dut.mac_bp_seed.value = self.seed

    @property
    def in_flight(self):
        """Frames inside the links and answers the NIC model has not sent yet."""
        return self.nic.pending + len(self._answers) + sum(
            link.in_flight for link in (self.to_nic, self.from_nic) if link is not None)

    def next_due(self):
        """The earliest cycle at which a link may deliver a frame or the NIC model send one
        (``None``: nothing waits)."""
        due = [d for d in (link.next_due() for link in (self.to_nic, self.from_nic)
                           if link is not None) if d is not None]
        nic = self.nic.next_due()
        if nic is not None:
            due.append(-(-round(nic * 1000) // period_ps(self.width)))
        if self._host_free > self.cycle and (self._answers or self.nic.tx_pending()):
            due.append(math.ceil(self._host_free))
        return min(due, default=None)

    def _now_ns(self):
        return self.cycle * period_ps(self.width) / 1000

    async def drained(self, *, max_cycles=10_000_000):
        """Wait until the links hold no frame."""
        deadline = now_cycle(self.width) + max_cycles
        while self.in_flight:
            if now_cycle(self.width) >= deadline:
                raise AssertionError(f"{self.in_flight} frames still in the links after "
                                     f"{max_cycles} cycles")
            self.event.clear()
            await First(self.event.wait(), Timer(1000 * period_ps(self.width), unit="ps"))

    def clear_sent(self):
        """Forget which (destination QP, PSN) were sent: for QPs opened again at PSNs used
        before, so that their packets do not count as retransmissions."""
        self._sent.clear()

    def _from_endpoint(self, frame):
        key = roce_data_key(frame)
        if key is not None:
            self.roce_frames += 1
            if key in self._sent:
                self.retransmitted += 1
                self.retransmissions.append(len(self.frames) - 1)
            else:
                self._sent.add(key)
        if self.to_nic is None:
            self._nic_receive(frame, False)
        else:
            self.to_nic.send(frame, self.cycle)

    def _nic_receive(self, frame, corrupted):
        if self.pcap:
            self.pcap.write(frame, cocotb.utils.get_sim_time("ns"))
        if corrupted:
            mark, strict = len(self.nic.log), self.nic.strict
            self.nic.strict = False
            try:
                answers = self.nic.receive(frame, self._now_ns())
            finally:
                self.nic.strict = strict
            self.corrupt_log += self.nic.log[mark:]
        else:
            answers = self.nic.receive(frame, self._now_ns())
        self._from_nic_model(answers)

    def _from_nic_model(self, answers):
        self._answers.extend(answers)
        self._pump_host()

    def post_send(self, qpn, opcode, **kwargs):
        """A send work request of the host (:meth:`~rocegen.sim.models.rnic.Rnic.post_send`,
        same arguments), and a wake of the loop so that its packets leave."""
        wr = self.nic.post_send(qpn, opcode, **kwargs)
        self.poke()
        return wr

    def _host_time(self, frame):
        """Cycles the host's line takes for ``frame`` (see the module documentation)."""
        if self._bytes_per_cycle:
            return (max(len(frame), 60) + LINE_OVERHEAD) / self._bytes_per_cycle
        return -(-len(frame) // (self.width // 8))

    def _pump_host(self):
        """Put frames on the host's line while it is free: the NIC model's answers and its
        requester's packets, one of each in turn while both wait. A frame that waited for the
        line starts where the frame before it ended (the line time is counted in fractions of
        a cycle: the loop wakes on whole cycles, the line does not idle in between); a frame
        that finds the line idle starts in the current cycle."""
        while True:
            if self._host_free > self.cycle:
                self._host_backlog = bool(self._answers) or bool(self.nic.tx_pending())
                return
            frame = None
            if self._requester_turn or not self._answers:
                out = self.nic.next_frames(self._now_ns(), budget=1)
                if out:
                    frame = out[0]
                    self._requester_turn = False
            request = frame is not None
            if not request:
                if not self._answers:
                    self._host_backlog = False
                    return
                frame = self._answers.popleft()
                self._requester_turn = True
            # (the loop wakes in the first whole cycle after the line freed)
            waited = self._host_backlog and self.cycle - self._host_free < 1
            start = self._host_free if waited else self.cycle
            if request:
                self.requests.append((start, start + self._host_time(frame)))
            self._host_free = start + self._host_time(frame)
            self._host_backlog = False
            if self.from_nic is None:
                self._to_endpoint(frame)
            else:
                self.from_nic.send(frame, self.cycle)

    def to_endpoint(self, frame):
        """Queue a frame (``bytes``) on the endpoint's ``s_axis`` as the host sends it: recorded
        in the pcap and noted by the frame check, as the NIC model's answers are."""
        self._to_endpoint(frame)

    def _to_endpoint(self, frame):
        self.framecheck.request(frame)
        for tap in self.taps:
            tap(frame)
        if self.pcap:
            self.pcap.write(frame, cocotb.utils.get_sim_time("ns"))
        self.source.send_nowait(AxiStreamFrame(frame, tuser=0))

    def _poll_links(self):
        if self.to_nic is not None:
            for d in self.to_nic.deliveries(self.cycle):
                self._nic_receive(d.frame, d.corrupted)
        self._from_nic_model(self.nic.due(self._now_ns()))
        if self.from_nic is not None:
            for d in self.from_nic.deliveries(self.cycle):
                self._to_endpoint(d.frame)
        self._pump_host()

    def poke(self):
        """Have the loop look at the links again (after a link was replaced or scripted)."""
        self._wake.set()

    def _frame_done(self, first, last, frame):
        self.framecheck.check(frame)
        self.frames.append((first, last, frame))
        if self._bytes_per_cycle is not None:
            start = max(first, self.line[-1][1] if self.line else first)
            end = start + (len(frame) + LINE_OVERHEAD) / self._bytes_per_cycle
            self.line.append((start, max(end, last + 1)))
        else:
            self.line.append((first, last + 1))
        self._from_endpoint(frame)

    async def _run(self):
        try:
            await self._loop()
        finally:                        # the test ended (the task is cancelled) or failed
            self._close_framecheck()

    def _close_framecheck(self):
        close = getattr(self.framecheck, "close", None)
        if close is None:
            return
        try:
            close()
        except Exception as e:          # cocotb fails the test with it (raised on cancellation)
            self.dut._log.error("frame check at the end of the test: %s", e)
            raise

    async def _loop(self):
        dut = self.dut
        W = self.width
        mac = MacFrames(dut, W)
        self._hw = True
        self._configure()
        offset = await cycle_offset(dut, W)
        frames = dut.mac_frames
        while True:
            due = self.next_due()
            self._wake.clear()
            if due is None:
                await First(ValueChange(frames), self._wake.wait())
            else:
                wait = max(due - now_cycle(W), 1)
                await First(ValueChange(frames), self._wake.wait(),
                            Timer(wait * period_ps(W), unit="ps"))
            self.cycle = now_cycle(W)
            for first, last, frame, aborted in mac.take():
                if aborted:
                    raise AssertionError("the endpoint aborted a frame (tuser on tlast)")
                self._frame_done(first + offset, last + offset, frame)
            starved = int(dut.mac_starved.value)
            if starved:
                raise AssertionError(f"valid dropped inside a frame to the MAC ({starved} cycles "
                                     f"by frame {len(self.frames)}): the MAC would underrun")
            self.tx_beats = mac.beats
            self._poll_links()
            self.event.set()


#: An XGMII frame's preamble and start-of-frame delimiter as cocotbext-eth gives them (the start
#: character /S/ read as the first preamble octet).
XGMII_PREAMBLE = bytes([0x55] * 7 + [0xD5])
#: Minimum inter-frame gap of the XGMII transmit MAC, in octet times from the terminate
#: character /T/ to the next start character /S/.
XGMII_MIN_GAP = 12


class XgmiiMacModel(MacModel):
    """:class:`MacModel` for the endpoint behind its own XGMII MAC (the test top with
    ``phy="xgmii"``): the line side is cocotbext-eth's :class:`~cocotbext.eth.XgmiiSource`
    (frames to the endpoint, with preamble, FCS, padding to 64 octets and the deficit-idle
    inter-frame gap) and :class:`~cocotbext.eth.XgmiiSink` (frames from it). Every frame out of
    the endpoint is checked on the line: preamble and SFD, a correct FCS, no control character
    inside, at least 64 octets with the FCS, a start in lane 0 and at least
    :data:`XGMII_MIN_GAP` octet times after the previous frame's /T/; a frame failing any of it
    raises ``AssertionError``. Frame times (:attr:`frames`, :attr:`line`) are the line's own:
    from the /S/ to the /T/ of each frame, so goodput figures count preamble, FCS, padding and
    gap as the XGMII spends them. The line rate is the XGMII's (one 64-bit word per cycle):
    :attr:`bytes_per_cycle` and :attr:`backpressure` change nothing (the endpoint's MAC cannot
    be held off)."""

    def __init__(self, dut, width, nic, **kwargs):
        if width != 64:
            raise ValueError(f"the XGMII line is 64 bits wide: width must be 64, not {width}")
        #: line checks passed, by frame (every frame out of the endpoint)
        self.line_frames = 0
        self._last_end = None
        super().__init__(dut, width, nic, **kwargs)

    def _attach(self):
        import logging

        from cocotbext.eth import XgmiiSink, XgmiiSource
        dut = self.dut
        for port in (dut.xgmii_rxd, dut.xgmii_txd):     # not their banners, not a line per frame
            logging.getLogger(f"cocotb.{port._path}").setLevel(logging.WARNING)
        self.source = XgmiiSource(dut.xgmii_rxd, dut.xgmii_rxc, dut.clk, dut.rst)
        self.sink = XgmiiSink(dut.xgmii_txd, dut.xgmii_txc, dut.clk, dut.rst)
        for side in (self.source, self.sink):
            side.log.setLevel("WARNING")

    def _configure(self):
        pass

    def _host_time(self, frame):
        # the XGMII line: a 64-bit word a cycle, preamble, FCS, padding and gap included
        return (max(len(frame), 60) + LINE_OVERHEAD) / 8

    def _to_endpoint(self, frame):
        from cocotbext.eth import XgmiiFrame
        self.framecheck.request(frame)
        if self.pcap:
            self.pcap.write(frame, cocotb.utils.get_sim_time("ns"))
        self.source.send_nowait(XgmiiFrame.from_payload(frame))

    def _check_line(self, f):
        """The line checks of a frame from the endpoint (see the class documentation); returns
        the frame without preamble and FCS."""
        n = len(self.frames)
        if bytes(f.get_preamble()) != XGMII_PREAMBLE:
            raise AssertionError(f"XGMII frame {n}: preamble {bytes(f.get_preamble()).hex()}")
        if f.ctrl is not None and any(f.ctrl):     # compact() leaves None when all are data
            raise AssertionError(f"XGMII frame {n}: a control character inside the frame "
                                 f"(an /E/ abort?)")
        if not f.check_fcs():
            raise AssertionError(f"XGMII frame {n}: bad FCS")
        payload = bytes(f.get_payload())
        if len(payload) + 4 < 64:
            raise AssertionError(f"XGMII frame {n}: {len(payload) + 4} octets with the FCS, "
                                 f"not padded to 64")
        if f.start_lane != 0:
            raise AssertionError(f"XGMII frame {n}: starts in lane {f.start_lane}, not 0")
        octet_ps = period_ps(self.width) // 8
        if self._last_end is not None:
            gap = (f.sim_time_start - self._last_end) // octet_ps
            if gap < XGMII_MIN_GAP:
                raise AssertionError(f"XGMII frame {n}: {gap} octet times after the previous "
                                     f"frame's end, less than {XGMII_MIN_GAP}")
        self._last_end = f.sim_time_end
        self.line_frames += 1
        return payload

    async def _loop(self):
        W = self.width
        self._hw = True
        period = period_ps(W)
        while True:
            if self.sink.empty():
                due = self.next_due()
                self._wake.clear()
                wait = [self.sink.active_event.wait(), self._wake.wait()]
                if due is not None:
                    wait.append(Timer(max(due - now_cycle(W), 1) * period, unit="ps"))
                await First(*wait)
            self.cycle = now_cycle(W)
            while not self.sink.empty():
                f = self.sink.recv_nowait()
                payload = self._check_line(f)
                first, last = f.sim_time_start // period, f.sim_time_end // period
                self.framecheck.check(payload)
                self.frames.append((first, last, payload))
                self.line.append((first, last + 1))
                self._from_endpoint(payload)
            self._poll_links()
            self.event.set()


async def wait_until(mac, predicate, *, max_cycles, what):
    """Wait until ``predicate()`` holds, looking again whenever the MAC model has handled a frame
    (:attr:`MacModel.event`); fail with ``what`` (text, or a function giving it at that point)
    once ``max_cycles`` cycles have passed."""
    deadline = now_cycle(mac.width) + max_cycles
    while not predicate():
        left = deadline - now_cycle(mac.width)
        if left <= 0:
            raise AssertionError(f"{what() if callable(what) else what} (waited {max_cycles} cycles)")
        mac.event.clear()
        await First(mac.event.wait(), Timer(left * period_ps(mac.width), unit="ps"))


def l2_length(frame):
    """Bytes of the Ethernet header of a frame: 14, or 18 with one 802.1Q tag."""
    if len(frame) >= ETH_VLAN.length and ETH.unpack(frame)["ethertype"] == ETHERTYPE_VLAN:
        return ETH_VLAN.length
    return ETH.length


def is_ipv4(frame):
    """True for an Ethernet frame carrying IPv4, untagged or with one 802.1Q tag (the frames a
    link may corrupt: an ARP message has no checksum of its own)."""
    if len(frame) < ETH.length:
        return False
    header = ETH_VLAN if l2_length(frame) == ETH_VLAN.length else ETH
    return header.unpack(frame)["ethertype"] == ETHERTYPE_IPV4


def roce_data_key(frame):
    """(destination QP, PSN) of a RoCEv2 RC SEND or RDMA WRITE packet (untagged or with one
    802.1Q tag), else ``None``."""
    l2 = l2_length(frame)
    at_udp = l2 + IPV4.length
    if len(frame) < at_udp + UDP.length + BTH.length or not is_ipv4(frame):
        return None
    ip = IPV4.unpack(frame[l2:])
    if ip["version"] != 4 or ip["ihl"] != 5 or ip["protocol"] != IP_PROTO_UDP:
        return None
    if UDP.unpack(frame[at_udp:])["dst_port"] != UDP_PORT_ROCEV2:
        return None
    bth = BTH.unpack(frame[at_udp + UDP.length:])
    if not OP_RC_SEND_FIRST <= bth["opcode"] <= OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE:
        return None
    return bth["dest_qp"], bth["psn"]


#: The NIC model's counters of the AETH frames it sends (ACKs, NAKs, copies and ghosts).
AETH_SENT = ("ack_tx", "ack_dup_tx", "ack_ghost_tx", "nak_seq_tx", "rnr_nak_tx", "nak_inv_req_tx",
             "nak_rem_access_tx", "nak_rem_op_tx")


#: The fault probabilities of a run (see :func:`link_pair`).
FAULTS = ("loss", "dup", "reorder", "corrupt")


def _rtt_us(run):
    rtt = run.get("rtt_us", 0) or 0
    if isinstance(rtt, bool) or not isinstance(rtt, (int, float)) or not 0 <= rtt < float("inf"):
        raise ValueError(f"rtt_us must be a number of microseconds >= 0, not {rtt!r}")
    return rtt


def link_pair(run, clock_mhz):
    """The links ``(to_nic, from_nic)`` of a run (a dict with optional ``loss``, ``dup``,
    ``reorder``, ``corrupt``, ``seed``, ``rtt_us``): the same probabilities both ways, seeds
    ``2 * seed`` and ``2 * seed + 1``, half the round trip as each one's delay (in cycles of
    ``clock_mhz``), IPv4 frames only corruptible. ``(None, None)`` for a perfect link without
    delay."""
    faults = {f: run.get(f, 0) or 0 for f in FAULTS}
    delay = round(_rtt_us(run) * clock_mhz / 2)
    if not any(faults.values()) and not delay:
        return None, None
    seed = run.get("seed", 0) or 0
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, not {seed!r}")
    return tuple(Link(**faults, delay=delay, corruptible=is_ipv4, seed=2 * seed + k, name=name)
                 for k, name in enumerate(("to NIC", "from NIC")))


#: The peer models a testbench may choose (:func:`peer_behaviour`).
PEERS = ("connectx", "ideal")


def peer_behaviour(seed, peer="connectx", *, faults=True):
    """The NIC model's :class:`~rocegen.sim.models.rnic.Behaviour` for a testbench: ``"ideal"``,
    the kind peer (:data:`~rocegen.sim.models.rnic.IDEAL`); ``"connectx"``, a ConnectX's, with
    its figures drawn from ``seed``: credit codes as a ConnectX sends them or any of
    0x00..0x1F, an ACK after every 1..32 packets or only on AckReq, an ACK timer of 0..3 us,
    answers 0..2 us late; with ``faults``, also duplicate and ghost ACKs, runts and oversize
    frames towards the endpoint (a few percent of the ACKs each). ``seed`` 0 gives the
    ConnectX defaults (and the faults)."""
    if peer not in PEERS:
        raise ValueError(f"peer must be one of {', '.join(PEERS)}, not {peer!r}")
    if peer == "ideal":
        return IDEAL
    b = Behaviour(seed=seed)
    if seed:
        rng = random.Random(seed)
        lo = rng.uniform(0, 1000)
        b = b.replace(credits=rng.choice(["rq", "random"]),
                      ack_every=rng.choice([None, rng.randint(1, 32)]),
                      ack_timer_ns=rng.choice([0.0, rng.uniform(50, 3000)]),
                      response_ns=(lo, lo + rng.uniform(0, 1000)))
    if faults:
        b = b.replace(dup_ack=0.05, ghost_ack=0.05, runt=0.03, oversize=0.03)
    return b


def timeout_code(run):
    """The QP retransmit timeout code (4.096 us x 2^code, 0 = never) of a run: its ``timeout``
    if given; else 0 on a perfect link and, with any fault (or scripted drop, ``drop_psns``),
    the smallest code from 4 whose
    timeout is at least four round trips (``rtt_us``)."""
    code = run.get("timeout")
    if code is not None:
        if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 31:
            raise ValueError(f"timeout must be a QP timeout code 0..31, not {code!r}")
        return code
    if not any(run.get(f) for f in FAULTS) and not run.get("drop_psns"):
        return 0
    rtt = _rtt_us(run)
    code = 4
    while code < 31 and 4.096 * (1 << code) < 4 * rtt:
        code += 1
    return code


class RecordDriver:
    """Sends records on the flat record-stream input ``<prefix>_data/_valid/_ready``, with an
    optional chance of an idle cycle before each record. Coroutines that send at the same time
    take turns, one record each (a lock)."""

    def __init__(self, dut, prefix, layout, *, idle=0.0, seed=0):
        self.dut = dut
        self.layout = layout
        self.data = getattr(dut, f"{prefix}_data")
        self.valid = getattr(dut, f"{prefix}_valid")
        self.ready = getattr(dut, f"{prefix}_ready")
        self.idle = idle
        self.rng = random.Random(seed)
        self.valid.value = 0
        self.sent = 0
        self.lock = Lock()

    async def send(self, fields):
        """Send one record; returns the simulation time (ps) of the clock edge that took it."""
        async with self.lock:
            return await self._send(fields)

    async def _send(self, fields):
        while self.idle and self.rng.random() < self.idle:
            await RisingEdge(self.dut.clk)
        self.data.value = pack(self.layout, fields)
        self.valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if int(self.ready.value):
                break
            # refused: sleep until ready rises instead of looking at every edge. After a clock
            # edge this testbench sees the values sampled at it; ready rising shows after an edge, and
            # the record is taken at the next edge, which the loop's check then sees.
            await RisingEdge(self.ready)
        self.valid.value = 0
        self.sent += 1
        return get_sim_time("ps")


class RecordCollector:
    """Collects the records of a stream the test top ends in a capture ring ``<prefix>_cap``
    (ports ``<prefix>_count``, ``<prefix>_rd``, ``<prefix>_bp_threshold``,
    ``<prefix>_bp_seed``): ``backpressure`` is the chance that the ring's ``ready`` is low in a
    cycle. The collector wakes once per record, not per cycle. :attr:`cycles` holds each
    record's cycle, numbered as :func:`now_cycle` numbers them."""

    def __init__(self, dut, prefix, layout, *, backpressure=0.0, seed=0, width):
        if not 0 <= backpressure < 1:
            raise ValueError(f"backpressure must be a probability in [0, 1), not {backpressure!r}")
        self.dut = dut
        self.prefix = prefix
        self.layout = layout
        self.width = width
        self.count = getattr(dut, f"{prefix}_count")
        getattr(dut, f"{prefix}_bp_threshold").value = min(round(backpressure * 65536), 65535)
        getattr(dut, f"{prefix}_bp_seed").value = random.Random(seed).getrandbits(32) | 1
        self.items = []
        self.cycles = []
        self.event = Event()
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        ring = getattr(dut, f"{self.prefix}_cap")
        cap = Capture(ring, self.count, getattr(dut, f"{self.prefix}_rd"),
                      (("record", data.Layout.cast(self.layout).size),), len(ring.cap_mem))
        offset = await cycle_offset(dut, self.width)
        while True:
            await ValueChange(self.count)
            for e in cap.take():
                self.items.append(unpack(self.layout, e["record"]))
                self.cycles.append(e["cycle"] + offset)
            self.event.set()

    async def wait_for(self, n, *, max_cycles):
        """Wait until ``n`` records have come; fail after ``max_cycles`` cycles without them."""
        deadline = now_cycle(self.width) + max_cycles
        while len(self.items) < n:
            left = deadline - now_cycle(self.width)
            if left <= 0:
                raise AssertionError(f"only {len(self.items)} of {n} records after "
                                     f"{max_cycles} cycles")
            self.event.clear()
            await First(self.event.wait(), Timer(left * period_ps(self.width), unit="ps"))
        return self.items[:n]


async def open_qp(ctl, psn_ctl, index, *, peer_ip, peer_qpn, rkey, base_va, pmtu, psn,
                  udp_sport=0xC000, ack_every_log2=4, state=QpState.RTS, dscp=0, ecn=0,
                  timeout=0, retry_cnt=7, rnr_retry=7):
    """Write QP ``index`` of the endpoint's QP table through its control ports. ``timeout``:
    retransmit timeout code (4.096 us x 2^timeout, 0 = never); ``retry_cnt``, ``rnr_retry``:
    retry counts (``rnr_retry`` 7 = forever)."""
    for name, value, top in (("timeout", timeout, 31), ("retry_cnt", retry_cnt, 7),
                             ("rnr_retry", rnr_retry, 7)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise ValueError(f"{name} must be an integer 0..{top}, not {value!r}")
    await psn_ctl.send({"qp": index, "psn": psn})
    await ctl.send({"qp": index, "context": {
        "state": state, "peer_ip": peer_ip, "peer_qpn": peer_qpn, "rkey": rkey,
        "base_va": base_va, "pmtu_log2": pmtu.bit_length() - 1, "udp_sport": udp_sport,
        "dscp": dscp, "ecn": ecn, "ack_every_log2": ack_every_log2, "timeout": timeout,
        "retry_cnt": retry_cnt, "rnr_retry": rnr_retry}})


async def write_onchip(dut, width, mem_bytes, addr, data):
    """Put ``data`` into the endpoint's on-chip payload memory at byte address ``addr`` (a
    multiple of W/8) through its ``memw`` word-write port."""
    B = width // 8
    if addr % B:
        raise ValueError(f"local address {addr:#x} is not a multiple of {B}")
    layout = mem_write_layout(width, (mem_bytes // B - 1).bit_length())
    data = bytes(data) + bytes(-len(data) % B)
    dut.memw_valid.value = 1
    for k in range(len(data) // B):
        dut.memw_data.value = pack(layout, {"addr": addr // B + k, "data": int.from_bytes(
            data[k * B:(k + 1) * B], "little"), "be": (1 << B) - 1})
        while True:
            await RisingEdge(dut.clk)
            if int(dut.memw_ready.value):
                break
    dut.memw_valid.value = 0


def qpn(index):
    return QPN_BASE + index


LAYOUTS = {"wr": WORK_REQUEST, "cpl": COMPLETION, "qpctl": CONTEXT_WRITE, "qppsn": PSN_WRITE}
