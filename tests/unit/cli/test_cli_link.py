"""``rocegen sim demo``'s link options: validated before anything is built (no Verilator here),
and carried into the run the bench is given."""

import argparse

import pytest

from rocegen.cli.main import demo_run, main


def run(argv):
    """``main``'s exit status, also for errors argparse itself reports (it exits with 2)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("args, message", [
    (["--loss", "1"], "--loss must be a probability in [0, 1), not 1.0"),
    (["--loss", "-0.01"], "--loss must be a probability in [0, 1), not -0.01"),
    (["--dup", "1.5"], "--dup must be a probability in [0, 1), not 1.5"),
    (["--reorder", "nan"], "--reorder must be a probability in [0, 1), not nan"),
    (["--corrupt", "2"], "--corrupt must be a probability in [0, 1), not 2.0"),
    (["--seed", "-3"], "--seed must be >= 0, not -3"),
    (["--rtt-us", "-1"], "--rtt-us must be a number of microseconds >= 0, not -1.0"),
    (["--rtt-us", "inf"], "--rtt-us must be a number of microseconds >= 0, not inf"),
    (["--loss", "0.1", "--dup", "1"], "--dup must be a probability in [0, 1), not 1.0"),
])
def test_bad_link_options_are_clear_errors(tmp_path, capsys, args, message):
    out = tmp_path / "demo"
    assert main(["sim", "demo", *args, "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--loss", "some"], "argument --loss: invalid float value: 'some'"),
    (["--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
    (["--rtt-us", "x"], "argument --rtt-us: invalid float value: 'x'"),
])
def test_malformed_link_options_exit_2(tmp_path, capsys, args, message):
    out = tmp_path / "demo"
    assert run(["sim", "demo", *args, "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_help_lists_the_link_options(capsys):
    assert run(["sim", "demo", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--loss P", "--dup P", "--reorder P", "--corrupt P", "--seed SEED",
                   "--rtt-us US"):
        assert option in text, option


def test_the_run_carries_the_link_options():
    args = argparse.Namespace(qps=2, pmtu=1024, bytes=4096, size=512, opcode="SEND", loss=0.01,
                              dup=0.02, reorder=0.03, corrupt=0.04, seed=9, rtt_us=2.5)
    assert demo_run(args, 100) == {
        "qps": 2, "pmtu": 1024, "bytes": 4096, "size": 512, "opcode": "SEND",
        "source": "memory", "line_gbps": 100, "loss": 0.01, "dup": 0.02, "reorder": 0.03,
        "corrupt": 0.04, "seed": 9, "rtt_us": 2.5}


def test_the_links_and_timeout_of_the_default_run_are_perfect():
    """With no link option the bench gets no link and QPs without a retransmit timeout."""
    from rocegen.sim.testing.roce_env import board_clock_mhz, link_pair, timeout_code
    args = argparse.Namespace(qps=2, pmtu=4096, bytes=1 << 20, size=65536, opcode="WRITE",
                              loss=0.0, dup=0.0, reorder=0.0, corrupt=0.0, seed=0, rtt_us=0.0)
    r = demo_run(args, 100)
    assert link_pair(r, board_clock_mhz(512)) == (None, None) and timeout_code(r) == 0
    r = demo_run(argparse.Namespace(**{**vars(args), "dup": 0.01, "rtt_us": 10.0}), 100)
    up, down = link_pair(r, board_clock_mhz(512))
    assert up.dup == down.dup == 0.01 and up.delay == down.delay == round(5 * 322.265625)
    assert timeout_code(r) == 4
