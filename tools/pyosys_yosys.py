"""The ``yosys`` command line, as far as :mod:`rocegen.tools.synth` uses it, on the native Yosys
of the ``pyosys`` package.

``pyosys`` (PyPI) is Yosys built as a Python extension (``libyosys.so``, with ABC as its
``yosys-abc`` beside it); it ships no ``yosys`` executable. This module stands for one:

    python -m rocegen.tools.pyosys_yosys -V                     # the version line
    python -m rocegen.tools.pyosys_yosys [-q] [-l LOG] SCRIPT.ys

runs the script as ``yosys [-q] [-l LOG] SCRIPT.ys`` would: the log (``-l``) starts with the
version line and then holds everything Yosys logs; ``-q`` keeps it off the console. Yosys's
``ERROR:`` ends the process with status 1, as the executable does. Each run is a process of its
own (Yosys keeps its design and state in globals).
"""

import sys

USAGE = "usage: python -m rocegen.tools.pyosys_yosys (-V | [-q] [-l LOG] SCRIPT.ys)"


def parse(argv):
    """``(version, quiet, log, script)`` from the arguments; raises ``ValueError`` on others."""
    if argv == ["-V"]:
        return True, False, None, None
    quiet, log, script = False, None, None
    args = iter(argv)
    for a in args:
        if a == "-q":
            quiet = True
        elif a == "-l":
            log = next(args, None)
            if log is None:
                raise ValueError("-l needs a file name")
        elif a.startswith("-") or script is not None:
            raise ValueError(f"unsupported argument {a!r}")
        else:
            script = a
    if script is None:
        raise ValueError("no script given")
    for name in (log, script):
        if name is not None and (not name or any(c.isspace() for c in name)):
            # the names become words of a Yosys command, which has no quoting for them
            raise ValueError(f"file names with white space are not supported: {name!r}")
    return False, quiet, log, script


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        version, quiet, log, script = parse(argv)
    except ValueError as e:
        print(f"{e}\n{USAGE}", file=sys.stderr)
        return 2
    from pyosys import libyosys as ys
    if version:
        print(ys.yosys_maybe_version())
        return 0
    command = f"script {script}"
    if log is not None:
        with open(log, "w") as f:
            f.write(ys.yosys_maybe_version() + "\n\n")
        command = f"tee{' -q' if quiet else ''} -a {log} {command}"
    ys.run_pass(command)            # an ERROR: in the script exits with status 1
    ys.log_flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
