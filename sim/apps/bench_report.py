"""Reports of the benchmark suite (:mod:`rocegen.sim.apps.bench_suite`) from its results: a text
summary, the suite's section of ``docs/performance.md`` (between the markers
``<!-- bench-suite:begin -->`` and ``<!-- bench-suite:end -->``), PNG plots under ``docs/img/``
(matplotlib, Agg back end) and the headline table of ``README.md`` (between
``<!-- bench-headline:begin -->`` and ``<!-- bench-headline:end -->``). Everything written is
derived from the results file; nothing is measured here."""

from pathlib import Path

from rocegen.sim.apps.bench_suite import (
    ATOMIC_BATCHES,
    ATOMIC_OUTSTANDING,
    ATOMIC_UNIT_CYCLES,
    CLOCK_MHZ,
    KIB,
    MIB,
    ROUNDTRIP_BATCHES,
    atomic_frames,
    limit_gbps,
    main_build,
    rate_limit_mmsgs,
)

__all__ = ["summary", "markdown", "headline_markdown", "plots", "write_docs"]

BEGIN, END = "<!-- bench-suite:begin -->", "<!-- bench-suite:end -->"
H_BEGIN, H_END = "<!-- bench-headline:begin -->", "<!-- bench-headline:end -->"
IMG = "img"


def size_text(n):
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= KIB and n % KIB == 0:
        return f"{n // KIB} KiB"
    return f"{n} B"


def _short(rev):
    return rev[:12] + ("-dirty" if rev.endswith("-dirty") else "")


def _rev(results):
    """The revision the figures were measured at (markdown); after ``--only`` re-runs, each
    batch's."""
    by = {}
    for b in results.get("batches", []):
        by.setdefault(_short(b.get("revision", results["revision"])), []).append(b["name"])
    if len(by) <= 1:
        return f"`{_short(results['revision'])}`"
    return "; ".join(f"`{rev}` for {', '.join(names)}" for rev, names in by.items())


def _headline_rows(results):
    h = results["headline"]
    rows = []
    for key, size in (("write_4k", "4 KiB"), ("write_1m", "1 MiB")):
        if key in h:
            r = h[key]
            rows.append((f"one QP, RDMA WRITE, {size} messages, PMTU 4096, 100G line",
                         f"{r['goodput_gbps']:.2f} Gb/s = {r['percent_of_limit']:.2f} % of the "
                         f"{r['limit_gbps']:.2f} Gb/s limit"))
    if "rate_64b" in h:
        r, u = h["rate_64b"], h.get("rate_64b_unthrottled")
        text = (f"{r['mmsgs']:.2f} M/s at 100G ({100 * r['mmsgs'] / r['limit_mmsgs']:.1f} % of "
                f"the line's {r['limit_mmsgs']:.2f} M/s)")
        if u:
            text += f"; {u['mmsgs']:.2f} M/s with the MAC taking a beat every cycle"
        rows.append(("64 B WRITE message rate, one QP", text))
    for key, what in (("wr_to_wire", "work request to its first beat on the MAC (64 B WRITE)"),
                      ("ack_to_cpl", "last beat of an ACK in to its completion out"),
                      ("cm_request_to_reply", "connection manager: OPEN_QP request in to reply "
                       "out")):
        if key in h:
            rows.append((what, f"{h[key]['cycles']} cycles ({h[key]['ns']:.1f} ns)"))
    trips = {r["test"]: r for r in results.get("roundtrip", [])
             if r["size"] == 64 and r["width"] == 512 and r["memory"] == "onchip"}
    if len(trips) == 2:
        rows.append(("round trip without software, 64 B: the endpoint's SEND echoed by the host "
                     "model / the host's WRITE to its ACK",
                     " / ".join(f"{trips[t]['rtt_ns']:.1f} ns" for t in ("send", "write"))
                     + " (half: " + " / ".join(f"{trips[t]['half_ns']:.1f} ns"
                                               for t in ("send", "write")) + ")"))
    free = [r for r in results["goodput"] if r["qps"] == 1 and r["opcode"] == "WRITE"
            and r["pmtu"] == 4096 and not r["line_gbps"] and r["size"] == 64 * KIB]
    if free:
        idle = sum(r["idle_beats"] for r in results["goodput"] if not r["line_gbps"])
        rows.append(("one QP, 64 KiB WRITEs, MAC taking a beat every cycle",
                     f"{free[0]['goodput_gbps']:.2f} Gb/s; "
                     + ("no idle beat between packets in any unthrottled run" if idle == 0 else
                        f"{idle} idle beats between packets over all unthrottled runs")))
    loss = {(r["rtt_us"], r["loss"]): r for r in results["loss"]}
    rtts = sorted({r["rtt_us"] for r in results["loss"]})
    parts = []
    for p in sorted({r["loss"] for r in results["loss"] if r["loss"]}):
        if all((t, p) in loss for t in rtts):
            parts.append(f"{100 * p:g} %: " + " / ".join(f"{loss[t, p]['goodput_gbps']:.2f}"
                                                         for t in rtts) + " Gb/s")
    if parts and len(rtts) > 1:
        rows.append((f"one QP, 4 KiB WRITEs, PMTU 4096, random loss each way, "
                     f"{' / '.join(f'{t:g} us' for t in rtts)} round trip",
                     "; ".join(parts) + " to the last completion (go-back-N); data always intact"))
    sp = results["simulation_speed"]
    if sp.get("cycles_per_second"):
        checked = sum(b.get("frames_checked") or 0 for b in results["batches"])
        modes = {b["framecheck_mode"] for b in results["batches"] if b.get("framecheck_mode")}
        check = (f"; {checked:,} frames rebuilt by scapy and compared"
                 + (" in a worker process beside the simulator" if modes == {"pool"} else "")
                 if checked else "")
        widths = " and ".join(str(w) for w in sorted(
            {b.get("width", 512) for b in results["batches"]}, reverse=True))
        rows.append((f"simulation speed (Verilator, W = {widths}, 8 QPs, with the cocotb host "
                     "model)",
                     f"{sp['cycles_per_second'] / 1e3:.1f} k cycles per second{check}"))
    return rows


def summary(results):
    """A readable account of the results, for the terminal."""
    out = [f"rocegen benchmark suite ({'quick' if results['quick'] else 'full'}), revision "
           f"{_rev(results)}, {results['date']}, {results['wall_seconds']:.0f} s"]
    for what, value in _headline_rows(results):
        out.append(f"  {what}: {value}")
    out.append("goodput (Gb/s; 'free': MAC takes a beat every cycle, limit = no idle beat):")
    for r in results["goodput"]:
        mac = f"{r['line_gbps']}G" if r["line_gbps"] else "free"
        out.append(f"  {r['opcode']:9} {r['qps']} QP PMTU {r['pmtu']:4} {size_text(r['size']):>8} "
                   f"{mac:>4}: {r['goodput_gbps']:7.2f} of {r['limit_gbps']:7.2f} "
                   f"({r['percent_of_limit']:7.3f} %)")
    out.append("message rate (M messages/s):")
    for r in results["message_rate"]:
        mac = f"{r['line_gbps']}G" if r["line_gbps"] else "free"
        build = "" if "width" not in r else f" ({_build_label(r)})"
        out.append(f"  {r['qps']} QP {size_text(r['size']):>6} {mac:>4}: {r['mmsgs']:7.2f} of "
                   f"{r['limit_mmsgs']:7.2f}{build}")
    for r in results["latency"]:
        w, a = r["wr_to_wire_cycles"], r["ack_to_cpl_cycles"]
        out.append(f"latency, {size_text(r['size'])} WRITE: work request to wire {w['min']}..{w['max']} "
                   f"cycles, ACK to completion {a['min']}..{a['max']} cycles")
    for r in results["cm"]:
        c = r["cm_cycles"]
        out.append(f"connection manager OPEN_QP request to reply: {c['min']}..{c['max']} cycles")
    for r in results["loss"]:
        out.append(f"loss {100 * r['loss']:.1f} % each way, RTT {r['rtt_us']} us: "
                   f"{r['goodput_gbps']:.2f} Gb/s ({r['percent_of_limit']:.2f} %), "
                   f"{r['retransmitted']} of {r['roce_frames']} frames resent")
    for r in results.get("soak", []):
        out.append(f"soak {r['opcode']:9} {r['qps']} QPs PMTU {r['pmtu']}: {r['packets']:,} packets "
                   f"({r['roce_frames']:,} frames, {r['retransmitted']:,} resent), "
                   f"{r['lost_to_nic'] + r['lost_from_nic']:,} frames lost, "
                   f"{r['checked_bytes']:,} bytes checked, {r['sim_cycles']:,} cycles in "
                   f"{r['wall_seconds']:.0f} s")
    for r in results.get("responder", []):
        mem = "" if r.get("memory", "onchip") == "onchip" else f" [{r['memory']}]"
        if r["test"] == "latency":
            c = r["latency_cycles"]
            out.append(f"responder{mem}: 64 B WRITE, last beat in to ACK out {c['min']}..{c['max']} "
                       "cycles")
        elif r["test"] == "bidirectional":
            out.append(f"responder{mem}: both ways, {size_text(r['size'])} WRITEs: "
                       f"{r['tx_goodput_gbps']:.2f} Gb/s out ({r['tx_percent_of_limit']:.1f} %), "
                       f"{r['rx_goodput_gbps']:.2f} Gb/s in ({r['percent_of_limit']:.1f} %) of "
                       f"{r['limit_gbps']:.2f}")
        else:
            out.append(f"responder{mem}: {r['opcode']:5} PMTU {r['pmtu']:4} "
                       f"{size_text(r['size']):>8}: {r['goodput_gbps']:7.2f} of "
                       f"{r['limit_gbps']:7.2f} ({r['percent_of_limit']:7.3f} %), "
                       f"{r['mmsgs']:.2f} M msg/s")
    for r in results.get("read", []):
        if r["test"] == "latency":
            c = r["latency_cycles"]
            out.append(f"READ: {size_text(r['size'])} READ request's last beat in to its first "
                       f"response beat out {c['min']}..{c['max']} cycles")
            continue
        if r.get("failed"):
            f = r["failed"]
            out.append(f"READ: endpoint READs, {r['outstanding']} outstanding, RTT {r['rtt_us']} "
                       f"us, {100 * r['loss']:g} % loss: FAILED, {f['status']} after "
                       f"{f['reads_done']} of {r['messages']} READs")
            continue
        what = ("host READs the endpoint" if r["test"] == "responder" else
                f"endpoint READs, {r['outstanding']:2} outstanding, RTT {r['rtt_us']} us"
                + (f", {100 * r['loss']:g} % loss" if r["loss"] else ""))
        out.append(f"READ: {what}, PMTU {r['pmtu']} {size_text(r['size']):>8}: "
                   f"{r['goodput_gbps']:7.2f} of {r['limit_gbps']:7.2f} "
                   f"({r['percent_of_limit']:7.3f} %)"
                   + (f", bound {r['bound_gbps']:.2f}" if r["bound_gbps"] < r["limit_gbps"]
                      else ""))
    for r in results.get("atomic", []):
        if r["test"] == "rate":
            mac = f"{r['line_gbps']}G" if r["line_gbps"] else "free"
            qps = f"{r['qps']} QP" + ("s" if r["qps"] > 1 else " ")
            out.append(f"atomic {_atomic_build(r)}: {r['opcode']:12} {qps} "
                       f"{mac:>4}: {r['mops']:7.2f} M/s ({r['percent_of_limit']:5.1f} % of "
                       f"{r['limit_mops']:.2f}"
                       + (f", {r['percent_of_unit']:5.1f} % of the unit's {r['unit_mops']:.2f})"
                          if r["unit_mops"] else ")"))
        else:
            c = r["latency_cycles"]
            what = r["opcode"] if r["test"] == "latency" else f"READ {size_text(r['size'])}"
            out.append(f"atomic {_atomic_build(r)}: {what} request's last beat in to its answer's "
                       f"first beat out {c['min']}..{c['max']} cycles")
    for r in results.get("roundtrip", []):
        c = r["rtt_cycles"]
        what = ROUNDTRIP_NAMES[r["test"]]
        out.append(f"round trip {_build_label(r)}: {what} of {size_text(r['size'])}: "
                   f"{c['min']:g}..{c['max']:g} cycles ({r['rtt_ns']} ns at best, half "
                   f"{r['half_ns']} ns)")
    for r in results.get("incast", []):
        p = r["parameters"]
        out.append(f"incast, {p['senders']} senders, DCQCN {'on' if p['dcqcn'] else 'off'}, PFC "
                   f"{'on' if p['pfc'] else 'off'}: utilization "
                   f"{100 * r['utilization_converged']:.2f} % converged, Jain "
                   f"{r['jain_fairness']:.4f}, queue max {r['max_queue_bytes']:,} B, drops "
                   f"{r['drops'] + r['headroom_drops']:,}, XOFF {r['xoff_sent']:,}, CNPs "
                   f"{r['cnps_sent']:,}")
    for r in results.get("resp_fuzz", []):
        out.append(f"responder fuzz: {r['frames']:,} hostile frames, {r['good_messages']} good "
                   f"messages intact, {r['checked_bytes']:,} bytes compared, every counter as "
                   "predicted")
    res = results["resources"]
    if res.get("available"):
        for d in res["designs"]:
            out.append(f"resources ({res['source']}, revision {str(d['revision'])[:12]}): "
                       f"{d['description']}: {d['lut_total']:,} LUTs, {d['ff']:,} FFs")
    else:
        out.append(f"resources: {res['note']}")
    for b in results["batches"]:
        out.append(f"batch {b['name']}: {b['runs']} runs, {b['sim_cycles']:,} cycles in "
                   f"{b['process_seconds']:.0f} s, {b['cycles_per_second']:,} cycles/s")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------- plots

def plots(results, folder):
    """Write the PNG plots; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    def sizes_axis(ax):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda v, _: size_text(int(v)).replace(" ", "") if v >= 1 and int(v) == v else ""))

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name):
        fig.tight_layout()
        path = folder / name
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path

    colours = {"WRITE": "tab:blue", "WRITE_IMM": "tab:orange", "SEND": "tab:green"}
    markers = {"WRITE": "o", "WRITE_IMM": "s", "SEND": "^"}
    good = results["goodput"]

    def curve(rows, **want):
        rows = sorted((r for r in rows if all(r[k] == v for k, v in want.items())),
                      key=lambda r: r["size"])
        return rows

    # goodput vs size at 100G, against the line limit
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), sharey=True)
    for i, qps in enumerate((1, 8)):
        for j, pmtu in enumerate((1024, 4096)):
            ax = axes[i][j]
            sizes_all = sorted({r["size"] for r in good if r["qps"] == qps})
            for op, colour in colours.items():
                rows = curve(good, qps=qps, pmtu=pmtu, opcode=op, line_gbps=100)
                if not rows:
                    continue
                xs = [r["size"] for r in rows]
                ax.plot(xs, [r["goodput_gbps"] for r in rows], markers[op], color=colour, ms=5,
                        mfc="none", label=f"{op} measured")
                fine = sorted(set(sizes_all) | {int(2 ** (k / 4)) for k in range(24, 89)
                                                if 2 ** (k / 4) <= max(sizes_all)})
                ax.plot(fine, [limit_gbps(s, pmtu, 100, op) for s in fine], "-", color=colour,
                        lw=1, alpha=0.7, label=f"{op} line limit")
            sizes_axis(ax)
            ax.set_title(f"{qps} QP{'s' if qps > 1 else ''}, PMTU {pmtu}, MAC at 100 Gb/s")
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("goodput (Gb/s)")
            ax.set_ylim(0, 102)
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Goodput vs message size, measured (dots) against the theoretical limit (lines)")
    written.append(save(fig, "goodput_vs_size.png"))

    # unthrottled: goodput against the no-idle-beat ideal
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for j, pmtu in enumerate((1024, 4096)):
        ax = axes[j]
        for qps, marker in ((1, "o"), (8, "s")):
            for op, colour in colours.items():
                rows = curve(good, qps=qps, pmtu=pmtu, opcode=op, line_gbps=0)
                if not rows:
                    continue
                xs = [r["size"] for r in rows]
                ax.plot(xs, [r["goodput_gbps"] for r in rows], marker, color=colour, ms=5,
                        mfc="none" if qps == 8 else colour, label=f"{op}, {qps} QP")
                if qps == 1:
                    ax.plot(xs, [r["limit_gbps"] for r in rows], "-", color=colour, lw=1,
                            alpha=0.6, label=f"{op}, one beat per cycle, no idle beat")
        sizes_axis(ax)
        ax.set_title(f"PMTU {pmtu}")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_ylim(0, 175)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.suptitle(f"MAC taking a beat every cycle (W = 512, {CLOCK_MHZ:.3f} MHz): measured (dots) "
                 "against one beat per cycle with no idle beat (lines)")
    written.append(save(fig, "goodput_unthrottled.png"))

    # message rate
    rate = main_build(results["message_rate"])
    if rate:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for qps, line, style, colour in ((1, 100, "o-", "tab:blue"), (8, 100, "s:", "tab:cyan"),
                                         (1, 0, "o-", "tab:red"), (8, 0, "s:", "tab:pink")):
            rows = curve(rate, qps=qps, line_gbps=line)
            if rows:
                ax.plot([r["size"] for r in rows], [r["mmsgs"] for r in rows], style,
                        color=colour, ms=8 if qps == 1 else 4, lw=1.5 if qps == 1 else 1,
                        mfc=colour if qps == 1 else "white",
                        label=f"{qps} QP{'s' if qps > 1 else ''}, "
                              f"{'MAC at 100 Gb/s' if line else 'MAC free'}")
        xs = sorted({r["size"] for r in rate})
        ax.plot(xs, [rate_limit_mmsgs(s, 4096, 100) for s in xs], "k--", lw=1,
                label="100 Gb/s line limit")
        sizes_axis(ax)
        ax.set_xlabel("WRITE message size (bytes)")
        ax.set_ylabel("messages per second (millions)")
        ax.set_ylim(bottom=0)
        ax.set_title("Message rate of small RDMA WRITEs (1 QP and 8 QPs give the same)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        written.append(save(fig, "message_rate.png"))

    # loss
    loss = results["loss"]
    if loss:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        for rtt, colour in ((2, "tab:blue"), (20, "tab:red")):
            rows = sorted((r for r in loss if r["rtt_us"] == rtt), key=lambda r: r["loss"])
            if rows:
                ax.plot([100 * r["loss"] for r in rows], [r["goodput_gbps"] for r in rows],
                        "o-", color=colour, label=f"round trip {rtt} us")
        lim = loss[0]["limit_gbps"]
        ax.axhline(lim, color="k", ls="--", lw=1, label=f"line limit {lim:.2f} Gb/s")
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xticks([0, 0.1, 1])
        ax.set_xticklabels(["0", "0.1 %", "1 %"])
        ax.set_xlabel("frames lost at random, each direction")
        ax.set_ylabel("goodput to the last completion (Gb/s)")
        ax.set_ylim(0, 102)
        ax.set_title("One QP, 4 KiB WRITEs, PMTU 4096, 100 Gb/s, go-back-N")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
        written.append(save(fig, "loss.png"))
    written += _incast_plots(results, folder)
    return written


def _incast_plots(results, folder):
    """The incast batch's plots (:data:`rocegen.sim.apps.incast.PLOTTED`)."""
    from rocegen.sim.apps import incast
    written = []
    for r in results.get("incast", []):
        p = r["parameters"]
        name = incast.PLOTTED.get((p["dcqcn"], p["pfc"]))
        if name and "series" in r:
            written.append(incast.plot(r, Path(folder) / name))
    return written


# ------------------------------------------------------------------------------------- markdown

def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


#: how each ``--peer`` of ``rocegen bench`` behaves, for the documents
PEER_TEXT = {
    "connectx": "behaving as a ConnectX (`--peer connectx`, the default: ACKs coalesced by "
                "count and by a timer, answers 0.3..1.2 us late, credit codes of its receive "
                "queue)",
    "ideal": "as the ideal peer (`--peer ideal`: an ACK for every AckReq at once)",
}


def _peer(results):
    peer = results.get("parameters", {}).get("peer")
    return PEER_TEXT.get(peer, "(peer behaviour not recorded)")


def headline_markdown(results):
    """The README's headline table."""
    out = [H_BEGIN,
           f"Measured by `make bench` (`rocegen bench`; revision {_rev(results)}, "
           f"{results['date'][:10]}): the endpoint (W = 512, 8 QPs) in Verilator at "
           f"{CLOCK_MHZ:.3f} MHz against the host NIC model {_peer(results)}, details in "
           "[docs/performance.md](docs/performance.md#benchmark-suite-rocegen-bench).", ""]
    out += _table(["figure", "value"], _headline_rows(results))
    return "\n".join(out + [H_END])


def markdown(results):
    """The suite's section of ``docs/performance.md``."""
    p = results["parameters"]
    ns = 1e3 / CLOCK_MHZ
    out = [BEGIN, "## Benchmark suite (`rocegen bench`)", "",
           f"Generated by `rocegen bench` (`make bench`) from `bench/results.json`; do not edit by "
           f"hand. Revision {_rev(results)}, {results['date']}, {results['machine']}, "
           f"{' '.join((results.get('verilator') or 'Verilator ?').split()[:2])}, "
           f"Amaranth {results['amaranth']}; the whole suite took "
           f"{results['wall_seconds'] / 60:.0f} minutes on a machine shared with other work (the "
           "cycle counts do not depend on it; the wall-clock figures do).", "",
           f"The endpoint ({p['design']}, W = {p['width']}, {p['num_qps']} QPs, on-chip payload "
           f"memory of {p['mem_bytes'] // KIB} KiB) runs cycle by cycle in Verilator at "
           f"{p['clock_mhz']:.3f} MHz against the host NIC model ({p['host']}) "
           f"{_peer(results)}. "
           "One QP's messages come from the traffic generator (test pattern); 8 QPs' come from work "
           "requests on the user port, round robin over the QPs, payload from local memory (so at "
           f"most {p['mem_bytes'] // KIB} KiB per message). \"100G\": the MAC takes frames at the "
           f"CMAC's line rate ({p['line_model']}); goodput is the payload over the time from the "
           "first frame's start on the line to the end of the last one's. \"free\": the MAC takes a "
           "beat every cycle; goodput is the payload over the cycles from the first beat to the "
           "last, and its limit is one beat per cycle with no idle beat between frames.", "",
           f"Theoretical limit: {p['limit']} (`rocegen.sim.apps.bench_suite.limit_gbps`).", ""]

    out += ["### Headline", ""]
    out += _table(["figure", "value"], _headline_rows(results))

    out += ["", "### Goodput vs message size", "",
            "![goodput vs size](img/goodput_vs_size.png)", "",
            "![goodput unthrottled](img/goodput_unthrottled.png)", ""]
    good = results["goodput"]
    for qps in (1, 8):
        for pmtu in (4096, 1024):
            rows = [r for r in good if r["qps"] == qps and r["pmtu"] == pmtu]
            if not rows:
                continue
            ops = [o for o in ("WRITE", "WRITE_IMM", "SEND") if any(r["opcode"] == o for r in rows)]
            sizes = sorted({r["size"] for r in rows})
            cells = {(r["opcode"], r["size"], r["line_gbps"]): r for r in rows}
            out += [f"**{qps} QP{'s' if qps > 1 else ''}, PMTU {pmtu}** (Gb/s; 100G: measured / "
                    "limit (% of it); free: measured (% of the no-idle-beat ideal))", ""]
            hdr = ["message"] + [f"{o} 100G" for o in ops] + [f"{o} free" for o in ops]
            table = []
            for s in sizes:
                row = [size_text(s)]
                for o in ops:
                    r = cells.get((o, s, 100))
                    row.append(f"{r['goodput_gbps']:.2f} / {r['limit_gbps']:.2f} "
                               f"({r['percent_of_limit']:.2f} %)" if r else "-")
                for o in ops:
                    r = cells.get((o, s, 0))
                    row.append(f"{r['goodput_gbps']:.2f} ({r['percent_of_limit']:.1f} %)" if r
                               else "-")
                table.append(row)
            out += _table(hdr, table) + [""]
    out += ["Bytes per run (`bench/results.json` has every run's parameters): one QP, at least "
            "two messages and 64 KiB, up to 8 messages or 1 MiB; 8 QPs, per QP at least two "
            "messages and 16 KiB, up to 4 messages or 256 KiB. WRITE_IMM and SEND are measured at "
            "fewer sizes than WRITE, and unthrottled at PMTU 4096 only.", ""]

    rate = main_build(results["message_rate"])
    if rate:
        out += ["### Message rate", "", "![message rate](img/message_rate.png)", "",
                "RDMA WRITEs of 1..256 bytes back to back (one QP: the traffic generator; 8 QPs: "
                "work requests on the user port, round robin), millions of messages per second: "
                "messages over the time their frames occupy the MAC. Limit at 100G: the line's "
                "frame rate; free: one beat per cycle.", ""]
        sizes = sorted({r["size"] for r in rate})
        cells = {(r["qps"], r["line_gbps"], r["size"]): r for r in rate}
        table = []
        for s in sizes:
            row = [size_text(s)]
            for q, line in ((1, 100), (8, 100), (1, 0), (8, 0)):
                r = cells.get((q, line, s))
                row.append(f"{r['mmsgs']:.2f} ({100 * r['mmsgs'] / r['limit_mmsgs']:.1f} %)"
                           if r else "-")
            lim = cells.get((1, 100, s))
            row.append(f"{lim['limit_mmsgs']:.2f}" if lim else "-")
            table.append(row)
        out += _table(["message", "1 QP, 100G", "8 QPs, 100G", "1 QP, free", "8 QPs, free",
                       "100G line limit"], table) + [""]

    out += ["### Latency", "",
            "Single messages on an idle endpoint (payload from on-chip memory), minimum .. maximum "
            "over the samples: from a work request's acceptance to its first beat on the MAC, and "
            "from the last beat of the acknowledgement into the MAC receive port to the completion "
            "it causes. A run's first work request on a new endpoint also waits for ARP to "
            "resolve the host's address: that is the 64 B row's maximum. Connection manager: "
            "from the last beat of an OPEN_QP request (a 64-byte "
            "datagram on UDP 17185) into the receive port to the first beat of its reply on the "
            "transmit port (each followed by a CLOSE_QP).", ""]
    table = []
    for r in main_build(results["latency"]):
        w, a = r["wr_to_wire_cycles"], r["ack_to_cpl_cycles"]
        table.append([f"{size_text(r['size'])} WRITE ({r['frame_bytes']}-byte frame)",
                      f"{w['min']}..{w['max']} cycles ({w['min'] * ns:.1f} ns)",
                      f"{a['min']}..{a['max']} cycles ({a['min'] * ns:.1f} ns)"])
    out += _table(["message", "work request to wire", "ACK to completion"], table) + [""]
    for r in main_build(results["cm"]):
        c = r["cm_cycles"]
        out += [f"Connection manager, OPEN_QP request to reply: **{c['min']}..{c['max']} cycles "
                f"({c['min'] * ns:.1f}..{c['max'] * ns:.1f} ns)** over {len(c['samples'])} "
                "requests.", ""]

    loss = results["loss"]
    if loss:
        out += ["### Goodput under loss", "", "![loss](img/loss.png)", "",
                "One QP, 4 KiB RDMA WRITEs from the traffic generator, PMTU 4096, MAC at 100 Gb/s, "
                "through the link model (`sim/models/fabric/link.py`), which loses frames at random with "
                "the same probability in each direction (data and acknowledgements alike) and "
                "delays each direction by half the round trip. Goodput is the payload over the time "
                "from the start of the run to its last completion (the last acknowledgement's round "
                "trip counts); the host memory is checked after each run. The QP's timeout is the "
                "smallest code from 4 that is at least four round trips (0, never, on a perfect "
                "link). \"Worst stall\": the longest time from a packet's first copy to its "
                "retransmission.", ""]
        table = []
        for r in sorted(loss, key=lambda r: (r["rtt_us"], r["loss"])):
            t = f"{4.096 * (1 << r['timeout']):.1f} us" if r["timeout"] else "never"
            stall = f"{r['worst_stall_cycles'] * ns / 1e3:.1f} us" if r["worst_stall_cycles"] else "-"
            table.append([f"{r['rtt_us']} us", f"{100 * r['loss']:g} %", size_text(r["bytes"]), t,
                          f"{r['goodput_gbps']:.2f} Gb/s", f"{r['percent_of_limit']:.2f} %",
                          r["roce_frames"], r["retransmitted"], r["lost_to_nic"], r["lost_from_nic"],
                          stall])
        out += _table(["round trip", "loss each way", "data", "timeout", "goodput", "of limit",
                       "frames sent", "resent", "lost to host", "lost to FPGA", "worst stall"],
                      table) + [""]
    rec = results["recovery"]
    if rec:
        out += ["Recovery after one lost packet of a burst of 64 x 4 KiB (round trip 2 us): in the "
                "middle, the host's sequence-error NAK starts the rewind; the last one, nothing "
                "reveals it and only the retransmit timer (4.096 us x 2^code, plus up to one tick "
                "of 1.024 us) recovers.", ""]
        table = []
        for r in rec:
            g = r["worst_stall_cycles"]
            table.append([r["where"], f"{r['timeout']} ({4.096 * (1 << r['timeout']):.1f} us)",
                          f"{g} cycles = {g * ns / 1e3:.2f} us", r["retransmitted"]])
        out += _table(["lost packet", "timeout code", "first copy to retransmission",
                       "packets resent"], table) + [""]

    soak = results.get("soak", [])
    if soak:
        out += ["### Soak", "",
                "`rocegen bench --only soak` (`make soak`): 8 QPs of 16 KiB messages at PMTU 256, "
                "work requests from local memory, MAC at 100 Gb/s, through the link model losing "
                "1 % of the frames, duplicating 0.5 % and reordering 0.5 % in each direction over "
                "a 2 us round trip; one run per opcode. After each run every byte is compared in "
                "the host's memory (or its receive buffers), the host's counters must show each "
                "data packet executed exactly once and each byte placed once, and every work "
                "request must have completed OK.", ""]
        table = []
        for r in soak:
            table.append([r["opcode"], f"{r['packets']:,}", f"{r['roce_frames']:,}",
                          f"{r['retransmitted']:,}", f"{r['lost_to_nic']:,} / {r['lost_from_nic']:,}",
                          f"{r['checked_bytes']:,}", f"{r['goodput_gbps']:.2f} Gb/s",
                          f"{r['sim_cycles']:,} ({r['sim_cycles'] * ns / 1e6:.2f} ms)",
                          f"{r['wall_seconds']:.0f} s"])
        out += _table(["opcode", "data packets", "frames sent", "resent", "lost to host / to FPGA",
                       "bytes checked", "goodput", "simulated cycles", "wall time"], table) + [""]

    out += _responder_markdown(results)
    out += _read_markdown(results)
    out += _atomic_markdown(results)
    out += _roundtrip_markdown(results)
    out += _goals_markdown(results)
    out += _incast_markdown(results)

    res = results["resources"]
    out += ["### Resources", ""]
    if res.get("available"):
        out += [f"From the last Yosys report (`{res['source']}`, {res['date']}, {res['yosys']}; "
                "`python -m bench.bench_synth`, details in [resources.md](resources.md)), not "
                "synthesized by the suite:", ""]
        out += _table(["design", "revision", "LUTs", "FFs", "RAMB36", "RAMB18", "URAM", "DSP",
                       "LUT levels"],
                      [[d["description"], f"`{str(d['revision'])[:12]}`", f"{d['lut_total']:,}",
                        f"{d['ff']:,}", d["bram36"], d["bram18"], d["uram"], d["dsp"],
                        d["lut_levels"]] for d in res["designs"]]) + [""]
    else:
        out += ["No figures: there was no Yosys report (`build/bench/synth.json`, written by `make "
                "synth`) when the suite ran, and the suite does not synthesize. See "
                "[resources.md](resources.md) for the last committed report.", ""]

    out += ["### Simulation speed", "",
            "Simulated clock cycles per wall-clock second while the runs execute (Verilator with "
            "the cocotb host model, MAC model and record drivers in Python, which dominate), per "
            "batch; \"process\" is the simulator process's whole wall time (start-up, set-up of "
            "each run and the data checks included).", ""]
    table = [[b["name"], b["runs"], f"{b['sim_cycles']:,}", f"{b['simulated_us'] / 1e3:.2f} ms",
              f"{b['process_seconds']:.0f} s", f"{b['cycles_per_second']:,}"]
             for b in results["batches"]]
    sp = results["simulation_speed"]
    table.append(["all", sum(b["runs"] for b in results["batches"]), f"{sp['sim_cycles']:,}",
                  f"{sp.get('simulated_us', sp['sim_cycles'] / CLOCK_MHZ) / 1e3:.2f} ms",
                  f"{sum(b['process_seconds'] for b in results['batches']):.0f} s",
                  f"{sp['cycles_per_second']:,}"])
    out += _table(["batch", "runs", "cycles", "simulated time", "process", "cycles per second"],
                  table) + ["", END]
    return "\n".join(out)


def _responder_markdown(results):
    """The "Responder" section: goodput of the host's WRITEs and SENDs into the endpoint, the
    64 B message rate, the ACK latency, both directions at once, and the fuzz run."""
    rows = results.get("responder", [])
    fuzz = results.get("resp_fuzz", [])
    if not rows and not fuzz:
        return []
    ns = 1e3 / CLOCK_MHZ
    out = ["### Responder", "",
           "The endpoint built with its RC responder (`responder=True`, W = 512, 8 QPs, 2 MiB of "
           "on-chip memory; the responder's region is its lower half), the host NIC model's "
           "requester WRITEing or SENDing into it on one QP, the host's line paced at 100 Gb/s "
           "(`rocegen.sim.cocotb.roce_resp`). Goodput: the payload over the time from the first "
           "request's start on the host's line to the first beat of the endpoint's last ACK, "
           "or to the end of the last request's line time if that is later (the MAC model "
           "hands a frame to the endpoint a beat a cycle from the start of its line time, "
           "faster than a line would) "
           "(1024 messages or 1 MiB per run, whichever is less: the one ACK latency after the "
           "last request, 34 to 140 cycles, weighs under 1 %); "
           "the limit is the same formula as above (the host's requests have the endpoint's "
           "wire format). Every byte is read back through the endpoint's own RDMA WRITEs and "
           "compared; every receive completion is checked.", ""]
    for memory in sorted({r.get("memory", "onchip") for r in rows}):
        good = [r for r in rows if r["test"] == "goodput" and r.get("memory", "onchip") == memory]
        if not good:
            continue
        cols = sorted({(r["opcode"], r["pmtu"]) for r in good},
                      key=lambda c: (c[0] != "WRITE", c[1]))
        cells = {(r["opcode"], r["pmtu"], r["size"]): r for r in good}
        table = []
        for size in sorted({r["size"] for r in good}):
            row = [size_text(size)]
            for op, pmtu in cols:
                r = cells.get((op, pmtu, size))
                row.append(f"{r['goodput_gbps']:.2f} / {r['limit_gbps']:.2f} "
                           f"({r['percent_of_limit']:.1f} %)" if r else "-")
            table.append(row)
        out += [f"**{memory} memory** (Gb/s: measured / limit (% of it))", ""]
        out += _table(["message"] + [f"{op} PMTU {pmtu}" for op, pmtu in cols], table) + [""]
    figs = []
    for r in rows:
        mem = f" ({r['memory']})" if r.get("memory", "onchip") != "onchip" else ""
        if r["test"] == "goodput" and r["size"] == 64 and r["opcode"] == "WRITE":
            figs.append([f"64 B WRITEs, PMTU {r['pmtu']}, message rate{mem}",
                         f"{r['mmsgs']:.2f} M/s = {100 * r['mmsgs'] / r['limit_mmsgs']:.1f} % of "
                         f"the line's {r['limit_mmsgs']:.2f} M/s"])
        elif r["test"] == "latency":
            c = r["latency_cycles"]
            figs.append([f"last beat of a 64 B WRITE in to the first beat of its ACK out{mem}",
                         f"{c['min']}..{c['max']} cycles ({c['min'] * ns:.1f} ns)"])
        elif r["test"] == "bidirectional":
            figs.append([f"both ways on one QP, {size_text(r['size'])} WRITEs{mem}: the traffic "
                         "generator's out, the host's in, each over its own frames' time on "
                         "its line (the other direction's ACKs share it: "
                         f"{r['tx_acks']} of the responder's beside the "
                         f"{r['tx_frames']} frames out)",
                         f"{r['tx_goodput_gbps']:.2f} Gb/s out ({r['tx_percent_of_limit']:.1f} %), "
                         f"{r['rx_goodput_gbps']:.2f} Gb/s in ({r['percent_of_limit']:.1f} %) "
                         f"of the {r['limit_gbps']:.2f} limit each way"])
    if figs:
        out += _table(["figure", "value"], figs) + [""]
    for r in fuzz:
        c = r["counters"]
        verdicts = ", ".join(f"{k[5:]} {c[k]:,}" for k in sorted(c) if k.startswith("resp_"))
        out += [f"Fuzz (`rocegen bench --only resp_fuzz`): {r['frames']:,} hostile frames "
                f"({r['candidates']:,} of them datagrams for UDP port 4791) during {r['rounds']} "
                f"rounds of host traffic on two QPs ({r['good_messages']} messages, all intact); "
                "fuzzed opcodes, lengths, PadCnts, R_Keys, addresses and PSNs to a victim QP set "
                "up again every 100 frames, requests to closed QPs and QP numbers beyond the "
                "table, from other sources and with other P_Keys, truncated and damaged frames. "
                "Every datagram had one verdict and every drop counter matched the model's "
                f"prediction; {r['checked_bytes']:,} bytes of memory outside the victim's region "
                f"read back unchanged. Responder verdicts: {verdicts}.", ""]
    return out



#: the goals the READ figures are reported against (percent of the limit of READ responses)
READ_GOALS = {"responder": 100.0, "requester": 99.0, "loss": 80.0}


def _read_markdown(results):
    """The "RDMA READ" section: the host's READs answered by the endpoint, the endpoint's own
    READs with 1, 4 and 16 outstanding over two round trips and under loss, and the responder's
    latency (batch ``read``)."""
    rows = results.get("read", [])
    if not rows:
        return []
    ns = 1e3 / CLOCK_MHZ
    out = ["### RDMA READ", "",
           "The build of the responder's batch (`responder=True`, which answers READs and issues "
           "them: `reads`, 16 READs outstanding per QP at most), one QP, both lines at 100 Gb/s "
           "(`rocegen.sim.cocotb.roce_resp_runs`, rows `\"kind\": \"read\"`). The limit is the line's "
           "for READ responses: per packet preamble, SFD and gap 20, Ethernet 14, IPv4 20, UDP 8, "
           "BTH 12, AETH 4 on FIRST, LAST and ONLY, payload and pad, ICRC 4, FCS 4 "
           "(`limit_gbps(size, pmtu, opcode=\"READ\")`). The host's READs keep 16 outstanding "
           "(its `max_rd_atomic`); their goodput is the payload over the responses' time on the "
           "endpoint's line, first one's start to last one's end, every byte compared with what "
           "the region holds. The endpoint's READs are work requests on `wr` (opcode READ, 64 KiB "
           "each), at most *outstanding* posted and not completed, in rounds of 1 MiB each read "
           "back through the endpoint's RDMA WRITEs and compared with the host's memory; goodput "
           "is the payload over the responses' time on the host's line, per round (\"to "
           "completion\": over the time from a round's first work request to its last completion, "
           "one round trip more). The bound is *outstanding* x 64 KiB per round trip (the link's; "
           "the host also answers 0.3..1.2 us late), at most the line's limit.", ""]
    resp = [r for r in rows if r["test"] == "responder"]
    if resp:
        pmtus = sorted({r["pmtu"] for r in resp})
        cells = {(r["pmtu"], r["size"]): r for r in resp}
        table = []
        for size in sorted({r["size"] for r in resp}):
            row = [size_text(size)]
            for pmtu in pmtus:
                r = cells.get((pmtu, size))
                row.append(f"{r['goodput_gbps']:.2f} / {r['limit_gbps']:.2f} "
                           f"({r['percent_of_limit']:.1f} %)" if r else "-")
            table.append(row)
        out += ["**The host READs the endpoint** (Gb/s: measured / limit of READ responses (% of "
                f"it); goal: {READ_GOALS['responder']:g} % at PMTU 4096 from 4 KiB)", ""]
        out += _table(["message"] + [f"READ PMTU {p}" for p in pmtus], table) + [""]
        short = sorted({r["size"] for r in resp if r["percent_of_limit"] < 99})
        if short:
            out += [f"Below the limit ({', '.join(size_text(s) for s in short)}): the host keeps "
                    "16 READs outstanding, so at most 16 messages per turn of a READ (its "
                    "request's time on the line, the endpoint's latency below, the host's "
                    "turnaround) leave, fewer than the line could carry at that size.", ""]
    req = [r for r in rows if r["test"] in ("requester", "loss")]
    if req:
        table = []
        for r in sorted(req, key=lambda r: (r["loss"], r["rtt_us"], r["outstanding"],
                                            r["size"])):
            goal = READ_GOALS["loss" if r["loss"] else "requester"]
            aim = (f"{goal:g} %" if r["outstanding"] == 16 and r["rtt_us"] == 2
                   and r["loss"] in (0, 0.01) else "-" if r["loss"] else "bound")
            f = r.get("failed")
            table.append([size_text(r["size"]), r["outstanding"], f"{r['rtt_us']:g} us",
                          f"{100 * r['loss']:g} %",
                          f"failed: {f['status']} after {f['reads_done']} of {r['messages']} "
                          "READs" if f else
                          f"{r['goodput_gbps']:.2f} ({r['percent_of_limit']:.1f} %)",
                          f"{r['bound_gbps']:.2f}" + ("" if f else
                                                       f" ({r['percent_of_bound']:.1f} % of it)"),
                          "-" if f else f"{r.get('goodput_to_completion_gbps', 0):.2f}",
                          f"{r['read_requests'] - r['messages']:,}",
                          f"{r.get('timeouts', 0):,} / {r.get('rewinds', 0):,}",
                          f"{r['lost_to_nic']:,} / {r['lost_from_nic']:,}", aim])
        out += ["**The endpoint READs the host** (PMTU 4096; limit of READ responses "
                + ", ".join(sorted({f"{r['limit_gbps']:.2f} Gb/s at {size_text(r['size'])}"
                                    for r in req})) + ")", ""]
        out += _table(["READ", "outstanding", "round trip", "loss each way", "goodput Gb/s (% of limit)",
                       "bound Gb/s", "to completion Gb/s", "READs reissued", "timeouts / rewinds",
                       "lost to host / to FPGA", "goal"], table) + [""]
        for r in req:
            if r.get("failed"):
                c = r.get("counters", {})
                out += [f"The run of {r['outstanding']} {size_text(r['size'])} READs outstanding at "
                        f"{100 * r['loss']:g} % loss "
                        f"ended when READ {r['failed']['reads_done'] + 1} completed with "
                        f"{r['failed']['status']} (its QP's retries ran out); the endpoint's "
                        "counters over it: " + ", ".join(f"{k} {v:,}" for k, v in sorted(c.items()))
                        + ".", ""]
    for r in rows:
        if r["test"] == "latency":
            c = r["latency_cycles"]
            out += [f"Latency: the last beat of a host's {size_text(r['size'])} READ request in to "
                    f"the first beat of its response out: {c['min']}..{c['max']} cycles "
                    f"({c['min'] * ns:.1f} ns at best).", ""]
    return out


def _atomic_build(row):
    """The build of an atomic row: ``W=512``, ``W=512 AXI4``."""
    return f"W={row['width']}" + (" AXI4" if row.get("memory") == "axi4" else "")


def _atomic_markdown(results):
    """The "RDMA atomics" section: the host's atomics executed by the endpoint's responder, their
    rate on one and 8 QPs and their latency beside the READ's (batches ``atomic`` and
    ``atomic-w64``)."""
    rows = results.get("atomic", [])
    if not rows:
        return []
    request, answer = atomic_frames()
    builds = sorted({_atomic_build(r) for r in rows},
                    key=lambda b: (-int(b.split()[0][2:]), b))
    lines = {w: line for w, line in ATOMIC_BATCHES.values()}
    setups = "; ".join(
        f"{b.replace('=', ' = ')} at {next(r['clock_mhz'] for r in rows if _atomic_build(r) == b):.3f} "
        f"MHz, both lines at {lines.get(int(b.split()[0][2:]), '?')} Gb/s" for b in builds)
    out = ["### RDMA atomics", "",
           "The responder's build with atomics (`atomics=\"little\"`, on-chip memory or, "
           "\"AXI4\", cocotbext-axi's AXI4 RAM, stalling none of its channels; 8 QPs; "
           f"{setups}: at W = 64 the 10G XGMII's clock and line) against the host NIC model's "
           "requester (`rocegen.sim.cocotb.roce_resp_runs`, rows `\"kind\": \"atomic\"`). Each "
           f"host QP keeps {ATOMIC_OUTSTANDING} atomics in flight (its `max_rd_atomic`, the "
           "endpoint's `rd_depth`), posted round robin over the QPs: FETCH_ADD adds 1 to one "
           "counter all the QPs share; COMPARE_SWAP steps each QP's own word from v to v + 1 "
           "(every one finds its compare value and writes). Rate: the ATOMIC_ACKNOWLEDGEs after "
           "the first over the time from the first one's start on the endpoint's line to the "
           f"last one's start. The line's limit is its request frames' ({request} bytes, "
           f"{request + 24} of line time; an ATOMIC_ACKNOWLEDGE is {answer}); \"free\": both "
           "ends take a beat every cycle, and the limit is the host's offered rate (a request "
           f"every {-(-request // 64)} beats at W = 512, {-(-request // 8)} at W = 64). The atomic "
           f"unit executes one atomic every {ATOMIC_UNIT_CYCLES} cycles (its read, arithmetic "
           "and write back; two for a COMPARE_SWAP that does not match). Every run checks every "
           "value returned (the shared counter's values each exactly once, increasing on each "
           "QP; each QP's COMPARE_SWAPs in order), one answer and one request per atomic, and "
           "the targets read back through the endpoint's RDMA WRITE; a run that fails gives no "
           "figure.", ""]
    rate = [r for r in rows if r["test"] == "rate"]
    if rate:
        cells = {(_atomic_build(r), r["qps"], r["line_gbps"], r["opcode"]): r for r in rate}
        table = []
        for w in builds:
            for q, line in sorted({(r["qps"], r["line_gbps"]) for r in rate
                                   if _atomic_build(r) == w},
                                  key=lambda c: (c[1] == 0, c[0])):
                row = [w.replace("=", " = "), q, f"{line}G" if line else "free"]
                for op in ("FETCH_ADD", "COMPARE_SWAP"):
                    r = cells.get((w, q, line, op))
                    row.append(f"{r['mops']:.2f} ({r['percent_of_limit']:.1f} % / "
                               + (f"{r['percent_of_unit']:.1f} %)" if r["unit_mops"] else "-)")
                               if r else "-")
                both = [r for (cw, cq, cl, _), r in cells.items() if (cw, cq, cl) == (w, q, line)]
                unit = both[0]["unit_mops"]
                row += [f"{both[0]['limit_mops']:.2f}", f"{unit:.2f}" if unit else "-",
                        f"{sum(r['messages'] for r in both):,}"]
                table.append(row)
        out += ["**Atomics per second** (millions; in brackets: % of the limit / % of the atomic "
                "unit's rate)", ""]
        out += _table(["build", "QPs", "line", "FETCH_ADD", "COMPARE_SWAP", "limit (line or "
                       "offered)", "atomic unit", "atomics checked"], table) + [""]
    lat = [r for r in rows if r["test"] in ("latency", "read_latency")]
    if lat:
        table = []
        for w in builds:
            mine = [r for r in lat if _atomic_build(r) == w]
            if not mine:
                continue
            clock = mine[0]["clock_mhz"]
            for r in sorted(mine, key=lambda r: (r["test"] != "latency", r["opcode"] != "FETCH_ADD",
                                                 r["size"])):
                c = r["latency_cycles"]
                what = (r["opcode"] if r["test"] == "latency"
                        else f"READ of {size_text(r['size'])} (its first response)")
                table.append([w.replace("=", " = "), what, f"{c['min']}..{c['max']} cycles",
                              f"{c['min'] * 1e3 / clock:.1f} ns", len(c["samples"])])
        out += ["**Latency**: single requests on an idle endpoint, the cycles from the last beat "
                "of the request into the endpoint to the first beat of its answer out "
                "(ATOMIC_ACKNOWLEDGE, or the READ's first response), minimum..maximum over the "
                "samples (the atomics each on the next 8-byte lane of a word).", ""]
        out += _table(["build", "request", "latency", "at best", "samples"], table) + [""]
    return out


#: ConnectX latencies as NVIDIA publishes them: (adapter, figure, where). Like the figures of
#: ``ib_send_lat`` and ``ib_write_lat`` (perftest's latency tests print half of a ping-pong's
#: round trip), they are one-way times between two hosts, their PCIe and software included.
CONNECTX_PUBLISHED = (
    ("ConnectX-6 VPI (InfiniBand)", "sub-600 ns",
     "https://docs.nvidia.com/networking/display/ConnectX6EN/Introduction"),
    ("ConnectX-6 EN (Ethernet)", "sub 0.8 us",
     "ConnectX-6 EN adapter card product brief"),
)
#: the parts of a round trip, in order, by test, and what each is
ROUNDTRIP_PARTS = {
    "send": (("tx", "endpoint: work request to the SEND's first beat"),
             ("out", "the SEND on the line"),
             ("turn", "host: to the echo's start (its ACK first, if it goes first)"),
             ("in", "the echo on the line"),
             ("rx", "endpoint: the echo's end to its receive completion")),
    "write": (("in", "the WRITE on the line"),
              ("resp", "endpoint: the WRITE's end to its ACK's first beat"),
              ("out", "the ACK on the line")),
    "read": (("in", "the READ request on the line"),
             ("resp", "endpoint: the request's end to the first beat of its response"),
             ("out", "the responses on the line")),
}
#: the round trips' names, by test
ROUNDTRIP_NAMES = {"send": "SEND ping-pong", "write": "WRITE to ACK", "read": "READ"}


#: the latency goals: (figure, what, goal in cycles or, for the message rate, % of the line)
GOALS = (
    ("wr_to_wire", "work request accepted to its first beat on the MAC (64 B WRITE)", 16),
    ("ack_to_cpl", "last beat of an ACK in to its completion out", 12),
    ("write_ack", "responder: last beat of a 64 B WRITE in to the first beat of its ACK out", 16),
    ("read_resp", "READ responder: last beat of a 64 B READ request in to the first beat of its "
                  "response", 24),
    ("cm", "connection manager (UDP 17185): OPEN_QP in to the reply out", 24),
    ("rate_64b", "one QP of 64 B WRITEs against the ConnectX-like peer, % of the line", 95),
)


def _goal_figures(results):
    """The figures of :data:`GOALS` by build (``W = 512``, ``W = 512 AXI4``, ``W = 64``): the
    least cycles over the samples (the message rate: % of the line's limit)."""
    out = {}

    def put(row, key, value):
        build = out.setdefault(_build_label({"width": row.get("width", 512),
                                                 "memory": row.get("memory", "onchip")}), {})
        build[key] = value
        # (rows written before rows named their build: the main build's clock)
        build["clock"] = row.get("clock_mhz", CLOCK_MHZ)
    for r in results.get("latency", []):
        if r["size"] == 64:
            put(r, "wr_to_wire", r["wr_to_wire_cycles"]["min"])
            put(r, "ack_to_cpl", r["ack_to_cpl_cycles"]["min"])
    for r in results.get("cm", []):
        put(r, "cm", r["cm_cycles"]["min"])
    for r in results.get("roundtrip", []):
        if r["size"] == 64 and "latency_cycles" in r:
            put(r, {"write": "write_ack", "read": "read_resp"}[r["test"]],
                r["latency_cycles"]["min"])
    for r in results.get("message_rate", []):
        if r["qps"] == 1 and r["size"] == 64 and r["line_gbps"]:
            put(r, "rate_64b", 100 * r["mmsgs"] / r["limit_mmsgs"])
    return out


def _goals_markdown(results):
    """The "Latency goals" section: each goal beside its figure in every build measured."""
    figs = _goal_figures(results)
    if not figs:
        return []
    builds = sorted(figs, key=lambda b: (-int(b.split()[2]), b))
    rows = []
    for key, what, goal in GOALS:
        row = [what]
        for b in builds:
            v = figs[b].get(key)
            if v is None:
                row.append("-")
            elif key == "rate_64b":
                row.append(f"{v:.1f} %")
            else:
                row.append(f"{v:g} ({v * 1e3 / figs[b]['clock']:.0f} ns)")
        row.append(f"{goal} %" if key == "rate_64b" else str(goal))
        rows.append(row)
    return ["### Latency goals", "",
            "The endpoint's own latencies (single requests on an idle endpoint, the least cycles "
            "over the samples; from the latency, round-trip and message-rate rows above) beside "
            "the goals they are to reach. The message rate at W = 64 is on its 10 Gb/s line; "
            "with AXI4 the payloads come from the AXI4 memory through the user port (on chip: "
            "the traffic generator). A \"-\": not measured in that build.", ""] + \
        _table(["path", *builds, "goal"], rows) + [""]


def _build_label(row):
    """The build of a row as the round-trip and goal tables name it: ``W = 512``,
    ``W = 512 AXI4``."""
    return _atomic_build(row).replace("=", " = ")


def _roundtrip_markdown(results):
    """The "Round trips" section: the endpoint's SEND echoed by the host NIC model and the
    host's WRITE to its ACK, with no software in either, beside ConnectX's published
    latencies (batches ``roundtrip``, ``roundtrip-axi4``, ``roundtrip-w64``)."""
    rows = results.get("roundtrip", [])
    if not rows:
        return []
    lines = {(w, m): line for w, line, m in ROUNDTRIP_BATCHES.values()}
    builds = sorted({_build_label(r) for r in rows}, key=lambda b: (-int(b.split()[2]), b))
    out = ["### Round trips", "",
           "Round trips with no software in them, on an idle endpoint (the responder's build, "
           "8 QPs; one QP, PMTU 4096; "
           + "; ".join(f"{b} at {r['clock_mhz']:.3f} MHz, both lines at "
                       f"{lines.get((r['width'], r['memory']), '?')} Gb/s"
                       for b in builds for r in [next(x for x in rows
                                                       if _build_label(x) == b)])
           + "; `rocegen.sim.cocotb.roce_roundtrip`, rows `\"kind\": \"roundtrip\"`):",
           "",
           "- **SEND ping-pong**: the endpoint SENDs from its memory; the host NIC model SENDs "
           "the bytes back as soon as it has the SEND whole (the end of its line time); from "
           "the clock edge that takes the endpoint's work request to the receive completion of "
           "the echo.",
           "- **host WRITE to its ACK**: from the start of the host's RDMA WRITE on its line to "
           "the end of the endpoint's ACK on the line.",
           "- **host READ**: from the start of the host's RDMA READ request on its line to the "
           "end of the endpoint's last response on the line.",
           "",
           "Every sample compares the bytes (both ways for the SEND). The host model answers in "
           "no time and the link has no length: these are the endpoint's share of a round trip "
           "and the frames' time on the line, not two NICs' and their hosts'. One reservation "
           "for the frames into the endpoint at W = 512: the MAC model hands a frame over a beat "
           "a cycle from the start of its time on the line (64 bytes a cycle, where 100 Gb/s "
           "brings 38.8), so a long frame is in before its line time ends, and the endpoint's "
           "part after it starts early: a 4 KiB WRITE's comes out negative. The endpoint's own "
           "time from a request's last beat in to its answer's first beat out does not depend "
           "on the size (the responder's latency rows).", ""]
    table = []
    for b in builds:
        for test in ROUNDTRIP_PARTS:
            for r in sorted((r for r in rows if _build_label(r) == b and r["test"] == test),
                            key=lambda r: r["size"]):
                c = r["rtt_cycles"]
                ns = 1e3 / r["clock_mhz"]
                parts = " + ".join(f"{r['parts_cycles'][k]:g}"
                                   for k, _ in ROUNDTRIP_PARTS[test] if k in r["parts_cycles"])
                table.append([b, ROUNDTRIP_NAMES[test],
                              size_text(r["size"]), f"{c['min']:g}..{c['max']:g} cycles",
                              f"{c['min'] * ns:.1f} ns", f"{c['min'] * ns / 2:.1f} ns", parts,
                              len(c["samples"])])
    out += _table(["build", "round trip", "payload", "round trip", "at best", "half",
                   "parts (medians, cycles)", "samples"], table) + [""]
    for test, name in ROUNDTRIP_NAMES.items():
        out.append(f"Parts of a {name}: " + "; ".join(f"{what}" for _, what in
                                                      ROUNDTRIP_PARTS[test]) + ".")
    out += ["", "ConnectX latencies as NVIDIA publishes them (one way between two hosts, PCIe "
            "and software included, as `ib_send_lat` and `ib_write_lat` print half a "
            "ping-pong's round trip):", ""]
    out += _table(["adapter", "latency", "source"],
                  [list(x) for x in CONNECTX_PUBLISHED]) + [""]
    return out


def _incast_markdown(results):
    """The "Incast" section: the closed-loop incast model's runs (batch ``incast``)."""
    from rocegen.sim.apps import incast
    from rocegen.sim.models.cc.dcqcn import rate_gbps
    rows = results.get("incast", [])
    if not rows:
        return []
    batch = next((b for b in results.get("model_batches", []) if b["name"] == rows[0]["batch"]),
                 {})
    p = rows[0]["parameters"]
    d, clk = p["params"], p["clk_hz"]
    us = 1e6 / clk

    def mbps(units):
        return f"{rate_gbps(units, clk) * 1e3:.0f} Mb/s"
    when = (f", revision `{_short(batch['revision'])}`, {batch['date']}, "
            f"{batch['process_seconds']:.0f} s for {batch['runs']} runs" if batch else "")
    out = ["### Incast: DCQCN, ECN and PFC", ""]
    for (dcqcn, pfc), name in incast.PLOTTED.items():
        if any(r["parameters"]["dcqcn"] == dcqcn and r["parameters"]["pfc"] == pfc
               and "series" in r for r in rows):
            out += [f"![incast, DCQCN {'on' if dcqcn else 'off'}, PFC {'on' if pfc else 'off'}]"
                    f"(img/{name})", ""]
    if len(out) > 2:
        out += ["Above, each flow's rate delivered to the host (solid; with DCQCN its rate RC "
                "at the limiter, dotted) and the deepest egress queue per window: on the left "
                "the incast's first microseconds window by window, on the right the whole run.",
                ""]
    out += [f"Not the endpoint in Verilator: the Python model behind `rocegen sim incast` "
            f"(`sim/models/fabric/incast.py`; batch `{rows[0]['batch']}`{when}), event by event. "
            f"{p['senders']} senders (FPGA endpoints, one RC QP each, each on its own "
            f"{p['line_gbps']:g} Gb/s line) send RDMA WRITE packets of {p['pmtu']} bytes "
            f"({rows[0]['frame_bytes']}-byte frames, DSCP 26, ECT(0)) through the switch model "
            f"(`sim/models/fabric/switch.py`) into one {p['line_gbps']:g}G port towards the host NIC, "
            f"for {p['us'] / 1e3:g} ms; \"converged\" figures are taken from "
            f"{p['settle_us'] / 1e3:g} ms on. Each sender paces itself as the gateware does: the "
            f"DCQCN rate law of each QP (`DcqcnRp`, the DCQCN paper's parameters: g = "
            f"1/{1 << d['g_log2']}, K = {d['alpha_period'] * us:.0f} us, T = "
            f"{d['rate_period'] * us:.0f} us, B = {d['byte_count'] / MIB:g} MiB, F = "
            f"{d['fast_steps']}, R_AI = {mbps(d['r_ai'])}, R_HAI = {mbps(d['r_hai'])}, minimum "
            f"{mbps(d['min_rate'])}) through the rate limiter's byte-accurate token bucket "
            f"(burst {p['burst']:,} bytes), a new rate in force {p['rate_latency_cycles']} cycles "
            f"after its cause. Switch: {p['buffer']:,} bytes of shared buffer, ECN marking "
            f"between Kmin = {p['kmin']:,} and Kmax = {p['kmax']:,} bytes with Pmax = "
            f"{100 * p['pmax']:g} % (the DCQCN paper's), with PFC XOFF above {p['xoff']:,} and XON "
            f"at {p['xon']:,} bytes per sender, headroom for {p['cable_ns']:g} ns cables. Host: "
            f"a CNP (DSCP 48) per CE-marked frame, at most one per QP every "
            f"{p['cnp_interval_ns'] / 1e3:.3g} us. DCQCN off: line rate, CNPs ignored. Link "
            "utilization: the egress line's busy time; flows: line bytes delivered (so they add "
            "up to the utilization); Jain's index (sum x)^2 / (n sum x^2) of the flows; paused: "
            "the share of the senders' time under a PFC pause.", ""]
    table = []
    for r in rows:
        q = r["parameters"]
        table.append([
            "on" if q["dcqcn"] else "off", "on" if q["pfc"] else "off",
            f"{100 * r['utilization']:.2f} % / {100 * r['utilization_converged']:.2f} %",
            f"{r['jain_fairness']:.4f}",
            " / ".join(f"{x:.1f}" for x in r["throughput_gbps"]),
            f"{r['max_queue_bytes'] / 1e3:,.0f} KB / {r['max_queue_converged_bytes'] / 1e3:,.0f} KB",
            f"{r['drops'] + r['headroom_drops']:,}",
            f"{r['xoff_sent']:,} / {r['xon_sent']:,}",
            f"{100 * r['paused_fraction']:.2f} %",
            f"{r['ce_marks']:,}", f"{r['cnps_sent']:,}"])
    out += _table(["DCQCN", "PFC", "utilization (run / converged)", "Jain (converged)",
                   "flows, converged (Gb/s)", "deepest queue (run / converged)", "drops",
                   "XOFF / XON", "paused", "CE marks", "CNPs"], table) + [""]
    notes = []
    for r in rows:
        q, s = r["parameters"], r.get("series")
        if q["dcqcn"] and q["pfc"] and s:
            fair = q["line_gbps"] / q["senders"]
            lowest = max(r["min_rate_gbps"])
            reach = next((t for i, t in enumerate(s["t_us"])
                          if all(x[i] >= 0.9 * fair for x in s["dcqcn_rate_gbps"])), None)
            notes.append(
                f"With DCQCN and PFC the incast's first microseconds fill the queue to "
                f"{r['max_queue_bytes'] / 1e3:,.0f} KB (Kmax {q['kmax'] / 1e3:,.0f} KB) before "
                f"the first CNPs arrive; the marks go on while it drains and each sender gets a "
                f"CNP per interval until it has cut its rate to {lowest:.1f} Gb/s or less; from "
                f"there the published parameters' additive increase ({mbps(d['r_ai'])} per "
                f"{d['rate_period'] * us:.0f} us, the byte counter too slow to help) "
                + (f"brings every sender back to 90 % of the fair share ({fair:g} Gb/s) at "
                   f"{reach / 1e3:.1f} ms; after that the rates stay near the fair share and "
                   f"the queue under {r['max_queue_converged_bytes'] / 1e3:,.0f} KB once "
                   "converged (the plot). The simulated time and "
                   "the settle time were chosen for that; the law and its parameters are the "
                   "gateware's defaults." if reach else
                   f"has not brought every sender back to 90 % of the fair share ({fair:g} Gb/s) "
                   "within the run."))
        if not q["dcqcn"] and not q["pfc"] and r["jain_fairness"] < 0.5:
            notes.append(
                "Without DCQCN and PFC the queue stays at the buffer's size and what does not fit "
                "is dropped. Which sender's frame finds room depends on the order of arrival: the "
                "model's senders run in lockstep (same start, same frame size, one clock), so "
                "the same sender's frame comes first after every departure and takes the room "
                "freed each time (tail drop's lock-out); real senders' clocks differ by some "
                "ppm and would move the advantage around.")
    for n in notes:
        out += [n, ""]
    return out

def _replace(text, begin, end, block, where):
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        return text[:a] + block + text[b:]
    return where(text, block)


def write_docs(results, root):
    """Regenerate the suite's section of ``docs/performance.md``, its plots and the README's
    headline table; returns the files written."""
    root = Path(root)
    written = plots(results, root / "docs" / IMG)
    perf = root / "docs" / "performance.md"

    def append(text, block):
        return text.rstrip("\n") + "\n\n" + block + "\n"
    perf.write_text(_replace(perf.read_text(), BEGIN, END, markdown(results), append))
    written.append(perf)
    readme = root / "README.md"

    def before_numbers(text, block):
        key = "## Numbers\n"
        if key not in text:
            return append(text, block)
        i = text.index(key) + len(key)
        return text[:i] + "\n" + block + "\n" + text[i:]
    readme.write_text(_replace(readme.read_text(), H_BEGIN, H_END, headline_markdown(results),
                               before_numbers))
    written.append(readme)
    return written
