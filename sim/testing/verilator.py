"""Where the project's Verilator is, without relying on ``PATH``.

cocotb 2.x needs Verilator >= 5.036 (Debian 12 ships 5.006), so ``make setup`` finds or builds
one with ``tools/verilator.sh``: into a per-user cache directory, recording its ``bin``
directory in ``<virtual environment>/verilator-bin``. :func:`verilator_bin_dir` finds it again
from any command of the project, whatever ``PATH`` holds, in this order:

1. ``$ROCEGEN_VERILATOR``: the ``verilator`` executable or the directory holding it (used as
   given: an error if it is not a new enough Verilator);
2. a ``verilator`` on ``PATH`` that is new enough;
3. the directory ``make setup`` recorded in ``<sys.prefix>/verilator-bin``;
4. the cached build ``tools/verilator.sh`` makes: ``$ROCEGEN_CACHE`` (default
   ``${XDG_CACHE_HOME:-~/.cache}/rocegen``) ``/verilator-<version>/bin``, the pinned version
   (``$ROCEGEN_VERILATOR_VERSION``, default :data:`PIN`) first, then any other complete one,
   newest first.

Otherwise :class:`VerilatorNotFound` says how to get one. :func:`verilator_on_path` puts the
directory first on ``PATH`` for the duration of a build (cocotb's runner looks ``verilator``
up there).
"""

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["MIN_VERSION", "PIN", "VerilatorNotFound", "verilator_bin_dir", "verilator_on_path",
           "verilator_version", "cache_root"]

#: Oldest Verilator cocotb 2.x accepts (as ``tools/verilator.sh``'s ``MIN``).
MIN_VERSION = "5.036"
#: The version ``tools/verilator.sh`` builds unless ``$ROCEGEN_VERILATOR_VERSION`` names another.
PIN = "5.048"

_ROOT = Path(__file__).resolve().parents[2]


class VerilatorNotFound(RuntimeError):
    """No Verilator new enough for cocotb was found; the message says how to get one."""


def _key(version):
    return tuple(int(x) for x in version.split("."))


def verilator_version(executable):
    """``"5.048"`` for a Verilator executable (what ``--version`` reports), else None."""
    try:
        out = subprocess.run([str(executable), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^Verilator (\d+\.\d+)", out, re.M)
    return m.group(1) if m else None


def _new_enough(executable):
    v = verilator_version(executable)
    return v is not None and _key(v) >= _key(MIN_VERSION)


def cache_root(env=None):
    """The per-user cache directory ``tools/verilator.sh`` builds into."""
    env = os.environ if env is None else env
    if env.get("ROCEGEN_CACHE"):
        return Path(env["ROCEGEN_CACHE"])
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(xdg) / "rocegen"


def _cached_dirs(env):
    root = cache_root(env)
    pin = env.get("ROCEGEN_VERILATOR_VERSION") or PIN
    found = []
    if root.is_dir():
        for d in root.glob("verilator-*"):
            m = re.fullmatch(r"verilator-(\d+(?:\.\d+)*)", d.name)
            if m and (d / ".complete").exists():
                found.append((m.group(1) == pin, _key(m.group(1)), d / "bin"))
    return [d for *_, d in sorted(found, reverse=True)]


def verilator_bin_dir(env=None, prefix=None):
    """The directory holding a ``verilator`` >= :data:`MIN_VERSION` (see the module
    documentation for the order). ``env`` (default ``os.environ``) and ``prefix`` (default
    ``sys.prefix``, where ``make setup`` records its directory) are for tests."""
    env = os.environ if env is None else env
    prefix = Path(sys.prefix if prefix is None else prefix)
    looked = []
    given = env.get("ROCEGEN_VERILATOR")
    if given:
        p = Path(given)
        exe = p / "verilator" if p.is_dir() else p
        v = verilator_version(exe) if exe.is_file() else None
        if v is not None and _key(v) >= _key(MIN_VERSION):
            return exe.parent
        what = f"Verilator {v}, older than {MIN_VERSION}" if v else "no Verilator"
        raise VerilatorNotFound(
            f"$ROCEGEN_VERILATOR={given} is {what}: name a Verilator >= {MIN_VERSION} "
            f"executable or its bin directory, or unset it ({_how()})")
    on_path = shutil.which("verilator", path=env.get("PATH", os.defpath))
    if on_path and _new_enough(on_path):
        return Path(on_path).parent
    looked.append(f"PATH ({'Verilator ' + str(verilator_version(on_path)) if on_path else 'none'})")
    record = prefix / "verilator-bin"
    candidates = []
    if record.is_file():
        lines = record.read_text().strip().splitlines()
        if lines:
            candidates.append((Path(lines[-1]), f"{record} ({lines[-1]})"))
    else:
        looked.append(f"{record} (missing)")
    candidates += [(d, str(d)) for d in _cached_dirs(env)]
    for d, label in candidates:
        if (d / "verilator").is_file() and _new_enough(d / "verilator"):
            return d
        looked.append(label)
    looked.append(f"{cache_root(env)}/verilator-*/bin")
    raise VerilatorNotFound(
        f"no Verilator >= {MIN_VERSION} found (cocotb needs it; looked at: {'; '.join(looked)}). "
        + _how())


def _how():
    return (f"Get one with `make setup` in {_ROOT} (finds or builds it, about 6 minutes the "
            f"first time, and records it for every rocegen command), or run "
            f"`bash {_ROOT / 'tools' / 'verilator.sh'}`, which prints its bin directory: put that "
            f"on PATH or in $ROCEGEN_VERILATOR")


@contextlib.contextmanager
def verilator_on_path():
    """Run the body with :func:`verilator_bin_dir` first on ``PATH`` (restored afterwards);
    yields the directory."""
    d = verilator_bin_dir()
    old = os.environ.get("PATH")
    os.environ["PATH"] = os.pathsep.join([str(d)] + ([old] if old else []))
    try:
        yield d
    finally:
        if old is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = old
