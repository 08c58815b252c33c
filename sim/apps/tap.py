"""``rocegen sim serve --tap``: the simulated FPGA on a TAP interface inside a network namespace
that the command creates, and removes when it stops.

Only inside that namespace does the FPGA's address exist: nothing changes in the machine's own
network. The namespace (``--netns``, default ``rocegen``) holds the TAP ``rgtap0`` with the host's
address (``--host-ip``/24) and MAC, and its own loopback for the wire. Tools run in it with
``ip netns exec NAME ...``, and address the FPGA at its IP (``ping 10.0.0.2``, a host tool sending
its connection-manager datagrams to 10.0.0.2:17185); the host agent's simulated NIC joins the
wire there: ``ip netns exec rocegen rocegen-host connect --device sim --fpga 10.0.0.2``.

Needs root (CAP_NET_ADMIN), ``/dev/net/tun`` and the ``ip`` command (iproute2).
"""

import ctypes
import os
import shutil
import subprocess

__all__ = ["run_in_namespace", "TAP_NAME", "check_tap_support"]

TAP_NAME = "rgtap0"
_CLONE_NEWNET = 0x40000000


def check_tap_support():
    """None when TAP mode can work here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "--tap needs root (it creates a network namespace and a TAP interface)"
    if not os.path.exists("/dev/net/tun"):
        return "--tap needs /dev/net/tun"
    if shutil.which("ip") is None:
        return "--tap needs the ip command (iproute2)"
    return None


def _ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode:
        raise ValueError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def _enter(name):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise ValueError(f"cannot enter network namespace {name}: "
                             f"{os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def run_in_namespace(args, cfg, conf, run):
    """Create the namespace and its TAP, enter it, ``run(conf)`` (the simulation), then remove
    the namespace whatever happened. Returns what ``run`` returns."""
    why = check_tap_support()
    if why:
        raise ValueError(why)
    name = args.netns
    if not name or "/" in name or len(name) > 32:
        raise ValueError(f"--netns must be a short name, not {name!r}")
    if os.path.exists(f"/run/netns/{name}"):
        raise ValueError(f"network namespace {name} exists already (another rocegen sim serve "
                         f"--tap?): pick another --netns, or remove it with ip netns del {name}")
    cfg.build()         # before entering: a first build may take minutes, the namespace waits
    _ip("netns", "add", name)
    try:
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        try:
            _enter(name)
            try:
                _ip("link", "set", "lo", "up")
                _ip("tuntap", "add", "dev", TAP_NAME, "mode", "tap")
                _ip("link", "set", TAP_NAME, "address", conf["host_mac"])
                _ip("addr", "add", f"{conf['host_ip']}/24", "dev", TAP_NAME)
                _ip("link", "set", TAP_NAME, "up")
                print(f"network namespace {name}: {TAP_NAME} {conf['host_ip']}/24 "
                      f"({conf['host_mac']}); the FPGA is {conf['fpga_ip']} there. Try: ip netns "
                      f"exec {name} ping {conf['fpga_ip']}", flush=True)
                return run({**conf, "tap": TAP_NAME})
            finally:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.setns(own, _CLONE_NEWNET)
        finally:
            os.close(own)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
