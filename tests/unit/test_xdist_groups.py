"""The test runner keeps the promise ``make test`` relies on: with ``-n 2 --dist loadgroup``,
the tests of one ``xdist_group`` run in one worker, in one session, so that a module fixture
they share is set up once (the rxe co-simulation, the served endpoint of the host agent's
tests, the board build folders). pytest-xdist's grouping can stop working without a word when
pytest changes under it (pytest-dev/pytest-xdist#1386); this test fails then."""

import subprocess
import sys

TOY = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("toy")


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    # a file per set-up, named by the worker that made it
    (tmp_path_factory.getbasetemp().parent / f"setup-{os.getpid()}").touch()


@pytest.mark.parametrize("i", range(6))
def test_grouped(shared, i):
    pass


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


def test_a_group_runs_in_one_worker_with_one_setup(tmp_path):
    (tmp_path / "test_toy.py").write_text(TOY)
    base = tmp_path / "base"
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
                        "-p", "no:cacheprovider", "-q", "-rA", "--basetemp", str(base),
                        str(tmp_path / "test_toy.py")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # loadgroup names each grouped test's group after an @
    grouped = [line for line in r.stdout.splitlines()
               if line.startswith("PASSED") and "test_grouped" in line]
    assert len(grouped) == 6 and all(line.endswith("@toy") for line in grouped), r.stdout
    setups = list(base.glob("setup-*"))
    assert len(setups) == 1, f"the group's module fixture was set up {len(setups)} times"
