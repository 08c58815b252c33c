"""``rocegen sim incast``: the closed-loop incast of :mod:`rocegen.sim.models.fabric.incast` (senders
with the gateware's DCQCN reaction point and rate limiter, the switch model's ECN marking and
PFC, the host's notification point) from the command line, its figures as JSON and plots; and
the ``incast`` batch of ``rocegen bench`` (:func:`bench_runs`, :func:`run_bench`), whose rows
:mod:`rocegen.sim.apps.bench_report` turns into the "Incast" section of
``docs/performance.md`` and its plots (:func:`plot`).
"""

import json
import sys
import time
from pathlib import Path

__all__ = ["add_parser", "run", "config_of", "plot", "downsample", "bench_runs", "run_bench",
           "BENCH_US", "BENCH_SETTLE_US", "QUICK_US", "PLOT_STEP_US", "START_US", "PLOTTED"]

#: the bench's runs: simulated time and start of the converged part (us). With the DCQCN
#: paper's parameters the incast's first round trips cut every sender to 1 Gb/s or less; the
#: additive increase (40 Mb/s per 55 us) brings them back to a quarter of the line in some
#: 30 ms, so the second half of 100 ms is well after convergence.
BENCH_US = 100_000
BENCH_SETTLE_US = 50_000
BENCH_SENDERS = 4
#: the quick suite's one run
QUICK_US = 3_000
#: the bench keeps the series of the plotted runs at this resolution (us)
PLOT_STEP_US = 500
#: the first microseconds the plots show beside the whole run (every sample)
START_US = 1_000
#: the runs the documents plot: (dcqcn, pfc) -> file under docs/img
PLOTTED = {(True, True): "incast_dcqcn_pfc.png", (False, False): "incast_no_cc.png"}

#: option -> IncastConfig field, for the options given straight through
_FIELDS = {"--senders": "senders", "--us": "us", "--kmin": "kmin", "--kmax": "kmax",
           "--pmax": "pmax", "--buffer": "buffer", "--xoff": "xoff", "--xon": "xon",
           "--cable-ns": "cable_ns", "--pmtu": "pmtu", "--seed": "seed",
           "--stagger-us": "stagger_us", "--sample-us": "sample_us", "--settle-us": "settle_us",
           "--burst": "burst", "--rate-latency-cycles": "rate_latency_cycles",
           "--cnp-interval-ns": "cnp_interval_ns", "--pfc-response-ns": "pfc_response_ns"}


def add_parser(subparsers):
    """Add the ``incast`` sub-command to ``rocegen sim``'s sub-parsers."""
    from rocegen.sim.models.fabric import incast as m
    d = m.IncastConfig()
    p = subparsers.add_parser(
        "incast", help="N senders with DCQCN into one 100G switch port (ECN, PFC): link "
        "utilization, fairness, queue, drops, pauses and CNPs as JSON, optional plots",
        description="Closed-loop incast (Python model, event driven): N FPGA senders, one RC QP "
        "each on its own 100 Gb/s line, send RDMA WRITEs (DSCP 26, ECT(0)) through a switch "
        "into one 100 Gb/s port towards a host NIC. Each sender paces itself as the gateware "
        "does (the DCQCN rate law of each QP through a byte-accurate token bucket); the switch "
        "marks ECN (RED between --kmin and --kmax) and, with PFC, pauses the senders; the host "
        "answers CE-marked frames with CNPs (at most one per QP per --cnp-interval-ns). Results "
        "after --settle-us count as converged.")
    p.add_argument("--senders", type=int, default=d.senders,
                   help=f"senders into the one port (1..{m.MAX_SENDERS}, default {d.senders})")
    p.add_argument("--us", type=float, default=d.us,
                   help=f"simulated time in microseconds (default {d.us:,.0f}: with the "
                   "default DCQCN parameters 4 senders converge after some 30 ms)")
    p.add_argument("--no-dcqcn", dest="dcqcn", action="store_false",
                   help="senders always at line rate, CNPs ignored (default: DCQCN on)")
    p.add_argument("--no-pfc", dest="pfc", action="store_false",
                   help="the data priority is lossy: frames that find no buffer are dropped "
                   "(default: PFC on, lossless)")
    p.add_argument("--kmin", type=int, default=d.kmin,
                   help=f"ECN: no marking up to this queue depth in bytes (default {d.kmin:,})")
    p.add_argument("--kmax", type=int, default=d.kmax,
                   help=f"ECN: every frame marked above this depth in bytes (default {d.kmax:,})")
    p.add_argument("--pmax", type=float, default=d.pmax,
                   help=f"ECN: marking probability at --kmax, rising linearly from 0 at --kmin "
                   f"(0..1, default {d.pmax})")
    p.add_argument("--buffer", type=int, default=d.buffer,
                   help=f"the switch's shared buffer in bytes (default {d.buffer:,})")
    p.add_argument("--xoff", type=int, default=d.xoff,
                   help=f"PFC: bytes of one sender's frames in the switch above which it is "
                   f"paused (default {d.xoff:,}; the headroom beyond the buffer is computed "
                   "for the cable)")
    p.add_argument("--xon", type=int, default=None,
                   help="PFC: bytes at or below which the sender is resumed (default half of "
                   "--xoff)")
    p.add_argument("--cable-ns", type=float, default=d.cable_ns,
                   help=f"delay of every cable, each way, in ns (default {d.cable_ns:g})")
    p.add_argument("--pmtu", type=int, default=d.pmtu,
                   help=f"payload bytes per packet (256..4096, a power of two; default {d.pmtu})")
    p.add_argument("--seed", type=int, default=d.seed,
                   help=f"seed of the switch's marking decisions (default {d.seed})")
    p.add_argument("--stagger-us", type=float, default=d.stagger_us,
                   help="sender k starts at k times this (us; default 0: all at once)")
    p.add_argument("--sample-us", type=float, default=d.sample_us,
                   help=f"period of the series: each flow's delivered rate and DCQCN rate, the "
                   f"queue depth (us, default {d.sample_us:g})")
    p.add_argument("--settle-us", type=float, default=None,
                   help="start of the converged part, over which the converged utilization, "
                   "the throughputs and the fairness index are taken (us; default half of --us)")
    p.add_argument("--burst", type=int, default=d.burst,
                   help=f"the rate limiter's burst allowance in bytes (default {d.burst})")
    p.add_argument("--rate-latency-cycles", type=int, default=d.rate_latency_cycles,
                   help="cycles (322.27 MHz) from a CNP's arrival, or a rate increase, to the "
                   f"new rate at the limiter (default {d.rate_latency_cycles}, as measured on "
                   "the gateware)")
    p.add_argument("--cnp-interval-ns", type=float, default=d.cnp_interval_ns,
                   help="the host's shortest time between two CNPs of one QP, ns (default "
                   f"{d.cnp_interval_ns:.1f}: the gateware notification point's 1290 cycles)")
    p.add_argument("--pfc-response-ns", type=float, default=d.pfc_response_ns,
                   help="time from a PFC frame's arrival at a sender to its effect, ns "
                   f"(default {d.pfc_response_ns:g}; counted in the headroom)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write every figure and the series to this JSON file")
    p.add_argument("--plot", default=None, metavar="DIR",
                   help="write incast.png (each flow's rate and the queue depth over time) "
                   "into this folder (matplotlib)")
    return p


def config_of(args):
    """The :class:`~rocegen.sim.models.fabric.incast.IncastConfig` of parsed options; ValueError naming
    the option for a bad value."""
    from rocegen.sim.models.fabric.incast import IncastConfig
    kw = {field: getattr(args, field) for field in _FIELDS.values()}
    try:
        return IncastConfig(dcqcn=args.dcqcn, pfc=args.pfc, **kw)
    except (ValueError, TypeError) as e:
        msg = str(e)
        for option, field in _FIELDS.items():
            if msg.startswith(field + " ") or msg.startswith(field + ","):
                msg = option + msg[len(field):]
                break
        raise ValueError(msg) from None


def _title(r):
    p = r["parameters"]
    cc = "DCQCN" if p["dcqcn"] else "no DCQCN"
    return (f"{p['senders']} senders -> one {p['line_gbps']:g}G port, {cc}, "
            f"PFC {'on' if p['pfc'] else 'off'}")


def summary(r):
    """A few lines for the terminal."""
    p = r["parameters"]
    out = [f"{_title(r)}: {p['us']:g} us simulated, converged from {p['settle_us']:g} us",
           f"  utilization {100 * r['utilization']:.2f} % overall, "
           f"{100 * r['utilization_converged']:.2f} % converged; Jain fairness "
           f"{r['jain_fairness']:.4f} (flows " + ", ".join(f"{x:.2f}" for x in
                                                          r["throughput_gbps"]) + " Gb/s)",
           f"  queue max {r['max_queue_bytes']:,} B ({r['max_queue_converged_bytes']:,} B "
           f"converged); drops {r['drops'] + r['headroom_drops']:,}; XOFF {r['xoff_sent']:,} / "
           f"XON {r['xon_sent']:,}, paused {100 * r['paused_fraction']:.2f} % of the time; "
           f"CE marks {r['ce_marks']:,}, CNPs {r['cnps_sent']:,}"]
    return "\n".join(out)


def run(args):
    """``rocegen sim incast``: returns the exit status."""
    from rocegen.sim.models.fabric.incast import simulate
    cfg = config_of(args)
    t0 = time.perf_counter()
    r = simulate(cfg)
    r["wall_seconds"] = round(time.perf_counter() - t0, 2)
    print(summary(r))
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(r) + "\n")
        print(f"wrote {path}")
    if args.plot:
        step = max(cfg.sample_us, cfg.us / 1000)        # at most some 1000 points
        written = plot(downsample(r, step), Path(args.plot) / "incast.png")
        print(f"wrote {written}")
    return 0


# ------------------------------------------------------------------------------ series, plots

def downsample(r, step_us, start_us=START_US):
    """``r`` with its series in windows of about ``step_us`` (a whole number of samples): the
    delivered rates averaged, the DCQCN rates and queue snapshots at each window's end, the
    queue's maximum over the window (``series_step_us`` says the window). When the run is
    longer than ``2 * start_us``, its first ``start_us`` keep every sample as
    ``series_start`` (the incast's first round trips)."""
    s = r["series"]
    sample = r["parameters"]["sample_us"]
    k = max(1, round(step_us / sample))
    n = len(s["t_us"])
    cuts = list(range(0, n, k))

    def mean(xs):
        return [round(sum(xs[a:a + k]) / len(xs[a:a + k]), 4) for a in cuts]

    def last(xs):
        return [round(xs[min(a + k, n) - 1], 4) for a in cuts]

    out = {"t_us": last(s["t_us"]), "rate_gbps": [mean(x) for x in s["rate_gbps"]],
           "dcqcn_rate_gbps": [last(x) for x in s["dcqcn_rate_gbps"]],
           "queue_bytes": last(s["queue_bytes"]),
           "queue_max_bytes": [max(s["queue_max_bytes"][a:a + k]) for a in cuts]}
    result = {**r, "series": out, "series_step_us": k * sample}
    if r["parameters"]["us"] > 2 * start_us and k > 1:
        m = sum(1 for t in s["t_us"] if t <= start_us)
        result["series_start"] = {
            key: [[round(y, 4) for y in x[:m]] for x in v] if key.endswith("gbps") else v[:m]
            for key, v in s.items()}
    return result


def _panels(top, bottom, r, s, step, *, unit, legend):
    """One column of the plot: the rates above, the queue below; time in ``unit`` (us, ms)."""
    import matplotlib.pyplot as plt
    p = r["parameters"]
    scale = 1000 if unit == "ms" else 1
    t = [x / scale for x in s["t_us"]]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, rate in enumerate(s["rate_gbps"]):
        c = colours[k % len(colours)]
        top.plot(t, rate, "-", color=c, lw=1.2, label=f"flow {k}")
        if p["dcqcn"] and "dcqcn_rate_gbps" in s:
            top.plot(t, s["dcqcn_rate_gbps"][k], ":", color=c, lw=1.2)
    if p["dcqcn"]:
        top.plot([], [], "k:", lw=1.2, label="dotted: its DCQCN rate RC")
    fair = p["line_gbps"] / p["senders"]
    top.axhline(fair, color="k", ls="--", lw=0.8, label=f"fair share {fair:g} Gb/s")
    top.set_ylabel("delivered (Gb/s)")
    top.set_ylim(0, p["line_gbps"] * 1.05)
    top.grid(True, alpha=0.3)
    q = s["queue_max_bytes"]
    bottom.plot(t, [x / 1000 for x in q], "-", color="tab:red", lw=1, zorder=3,
                label=f"egress queue, deepest per {step:g} us")
    top_kb = max(max(q, default=0), p["kmax"]) / 1000 * 1.15
    for value, name, style in ((p["kmin"], "Kmin", ":"), (p["kmax"], "Kmax", "--")):
        bottom.axhline(value / 1000, color="k", ls=style, lw=0.8, label=f"{name} {value:,} B")
    if p["buffer"] / 1000 <= top_kb:
        bottom.axhline(p["buffer"] / 1000, color="tab:purple", ls="--", lw=1.5, zorder=2,
                       label=f"buffer {p['buffer']:,} B")
    if p["settle_us"] / scale <= t[-1]:
        for ax in (top, bottom):
            ax.axvline(p["settle_us"] / scale, color="grey", ls="-.", lw=0.8,
                       label="converged from" if ax is bottom else None)
    bottom.set_xlabel(f"time ({unit})")
    bottom.set_ylabel("queue (KB)")
    bottom.set_ylim(0, top_kb)
    bottom.grid(True, alpha=0.3)
    if legend:
        top.legend(fontsize=7, ncol=2, loc="upper right")
        bottom.legend(fontsize=7, loc="upper right")


def plot(r, path, title=None):
    """Each flow's delivered rate (and its DCQCN rate, dotted) and the queue depth over time,
    as a PNG at ``path`` (with ``series_start``, the first microseconds beside the whole run);
    returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    step = r.get("series_step_us", r["parameters"]["sample_us"])
    start = r.get("series_start")
    cols = 2 if start else 1
    fig, axes = plt.subplots(2, cols, figsize=(14 if start else 10, 6.5), sharex="col",
                             squeeze=False, gridspec_kw={"height_ratios": [3, 2],
                                                         "width_ratios": [1, 2][-cols:]})
    if start:
        _panels(axes[0][0], axes[1][0], r, start, r["parameters"]["sample_us"], unit="us",
                legend=False)
        axes[0][0].set_title(f"the first {start['t_us'][-1]:g} us "
                             f"({r['parameters']['sample_us']:g} us windows)")
    _panels(axes[0][-1], axes[1][-1], r, r["series"], step, unit="ms", legend=True)
    axes[0][-1].set_title(f"the whole run ({step:g} us windows)")
    fig.suptitle(title or _title(r))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------ bench

def bench_runs(quick=False):
    """The runs of the ``incast`` batch of ``rocegen bench`` (``quick``: the one short run of
    ``--quick``): 4 senders, DCQCN on and off, PFC on and off."""
    if quick:
        return [{"kind": "incast", "senders": BENCH_SENDERS, "us": QUICK_US, "dcqcn": True,
                 "pfc": True}]
    return [{"kind": "incast", "senders": BENCH_SENDERS, "us": BENCH_US,
             "settle_us": BENCH_SETTLE_US, "dcqcn": dcqcn, "pfc": pfc}
            for dcqcn, pfc in ((True, True), (True, False), (False, True), (False, False))]


def run_bench(runs, log=print):
    """Run the batch: ``(batch record, rows)``. Each row is the run's figures (``"kind":
    "incast"``); the plotted runs (:data:`PLOTTED`) keep their series in windows of
    :data:`PLOT_STEP_US` (and every sample of the first :data:`START_US`), as far as the plots
    show them (no queue snapshots; no DCQCN rates without DCQCN), the others none."""
    from rocegen.sim.models.fabric.incast import IncastConfig, simulate
    rows = []
    t0 = time.perf_counter()
    for spec in runs:
        cfg = IncastConfig(**{k: v for k, v in spec.items() if k != "kind"})
        t1 = time.perf_counter()
        r = simulate(cfg)
        wall = time.perf_counter() - t1
        if (cfg.dcqcn, cfg.pfc) in PLOTTED:
            r = downsample(r, min(PLOT_STEP_US, cfg.us / 20))
            for key in ("series", "series_start"):     # what the plots do not show
                for drop in ("queue_bytes",) + (() if cfg.dcqcn else ("dcqcn_rate_gbps",)):
                    r.get(key, {}).pop(drop, None)
        else:
            r.pop("series")
        rows.append({"kind": "incast", **r, "wall_seconds": round(wall, 2)})
        log(f"  {_title(r)}: utilization {100 * r['utilization_converged']:.2f} % converged, "
            f"Jain {r['jain_fairness']:.4f}, drops {r['drops']}, {wall:.1f} s")
    seconds = time.perf_counter() - t0
    batch = {"runs": len(rows), "model": "rocegen.sim.models.fabric.incast",
             "simulated_us": sum(r["parameters"]["us"] for r in rows),
             "process_seconds": round(seconds, 2)}
    return batch, rows


if __name__ == "__main__":        # pragma: no cover
    import argparse
    ap = argparse.ArgumentParser(prog="rocegen sim")
    add_parser(ap.add_subparsers(dest="sim_command", required=True))
    sys.exit(run(ap.parse_args(["incast", *sys.argv[1:]])))
