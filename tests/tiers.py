"""The two tiers of the suite: ``make test`` (the gate, what CI runs) leaves out the tests marked
``full``, which ``make test-full`` adds (more seeds, sizes, PMTUs, widths, memories and QP
counts, and the long soaks)."""

import pytest

__all__ = ["full"]


def full(*values, id=None):
    """A parametrize case of the full tier: ``pytest.param(*values)`` marked ``full``."""
    return pytest.param(*values, marks=pytest.mark.full, id=id)
