"""Fixtures of the host agent's tests."""

import sys

import pytest

from tests.fake_pyverbs import modules


@pytest.fixture
def verbs(monkeypatch):
    """The fake pyverbs in ``sys.modules``; its record of what was done
    (:class:`tests.fake_pyverbs.Verbs`)."""
    mods = modules()
    for name, module in mods.items():
        monkeypatch.setitem(sys.modules, name, module)
    return mods["pyverbs"].state
