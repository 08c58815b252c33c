"""Whether two benchmark results files (``rocegen bench --json``) hold the same simulated
figures: every run of the one matched with the run of the same parameters in the other, and
every field that counts cycles, frames, bytes or rates compared; wall-clock seconds and
revisions are left out.

    .venv/bin/python -m bench.bench_same_figures bench/results.json build/bench/now.json

prints one line per run whose figures differ (with the fields and both values), the runs only
one file has, and a last line with the counts; it ends with status 1 when a figure differs.
Changes to the test suite must leave the figures as they were; a change to the gateware says
in its own words which figures it moved.
"""

import argparse
import json
import sys

#: The lists of runs in a results file, and the fields that name a run (its parameters).
SECTIONS = ("goodput", "message_rate", "latency", "cm", "loss", "recovery", "responder", "read",
            "incast", "soak", "resp_fuzz")
KEYS = ("batch", "kind", "test", "qps", "pmtu", "bytes", "size", "opcode", "source", "memory",
        "line_gbps", "timeout", "loss", "rtt_us", "seed", "outstanding", "where", "drop_psns",
        "senders")
#: Fields that are not simulated figures.
SKIP = {"wall_seconds", "framecheck_seconds", "framecheck_wait_seconds", "revision", "series",
        "parameters"}


def _key(run):
    return json.dumps({k: run.get(k) for k in KEYS if k in run}, sort_keys=True)


def runs(results):
    """``{(section, key): run}`` of a results file."""
    out = {}
    for section in SECTIONS:
        for run in results.get(section) or []:
            if isinstance(run, dict):
                out.setdefault((section, _key(run)), run)
    return out


def differences(a, b):
    """The fields (besides :data:`SKIP`) whose values differ between two runs."""
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if k not in SKIP and a.get(k) != b.get(k)}


def compare(old, new, sections=None):
    """``(changed, only_old, only_new, same)`` between two results (dicts); ``sections``, when
    given, limits the comparison to those lists."""
    ro, rn = runs(old), runs(new)
    if sections:
        ro = {k: v for k, v in ro.items() if k[0] in sections}
        rn = {k: v for k, v in rn.items() if k[0] in sections}
    changed, same = [], 0
    for k in sorted(set(ro) & set(rn)):
        d = differences(ro[k], rn[k])
        if d:
            changed.append((k, d))
        else:
            same += 1
    return changed, sorted(set(ro) - set(rn)), sorted(set(rn) - set(ro)), same


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="results file (e.g. bench/results.json)")
    ap.add_argument("new", help="results file to compare with it")
    ap.add_argument("--sections", nargs="+", choices=SECTIONS,
                    help="compare only these lists of runs")
    ap.add_argument("--only-common", action="store_true",
                    help="do not list runs only one of the files has (e.g. a partial run)")
    args = ap.parse_args(argv)
    with open(args.old) as f:
        old = json.load(f)
    with open(args.new) as f:
        new = json.load(f)
    changed, only_old, only_new, same = compare(old, new, args.sections)
    for (section, key), d in changed:
        print(f"{section} {key}:")
        for field, (a, b) in d.items():
            print(f"    {field}: {a!r} -> {b!r}")
    if not args.only_common:
        for section, key in only_old:
            print(f"only in {args.old}: {section} {key}")
        for section, key in only_new:
            print(f"only in {args.new}: {section} {key}")
    print(f"{same} runs with the same figures, {len(changed)} with other figures"
          + ("" if args.only_common else
             f", {len(only_old)} only in {args.old}, {len(only_new)} only in {args.new}"))
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
