"""Reader of the test-vector files in ``tests/vectors``.

A vector file holds records of two lines, ``name: <what the frame is>`` then ``hex: <bytes>``;
lines starting with ``#`` are comments.
"""

from pathlib import Path

__all__ = ["ICRC_VECTORS", "CAPTURE_VECTORS", "RXE_VECTORS", "read_vectors"]

#: RoCEv2 frames with a known-good ICRC (whole Ethernet frames without FCS), computed
#: independently of this project (scapy's roce layer, cross-checked by another CRC-32).
ICRC_VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors" / "icrc-synthetic.txt"
#: RoCEv2 frames captured from real NICs, each with its public source named in the file.
CAPTURE_VECTORS = ICRC_VECTORS.parent / "roce-captures.txt"
#: RoCEv2 frames Linux's soft-RoCE (rdma_rxe) sent to the endpoint in ``rocegen sim rxe`` runs,
#: one of each kind (``rocegen sim rxe --vectors``).
RXE_VECTORS = ICRC_VECTORS.parent / "rxe-captures.txt"


def read_vectors(path=ICRC_VECTORS):
    """``[(name, frame bytes), ...]`` in file order."""
    out, name = [], None
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("hex:"):
            if name is None:
                raise ValueError(f"{path}:{n}: hex record without a name")
            out.append((name, bytes.fromhex(line[4:].strip())))
            name = None
    if not out:
        raise ValueError(f"{path}: no vectors")
    return out
