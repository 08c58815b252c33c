"""The story ``rocegen sim rxe`` plays inside its guest: the host agent (``rocegen-host``, on
pyverbs over the soft-RoCE device ``rxe0``) against the simulated FPGA, every byte checked.

Run by the guest's job as ``python3 /mnt/src/sim/apps/rxe_story.py /mnt/out/job.json``, with only
the guest's Python and ``rocegen.host`` / ``rocegen.wire`` (no other part of the project) at hand.
The job (JSON, written by :mod:`rocegen.sim.apps.rxe`) gives ``fpga_ip``, ``qps``, ``pmtu``,
``count``, ``size``, ``connect`` (extra options of ``rocegen-host connect``) and ``steps`` (the
names of :data:`STEPS` to play, in order).

Every step is one or two ``rocegen-host`` commands with ``--json``; what each printed, its exit
status and wall time, and rxe's counters after it (``rdma statistic`` of ``rxe0/1``; the sysfs
``hw_counters``) go to ``/mnt/out/story.json``, rewritten after every step so a run stopped
half-way still tells how far it came. A step fails on a non-zero exit status or on any byte
found wrong; the story goes on with the next step unless the agent is gone.

The ``cm:`` steps run librdmacm's tools (cmtime, rping, rdma_client, rdma_server) against the
FPGA's IB CM and judge them with the FPGA's counters and ``qp_open`` (the QPs its connection
managers hold) from the status file; they talk to the simulation through files beside it:
``serve.json.connect`` (the FPGA connects to a port of the guest, ``cm:rdma_server``) and
``serve.json.cut`` (the link cut both ways while it exists, ``cm:vanish``; only the DREQs to
the FPGA dropped while it says ``dreq``, ``cm:quiet``). The job's ``loops`` gives ``cm:loop``'s
rounds. Without the host agent, each of these steps begins once every QP of the FPGA is free
(a connection a host left without its DREQ reaching the FPGA is closed by the FPGA once quiet),
so that its counters are its own.
"""

import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

OUT = Path("/mnt/out")
HOST = ["rocegen-host"]
#: The steps a job may name: ``fpga:OP`` (the FPGA's traffic generator, checked by the host or,
#: for READ, by the FPGA's pattern sink; FETCH_ADD/COMPARE_SWAP, its atomics on a counter in
#: rxe's memory, ``rocegen-host atomic --direction fpga-to-host``: one run per QP in turn,
#: checked by the host against a model, the originals READ back from the FPGA), ``host:OP`` (the
#: host's own WRITE/SEND/READ into the FPGA, checked by the FPGA's sink or, for READ, by the
#: host; FETCH_ADD/COMPARE_SWAP, the contended counter of ``rocegen-host atomic`` on every QP at
#: once, checked by the host), ``connect``, ``close``, ``stop``; with the FPGA's IB CM
#: (``rdma_cm_port``), ``cm:connect`` (the agent's QPs opened through librdmacm, ``connect
#: --rdma-cm``), ``cm:cmtime`` (librdmacm's own ``cmtime``: ``qps`` connections made and torn
#: down at once), ``cm:rping`` (librdmacm's ``rping -c`` against the FPGA's rping server),
#: ``cm:rdma_client`` (librdmacm's ``rdma_client`` example against the FPGA's SEND echo) and
#: ``cm:rdma_server`` (librdmacm's ``rdma_server`` example in the guest, the FPGA connecting to
#: it: the FPGA's active side against Linux's CM), ``cm:vanish`` (rping's host vanishes: the
#: link cut under a busy connection, the FPGA's DREQs unanswered, its time-wait, the QP back,
#: rping again), ``cm:quiet`` (rping's one DREQ lost: the FPGA closes the connection once
#: quiet, ``--service-idle``), ``cm:loop`` (``cmtime`` on every QP of the FPGA, ``loops`` times,
#: every QP back after each) and ``cm:mixed`` (with the agent's QPs of UDP 17185 open: rping through
#: the IB CM on another QP while the agent WRITEs, both checked).
STEPS = ("connect", "fpga:WRITE", "fpga:WRITE_IMM", "fpga:SEND", "fpga:SEND_IMM", "fpga:READ",
         "fpga:FETCH_ADD", "fpga:COMPARE_SWAP", "host:WRITE", "host:WRITE_IMM", "host:SEND",
         "host:SEND_IMM", "host:READ", "host:FETCH_ADD", "host:COMPARE_SWAP", "close", "stop",
         "cm:connect", "cm:cmtime", "cm:rping", "cm:rdma_client", "cm:rdma_server",
         "cm:rping_server",
         "cm:vanish", "cm:quiet", "cm:loop", "cm:mixed")
#: The steps that start the host agent, and those that need none.
STARTS = ("connect", "cm:connect")
STANDALONE = ("cm:cmtime", "cm:rping", "cm:rdma_client", "cm:rdma_server", "cm:vanish",
              "cm:quiet", "cm:loop", "cm:rping_server")
#: The FPGA's rping server's port (rping's own default) and what ``cm:rping`` runs against it.
RPING_PORT = 7174
RPING_ARGS = ("-C", "10", "-S", "4096", "-V", "-v")
#: The FPGA's SEND echo's port (``rdma_client``'s own default).
ECHO_PORT = 7471
#: The port ``rdma_server`` listens on in the guest for the FPGA's connection.
SERVER_PORT = 7472
#: ``cm:rping_server``: the FPGA's rping client (built with ``--rping-client`` of the guest's
#: rping port, rping's own default) runs CLIENT_COUNT pings of CLIENT_SIZE bytes against
#: ``rping -s`` in the guest (whose buffer, ``-S``, must hold them)
CLIENT_PORT, CLIENT_SIZE, CLIENT_COUNT = 7174, 3000, 10
RPING_SERVER_ARGS = ("-S", "4096", "-v")
#: cmtime's steps (its table's rows)
CMTIME_STEPS = ("create id", "resolve addr", "resolve route", "create qp", "connect",
                "disconnect", "destroy")
#: How long (wall seconds) the story waits for the FPGA's side of a ``cm:`` step: its QPs
#: back after a time-wait, its retries and DREQs run out behind a cut link.
FPGA_WAIT = 300
#: ``rping`` with its output line by line (it is stopped, not ended, in ``cm:vanish`` and
#: ``cm:mixed``: nothing it printed may stay in its buffer).
RPING = ("stdbuf", "-oL", "rping")
#: The FPGA's connects asked for (``cm:rdma_server``): their numbers, in the connect file.
_CONNECTS = itertools.count(1)
#: The host's atomic steps' ops (``rocegen-host atomic --op``).
ATOMICS = ("FETCH_ADD", "COMPARE_SWAP")


def rxe_counters():
    """rxe's counters: ``rdma statistic`` of rxe0 port 1 and the sysfs hw_counters."""
    counters = {}
    hw = Path("/sys/class/infiniband/rxe0/ports/1/hw_counters")
    if hw.is_dir():
        for f in sorted(hw.iterdir()):
            try:
                counters[f.name] = int(f.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    r = subprocess.run(["rdma", "-j", "statistic", "show", "link", "rxe0/1"],
                       capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        try:
            for entry in json.loads(r.stdout):
                for k, v in entry.items():
                    if isinstance(v, int):
                        counters.setdefault(k, v)
        except ValueError:
            pass
    return counters


def fpga_status(after):
    """The simulated FPGA's status (``rocegen sim serve``'s file, in the run folder) once it was
    rewritten after the wall-clock time ``after`` (it is, about once a second), else the last."""
    path = OUT / "serve.json"
    end = time.time() + 5
    while True:
        try:
            st = path.stat()
            if st.st_mtime > after + 1.1 or time.time() > end:
                return json.loads(path.read_text())
        except (OSError, ValueError):
            if time.time() > end:
                return {}
        time.sleep(0.2)


def counters_moved(before, after):
    """The FPGA's statistics counters that changed between two readings, ``name=+delta``
    (modulo 2^32), in the order of ``after``: a failed step's account of what the FPGA saw."""
    moved = ((k, (v - before.get(k, 0)) % (1 << 32)) for k, v in after.items()
             if isinstance(v, int))
    return " ".join(f"{k}=+{d}" for k, d in moved if d) or "none"


def host(*args):
    t = time.monotonic()
    r = subprocess.run([*HOST, *args], capture_output=True, text=True)
    out = r.stdout.strip().splitlines()
    try:
        parsed = json.loads(out[-1]) if out else None
    except ValueError:
        parsed = None
    return {"cmd": ["rocegen-host", *args], "rc": r.returncode, "wall_s": time.monotonic() - t,
            "json": parsed, "stderr": r.stderr[-2000:]}


def tally(cmd, by, checked, wrong, messages):
    """Note on a command who checked its bytes (``"host"``: the agent, against the test
    pattern; ``"fpga"``: the FPGA's pattern sink), how many and how many were wrong."""
    cmd.update(checked_by=by, checked=checked or 0, wrong=wrong or 0, messages=messages)


def play(job, name):
    count, size = str(job["count"]), job["size"]
    if name == "connect":
        r = host("connect", "--device", "rxe0", "--fpga", job["fpga_ip"], "--qps", str(job["qps"]),
                 "--pmtu", str(job["pmtu"]), *job.get("connect", []), "--json")
        r["ok"] = r["rc"] == 0 and isinstance(r["json"], list) and len(r["json"]) == job["qps"]
        return [r]
    if name == "cm:connect":
        r = host("connect", "--device", "rxe0", "--fpga", job["fpga_ip"], "--qps", str(job["qps"]),
                 "--rdma-cm", "--rdma-cm-port", str(job["rdma_cm_port"]),
                 *job.get("cm_connect", []), "--json")
        r["ok"] = r["rc"] == 0 and isinstance(r["json"], list) and len(r["json"]) == job["qps"]
        return [r]
    if name == "cm:cmtime":
        return [cmtime(job)]
    if name == "cm:rping":
        return [rping(job)]
    if name == "cm:rdma_client":
        return [rdma_client(job)]
    if name == "cm:rdma_server":
        return [rdma_server(job)]
    if name == "cm:rping_server":
        return [rping_server(job)]
    if name == "cm:vanish":
        return [vanish(job)]
    if name == "cm:quiet":
        return [quiet(job)]
    if name == "cm:loop":
        return [loop(job)]
    if name == "cm:mixed":
        return mixed(job)
    if name in ("close", "stop"):
        r = host(name, *(["--json"] if name == "close" else []))
        r["ok"] = r["rc"] == 0
        return [r]
    who, op = name.split(":")
    if who == "fpga" and op in ATOMICS:
        return [fpga_atomic(job, op)]
    if who == "fpga":
        start = host("traffic", "--op", op, "--count", count, "--size", str(size), "--json")
        start["ok"] = start["rc"] == 0
        if not start["ok"]:
            return [start]
        r = host("recv", "--no-progress", "--json")
        rows = [x for x in (r["json"] or {}).get("result") or [] if "op" in x]
        messages = sum(x["verified"] for x in rows)
        if op == "READ":        # the FPGA's sink checked what it read
            tally(r, "fpga", sum(x["checked"] or 0 for x in rows),
                  sum(x["wrong"] or 0 for x in rows), messages)
        else:                   # the agent checked every message against the pattern
            tally(r, "host", sum(x["bytes"] for x in rows), sum(x["bad"] for x in rows) * size,
                  messages)
        r["ok"] = r["rc"] == 0 and bool(rows) and all(x.get("ok") for x in rows) and \
            r["wrong"] == 0 and r["checked"] == job["count"] * job["size"] * job["qps"]
        return [start, r]
    if op in ATOMICS:
        return [atomic(job, op)]
    verb = {"WRITE": "write", "WRITE_IMM": "write", "SEND": "send", "SEND_IMM": "send",
            "READ": "read"}[op]
    r = host(verb, "--count", count, "--size", str(size), *(["--imm"] if op.endswith("_IMM") else []),
             "--json")
    res = r["json"] or {}
    tally(r, "host" if op == "READ" else "fpga", res.get("checked"), res.get("wrong"),
          sum(q.get("messages", 0) for q in res.get("qps", [])))
    r["ok"] = r["rc"] == 0 and bool(res.get("ok")) and r["wrong"] == 0 and \
        r["checked"] == job["count"] * job["size"] * job["qps"]
    return [r]


def fpga_moved(status, before, names):
    """How far each FPGA counter of ``names`` moved from ``before`` (counters) to ``status``
    (the status file's)."""
    return {n: status.get("stats", {}).get(n, 0) - before.get(n, 0) for n in names}


def fpga_count(name, base, want, wait=30.0):
    """FPGA counter ``name`` less ``base`` once it reached ``want`` in the status file's
    counters (read about once a second, so a while after the fact), or after ``wait`` seconds
    whatever it is then."""
    end = time.time() + wait
    while True:
        now = time.time()
        got = fpga_status(now).get("stats", {}).get(name, 0) - base
        if got >= want or now > end:
            return got


def fpga_wait(ok, wait=FPGA_WAIT):
    """The FPGA's status once ``ok(status)`` holds (each rewrite looked at), or after ``wait``
    seconds the last one; and whether ``ok`` held."""
    end = time.time() + wait
    while True:
        st = fpga_status(time.time())
        if ok(st) or time.time() > end:
            return st, bool(ok(st))


def fpga_settled(wait=30):
    """The FPGA's status once its counters (``stats``, read beside the simulation about once a
    second) were read after everything up to now: so the step's counters hold all it did,
    rdma_server's reply to the pattern sink included (its bytes are not the test pattern:
    they must not fall into the next step)."""
    now = fpga_status(time.time()).get("cycles", 0)
    return fpga_wait(lambda st: (st.get("stats_at") or 0) >= now, wait)[0]


def qps_free(st):
    """Whether the FPGA's status shows every QP free (``qp_open`` 0: none held by either
    connection manager, none in time-wait)."""
    return st.get("qp_open") == 0


def start_tool(cmd):
    """Starts the librdmacm tool ``cmd`` in the background, its output into a file (a pipe
    nobody reads while it runs would stop it once full: ``rping -v`` prints each ping)."""
    out = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    proc.output = out
    return proc


def stop_tool(proc):
    """Stops a tool of :func:`start_tool` still running (SIGINT, then SIGKILL): its status and
    output."""
    if proc.poll() is None:
        proc.send_signal(2)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.output.seek(0)
    out = proc.output.read()
    proc.output.close()
    return proc.returncode, out


def run_tool(cmd):
    """Runs the librdmacm tool ``cmd`` (at most 600 s): the FPGA's counters before it, its
    status, output and error output, the seconds it took."""
    before = fpga_status(time.time() + 1).get("stats", {})
    t = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = -1, e.stdout or "", f"{cmd[0]} did not finish in 600 s"
    out = out if isinstance(out, str) else out.decode(errors="replace")
    return before, rc, out, err, time.monotonic() - t


#: cmtime's "min us" of a step that no connection timed: its starting value, 999999999 as a
#: C float (``show_perf``).
CMTIME_UNTIMED = 1e9


def cmtime_table(out):
    """cmtime's table in ``out``: each step of :data:`CMTIME_STEPS` it printed, with its four
    figures (total ms, max ms, min us, us per connection). cmtime prints each in ``%11.2f``, so
    a figure of more than 11 characters runs into the one before it (``0.001000000000.00``);
    each figure has two decimals, which is what splits them. A step no connection timed has
    its min as None (cmtime prints its starting value)."""
    table = {}
    for line in out.splitlines():
        name, sep, figures = line.partition(":")
        if sep and name.strip() in CMTIME_STEPS:
            row = [float(x) for x in re.findall(r"-?\d+\.\d\d", figures)]
            if len(row) == 4 and row[2] >= CMTIME_UNTIMED:
                row[2] = None
            table[name.strip()] = row
    return table


def cmtime(job):
    """``cm:cmtime``: librdmacm's ``cmtime`` connects ``qps`` QPs to the FPGA's port at once and
    disconnects them; its table (per step: total ms, max ms, min us, us per connection) in
    ``json``. Passes when it ends well, every step of its table is there, and the FPGA took
    each connection and gave its QP back: ``qps`` time-waits ended and every QP free again.
    The FPGA's ``ibcm_established`` is reported beside (``qps`` at most): on a lossy link a
    connection whose RTU was lost and that cmtime closed at once (its DREQ comes while the REP
    is still unanswered) goes to time-wait without being counted established, as with
    Linux's CM."""
    cmd = ["cmtime", "-s", job["fpga_ip"], "-p", str(job["rdma_cm_port"]), "-c",
           str(job["qps"])]
    before, rc, out, err, secs = run_tool(cmd)
    table = cmtime_table(out)
    ended = fpga_count("ibcm_timewait_exits", before.get("ibcm_timewait_exits", 0), job["qps"])
    end, free = fpga_wait(qps_free)
    made = end.get("stats", {}).get("ibcm_established", 0) - before.get("ibcm_established", 0)
    return {"cmd": cmd, "rc": rc, "wall_s": secs, "json": {
            "table": table, "fpga_established": made, "fpga_timewait_exits": ended,
            "free_after": free}, "stderr": (err + out)[-2000:],
            "ok": rc == 0 and set(table) == set(CMTIME_STEPS) and ended == job["qps"] and
            0 <= made <= job["qps"] and free}


def rping(job, count=None):
    """``cm:rping``: ``rping -c -a FPGA -p 7174 -C 10 -S 4096 -V -v`` against the FPGA's rping
    server (each ping's bytes READ by the FPGA, WRITten back and compared by rping: ``-V``);
    ``count`` pings instead of 10 when given. Passes when rping ends well, printed each ping's
    data, and the FPGA counted the pings."""
    args = list(RPING_ARGS)
    if count is not None:
        args[args.index("-C") + 1] = str(count)
    count = int(args[args.index("-C") + 1])
    cmd = ["rping", "-c", "-a", job["fpga_ip"], "-p", str(RPING_PORT), *args]
    before, rc, out, err, secs = run_tool(cmd)
    pings = sum(line.startswith("ping data: ") for line in out.splitlines())
    done = fpga_count("rping_pings", before.get("rping_pings", 0), count)
    return {"cmd": cmd, "rc": rc, "wall_s": secs, "json": {
            "pings": pings, "fpga_pings": done, "output": out[:300] + out[-300:]},
            "stderr": (err + out)[-2000:],
            "ok": rc == 0 and pings == count and done == count}


def vanish(job):
    """``cm:vanish``: a host that vanishes under a busy connection of the FPGA's IB CM.
    ``rping -c -C 0`` (for ever) against the FPGA's rping server; once the FPGA counted two
    pings (rping has then checked one at least: it starts a ping once it has checked the one
    before; the second's check may need frames the cut drops), the link is cut both ways (the file
    ``serve.json.cut``: the simulation drops every frame from the FPGA's next request on,
    :class:`rocegen.sim.cocotb.serve.Cut`). The FPGA's request goes unanswered, its QP's retries
    run out, its IB CM sends the DREQ and sends it again as the REQ's max CM retries allow,
    unanswered, then the time-wait, then the QP is free (``qp_open`` as before the step). Then
    the cut is lifted, rping (waiting for ever, or ended in error by rxe's own retries: neither
    is the step's failure) is stopped, and ``rping -C 2`` connects again. Passes when the FPGA
    counted a DREQ timeout, a disconnect it began and a time-wait ended, every QP came back
    while the link was cut, and the second rping ended well with its two pings checked (by
    rping, ``-V``, and counted by the FPGA)."""
    cut = OUT / "serve.json.cut"
    cut.unlink(missing_ok=True)
    start = fpga_status(time.time() + 1)
    before, held = start.get("stats", {}), start.get("qp_open")
    t = time.monotonic()
    cmd = [*RPING, "-c", "-a", job["fpga_ip"], "-p", str(RPING_PORT), "-C", "0", "-S", "4096",
           "-V", "-v"]
    proc = start_tool(cmd)
    base = before.get("rping_pings", 0)
    at_cut, busy = fpga_wait(lambda st: st.get("stats", {}).get("rping_pings", 0) - base >= 2 or
                             proc.poll() is not None, 120)
    busy = busy and proc.poll() is None
    cut.write_text("the host is gone\n")
    names = ("ibcm_dreq_timeouts", "ibcm_disconnects", "ibcm_timewait_exits",
             "ibcm_retransmits", "roce_timeouts", "rping_pings")

    def delta(st):
        return fpga_moved(st, before, names)

    def gone(st):
        d = delta(st)
        return (st.get("cut") or {}).get("active") == 1 and d["ibcm_dreq_timeouts"] >= 1 and \
            d["ibcm_timewait_exits"] >= 1 and st.get("qp_open") == held

    during, back = fpga_wait(gone) if busy else (fpga_status(time.time()), False)
    cut_secs = time.monotonic() - t
    cut.unlink(missing_ok=True)
    lifted, _ = fpga_wait(lambda st: not (st.get("cut") or {}).get("active"), 30)
    rc, out = stop_tool(proc)
    again = rping(job, count=2)
    gave = delta(during)
    return {"cmd": cmd, "rc": again["rc"], "wall_s": time.monotonic() - t, "json": {
            "pings_before_cut": sum(x.startswith("ping data: ") for x in out.splitlines()),
            "fpga_pings_before_cut": at_cut.get("stats", {}).get("rping_pings", 0) - base,
            "busy": busy, "first_rc": rc, "first_output": out[-300:], "fpga": gave,
            "cut": during.get("cut"), "qp_open_cut": during.get("qp_open"),
            "cut_s": round(cut_secs, 1), "lifted": lifted.get("cut"),
            "again": again["json"], "again_ok": again["ok"]},
            "stderr": (out[-1000:] + again["stderr"])[-2000:],
            "ok": busy and back and again["ok"] and gave["ibcm_disconnects"] >= 1}


def quiet(job):
    """``cm:quiet``: rping's one DREQ lost. While the file ``serve.json.cut`` says ``dreq``, the
    simulation drops the CM's DREQs to the FPGA and nothing else: its lossy links lose nothing
    then (were the ACK of the FPGA's last SEND lost, the FPGA would send it again to rping's QP,
    gone, and close the connection as failed, not as quiet). Meanwhile ``rping -c -C 2`` runs
    against the FPGA's rping server: it ends well, and its DREQ is lost (rping destroys its id
    right after ``rdma_disconnect``, and Linux does not send that DREQ again), so the FPGA's
    connection stays open with nobody behind it. The file goes; once the connection was quiet
    for the FPGA's ``--service-idle`` (up to twice that), the FPGA closes it: its DREQ, which
    Linux answers (the id in its time-wait, or gone: Linux answers a DREQ it cannot match), the
    time-wait, the QP free. Passes when rping ended well with its two pings checked (``-V``),
    the simulation dropped a DREQ, the FPGA counted one connection closed for quiet and one
    disconnect it began, none of its DREQs went unanswered, a time-wait ended, and the QPs held
    are those held before the step."""
    cut = OUT / "serve.json.cut"
    start = fpga_status(time.time() + 1)
    before, held = start.get("stats", {}), start.get("qp_open")
    base = (start.get("cut") or {}).get("dropped_dreqs", 0)
    cut.write_text("dreq\n")
    try:            # (the DREQs of the steps after this one must pass)
        _, armed = fpga_wait(lambda st: (st.get("cut") or {}).get("dreq") == 1, 30)
        t = time.monotonic()
        ping = rping(job, count=2)
        lost, _ = fpga_wait(lambda st: (st.get("cut") or {}).get("dropped_dreqs", 0) > base, 30)
    finally:
        cut.unlink(missing_ok=True)
    names = ("ibcm_idle_closes", "ibcm_disconnects", "ibcm_dreq_timeouts",
             "ibcm_timewait_exits", "rping_pings", "rping_ended")

    def delta(st):
        return fpga_moved(st, before, names)

    end, closed = fpga_wait(lambda st: delta(st)["ibcm_idle_closes"] >= 1 and
                            delta(st)["ibcm_timewait_exits"] >= 1 and st.get("qp_open") == held)
    d = delta(end)
    dropped = (lost.get("cut") or {}).get("dropped_dreqs", 0) - base
    return {"cmd": ping["cmd"], "rc": ping["rc"], "wall_s": time.monotonic() - t, "json": {
            "rping": ping["json"], "armed": armed, "dreqs_dropped": dropped, "fpga": d,
            "qp_open_before": held, "qp_open_after": end.get("qp_open"),
            "quiet_s": round(time.monotonic() - t - ping["wall_s"], 1)},
            "stderr": ping["stderr"],
            "ok": ping["ok"] and armed and dropped == 1 and closed and d["ibcm_idle_closes"] == 1 and
            d["ibcm_disconnects"] == 1 and d["ibcm_dreq_timeouts"] == 0}


def loop(job):
    """``cm:loop``: connections opened and closed in a loop, every QP of the FPGA each time.
    Once every QP is free (``qp_open`` 0: the time-waits of earlier steps over), ``loops``
    times ``cmtime -c N`` (N the FPGA's QPs, all of them at once), each time waiting until
    every QP is free again. Passes when every cmtime ended well with its table whole, the FPGA
    counted N time-waits ended per round (connections established: as many at most), and
    every QP was free
    after each round: none leaked (a QP kept would make the next round's last REQ refused).
    (A connection whose RTU was lost and that cmtime closed at once reaches its time-wait
    without the FPGA counting it established: the time-waits ended are the connections.)"""
    start, free = fpga_wait(qps_free)
    n = start.get("num_qps", job["qps"])
    before = start.get("stats", {})
    cmd = ["cmtime", "-s", job["fpga_ip"], "-p", str(job["rdma_cm_port"]), "-c", str(n)]
    rounds, t, ok = [], time.monotonic(), free
    for _ in range(job.get("loops", 3)):
        if not ok:
            break
        _, rc, out, err, secs = run_tool(cmd)
        steps = set(cmtime_table(out))
        st, back = fpga_wait(qps_free)
        rounds.append({"rc": rc, "wall_s": round(secs, 1), "table": set(CMTIME_STEPS) <= steps,
                       "free_after": back, "qp_open": st.get("qp_open"),
                       "stderr": (err + out)[-300:] if rc else ""})
        ok = rc == 0 and set(CMTIME_STEPS) <= steps and back
    want = job.get("loops", 3) * n
    # (``qp_open`` is read as the status file is written, its counters up to a second or two
    # before: the last time-waits may have ended, their QPs free, and not be counted there yet)
    if ok:
        fpga_count("ibcm_timewait_exits", before.get("ibcm_timewait_exits", 0), want)
    end = fpga_status(time.time())
    d = fpga_moved(end, before, ("ibcm_established", "ibcm_timewait_exits", "ibcm_rejected",
                                 "ibcm_connect_no_qp"))
    return {"cmd": cmd, "rc": 0 if ok else 1, "wall_s": time.monotonic() - t,
            "json": {"qps": n, "loops": job.get("loops", 3), "rounds": rounds, "fpga": d,
                     "free_at_start": free, "qp_open": end.get("qp_open")},
            "stderr": "; ".join(r["stderr"] for r in rounds if r["stderr"]),
            "ok": ok and len(rounds) == job.get("loops", 3) and
            0 < d["ibcm_established"] <= want and d["ibcm_timewait_exits"] == want and
            qps_free(end)}


def mixed(job):
    """``cm:mixed``: QPs of both connection managers open at once, each carrying checked
    traffic. With the agent's QPs of UDP 17185 open (``connect`` before), ``rping -c -C 10
    -S 4096 -V -v`` through the IB CM takes another QP of the same pool; once the FPGA shows
    both held (``qp_open``: more QPs than the agent's), the agent WRITEs into the FPGA on its
    QPs (``rocegen-host write``, checked by the FPGA's pattern sink) while rping goes on. Passes
    when the write checked every byte, rping ended well with its pings checked (``-V``) and
    counted by the FPGA, and both managers' QPs were seen held together with rping still
    running when the write began. (rping's DREQ goes once: it destroys its id right after
    ``rdma_disconnect``, and Linux's CM cancels a DREQ's retransmission when its id is
    destroyed. A lost one leaves the FPGA's idle QP held.)"""
    before = fpga_status(time.time() + 1).get("stats", {})
    t = time.monotonic()
    count = int(RPING_ARGS[RPING_ARGS.index("-C") + 1])
    cmd = ["rping", "-c", "-a", job["fpga_ip"], "-p", str(RPING_PORT), *RPING_ARGS]
    proc = start_tool(cmd)
    both, seen = fpga_wait(lambda st: bin(st.get("qp_open") or 0).count("1") > job["qps"] or
                           proc.poll() is not None, 120)
    seen = seen and proc.poll() is None
    w = host("write", "--count", str(job["count"]), "--size", str(job["size"]), "--json")
    res = w["json"] or {}
    tally(w, "fpga", res.get("checked"), res.get("wrong"),
          sum(q.get("messages", 0) for q in res.get("qps", [])))
    w["ok"] = w["rc"] == 0 and bool(res.get("ok")) and w["wrong"] == 0 and \
        w["checked"] == job["count"] * job["size"] * job["qps"]
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        pass
    rc, out = stop_tool(proc)
    printed = sum(x.startswith("ping data: ") for x in out.splitlines())
    counted = fpga_count("rping_pings", before.get("rping_pings", 0), count)
    r = {"cmd": cmd, "rc": rc, "wall_s": time.monotonic() - t, "json": {
         "qp_open_both": both.get("qp_open"), "both_seen": seen, "pings": printed,
         "fpga_pings": counted, "output": out[:300] + out[-300:]},
         "stderr": out[-2000:],
         "ok": rc == 0 and seen and printed == count and counted == count}
    return [w, r]


def serve_fpga(cmd, port):
    """Starts ``cmd`` (a server in the guest listening on ``port``), tells the FPGA to connect
    to it (the connect file: ``PORT SEQ``, SEQ this connect's number in the story) and waits
    for it to end (at most 300 s). Returns its status, output, error output and SEQ."""
    seq = next(_CONNECTS)
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)                 # (listening by then; a REQ before is refused and tried again)
    (OUT / "serve.json.connect").write_text(f"{port} {seq}\n")
    try:
        out, err = server.communicate(timeout=300)
        rc = server.returncode
    except subprocess.TimeoutExpired:
        server.kill()
        out, err = server.communicate()
        rc, err = -1, err + f"{cmd[0]} did not finish in 300 s"
    return rc, out, err, seq


def rdma_server(job):
    """``cm:rdma_server``: librdmacm's ``rdma_server -p 7472`` listens in the guest; the FPGA is
    told to connect to it (the file ``serve.json.connect`` in the run folder, holding the port
    and this connect's number in the story, so that each time the step is played the FPGA
    connects again: the simulation's user logic connects through the IB CM's
    ``rdma_cm_connect``, again while it is refused, and SENDs 16 bytes once established).
    ``rdma_server`` accepts, takes the message, SENDs its own 16 bytes back and disconnects.
    Passes when it ends with ``rdma_server: end 0``, and the FPGA counted its connect
    established, and the simulation's last connect is this one's, established."""
    cmd = ["rdma_server", "-p", str(SERVER_PORT)]
    before = fpga_status(time.time() + 1).get("stats", {})
    t = time.monotonic()
    rc, out, err, seq = serve_fpga(cmd, SERVER_PORT)
    made = fpga_count("ibcm_connects", before.get("ibcm_connects", 0), 1)
    est = fpga_count("ibcm_established", before.get("ibcm_established", 0), 1)
    status = fpga_settled()
    mine = status.get("fpga_connect", {})
    return {"cmd": cmd, "rc": rc, "wall_s": time.monotonic() - t,
            "json": {"output": out[-300:], "fpga_connects": made, "fpga_established": est,
                     "fpga": mine, "seq": str(seq),
                     "fpga_recv_completions": status.get("recv_completions")},
            "stderr": (err + out)[-2000:],
            "ok": rc == 0 and "rdma_server: end 0" in out and made >= 1 and est >= 1 and
            mine.get("seq") == str(seq) and bool(mine.get("ok"))}


def ping_text(ping, size):
    """What ``rping -s -v`` prints of ping ``ping`` (its ``start_buf``: ``"rdma-ping-%d: "``,
    letters from ``A`` on, one more each ping, the last byte 0)."""
    text = f"rdma-ping-{ping}: "
    c, out = 65 + ping % 58, [text]
    for _ in range(len(text), size - 1):
        out.append(chr(c))
        c = 65 if c == 122 else c + 1
    return "".join(out)


def rping_server(job):
    """``cm:rping_server``: stock ``rping -s -p 7174 -S 4096 -v`` listens in the guest; the
    FPGA is told to connect to it (the connect file, as for ``cm:rdma_server``), and the
    connection is the FPGA's rping client's: ``CLIENT_COUNT`` pings of ``CLIENT_SIZE`` bytes
    (the server READs each from the FPGA's memory, WRITEs it back, the FPGA compares), then the
    FPGA disconnects and ``rping -s`` ends. Passes when rping ends well, printed every ping the
    FPGA sent as rping's client makes it, and the FPGA counted the pings and one connection
    done, no mismatch."""
    cmd = ["rping", "-s", "-a", "0.0.0.0", "-p", str(CLIENT_PORT), *RPING_SERVER_ARGS]
    before = fpga_status(time.time() + 1).get("stats", {})
    t = time.monotonic()
    rc, out, err, seq = serve_fpga(cmd, CLIENT_PORT)
    pings = [line[len("server ping data: "):] for line in out.splitlines()
             if line.startswith("server ping data: ")]
    done = fpga_count("rping_client_done", before.get("rping_client_done", 0), 1)
    status = fpga_settled()
    got = {k: status.get("stats", {}).get(f"rping_client_{k}", 0) -
           before.get(f"rping_client_{k}", 0) for k in ("pings", "done", "mismatch")}
    right = pings == [ping_text(p, CLIENT_SIZE) for p in range(CLIENT_COUNT)]
    return {"cmd": cmd, "rc": rc, "wall_s": time.monotonic() - t,
            "json": {"pings": len(pings), "pings_right": right, "fpga": got,
                     "fpga_done": done, "seq": str(seq), "output": out[:300] + out[-300:]},
            "stderr": (err + out)[-2000:],
            "ok": rc == 0 and right and got == {"pings": CLIENT_COUNT, "done": 1,
                                                 "mismatch": 0}}


def rdma_client(job):
    """``cm:rdma_client``: librdmacm's ``rdma_client -s FPGA -p 7471`` against the FPGA's SEND
    echo (it SENDs 16 bytes and waits for them to come back). Passes when it ends with
    ``rdma_client: end 0`` and the FPGA counted the echo."""
    cmd = ["rdma_client", "-s", job["fpga_ip"], "-p", str(ECHO_PORT)]
    before, rc, out, err, secs = run_tool(cmd)
    echoes = fpga_count("echo_echoes", before.get("echo_echoes", 0), 1)
    return {"cmd": cmd, "rc": rc, "wall_s": secs,
            "json": {"output": out[-300:], "fpga_echoes": echoes},
            "stderr": (err + out)[-2000:],
            "ok": rc == 0 and "rdma_client: end 0" in out and echoes == 1}


def atomic(job, op):
    """``host:FETCH_ADD`` / ``host:COMPARE_SWAP``: the contended counter, ``count`` per QP on
    every QP at once (one target: the regions' last word); the agent checked the values it got
    back (every one counts as checked, each failed check as wrong), and the target rose by
    ``qps * count``."""
    r = host("atomic", "--op", op, "--count", str(job["count"]), "--json")
    res = r["json"] or {}
    targets = res.get("targets") or []
    r["atomic"] = {"op": op, "qps": len(res.get("qps") or []), "count": job["count"],
                   "ops": res.get("ops", 0),
                   "targets": [{k: t.get(k) for k in ("addr", "initial", "final", "expected",
                                                      "distinct", "consecutive", "successes",
                                                      "problems")} for t in targets]}
    tally(r, "host", res.get("ops"), sum(len(t.get("problems") or []) for t in targets),
          res.get("ops", 0))
    n = job["qps"] * job["count"]
    r["ok"] = r["rc"] == 0 and bool(res.get("ok")) and r["wrong"] == 0 and bool(targets) and \
        all(t.get("final") is not None and (t["final"] - t["initial"]) % 2**64 == n and
            t.get("distinct") == n for t in targets)
    return r


def fpga_atomic(job, op):
    """``fpga:FETCH_ADD`` / ``fpga:COMPARE_SWAP``: the FPGA's traffic generator on one counter in
    rxe's memory, ``count`` atomics per QP, one run per QP in turn (one ``rocegen-host``
    command); the agent checked the counter after each run against its model (each atomic it
    saw executed counts as checked, each failed check as wrong) and the originals of the last
    run, READ back from the FPGA's memory."""
    r = host("atomic", "--direction", "fpga-to-host", "--op", op, "--count", str(job["count"]),
             "--json")
    res = r["json"] or {}
    c, o = res.get("counter") or {}, res.get("originals") or {}
    problems = [*(c.get("problems") or []), *(o.get("problems") or []),
                *(e for q in res.get("runs") or [] for e in q.get("errors") or [])]
    runs = res.get("runs") or []
    r["atomic"] = {"op": op, "direction": "fpga-to-host", "qps": len(runs),
                   "count": job["count"], "ops": res.get("ops", 0),
                   "targets": [{"addr": c.get("addr"), "initial": runs[0]["initial"] if runs
                                else None, "final": c.get("final"),
                                "expected": c.get("expected"),
                                "originals": o.get("slots", 0), "distinct": o.get("distinct"),
                                "problems": problems}] if c else []}
    tally(r, "host", res.get("ops"), len(problems), res.get("ops", 0))
    want = job["qps"] * job["count"] if op == "FETCH_ADD" else job["count"]
    r["ok"] = r["rc"] == 0 and bool(res.get("ok")) and r["wrong"] == 0 and \
        c.get("final") == want and res.get("ops") == job["qps"] * job["count"] and \
        o.get("distinct") == min(job["count"], 64)
    return r


def main(path):
    job = json.loads(Path(path).read_text())
    unknown = [s for s in job["steps"] if s not in STEPS]
    if unknown:
        raise SystemExit(f"unknown steps {unknown}")
    os.environ.setdefault("ROCEGEN_HOST_STATE", "/run/rocegen-host")
    story = {"job": job, "steps": [], "counters_start": rxe_counters()}
    agent = False
    for name in job["steps"]:
        if not agent and name not in STARTS + STANDALONE:
            story["steps"].append({"step": name, "ok": False, "wall_s": 0.0, "commands": [],
                                   "skipped": "no host agent (connect failed or not done)",
                                   "counters": story["counters_start"]})
            continue
        t = time.monotonic()
        settled = None
        if not agent and name in STANDALONE:
            settled = fpga_wait(qps_free)[1]
        before = fpga_status(0).get("stats", {})
        try:
            cmds = play(job, name)
        except Exception:           # (a step that breaks fails alone; the story goes on)
            cmds = [{"cmd": [name], "rc": -1, "ok": False, "stderr": traceback.format_exc()}]
        # (a step without the agent fails too when some QP stayed held for FPGA_WAIT before it)
        step = {"step": name, "ok": all(c["ok"] for c in cmds) and settled is not False,
                "wall_s": time.monotonic() - t, "free_at_start": settled, "commands": cmds,
                "counters": rxe_counters(), "fpga": fpga_status(time.time())}
        story["steps"].append(step)
        agent = (agent or name in STARTS and step["ok"]) and name != "stop"
        (OUT / "story.json").write_text(json.dumps(story, indent=1))
        print(f"{name}: {'ok' if step['ok'] else 'FAILED'} in {step['wall_s']:.1f} s", flush=True)
        if not step["ok"]:
            for c in cmds:
                print(f"  {' '.join(c['cmd'])}: status {c['rc']}\n  {c['stderr']}", flush=True)
            print(f"  the FPGA's counters that moved: "
                  f"{counters_moved(before, step['fpga'].get('stats', {}))}", flush=True)
    log = Path(os.environ["ROCEGEN_HOST_STATE"]) / "agent.log"
    if log.exists():
        (OUT / "agent.log").write_text(log.read_text()[-20000:])
    return 0 if all(s["ok"] for s in story["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
