"""Timing exceptions that travel with the synchronizers: found in a design, written once each."""

import pytest
from amaranth.hdl import ClockDomain, Fragment, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.boards.base import xdc_false_paths
from rocegen.gateware.lib.false_path import design_false_paths
from rocegen.gateware.lib.level_sync import LevelSync
from rocegen.gateware.lib.reset_sync import ResetSync
from rocegen.gateware.shell.status_leds import StatusLeds


class _Top(wiring.Component):
    def __init__(self, reset_name):
        self.reset_name = reset_name
        super().__init__({"i": In(1), "o": Out(2)})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        rs = m.submodules[self.reset_name] = ResetSync("sync")
        a = m.submodules.a_sync = LevelSync()
        b = m.submodules.leds = StatusLeds(blink=4, heartbeat=8)     # two more LevelSyncs
        m.d.comb += [rs.arst.eq(self.i), a.i.eq(self.i), b.link.eq(self.i),
                     self.o.eq(a.o | rs.rst)]
        return m


def test_each_kind_once_in_order():
    found = design_false_paths(Fragment.get(_Top("rst_sync_core"), None))
    assert found == [*ResetSync.FALSE_PATHS, *LevelSync.FALSE_PATHS]
    text = "\n".join(xdc_false_paths(found))
    assert text.count("set_false_path") == 2
    assert ("{ASYNC_REG == TRUE && NAME =~ *rst_sync_*}] -filter {REF_PIN_NAME == PRE}]"
            in text)
    assert "{ASYNC_REG == TRUE && NAME =~ *cdc0_reg*}] -filter {REF_PIN_NAME == D}]" in text
    assert xdc_false_paths([]) == []


def test_an_instance_its_exception_cannot_find_is_refused():
    with pytest.raises(ValueError, match=r"ResetSync at por: its timing exception for "
                                         r"\*rst_sync_\* .* does not find register stage0"):
        design_false_paths(Fragment.get(_Top("por"), None))


def test_paths_name_the_registers():
    (fp,) = LevelSync.FALSE_PATHS
    assert fp.covers(("leds", "link_sync")) and fp.covers(())
    (fp,) = ResetSync.FALSE_PATHS
    assert fp.covers(("ddr4", "mem_reset", "rst_sync_mem")) and not fp.covers(("por",))
