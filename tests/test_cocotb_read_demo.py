"""``rocegen sim demo --peer-op READ`` (the host NIC model READs the endpoint) and ``--op READ``
(the endpoint READs the host's memory), at W = 64 on the responder's build that
:mod:`tests.test_cocotb_responder` uses: each example of the help, as typed."""

import json
import shlex

import pytest

from rocegen.cli import main

#: the examples' figures: bytes per QP, message size, QPs, path MTU (the default)
PER_QP, SIZE, QPS, PMTU = 65536, 8192, 2, 4096


def example(capsys, start):
    """The help's example that starts with ``start``, as ``main``'s arguments."""
    with pytest.raises(SystemExit) as e:
        main(["sim", "demo", "--help"])
    assert e.value.code == 0
    line = next(x.strip() for x in capsys.readouterr().out.splitlines()
                if x.strip().startswith(start))
    return shlex.split(line)[1:]


@pytest.mark.parametrize("start, kind", [("rocegen sim demo --peer-op READ", "peer_read"),
                                         ("rocegen sim demo --op READ", "read")])
def test_read_demo(tmp_path, capsys, start, kind):
    argv = example(capsys, start)
    assert main([*argv, "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    r = json.loads((tmp_path / "roce_w64_responder.json").read_text())[0]
    messages = QPS * PER_QP // SIZE
    assert r["kind"] == kind and r["messages"] == messages and r["rounds"] == 1
    assert r["packets"] == messages * SIZE // PMTU
    assert r["checked_bytes"] == QPS * PER_QP and r["goodput_gbps"] > 0
    assert r["line_cycles"] > 0
    if kind == "peer_read":
        assert "the host READs messages of 8192 bytes" in text
        assert "every READ completed OK at the host" in text
        assert r["read_retries"] == 0
    else:
        assert "the endpoint READs messages of 8192 bytes" in text
        assert "every READ work request completed OK" in text
        # the host executed each READ once and answered it in full; it sent no request
        assert r["host_reads_executed"] == messages and r["retransmitted"] == 0
        assert r["host_read_responses"] == messages * SIZE // PMTU
    assert (tmp_path / "roce_w64_responder.pcap").stat().st_size > 0
