"""The goal check of the synthesis report (``python -m bench.bench_synth --check``)."""

from bench.bench_synth import LEVEL_GOAL, LUT_GOAL, goal_misses


def _design(name, luts, levels, parameters=None):
    return {"name": name, "description": name, "lut_total": luts, "lut_levels": levels,
            "parameters": parameters or name,
            "worst_paths": [{"levels": levels, "start": "FDRE a", "end": "FDRE.D of b"}]}


def test_cores_within_both_goals_pass():
    assert goal_misses([_design("endpoint_w512", LUT_GOAL - 1, LEVEL_GOAL),
                        _design("endpoint_w64", 1000, 3)]) == []


def test_each_missed_goal_is_named_with_the_worst_path():
    misses = goal_misses([_design("endpoint_w512", LUT_GOAL, LEVEL_GOAL + 1),
                          _design("endpoint_w64", 1000, LEVEL_GOAL)])
    assert len(misses) == 2
    assert misses[0].startswith("endpoint_w512: 40,000 LUTs")
    assert f"{LEVEL_GOAL + 1} LUT levels" in misses[1] and "FDRE a -> FDRE.D of b" in misses[1]


def test_blocks_are_not_judged():
    # a block's ports are path ends: its depth is only its share of a path through the core
    assert goal_misses([_design("scheduler", 10 * LUT_GOAL, 40)]) == []


def test_a_configuration_meets_the_goals_in_one_netlist():
    # two mappings of one configuration: one netlist within both goals is enough
    assert goal_misses([_design("endpoint_w512", LUT_GOAL - 1, LEVEL_GOAL + 3, "W512"),
                        _design("endpoint_w512_depth", LUT_GOAL - 1, LEVEL_GOAL, "W512")]) == []
    # each netlist meets one goal only: not enough, and both misses are named
    misses = goal_misses([_design("endpoint_w512", LUT_GOAL - 1, LEVEL_GOAL + 3, "W512"),
                          _design("endpoint_w512_depth", LUT_GOAL + 2000, LEVEL_GOAL, "W512")])
    assert [m.split(":")[0] for m in misses] == ["endpoint_w512", "endpoint_w512_depth"]
    assert f"{LEVEL_GOAL + 3} LUT levels" in misses[0] and "42,000 LUTs" in misses[1]


def test_a_failed_netlist_is_named_and_does_not_count():
    failed = {"name": "endpoint_w512_depth", "description": "endpoint_w512_depth",
              "parameters": "W512", "failed": "Yosys exited with status 1"}
    misses = goal_misses([_design("endpoint_w512", LUT_GOAL - 1, LEVEL_GOAL + 3, "W512"), failed])
    assert misses[0] == "endpoint_w512_depth: not synthesized (Yosys exited with status 1)"
    assert f"{LEVEL_GOAL + 3} LUT levels" in misses[1] and len(misses) == 2


def test_every_design_of_the_report_is_built():
    """Each design ``make synth`` maps is the block its description names (the blocks are
    taken from inside an endpoint, whose layout changes)."""
    import warnings

    from bench.bench_synth import DESIGNS
    from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, description, _, factory, kind, _ in DESIGNS:
            design = factory()
            expected = RoceEndpoint if kind != "block" else None
            if expected is not None:
                assert isinstance(design, expected), name
            else:
                assert type(design).__name__ == description.split()[0], (name, design)
