"""The guest of ``rocegen sim rxe``: a small Linux from Debian's packages that runs Linux's own
RDMA stack (the ``rdma_rxe`` soft-RoCE driver, rdma-core, pyverbs) under QEMU.

Built once, by :func:`build_guest`, into ``~/.cache/rocegen/rxe-guest/<key>`` (``key``: a hash of
the suite, the packages, the kernel modules kept and the init script, so a change to any of them
builds a new guest beside the old one):

1. ``debootstrap --variant=minbase`` of Debian :data:`SUITE` with :data:`PACKAGES` (the kernel,
   rdma-core, the verbs providers and utilities, librdmacm's tools, perftest, pyverbs,
   iproute2);
2. trimmed: of the kernel's modules only those :data:`MODULES` need are kept (found with
   ``modprobe --show-depends`` in the tree, then ``depmod``), and apt's cache, documentation,
   manuals and locales go;
3. packed whole as an uncompressed initramfs (``cpio -H newc``: the kernel unpacks it into
   memory faster than it would decompress it under emulation) with :data:`INIT` as ``/init``;
   the kernel image beside it, and ``manifest.json`` (versions, size, build time).

A boot (:func:`qemu_command`) gives the guest two 9p shares: the project's sources, read-only, at
``/mnt/src`` (the host agent runs from them: ``/opt/rocegen`` holds ``rocegen.host`` and
``rocegen.wire`` as links into ``/mnt/src``), and a run folder, writable, at ``/mnt/out``.
``/init`` mounts them, loads the modules and runs ``/mnt/out/job.sh`` (written for each run),
its output to ``/mnt/out/job.log``; then it powers the guest off. Nothing of a run stays in the
guest: its root is in memory.

Needs root (debootstrap), ``debootstrap``, ``cpio`` and ``qemu-system-x86_64``: ``make qemu``
installs them from Debian's packages. :func:`missing_tools` says what is missing.
"""

import fcntl
import functools
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rocegen.sim.testing.verilator import cache_root

__all__ = ["SUITE", "PACKAGES", "MODULES", "guest_dir", "missing_tools", "build_guest",
           "qemu_command", "kvm_works", "INSTALL_HINT"]

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("linux-image-amd64", "kmod", "iproute2", "iputils-ping", "procps", "rdma-core",
            "ibverbs-providers", "ibverbs-utils", "rdmacm-utils", "perftest", "python3-pyverbs")
#: Kernel modules the guest loads at boot (with their dependencies): virtio PCI and network,
#: 9p over virtio, soft-RoCE and its user interfaces, the CRC32 rxe's ICRC needs, netem.
MODULES = ("crc32_generic", "crc32_pclmul", "virtio_pci", "virtio_net", "9pnet_virtio", "9p",
           "rdma_rxe", "ib_uverbs", "rdma_ucm", "ib_umad", "sch_netem")
INSTALL_HINT = "as root, `make qemu` installs them (Debian's qemu-system-x86, debootstrap, cpio)"

INIT = """#!/bin/sh
# rocegen rxe guest: mounts, modules, the run's job, power off
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PYTHONPATH=/opt/rocegen
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp; mount -t tmpfs run /run
for m in {modules}; do modprobe $m || echo "init: modprobe $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro src /mnt/src
mount -t 9p -o trans=virtio,version=9p2000.L out /mnt/out
ip link set lo up
if [ -f /mnt/out/job.sh ]; then
    sh /mnt/out/job.sh > /mnt/out/job.log 2>&1
    echo $? > /mnt/out/job.rc
else
    echo "init: no /mnt/out/job.sh" > /mnt/out/job.log
fi
sync
echo o > /proc/sysrq-trigger
sleep 30
"""


def _init_text():
    return INIT.format(modules=" ".join(MODULES))


def guest_key():
    """The hash naming the guest these constants build."""
    h = hashlib.sha256(json.dumps([SUITE, PACKAGES, MODULES, _init_text(), 1]).encode())
    return h.hexdigest()[:16]


def guest_dir(cache=None):
    """Folder of the guest (it may not be built yet), in ``cache`` (default: ``rxe-guest`` in the
    per-user cache directory the Verilator build also uses, ``$ROCEGEN_CACHE`` or
    ``~/.cache/rocegen``)."""
    return Path(cache or cache_root() / "rxe-guest") / guest_key()


def missing_tools(root_needed=True):
    """What is missing to build and boot the guest here, as one sentence, or None."""
    missing = [t for t in ("qemu-system-x86_64", "debootstrap", "cpio") if shutil.which(t) is None]
    why = []
    if missing:
        why.append(f"{', '.join(missing)} missing ({INSTALL_HINT})")
    if root_needed and os.geteuid() != 0:
        why.append("root needed (debootstrap, network namespace, TAP and bridge)")
    if not os.path.exists("/dev/net/tun"):
        why.append("/dev/net/tun missing")
    return "; ".join(why) or None


def _run(cmd, log, **kw):
    log.write(f"$ {' '.join(map(str, cmd))}\n")
    log.flush()
    r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kw)
    if r.returncode:
        raise RuntimeError(f"{cmd[0]} failed (status {r.returncode}); see {log.name}")


def _kernel_version(tree):
    versions = sorted(p.name for p in (tree / "usr/lib/modules").iterdir())
    if len(versions) != 1:
        raise RuntimeError(f"expected one kernel in the guest, found {versions}")
    return versions[0]


def _trim(tree, kver, log):
    deps = set()
    for m in MODULES:
        out = subprocess.run(["chroot", str(tree), "modprobe", "-S", kver, "--show-depends", m],
                             capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"the guest's kernel has no module {m}: {out.stderr.strip()}")
        deps |= {line.split()[1] for line in out.stdout.splitlines()
                 if line.startswith("insmod ")}
    mods = tree / "usr/lib/modules" / kver
    keep = tree / "keep-modules"
    for path in deps:
        rel = Path(path).relative_to(f"/lib/modules/{kver}")
        (keep / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(mods / rel, keep / rel)
    shutil.rmtree(mods / "kernel")
    (keep / "kernel").rename(mods / "kernel")
    shutil.rmtree(keep)
    _run(["chroot", str(tree), "depmod", kver], log)
    for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                 "usr/share/locale", "usr/share/info"):
        shutil.rmtree(tree / junk, ignore_errors=True)
    log.write(f"kept {len(deps)} kernel modules\n")


def _agent_links(tree):
    pkg = tree / "opt/rocegen/rocegen"
    pkg.mkdir(parents=True)
    (pkg / "host").symlink_to("/mnt/src/sw")
    (pkg / "wire").symlink_to("/mnt/src/wire")
    for d in ("mnt/src", "mnt/out"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    helper = tree / "usr/local/bin/rocegen-host"
    helper.write_text("#!/bin/sh\nexec python3 -m rocegen.host.cli \"$@\"\n")
    helper.chmod(0o755)


def _versions(tree):
    out = subprocess.run(["chroot", str(tree), "dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                          *[p for p in PACKAGES if p not in ("kmod", "procps", "iputils-ping")],
                          "python3"], capture_output=True, text=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def build_guest(cache=None, mirror=MIRROR, log=sys.stdout):
    """The guest's folder, built first when it is not in the cache (minutes; one build at a time
    under a lock). Raises RuntimeError when a step fails, naming its log."""
    gdir = guest_dir(cache)
    if (gdir / "manifest.json").exists():
        return gdir
    why = missing_tools()
    if why:
        raise RuntimeError(f"cannot build the rxe guest: {why}")
    gdir.parent.mkdir(parents=True, exist_ok=True)
    with open(gdir.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (gdir / "manifest.json").exists():
            return gdir
        work = gdir.parent / f".build-{gdir.name}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        tree = work / "tree"
        t0 = time.monotonic()
        print(f"building the rxe guest (Debian {SUITE}, once; a few minutes) in {gdir}",
              file=log, flush=True)
        with open(work / "build.log", "w") as blog:
            try:
                _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
                      SUITE, str(tree), mirror], blog)
                kver = _kernel_version(tree)
                versions = _versions(tree)
                _trim(tree, kver, blog)
                vmlinuz = tree / "boot" / f"vmlinuz-{kver}"
                shutil.copy2(vmlinuz, work / "vmlinuz")
                shutil.rmtree(tree / "boot")
                (tree / "boot").mkdir()
                _agent_links(tree)
                (tree / "init").write_text(_init_text())
                (tree / "init").chmod(0o755)
                tree_bytes = sum(f.lstat().st_size for f in tree.rglob("*"))
                with open(work / "initrd.cpio", "wb") as out:
                    find = subprocess.Popen(["find", ".", "-print0"], cwd=tree,
                                            stdout=subprocess.PIPE)
                    cpio = subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"],
                                          cwd=tree, stdin=find.stdout, stdout=out)
                    find.wait()
                if cpio.returncode or find.returncode:
                    raise RuntimeError(f"packing the guest failed; see {blog.name}")
            except Exception:
                blog.flush()
                raise
        shutil.rmtree(tree)
        manifest = {"suite": SUITE, "kernel": kver, "packages": versions, "modules": MODULES,
                    "build_s": round(time.monotonic() - t0, 1), "tree_bytes": tree_bytes,
                    "initrd_bytes": (work / "initrd.cpio").stat().st_size,
                    "kernel_bytes": (work / "vmlinuz").stat().st_size, "mirror": mirror,
                    "built": time.strftime("%Y-%m-%d %H:%M:%S")}
        (work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(gdir, ignore_errors=True)
        work.rename(gdir)
        print(f"rxe guest built in {manifest['build_s']:.0f} s: kernel {kver}, "
              f"{manifest['initrd_bytes'] / 2**20:.0f} MiB", file=log, flush=True)
    return gdir


#: How long the KVM probe waits for the kernel's first line ("Linux version"), then for its
#: panic: a working KVM gets there in a second or two.
KVM_FIRST_LINE_SECONDS = 10
KVM_PANIC_SECONDS = 30


def kvm_works(kernel):
    """Whether a Linux kernel boots under KVM here. ``/dev/kvm`` may exist where it does not
    work: on a host whose processor gives no virtualisation to guests QEMU aborts at the
    machine's reset, and under some nested hypervisors the machine starts but the kernel never
    prints a line. So ``kernel`` (the guest's own) is booted with no root file system, and KVM
    counts as working when it prints its first line within :data:`KVM_FIRST_LINE_SECONDS` and
    reaches its panic ("VFS: Unable to mount root") within :data:`KVM_PANIC_SECONDS`. One probe
    per kernel and process."""
    return _kvm_boots(str(kernel))


@functools.cache
def _kvm_boots(kernel):
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    try:
        p = subprocess.Popen(["qemu-system-x86_64", "-machine", "q35", "-accel", "kvm", "-cpu",
                              "host", "-m", "256", "-nographic", "-no-reboot", "-nodefaults",
                              "-serial", "stdio", "-kernel", kernel,
                              "-append", "console=ttyS0 panic=-1"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    except OSError:
        return False
    try:
        return _reaches_panic(p.stdout.fileno())
    finally:
        p.kill()
        p.wait()


def _reaches_panic(fd):
    """Read the probe's console from ``fd`` until the kernel panics (True), or its first line
    or its panic is late, or the machine ends without one (False)."""
    start, seen = time.monotonic(), b""
    while True:
        limit = KVM_PANIC_SECONDS if b"Linux version" in seen else KVM_FIRST_LINE_SECONDS
        left = start + limit - time.monotonic()
        if left <= 0:
            return False
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return False
        seen += chunk
        if b"Kernel panic" in seen:
            return True


def qemu_command(gdir, src, out, *, tap, mac, memory_mib=1024, kvm=None):
    """QEMU's command line booting the guest of ``gdir`` with ``src`` shared read-only and
    ``out`` writable, its NIC (virtio, MAC ``mac``) on the TAP interface ``tap``; TCG unless
    ``kvm`` (default: when :func:`kvm_works` with the guest's kernel)."""
    if kvm is None:
        kvm = kvm_works(gdir / "vmlinuz")
    return ["qemu-system-x86_64", "-machine", "q35", "-accel", "kvm" if kvm else "tcg",
            "-cpu", "host" if kvm else "max", "-m", str(memory_mib), "-smp", "1",
            "-nographic", "-no-reboot", "-nodefaults", "-serial", "stdio",
            "-kernel", str(gdir / "vmlinuz"), "-initrd", str(gdir / "initrd.cpio"),
            "-append", "console=ttyS0 rdinit=/init quiet panic=-1",
            "-virtfs", f"local,path={src},mount_tag=src,security_model=none,readonly=on",
            "-virtfs", f"local,path={out},mount_tag=out,security_model=none",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,mac={mac}"]
