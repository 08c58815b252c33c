"""``rocegen sim demo --peer-op``'s options: validated before anything is built (no Verilator
here), and the help describes them with examples that name only options the parser takes."""

import shlex
import sys

import pytest

from rocegen.cli.main import main


def run(argv):
    """``main``'s exit status, also for errors argparse itself reports (it exits with 2)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("args, message", [
    (["--peer-op", "WRITE", "--opcode", "SEND"],
     "--opcode is what the endpoint sends; with --peer-op the host sends"),
    # W = 512: 2 MiB of memory, the region its lower half, two QPs share it
    (["--peer-op", "WRITE", "--size", "0"], "--size must be 1..524288 with --peer-op"),
    (["--peer-op", "SEND", "--size", "524289"], "--size must be 1..524288 with --peer-op"),
    # W = 64: 256 KiB of memory; four QPs share its lower half
    (["--peer-op", "SEND_IMM", "--width", "64", "--qps", "4", "--size", "32769"],
     "--size must be 1..32768 with --peer-op (each QP's share of the responder's region with 4 "
     "QPs at W = 64), not 32769"),
    (["--peer-op", "WRITE", "--bytes", "0"], "--bytes must be >= 1 with --peer-op, not 0"),
    (["--peer-op", "WRITE", "--phy", "xgmii"], "--peer-op runs on the AXI-Stream MAC port"),
    (["--peer-op", "WRITE", "--vlan", "5"], "--peer-op runs on the AXI-Stream MAC port"),
    (["--peer-op", "WRITE_IMM", "--loss", "1"], "--loss must be a probability in [0, 1), not 1.0"),
    (["--peer-op", "WRITE", "--line-gbps", "-1"], "--line-gbps must be a line rate 0..1000 Gb/s"),
    (["--peer-op", "FETCH_ADD", "--count", "0"], "--count must be 1..65536 with --peer-op"),
    (["--peer-op", "COMPARE_SWAP", "--outstanding", "17"],
     "--outstanding must be 1..16 (the host QP's max_rd_atomic), not 17"),
    (["--line-gbps", "nan"], "--line-gbps must be a line rate 0..1000 Gb/s"),
    # the endpoint's own atomics
    (["--op", "FETCH_ADD", "--count", "0"], "--count must be 1..65536 with --op FETCH_ADD"),
    (["--op", "COMPARE_SWAP", "--size", "16"],
     "--size must be 8 with --op COMPARE_SWAP (each message is one 8-byte atomic), not 16"),
    (["--op", "FETCH_ADD", "--outstanding", "4"],
     "--outstanding is the host's (--peer-op); with --op FETCH_ADD the endpoint keeps"),
    (["--op", "FETCH_ADD", "--peer-op", "WRITE"], "--opcode is what the endpoint sends"),
])
def test_bad_peer_options_are_clear_errors(tmp_path, capsys, args, message):
    out = tmp_path / "demo"
    assert main(["sim", "demo", *args, "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_unknown_peer_opcode_exits_2(tmp_path, capsys):
    assert run(["sim", "demo", "--peer-op", "ATOMIC", "-o", str(tmp_path / "demo")]) == 2
    assert "argument --peer-op: invalid choice: 'ATOMIC'" in capsys.readouterr().err


def test_help_describes_peer_op_and_its_examples_parse(capsys, monkeypatch):
    assert run(["sim", "demo", "--help"]) == 0
    text = capsys.readouterr().out
    words = " ".join(text.split())
    assert "--peer-op OP" in words and "WRITE, WRITE_IMM, SEND, SEND_IMM or READ" in words
    examples = [line.strip() for line in text.splitlines()
                if line.strip().startswith("rocegen sim demo")]
    assert "FETCH_ADD or COMPARE_SWAP: the contended counter" in words
    assert len(examples) == 7 and any("--peer-op READ" in e for e in examples) and \
        any("--op READ" in e for e in examples) and any("--op FETCH_ADD" in e for e in examples)
    # each example, as typed, passes argparse (the runs themselves are in
    # tests/test_cocotb_responder.py): a bad one would exit 2 before the handler
    seen = []
    monkeypatch.setattr(sys.modules["rocegen.cli.main"], "_sim_demo",
                        lambda args: seen.append(args) or 0)
    for e in examples:
        assert main(shlex.split(e)[1:]) == 0, e
    assert [a.peer_op for a in seen] == [None, "SEND_IMM", "WRITE", "READ", None, "FETCH_ADD",
                                         None]
    assert (seen[-1].opcode, seen[-1].qps, seen[-1].count) == ("FETCH_ADD", 2, 8)
