"""The parts of ``rocegen sim rxe`` that need no guest: the capture's frames by kind (scapy builds
them), the vector file written and read back, the story's verdicts on what ``rocegen-host``
answers, the options refused, and ``sim serve``'s lossy links refused out of range."""

import argparse
import json
import os
import struct

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.sim.apps import bridge, rxe, rxe_guest, rxe_story, serve
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.vectors import read_vectors
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I


def _frame(bth, payload=b"", *, from_host=True):
    src, dst = (HOST_MAC, FPGA_MAC) if from_host else (FPGA_MAC, HOST_MAC)
    sip, dip = (HOST_IP, FPGA_IP) if from_host else (FPGA_IP, HOST_IP)
    return bytes(Ether(src=src, dst=dst) / IP(src=sip, dst=dip) /
                 UDP(sport=0xC000, dport=4791, chksum=0) / bth / Raw(payload))


def _pcap(path, frames):
    with PcapWriter(path) as p:
        for k, f in enumerate(frames):
            p.write(f, k)
    return path


def test_frames_by_direction_and_kind(tmp_path):
    send = _frame(BTH(opcode=0x04, dqpn=256, psn=7), bytes(64))
    frames = [
        send, send,                                                     # a duplicate SEND_ONLY
        _frame(BTH(opcode=0x11, dqpn=256, psn=7) / AETH(syndrome=0x1F, msn=1)),
        _frame(BTH(opcode=0x11, dqpn=256, psn=8) / AETH(syndrome=0x60, msn=1)),
        _frame(BTH(opcode=0x11, dqpn=256, psn=8) / AETH(syndrome=0x2E, msn=1)),
        _frame(BTH(opcode=0x11, dqpn=17, psn=3) / AETH(syndrome=0x62, msn=0), from_host=False),
        _frame(BTH(opcode=0x0C, dqpn=17, psn=4), bytes(16), from_host=False),
        bytes(Ether(src=HOST_MAC, dst=FPGA_MAC) / IP(src=HOST_IP, dst=FPGA_IP) /
              UDP(sport=1, dport=17185) / Raw(bytes(64))),              # not RoCEv2
    ]
    path = _pcap(tmp_path / "c.pcap", frames)
    kinds = [(w, k) for w, k, _ in rxe.frame_kinds(path)]
    assert kinds == [("to_fpga", "SEND_ONLY"), ("to_fpga", "duplicate SEND_ONLY"),
                     ("to_fpga", "ACK"), ("to_fpga", "NAK PSN sequence"), ("to_fpga", "RNR NAK"),
                     ("from_fpga", "NAK remote access"), ("from_fpga", "RDMA_READ_REQUEST")]
    counts = rxe.classify_pcap(path)
    assert counts["to_fpga"]["duplicate"] == 1 and counts["from_fpga"]["duplicate"] == 0


def _mad(attribute_id, *, from_host=True, mgmt_class=I.MGMT_CLASS_CM):
    """A MAD of the IB CM's class to QP1 (a UD SEND_ONLY), its attribute ``attribute_id``."""
    hdr = I.MAD_HDR.pack(base_version=1, mgmt_class=mgmt_class, class_version=2, method=3,
                         status=0, class_specific=0, transaction_id=9,
                         attribute_id=attribute_id, reserved=0, attribute_modifier=0)
    deth = H.DETH.pack(qkey=I.QP1_QKEY, reserved=0, src_qp=1)
    return _frame(BTH(opcode=0x64, dqpn=1, psn=0), deth + hdr + bytes(232), from_host=from_host)


def test_the_cms_mads_counted_by_message(tmp_path):
    """A UD SEND_ONLY to QP1 of the CM's class is also counted by its message (``CM DREQ``,
    ...); another class's, or a SEND to another QP, only as a UD SEND_ONLY."""
    frames = [_mad(I.ATTR_REQ), _mad(I.ATTR_REP, from_host=False),
              _mad(I.ATTR_DREQ, from_host=False), _mad(I.ATTR_DREQ, from_host=False),
              _mad(I.ATTR_DREP), _mad(I.ATTR_DREQ, mgmt_class=4)]
    counts = rxe.classify_pcap(_pcap(tmp_path / "c.pcap", frames))
    assert counts["to_fpga"] == {"UD_SEND_ONLY": 3, "CM REQ": 1, "CM DREP": 1}
    assert counts["from_fpga"] == {"UD_SEND_ONLY": 3, "CM REP": 1, "CM DREQ": 2}


def test_vectors_one_of_each_kind_round_trip(tmp_path):
    ack = _frame(BTH(opcode=0x11, dqpn=256, psn=1) / AETH(syndrome=0x1F, msn=1))
    frames = [ack, ack, _frame(BTH(opcode=0x0C, dqpn=17, psn=4), bytes(16), from_host=False)]
    vectors = rxe.rxe_vectors([(_pcap(tmp_path / "c.pcap", frames), "a test")])
    assert [(n, f) for n, f, _ in vectors] == [("rxe-ack", ack)]       # rxe's frames only, once
    manifest = {"suite": "bookworm", "kernel": "6.1", "packages": {"rdma-core": "44.0-2"}}
    rxe.write_vectors(tmp_path / "v.txt", vectors, manifest)
    assert read_vectors(tmp_path / "v.txt") == [("rxe-ack", ack)]
    assert "rdma-core 44.0-2" in (tmp_path / "v.txt").read_text()


def _run(op, qps, **kw):
    return {"op": op, "verified": kw.get("verified", 2), "bytes": kw.get("bytes", 2000),
            "bad": kw.get("bad", 0), "checked": kw.get("checked"), "wrong": kw.get("wrong"),
            "ok": kw.get("ok", True), "fpga_qpn": qps}


def _fpga_atomics(problems=()):
    """What ``rocegen-host atomic --direction fpga-to-host --json`` answers for 1 QP x 2."""
    return {"direction": "fpga-to-host", "op": "FETCH_ADD", "ok": not problems, "ops": 2,
            "runs": [{"fpga_qpn": 256, "initial": 0, "final": 2, "expected": 2, "ok": True,
                      "errors": []}],
            "counter": {"addr": 0x7F00, "final": 2, "expected": 2, "problems": []},
            "originals": {"slots": 2, "distinct": 2, "problems": list(problems)}}


@pytest.mark.parametrize("step, answers, verdict", [
    # the FPGA's WRITEs: the agent checked every message
    ("fpga:WRITE", [{"ok": True}, {"ok": True, "result": [_run("WRITE", 256)]}],
     ("host", 2000, 0, True)),
    # one message found bad: its bytes count as wrong
    ("fpga:SEND", [{"ok": True}, {"ok": False, "result": [_run("SEND", 256, bad=1,
                                                                 ok=False)]}],
     ("host", 2000, 1000, False)),
    # the FPGA's READ: its sink checked; short of what was asked is a failure
    ("fpga:READ", [{"ok": True}, {"ok": True, "result": [_run("READ", 256, checked=1500,
                                                                wrong=0)]}],
     ("fpga", 1500, 0, False)),
    # the host's SEND: the FPGA's sink checked
    ("host:SEND", [{"op": "SEND", "ok": True, "checked": 2000, "wrong": 0, "bytes": 2000,
                    "qps": [{"messages": 2}]}], ("fpga", 2000, 0, True)),
    # the host's READ: the agent checked, one byte wrong
    ("host:READ", [{"op": "READ", "ok": False, "checked": 2000, "wrong": 1, "bytes": 2000,
                    "qps": [{"messages": 2}]}], ("host", 2000, 1, False)),
    # the FPGA's atomics on rxe's counter: the agent checked each run and the originals
    ("fpga:FETCH_ADD", [_fpga_atomics()], ("host", 2, 0, True)),
    # an original not as the model says: a failed check counts as wrong
    ("fpga:FETCH_ADD", [_fpga_atomics(problems=["1 of 2 differ from the model"])],
     ("host", 2, 1, False)),
])
def test_the_story_judges_what_the_agent_answers(monkeypatch, step, answers, verdict):
    replies = iter(answers)

    def fake_host(*args):
        return {"cmd": ["rocegen-host", *args], "rc": 0, "wall_s": 0.0, "json": next(replies),
                "stderr": ""}

    monkeypatch.setattr(rxe_story, "host", fake_host)
    job = {"fpga_ip": FPGA_IP, "qps": 1, "pmtu": 1024, "count": 2, "size": 1000, "steps": [step]}
    cmds = rxe_story.play(job, step)
    last = cmds[-1]
    assert (last["checked_by"], last["checked"], last["wrong"], last["ok"]) == verdict
    assert last["messages"] == 2
    if step == "fpga:FETCH_ADD":
        assert cmds[0]["cmd"][1:5] == ["atomic", "--direction", "fpga-to-host", "--op"]
        row = {"step": step, "ok": last["ok"], "wall_s": 1.0, "checked_by": "host", "checked": 2,
               "wrong": last["wrong"], "messages": 2, "rxe": {}, "fpga": {},
               "atomic": last["atomic"]}
        lines = rxe.table({"steps": [row], "frames": {}, "loss": {}, "sim_us": 1.0,
                           "wall_s": 1.0, "cycles": 1, "framecheck": {}, "ok": last["ok"]})
        assert lines[2].startswith("  the FPGA's atomics on rxe's counter: 1 QP x 2 FETCH_ADDs, "
                                   "one run after the other, on 0x7f00: 0x2 (expected 0x2), 2 "
                                   "atomics; 2 originals READ back from the FPGA, 2 distinct")


class _Fpga:
    """The FPGA's status as ``cm:loop`` sees it: each cmtime round establishes ``qps``
    connections; each ends its time-wait and frees its QP, but for the ``leak`` first ones."""

    def __init__(self, qps=2, leak=0, lag=0):
        self.qps, self.leak, self.lag = qps, leak, lag
        self.st = {"num_qps": qps, "qp_open": 0,
                   "stats": {"ibcm_established": 5, "ibcm_timewait_exits": 5}}
        self.late = 0           # time-waits ended but not in the status file's counters yet
        self.reads = 0

    def status(self, *_):
        # (the counters trail ``qp_open``: the last round's time-waits show ``lag`` reads late)
        st = json.loads(json.dumps(self.st))
        self.reads += 1
        if self.late and self.reads <= self.lag:
            st["stats"]["ibcm_timewait_exits"] -= self.late
        else:
            self.late = 0
        return st

    def wait(self, ok, wait=0):
        st = self.status()
        return st, bool(ok(st))

    def cmtime(self, cmd):
        s = self.st["stats"]
        s["ibcm_established"] += self.qps
        kept = min(self.leak, self.qps)
        self.leak -= kept
        s["ibcm_timewait_exits"] += self.qps - kept
        self.late, self.reads = self.qps - kept, 0
        self.st["qp_open"] |= (1 << kept) - 1
        table = "".join(f"{name}: 1 1 1 1\n" for name in rxe_story.CMTIME_STEPS)
        return {}, 0, table, "", 1.0


@pytest.mark.parametrize("leak, lag, ok, rounds", [(0, 0, True, 3), (1, 0, False, 1),
                                                   (0, 3, True, 3)])
def test_the_loop_step_finds_a_qp_that_leaked(monkeypatch, leak, lag, ok, rounds):
    """``cm:loop`` passes when every round's QPs came back; a QP kept after a round fails it
    there (the next round would find one QP short). The status file's counters trail its
    ``qp_open``: the step waits for the last round's time-waits to be counted (``lag``)."""
    fpga = _Fpga(leak=leak, lag=lag)
    monkeypatch.setattr(rxe_story, "fpga_status", fpga.status)
    monkeypatch.setattr(rxe_story, "fpga_wait", fpga.wait)
    monkeypatch.setattr(rxe_story, "run_tool", fpga.cmtime)
    job = {"fpga_ip": FPGA_IP, "qps": 1, "count": 2, "size": 100, "rdma_cm_port": 7470,
           "loops": 3}
    (r,) = rxe_story.play(job, "cm:loop")
    assert r["ok"] is ok and len(r["json"]["rounds"]) == rounds
    assert r["cmd"][-2:] == ["-c", "2"] and r["json"]["fpga"]["ibcm_established"] == 2 * rounds
    assert [x["free_after"] for x in r["json"]["rounds"]] == [True] * (rounds - 1) + [ok]


def _rxe_args(*argv):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    rxe.add_parser(sub)
    return p.parse_args(["rxe", *argv])


@pytest.mark.parametrize("argv, message", [
    (["--steps", "connect,fpga:SWAP"], "unknown"),
    (["--steps", "fpga:WRITE"], "must begin with connect"),
    (["--qps", "9"], "--qps must be 1..8"),
    (["--host-timeout", "32"], "--host-timeout must be 0..31"),
    (["--host-rnr-retry", "8"], "--host-rnr-retry must be 0..7"),
    (["--fpga-timeout", "0"], "--fpga-timeout must be 1..31"),
    (["--cm-timeout", "32"], "--cm-timeout must be 1..31"),
    (["--cm-loops", "0"], "--cm-loops must be 1..1000"),
    (["--pace", "0"], "--pace must be 1..1000000"),
    (["--steps", "cm:mixed"], "must begin with connect"),
    (["--recv-depth", "0"], "--recv-depth must be 1..4096"),
    (["--", "--tap"], "--tap is set by rocegen sim rxe"),
])
def test_rxe_options_refused(argv, message):
    with pytest.raises(ValueError, match=message):
        rxe._validate(_rxe_args(*argv))


def test_serve_args_after_the_separator_pass_through():
    steps, extra = rxe._validate(_rxe_args("--", "--rq-depth", "2"))
    assert extra == ["--rq-depth", "2"] and steps[0] == "connect"


@pytest.mark.parametrize("option", ["--loss-to-fpga", "--loss-from-fpga"])
def test_serve_refuses_a_loss_out_of_range(option):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    serve.add_parser(sub)
    args = p.parse_args(["serve", "--width", "64", option, "0.9"])
    with pytest.raises(ValueError, match=f"{option} must be a probability 0..0.5"):
        serve.serve_config(args)


@pytest.mark.parametrize("pace, refused", [("0", True), ("2e6", True), ("1000", False)])
def test_serve_takes_a_pace(pace, refused):
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    serve.add_parser(sub)
    args = p.parse_args(["serve", "--width", "64", "--pace", pace])
    if refused:
        with pytest.raises(ValueError, match="--pace must be 1..1000000 microseconds"):
            serve.serve_config(args)
    else:
        assert serve.serve_config(args)[1]["pace_us"] == 1000


def test_a_pace_holds_the_simulation_to_the_wall_clock():
    """At 1000 us per second and 100 MHz, 100k cycles may take no less than 1 s of wall time:
    a simulator faster than that waits the rest; one slower waits nothing and saves at most
    the slack for later."""
    now = [10.0]
    pace = bridge.Pace(1000, 100, slack=0.05, clock=lambda: now[0])
    now[0] += 0.25                          # 100k cycles simulated in 0.25 s: wait 0.75 s
    assert pace.wait(100_000) == pytest.approx(0.75)
    now[0] += 0.75
    now[0] += 3.0                           # then 100k cycles in 3 s: behind, no wait
    assert pace.wait(100_000) == 0.0
    now[0] += 0.01                          # what it saved is the slack only, 0.05 s: 10k
    assert pace.wait(10_000) == pytest.approx(0.1 - 0.05 - 0.01)     # cycles wait 0.04 s
    with pytest.raises(ValueError, match="positive"):
        bridge.Pace(0, 100)


@pytest.mark.parametrize("argv, pace", [((), 1000), (("--pace", "250"), 250),
                                         (("--", "--pace", "40"), 40)])
def test_rxe_gives_serve_its_pace(argv, pace):
    """The serve command of a run, read by serve's own parser: the pace of ``--pace`` (1000 us
    per second by default), or of serve's options after ``--``."""
    args = _rxe_args("--rdma-cm-port", "7470", *argv)
    _, extra = rxe._validate(args)
    cmd = rxe.serve_command(args, extra, rocegen=["rocegen"], netns="ns", status="s.json",
                            pcap="p.pcap")
    assert cmd[:3] == ["rocegen", "sim", "serve"]
    p = argparse.ArgumentParser()
    serve.add_parser(p.add_subparsers(dest="cmd"))
    parsed = p.parse_args(cmd[2:])
    assert parsed.pace == pace and parsed.rdma_cm_port == (7470, 7174, 7471)


def test_the_guest_key_follows_what_builds_it(monkeypatch):
    key = rxe_guest.guest_key()
    monkeypatch.setattr(rxe_guest, "PACKAGES", rxe_guest.PACKAGES + ("strace",))
    assert rxe_guest.guest_key() != key
    monkeypatch.setattr(rxe_guest.shutil, "which", lambda tool: None)
    why = rxe_guest.missing_tools(root_needed=False)
    assert "qemu-system-x86_64, debootstrap, cpio missing" in why and "make qemu" in why


def test_qemu_command_shares_the_sources_read_only(tmp_path):
    cmd = rxe_guest.qemu_command(tmp_path, "/src", tmp_path / "out", tap="t0", mac=HOST_MAC,
                                 kvm=False)
    assert "tcg" in cmd and "local,path=/src,mount_tag=src,security_model=none,readonly=on" in cmd
    assert f"virtio-net-pci,netdev=n0,mac={HOST_MAC}" in cmd
    assert json.dumps(cmd)          # plain strings only


@pytest.mark.parametrize("console, works", [
    ("echo '[    0.0] Linux version 6.1'; sleep 0.3; "
     "echo '[    1.2] Kernel panic - not syncing: VFS: Unable to mount root fs'; exec sleep 60", True),
    # a machine that starts, a kernel that never runs: given up after the first line's time
    ("echo SeaBIOS; echo 'Booting from ROM...'; exec sleep 60", False),
    # a kernel that runs and never gets to its panic: given up after the panic's time
    ("echo '[    0.0] Linux version 6.1'; exec sleep 60", False),
    ("exit 1", False),                            # QEMU refuses KVM
])
def test_kvm_counts_only_when_the_kernel_boots(monkeypatch, tmp_path, console, works):
    """KVM is taken only when the guest's kernel runs under it, not when /dev/kvm merely opens:
    under some nested hypervisors QEMU starts and the kernel never prints a line. The probe is
    a stand-in QEMU on PATH printing what such a console shows; the probe is killed at its
    verdict."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    qemu = bindir / "qemu-system-x86_64"
    qemu.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\necho $$ > {tmp_path / 'pid'}\n"
                    f"{console}\n")
    qemu.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(rxe_guest.os, "access", lambda path, mode: True)
    monkeypatch.setattr(rxe_guest, "KVM_FIRST_LINE_SECONDS", 1)
    monkeypatch.setattr(rxe_guest, "KVM_PANIC_SECONDS", 2)
    rxe_guest._kvm_boots.cache_clear()
    kernel = tmp_path / "vmlinuz-probe"
    assert rxe_guest.kvm_works(kernel) is works
    with pytest.raises(ProcessLookupError):  # killed at its verdict, not left to its sleep
        os.kill(int((tmp_path / "pid").read_text()), 0)
    assert rxe_guest.kvm_works(kernel) is works
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 1                   # one probe per kernel
    assert "-accel kvm" in calls[0] and f"-kernel {kernel} " in calls[0]
    (tmp_path / "calls").unlink()
    cmd = rxe_guest.qemu_command(tmp_path, "/src", tmp_path / "out", tap="t0", mac=HOST_MAC)
    assert f"-kernel {tmp_path / 'vmlinuz'} " in (tmp_path / "calls").read_text()  # its own
    assert ("kvm" in cmd) is works and ("tcg" in cmd) is not works
    rxe_guest._kvm_boots.cache_clear()


def test_cmtimes_table_read_when_a_figure_overflows_its_column():
    """cmtime prints each figure in ``%11.2f``; a step that no connection timed has the min's
    starting value, 999999999 as a float, 13 characters, which runs into the max before it. The
    table keeps the four figures apart, that min as None, and only the steps it printed."""
    figures = {"create id": (0.52, 0.11, 12.5, 26.0), "resolve addr": (1.0, 0.5, 400.25, 500.0),
               "resolve route": (0.3, 0.1, 20.0, 150.0), "create qp": (2.0, 1.0, 900.0, 1000.0),
               "connect": (31.5, 30.25, 29000.0, 15750.0), "disconnect": (12.0, 0.0, None, 6000.0)}
    untimed = struct.unpack("f", struct.pack("f", 999999999.0))[0]     # as a C float
    out = "step              total ms     max ms     min us  us / conn\n" + "".join(
        f"{name:<13s}: {t:11.2f}{mx:11.2f}{untimed if mn is None else mn:11.2f}{per:11.2f}\n"
        for name, (t, mx, mn, per) in figures.items())      # cmtime's "%-13s: %11.2f..."
    assert "0.001000000000.00" in out
    table = rxe_story.cmtime_table(out + "unrelated: 1.00\n")
    assert table == {name: list(f) for name, f in figures.items()}


def test_a_step_that_breaks_fails_alone_with_the_fpgas_counters(monkeypatch, tmp_path, capsys):
    """A step whose play raises is recorded failed with the traceback, the story goes on to
    the next step, and a failed step prints the FPGA's counters that moved meanwhile."""
    # (each step: every QP free at its start, its counters before, after)
    free = {"qp_open": 0}
    readings = iter([free, {"stats": {"rx_frames": 10, "roce_timeouts": 2, "ibcm_dreqs": 1}},
                     {"stats": {"rx_frames": 30, "roce_timeouts": 9, "ibcm_dreqs": 1}},
                     free, {"stats": {"rx_frames": 30}}, {"stats": {"rx_frames": 31}}])

    def play(job, name):
        if name == "cm:cmtime":
            raise ValueError("could not convert string to float: '0.001000000000.00'")
        return [{"cmd": [name], "rc": 0, "ok": True, "stderr": ""}]

    monkeypatch.setattr(rxe_story, "OUT", tmp_path)
    monkeypatch.setattr(rxe_story, "play", play)
    monkeypatch.setattr(rxe_story, "rxe_counters", dict)
    monkeypatch.setattr(rxe_story, "fpga_status", lambda after: next(readings))
    monkeypatch.setenv("ROCEGEN_HOST_STATE", str(tmp_path))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"steps": ["cm:cmtime", "cm:rping"]}))
    assert rxe_story.main(job) == 1
    story = json.loads((tmp_path / "story.json").read_text())
    assert [(s["step"], s["ok"]) for s in story["steps"]] == [("cm:cmtime", False),
                                                               ("cm:rping", True)]
    assert "ValueError: could not convert" in story["steps"][0]["commands"][0]["stderr"]
    assert [s["free_at_start"] for s in story["steps"]] == [True, True]
    out = capsys.readouterr().out
    assert "the FPGA's counters that moved: rx_frames=+20 roce_timeouts=+7\n" in out
    assert out.count("counters that moved") == 1


def test_a_step_without_the_agent_waits_for_every_qp_free(monkeypatch, tmp_path):
    """Without the host agent, a cm: step begins once the FPGA holds no QP (a connection a lossy
    link left open is closed meanwhile), and fails when one stays held for FPGA_WAIT; a step
    that starts the agent, and any after it, does not wait."""
    waited = []

    def fpga_wait(ok, wait=rxe_story.FPGA_WAIT):
        waited.append(wait)
        st = {"qp_open": 1 if len(waited) == 1 else 0}
        return st, ok(st)

    monkeypatch.setattr(rxe_story, "OUT", tmp_path)
    monkeypatch.setattr(rxe_story, "play",
                        lambda job, name: [{"cmd": [name], "rc": 0, "ok": True, "stderr": ""}])
    monkeypatch.setattr(rxe_story, "rxe_counters", dict)
    monkeypatch.setattr(rxe_story, "fpga_status", lambda after: {"stats": {}})
    monkeypatch.setattr(rxe_story, "fpga_wait", fpga_wait)
    monkeypatch.setenv("ROCEGEN_HOST_STATE", str(tmp_path))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"steps": ["cm:rping", "cm:rping", "cm:connect", "cm:rping"]}))
    assert rxe_story.main(job) == 1
    story = json.loads((tmp_path / "story.json").read_text())
    assert [(s["step"], s["ok"], s["free_at_start"]) for s in story["steps"]] == \
        [("cm:rping", False, False), ("cm:rping", True, True), ("cm:connect", True, None),
         ("cm:rping", True, None)]
    assert waited == [rxe_story.FPGA_WAIT] * 2
