"""The host agent's real-verbs NIC (:class:`rocegen.host.nic.VerbsNic`) with a fake pyverbs
(:mod:`tests.fake_pyverbs`, whose objects report any use after they were destroyed): the NIC
closed while its CQ is polled."""

import sys
import threading
import time

import pytest

from rocegen.host.nic import NicError, VerbsNic
from tests.fake_pyverbs import LOCAL_IP, modules


@pytest.fixture
def verbs(monkeypatch):
    """The fake pyverbs in ``sys.modules``; its record of what was done (:class:`Verbs`)."""
    mods = modules()
    for name, module in mods.items():
        monkeypatch.setitem(sys.modules, name, module)
    return mods["pyverbs"].state


# ---------------------------------------------------------------------- closing

def test_close_waits_for_a_poll_and_later_polls_fail_cleanly(verbs):
    """VerbsNic.close while another thread polls the CQ: the poll under way ends first, and every
    later one raises NicError, touching no destroyed object."""
    nic = VerbsNic()
    assert nic.local_ip == LOCAL_IP
    nic.create_qp(4)
    addr, _ = nic.register(4096)
    outcome = []

    def poller():
        try:
            while True:
                nic.poll(64, timeout=0.01)
        except Exception as e:          # whatever it was, the test looks at it
            outcome.append(e)

    t = threading.Thread(target=poller, daemon=True)
    t.start()
    while not verbs.polls:
        time.sleep(0.001)
    nic.close()
    t.join(timeout=5)
    assert not t.is_alive()
    assert verbs.misuse == []
    assert len(outcome) == 1 and isinstance(outcome[0], NicError), outcome
    assert "closed" in str(outcome[0])
    assert verbs.closed == ["QP", "MR", "CQ", "PD", "context"]
    for later in (lambda: nic.poll(1), lambda: nic.poll_send(1), lambda: nic.read(addr, 4),
                  lambda: nic.write(addr, b"x"), lambda: nic.create_qp(4)):
        with pytest.raises(NicError, match="closed"):
            later()
    nic.close()                         # a second close does nothing
    assert verbs.misuse == [] and len(verbs.closed) == 5
