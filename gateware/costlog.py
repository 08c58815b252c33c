"""A log of what building the gateware cost: one JSON object per line, appended by every process.

The Verilator model builds (:mod:`rocegen.sim.testing.cocotb_runner`) and the Yosys runs
(:func:`rocegen.tools.synth.synthesize`) each add a line saying what was built, how long it took
and whether it was done or taken from a cache; ``.ci/run`` sums them up at the end of a CI run
(``bench/ci_time.py``). A line looks like::

    {"t": 1767225600.12, "kind": "verilator", "name": "endpoint-1a2b3c4d5e", "source": "compiled",
     "seconds": 97.31, "pid": 4242}

The log is ``$ROCEGEN_COST_LOG`` when that is set (an empty value turns it off), else
``build/bench/builds.jsonl`` of the source checkout the package runs from (none when it is
installed elsewhere than a checkout). Every line is one ``write`` to a file opened with
``O_APPEND``, so the lines of parallel processes (pytest-xdist workers) do not mix. Recording
never fails the build: a log that cannot be written is skipped silently.
"""

import json
import os
import time
from pathlib import Path

__all__ = ["cost_log_path", "record"]

_ROOT = Path(__file__).resolve().parent.parent


def cost_log_path(env=None):
    """The log file (a :class:`~pathlib.Path`), or None when nothing is to be recorded."""
    env = os.environ if env is None else env
    given = env.get("ROCEGEN_COST_LOG")
    if given is not None:
        return Path(given) if given else None
    if not (_ROOT / "pyproject.toml").is_file():        # an installed package: no checkout
        return None
    return _ROOT / "build" / "bench" / "builds.jsonl"


def record(kind, name, source, seconds, **extra):
    """Append one line: ``kind`` (``"verilator"``, ``"yosys"``), ``name`` (the build), ``source``
    (how it was obtained: ``"compiled"``, ``"reused"``, ``"synthesized"``, ``"cache"``...),
    ``seconds`` spent on it by this process, and ``extra`` JSON-serialisable fields."""
    path = cost_log_path()
    if path is None:
        return
    entry = {"t": round(time.time(), 3), "kind": kind, "name": name, "source": source,
             "seconds": round(seconds, 3), "pid": os.getpid(), **extra}
    line = (json.dumps(entry, sort_keys=False, default=str) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass
