"""Wireshark's view of the captures the demo and the benches write: ``tshark`` dissects every
frame of each pcap, and the check fails on any malformed header or on any RoCE frame (UDP port
4791) that Wireshark does not decode as InfiniBand.

``python -m rocegen.sim.apps.interop [--vectors OUT.pcap] PCAP...`` (``make interop`` makes the
captures first). Per frame, tshark's fields say what it made of it:

* ``_ws.malformed`` (a dissector ran out of bytes or met an impossible value) fails the frame;
* expert information of severity *error* fails it, with IPv4 and UDP checksum validation on (a
  UDP checksum of 0 is "not present", which RoCEv2 over IPv4 allows);
* a frame to or from UDP port 4791 must carry ``infiniband`` in its protocols with a BTH opcode.

Wireshark's heuristic dissectors of InfiniBand payloads (iSER, SMB Direct, NVMe-RDMA, ...) are
turned off: they guess at user data, and a guess gone wrong says nothing about the headers (a
malformed mark inside whatever still claims the payload is counted apart, not as a fault).
``--vectors OUT.pcap`` first writes the frames captured from real NICs
(``tests/vectors/roce-captures.txt``) to a pcap, which is then checked with the others.

The report gives, per file, the frames tshark dissected, the RoCE frames it decoded as
InfiniBand, by BTH opcode, and the problems found; the exit status is 1 when there is any
problem, 2 when tshark is missing.
"""

import argparse
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

__all__ = ["tshark_path", "dissect", "check_pcap", "write_vector_pcap", "main"]

ROCE_PORT = "4791"
FIELDS = ("frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.severity",
          "_ws.expert.message", "udp.srcport", "udp.dstport", "infiniband.bth.opcode")
#: how tshark says "error" in the severity field (the value of PI_ERROR)
SEVERITY_ERROR = 0x00800000
INSTALL_HINT = ("tshark is missing: install it with `apt-get install tshark` (as root, with "
                "DEBIAN_FRONTEND=noninteractive and wireshark-common/install-setuid=false "
                "preseeded), or run `make tshark` as root")


def tshark_path():
    """The ``tshark`` executable, or ``None``."""
    return shutil.which("tshark")


def _ib_heuristics(tshark):
    out = subprocess.run([tshark, "-G", "heuristic-decodes"], capture_output=True, text=True,
                         check=True).stdout
    return sorted({line.split("\t")[1] for line in out.splitlines()
                   if line.startswith("infiniband.payload\t")})


def dissect(pcap, tshark=None):
    """tshark's fields of every frame of ``pcap``: a list of dicts (field -> list of values)."""
    tshark = tshark or tshark_path()
    if tshark is None:
        raise FileNotFoundError(INSTALL_HINT)
    cmd = [tshark, "-n", "-r", str(pcap), "-o", "ip.check_checksum:TRUE",
           "-o", "udp.check_checksum:TRUE", "-o", "infiniband.try_heuristic_first:FALSE",
           "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|"]
    for proto in _ib_heuristics(tshark):
        if proto != "ethertype":            # that one is Ethernet's own dissector as well
            cmd += ["--disable-protocol", proto]
    for f in FIELDS:
        cmd += ["-e", f]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"tshark failed on {pcap} ({proc.returncode}): {proc.stderr.strip()}")
    rows = []
    for line in proc.stdout.splitlines():
        values = line.split("\t")
        values += [""] * (len(FIELDS) - len(values))
        rows.append({f: [v for v in val.split("|") if v] for f, val in zip(FIELDS, values)})
    return rows


def _severities(values):
    out = []
    for v in values:
        try:
            out.append(int(v, 0))
        except ValueError:
            out.append(SEVERITY_ERROR if v.lower() == "error" else 0)
    return out


def _payload_guess(protocols):
    """True when a dissector other than plain data took the bytes after the InfiniBand
    headers (a heuristic's guess at user data)."""
    if "infiniband" not in protocols:
        return False
    after = protocols[protocols.index("infiniband") + 1:]
    return any(p not in ("data", "_ws.malformed") for p in after)


def check_pcap(pcap, tshark=None):
    """``(report, problems)`` for one capture: ``report`` holds ``frames``, ``roce`` (frames on
    UDP 4791 decoded as InfiniBand) and ``opcodes`` (a Counter of their BTH opcodes);
    ``payload_guesses_ignored`` (malformed frames whose fault lies in a guess at the InfiniBand
payload); ``problems`` is a list of text, one per fault found."""
    rows = dissect(pcap, tshark)
    problems, opcodes = [], Counter()
    roce = heuristic = 0
    for r in rows:
        n = r["frame.number"][0] if r["frame.number"] else "?"
        protocols = (r["frame.protocols"] or [""])[0].split(":")
        malformed = bool(r["_ws.malformed"]) or "_ws.malformed" in protocols
        guessed = _payload_guess(protocols)
        if malformed and guessed:
            heuristic += 1                  # inside a guess at the payload: not a header fault
        elif malformed:
            problems.append(f"frame {n}: malformed ({':'.join(protocols)})")
        errors = [m for m, s in zip(r["_ws.expert.message"], _severities(r["_ws.expert.severity"]))
                  if s >= SEVERITY_ERROR]
        if errors:
            problems.append(f"frame {n}: expert errors: {'; '.join(errors)}")
        if ROCE_PORT in r["udp.dstport"] or ROCE_PORT in r["udp.srcport"]:
            if "infiniband" not in protocols or not r["infiniband.bth.opcode"]:
                problems.append(f"frame {n}: UDP port 4791 but not decoded as InfiniBand "
                                f"({':'.join(protocols)})")
            else:
                roce += 1
                opcodes[int(r["infiniband.bth.opcode"][0], 0)] += 1
    return {"frames": len(rows), "roce": roce, "opcodes": opcodes,
            "payload_guesses_ignored": heuristic}, problems


def write_vector_pcap(out, paths=None):
    """Write every frame of the vector files (default: the captures of real NICs,
    ``tests/vectors/roce-captures.txt``; the synthetic ICRC vectors break checksum rules on
    purpose) to a pcap; returns how many."""
    from rocegen.sim.testing.pcap import PcapWriter
    from rocegen.sim.testing.vectors import CAPTURE_VECTORS, read_vectors
    paths = paths or [CAPTURE_VECTORS]
    n = 0
    with PcapWriter(out) as pcap:
        for path in paths:
            for _, frame in read_vectors(path):
                pcap.write(frame, 1000 * n)
                n += 1
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m rocegen.sim.apps.interop", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pcaps", nargs="*", type=Path, help="captures to dissect")
    ap.add_argument("--vectors", type=Path, metavar="OUT.pcap",
                    help="also write the captured frames of tests/vectors to this pcap and check it")
    args = ap.parse_args(argv)
    tshark = tshark_path()
    if tshark is None:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    pcaps = list(args.pcaps)
    if args.vectors:
        write_vector_pcap(args.vectors)
        pcaps.append(args.vectors)
    if not pcaps:
        ap.error("no capture to check")
    bad = 0
    for pcap in pcaps:
        if not pcap.is_file():
            print(f"{pcap}: missing", file=sys.stderr)
            bad += 1
            continue
        report, problems = check_pcap(pcap, tshark)
        ops = ", ".join(f"{op:#04x} x{c}" for op, c in sorted(report["opcodes"].items()))
        print(f"{pcap}: {report['frames']} frames dissected by tshark, {report['roce']} RoCE "
              f"frames decoded as InfiniBand ({ops or 'none'}), {len(problems)} problems")
        for p in problems[:20]:
            print(f"  {p}")
        if len(problems) > 20:
            print(f"  ... and {len(problems) - 20} more")
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
