"""DCQCN's reaction point and the per-QP rate limiter: reaction time, size, and the rate law's
trajectory.

* reaction: the :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine` joined to a
  :class:`~rocegen.gateware.roce.cc.rate_limiter.RateLimiter` (its ``rate_w`` into the limiter's
  ``rate``, the reports of the packets sent into both), at 512 bits and 322.27 MHz with a 100G
  line and at 64 bits and 156.25 MHz with a 10G line, 8 and 256 QPs; QP 0 backlogged with
  1 KiB RDMA WRITEs (1106 bytes on the wire) on a path of W/8 bytes per cycle, a CNP for it in
  cycle c. Measured: cycles from the CNP to its rate written into the limiter, the bound to
  the QP's next refill (+ P - 1 cycles, P the refill period), the first packet on the wire
  that leaves later than the old rate would have let it, and the rate achieved from 1 us
  after the CNP against the new rate. Goal: the lower rate on the wire within 1 us of the CNP.
* endpoint: the whole endpoint with the reaction point (``RoceEndpoint(dcqcn=True)``, W = 512
  at 322.27 MHz and W = 64 at 156.25 MHz) sending 64 KiB RDMA WRITEs of QP 0 at the line rate
  to the host NIC model, which sends it a CNP: cycles from the CNP's last beat on the MAC
  receive port to the first frame on the MAC transmit port that starts later than the old
  rate would have let it (through the stack's receive FIFO and ICRC check, the receive path,
  the engine, the limiter, and the frames already past the scheduler), and the rate on the
  wire over the 16 frames before and from then on against the new rate.
* size (``--synth``): Yosys figures of both blocks at 8 and 256 QPs (the limiter at 512 bits),
  mapped for area and for 8 LUT levels.
* trajectory: the model (:class:`rocegen.sim.models.cc.dcqcn.DcqcnRp`, the published defaults) of
  a QP sending at its rate after a burst of five CNPs 50 us apart, and after one CNP: RC, RT,
  alpha and the step counts.

Run: python -m bench.bench_dcqcn [--json FILE] [--synth]
"""

import argparse
import time

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from bench.bench_synth import write_rows
from rocegen.gateware.roce.cc.dcqcn import DcqcnEngine
from rocegen.gateware.roce.cc.dcqcn_layouts import dcqcn_config
from rocegen.gateware.roce.cc.rate_limiter import RateLimiter
from rocegen.sim.models.cc.dcqcn import DcqcnParams, DcqcnRp, rate_gbps
from rocegen.sim.testing.congestion import SLOW, run_endpoint
from rocegen.sim.testing.harness import run_sim
from rocegen.tools.synth import synthesize
from rocegen.wire.pfc import line_bytes

CLK = 322_265_625
WIDTH = 512
#: (clock, line in Gb/s) of each width
LINES = {512: (CLK, 100), 64: (156_250_000, 10)}
PACKET = 1024 + 82          # wire bytes of a 1 KiB WRITE MIDDLE packet


class ReactionPath(Elaboratable):
    """The engine's rates into the limiter; ``sent`` reports go to both."""

    def __init__(self, num_qps, width):
        cfg = dcqcn_config(*LINES[width])
        self.dcqcn = DcqcnEngine(num_qps, config=cfg)
        self.lim = RateLimiter(num_qps, width, init_rate=cfg["line_rate"])
        self.line = cfg["line_rate"]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dcqcn, m.submodules.lim = self.dcqcn, self.lim
        wiring.connect(m, self.dcqcn.rate_w, self.lim.rate)
        m.d.comb += [self.lim.sent.valid.eq(self.dcqcn.sent.valid),
                     self.lim.sent.payload.eq(self.dcqcn.sent.payload),
                     self.lim.bypass.eq(self.dcqcn.bypass)]
        return m


def reaction(num_qps, width=WIDTH):
    clk = LINES[width][0]
    one_us = round(clk / 1e6)
    cnp_at = 20 * one_us + 17          # past the first alpha timer, not on a visit of QP 0
    cycles = cnp_at + 44 * one_us
    top = ReactionPath(num_qps, width)
    d, lim = top.dcqcn, top.lim
    beat = width // 8
    marks = {"departures": [], "rate_w": None, "new_rate": None}

    async def tb(ctx):
        busy = 0
        for t in range(cycles):
            ctx.set(d.cnp.valid, t == cnp_at)
            ctx.set(d.cnp.payload.qp, 0)
            sent = False
            if busy:
                busy -= 1
            elif ctx.get(lim.allowed) & 1:
                sent, busy = True, -(-PACKET // beat) - 1
                marks["departures"].append(t)
            ctx.set(d.sent.valid, sent)
            ctx.set(d.sent.payload, {"qp": 0, "bytes": PACKET})
            _, _, rv, rp = await ctx.tick().sample(d.rate_w.valid, d.rate_w.payload)
            if rv and rp.qp == 0 and marks["rate_w"] is None and t >= cnp_at:
                marks["rate_w"], marks["new_rate"] = t, int(rp.rate)

    run_sim(top, testbenches=[tb], deadline_cycles=cycles + 100)
    dep = marks["departures"]
    old_gap = PACKET * (1 << 20) / top.line
    write = marks["rate_w"] - cnp_at
    period = lim.period
    # the first packet later than the old rate allows (visible where refills are fine-grained)
    late = None
    if period <= 16:
        last = max(b for b in dep if b <= cnp_at)
        late = next(b for a, b in zip(dep, dep[1:]) if a >= last and b - a > old_gap + period)
        late -= cnp_at
    # the rate achieved from 1 us after the CNP, for 40 us (before the first rate increase)
    window = [b for b in dep if cnp_at + one_us <= b <= cnp_at + 41 * one_us]
    achieved = (len(window) - 1) * PACKET / (window[-1] - window[0])
    want = marks["new_rate"] / (1 << 20)
    row = {"kind": "dcqcn", "name": f"reaction-{width}-{num_qps}qp",
           "cnp_to_limiter_cycles": write,
           "refill_bound_cycles": write + period - 1, "first_late_packet_cycles": late,
           "achieved_after_1us_gbps": achieved * 8 * clk / 1e9,
           "new_rate_gbps": want * 8 * clk / 1e9}
    held = "" if late is None else \
        f"first packet held back {late} cycles after the CNP ({late / clk * 1e9:.0f} ns); "
    print(f"  W = {width}, {num_qps:3} QPs: CNP -> rate at the limiter {write} cycles "
          f"({write / clk * 1e9:.0f} ns); next refill within {write + period - 1} cycles "
          f"({(write + period - 1) / clk * 1e9:.0f} ns); {held}from 1 us to 41 us after it: "
          f"{row['achieved_after_1us_gbps']:.2f} Gb/s for a new rate of "
          f"{row['new_rate_gbps']:.2f} Gb/s")
    return row


def endpoint_reaction(width):
    clk, line = LINES[width]
    one_us = round(clk / 1e6)
    pmtu = 4096 if width == 512 else 1024
    cnp_at = (10 if width == 512 else 40) * one_us
    frames, _, marks = run_endpoint(width, steps=cnp_at + (16 if width == 512 else 60) * one_us,
                                    cnp_at=cnp_at, pmtu=pmtu, length=64 * 1024)
    rp = DcqcnRp(DcqcnParams(**dcqcn_config(clk, line, **SLOW)))
    old = rp.rc / (1 << 20)
    rp.cnp(0)
    new = rp.rc / (1 << 20)
    t_in, starts = marks["cnp_in"], marks["starts"]
    # the first frame that starts later than the old rate lets it (by more than a refill)
    k = next(k + 1 for k, (a, b) in enumerate(zip(starts, starts[1:]))
             if b > t_in and b - a > line_bytes(len(frames[k][1])) / old + 9)
    late = starts[k]
    # the rate on the wire over the next 16 frames, start to start (and 16 before)
    n = 16
    after = sum(line_bytes(len(f)) for _, f in frames[k:k + n]) / (starts[k + n] - starts[k])
    before = sum(line_bytes(len(f)) for _, f in frames[k - n - 2:k - 2]) / \
        (starts[k - 2] - starts[k - n - 2])
    row = {"kind": "dcqcn", "name": f"endpoint-{width}", "cnp_to_wire_cycles": late - t_in,
           "cnp_to_wire_ns": (late - t_in) / clk * 1e9,
           "rate_before_gbps": before * 8 * clk / 1e9, "rate_after_gbps": after * 8 * clk / 1e9,
           "new_rate_gbps": new * 8 * clk / 1e9}
    print(f"  endpoint, W = {width}: CNP's last beat in -> first frame held back on the wire "
          f"{row['cnp_to_wire_cycles']} cycles ({row['cnp_to_wire_ns']:.0f} ns); on the wire "
          f"{row['rate_before_gbps']:.2f} Gb/s before, {row['rate_after_gbps']:.2f} Gb/s "
          f"over the 16 frames from then on, for a new rate of {row['new_rate_gbps']:.2f} Gb/s")
    return row


def synth_figures():
    """Both blocks at 8 and 256 QPs (the limiter at 512 bits), mapped for area and for 8 LUT
    levels."""
    rows = []
    for name, make in (("dcqcn", lambda n: DcqcnEngine(n)),
                       ("limiter", lambda n: RateLimiter(n, WIDTH))):
        for n in (8, 256):
            for depth in (None, 8):
                tag = f"{name}_{n}" + ("" if depth is None else f"_d{depth}")
                r = synthesize(make(n), top="top", workdir=f"build/synth/{tag}",
                               depth_target=depth)
                how = "area" if depth is None else f"{depth} levels"
                print(f"  {name}({n} QPs, for {how}): {r['lut_total']:,} LUTs, {r['ff']:,} FF, "
                      f"{r['bram36']} RAMB36 + {r['bram18']} RAMB18, {r['dsp']} DSP, "
                      f"{r['lut_levels']} LUT levels")
                rows.append({"kind": "dcqcn", "name": f"size-{tag}", **{k: r[k] for k in (
                    "lut_total", "ff", "bram36", "bram18", "dsp", "lut_levels")}})
    return rows


def trajectory(n_cnps, marks, title):
    """A QP sending at its rate (the model, the published defaults, 100G at 322 MHz), visited
    every 256 cycles; ``n_cnps`` CNPs 50 us apart from t = 0; a row at each of ``marks`` (us)."""
    p = DcqcnParams.from_physical(CLK, 100)
    rp = DcqcnRp(p)
    t0, step = 1000, 256
    cnps = [t0 + round(k * 50e-6 * CLK) for k in range(n_cnps)]
    show = [t0 + round(us * 1e-6 * CLK) for us in marks]
    rows, credit = [], 0.0
    for t in range(0, show[-1] + step, step):
        for c in cnps:
            if t - step < c <= t:
                rp.cnp(c)
        rp.tick(t)
        credit += rp.rc / (1 << 20) * step       # bytes sent at RC since the last visit
        rp.sent(int(credit))
        credit -= int(credit)
        if any(t - step < x <= t for x in show):
            rows.append({"us": (t - t0) / CLK * 1e6, "rc": rate_gbps(rp.rc, CLK),
                         "rt": rate_gbps(rp.rt, CLK), "alpha": rp.alpha / 65536,
                         "t_stage": rp.t_stage, "b_stage": rp.b_stage})
    print(f"  model: {title}")
    print("     t (us)   RC (Gb/s)   RT (Gb/s)   alpha    T   BC")
    for r in rows:
        print(f"    {r['us']:7.0f}   {r['rc']:9.2f}   {r['rt']:9.2f}   {r['alpha']:.3f}  "
              f"{r['t_stage']:3}  {r['b_stage']:3}")
    return {"kind": "dcqcn", "name": f"trajectory-{n_cnps}cnp", "rows": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--synth", action="store_true", help="also synthesize the blocks (Yosys)")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = [reaction(8), reaction(256), reaction(8, 64), reaction(256, 64),
            endpoint_reaction(512), endpoint_reaction(64)]
    print("  the published defaults: g 1/256, K = T = 55 us, B = 10 MiB, F 5, R_AI 40 Mb/s, "
          "R_HAI 400 Mb/s, 100G at 322 MHz")
    rows.append(trajectory(5, [0, 50, 100, 150, 200, 250, 300, 400, 500, 1000, 2000, 4000, 6000],
                           "a burst of 5 CNPs 50 us apart from t = 0"))
    rows.append(trajectory(1, [0, 55, 110, 165, 220, 275, 330, 500, 1000, 2000, 3000, 5000,
                               8000, 10000, 12000],
                           "one CNP at t = 0"))
    if args.synth:
        rows += synth_figures()
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        write_rows(args.json, rows)


if __name__ == "__main__":
    main()
