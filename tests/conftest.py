"""The gate's budget: the tests named in ``tests/full_tier.txt`` (written by
``bench/gate_plan.py`` from the measured seconds of a gate run, by the rule in its documentation)
are marked ``full``, as the cases marked in their own files are (``tests/tiers.py``), so that
``make test`` leaves them to ``make test-full``.

A run of the whole suite fails at collection when the list names a test that does not exist: a
renamed or removed test must leave the list with it."""

from pathlib import Path

import pytest

from bench.gate_plan import LIST as FULL_TIER
from bench.gate_plan import full_tier


def _whole_suite(config):
    here = Path(__file__).resolve().parent
    return [Path(a).resolve() for a in config.args] in ([here], [here.parent])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    names = full_tier()
    seen = set()
    for item in items:
        if item.nodeid in names:
            item.add_marker(pytest.mark.full)
            seen.add(item.nodeid)
    missing = sorted(names - seen)
    if missing and _whole_suite(config):
        raise pytest.UsageError(f"{FULL_TIER.name} names tests that do not exist (run "
                                f"bench/gate_plan.py again or edit it): {', '.join(missing)}")
