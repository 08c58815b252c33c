"""``rocegen bench``: runs the benchmark suite (:mod:`rocegen.sim.apps.bench_suite`), or takes
the results of an earlier run, and writes its reports (:mod:`rocegen.sim.apps.bench_report`):
the summary, ``docs/performance.md``, its plots and the README's headline table."""

import json
import sys
from pathlib import Path

from rocegen.sim.apps import bench_report, bench_suite
from rocegen.sim.testing.cocotb_runner import BUILD, ROOT

__all__ = ["add_parser", "run"]


def add_parser(sub):
    """The ``bench`` sub-command of ``rocegen``."""
    p = sub.add_parser("bench", help="run the benchmark suite of the endpoint (Verilator): "
                       "goodput, message rate, latency, loss, resources")
    p.add_argument("--quick", action="store_true",
                   help="a few points of each kind, in one simulator process (a smoke test)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="results file (default bench/results.json; build/bench/quick.json with "
                   "--quick)")
    p.add_argument("--no-doc", action="store_true",
                   help="do not regenerate docs/performance.md, its plots and the README headline "
                   "(never done with --quick)")
    p.add_argument("--doc-only", action="store_true",
                   help="only regenerate the documents from the results file")
    p.add_argument("--resources", action="store_true",
                   help="only take the resource figures of the last Yosys report (make synth) "
                   "into the results file, then regenerate the documents")
    p.add_argument("--peer", choices=("connectx", "ideal"), default="connectx",
                   help="behaviour of the host NIC model: a ConnectX's (ACKs coalesced by count "
                   "and timer, answers 0.3..1.2 us late, credit codes of the receive queue, "
                   "port MTU 4200; the default) or the ideal peer (an ACK per AckReq at once)")
    p.add_argument("--only", nargs="+", metavar="BATCH",
                   help="run only these batches and replace their figures in the results file "
                   "(the others keep theirs, with the revision they were measured at)")
    return p


def run(args):
    """``rocegen bench``."""
    default = BUILD / "bench" / "quick.json" if args.quick else ROOT / "bench" / "results.json"
    path = Path(args.json) if args.json else default
    if args.doc_only or args.resources:
        if not path.exists():
            raise ValueError(f"{path} does not exist: run the suite first")
        results = json.loads(path.read_text())
        if args.resources:
            results["resources"] = bench_suite.resources()
            path.write_text(json.dumps(results, indent=1) + "\n")
            print(f"wrote {path}")
    else:
        previous = json.loads(path.read_text()) if args.only and path.exists() else None
        if args.only and previous is None:
            raise ValueError(f"--only replaces batches of an earlier run, but {path} does not exist")
        results = bench_suite.run_suite(args.quick, log=lambda s: print(s, flush=True), only=args.only,
                            previous=previous, peer=args.peer)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {path}")
    print(bench_report.summary(results))
    if results["failed_batches"]:
        print("failed batches: " + ", ".join(b["name"] for b in results["failed_batches"]),
              file=sys.stderr)
        return 1
    if not args.quick and not args.no_doc and not results.get("quick"):
        for written in bench_report.write_docs(results, ROOT):
            print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_parser(ap.add_subparsers(dest="command", required=True))
    sys.exit(run(ap.parse_args(["bench", *sys.argv[1:]])))
