"""Test-only top level of the XGMII MAC with AXI-Stream and XGMII port names, for the cocotb
testbenches (tests/cocotb/xgmii_mac.py)."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axis import axis_members
from rocegen.gateware.mac.xgmii_rx import XgmiiRx
from rocegen.gateware.mac.xgmii_tx import XgmiiTx

__all__ = ["XgmiiLoopTop", "COUNTERS"]

#: Counter output ports and the strobe each one counts.
COUNTERS = {
    "rx_frames": ("rx", "rx_frame"),
    "rx_fcs_errors": ("rx", "rx_fcs_error"),
    "rx_runts": ("rx", "rx_runt"),
    "rx_too_long": ("rx", "rx_too_long"),
    "rx_bad_codes": ("rx", "rx_bad_code"),
    "rx_bad_preambles": ("rx", "rx_bad_preamble"),
    "tx_frames": ("tx", "tx_frame"),
    "tx_underruns": ("tx", "tx_underrun"),
}


class XgmiiLoopTop(wiring.Component):
    """XgmiiTx and XgmiiRx side by side, with AXI-Stream ports.

    * ``s_axis_*`` (``tuser`` = error) -> transmit FIFO -> :class:`XgmiiTx` -> ``xgmii_txd`` /
      ``xgmii_txc``.
    * ``xgmii_rxd`` / ``xgmii_rxc`` -> :class:`XgmiiRx` -> ``m_axis_*`` (``tuser`` = error).
      The receiver has no backpressure: ``m_axis_tready`` is ignored and the AXI-Stream sink
      must accept every beat (keep its ``tready`` high).
    * The transmit FIFO (``fifo_depth`` beats) is what a MAC integration puts in front of
      :class:`XgmiiTx`, which must not starve inside a frame. With ``tx_cut_through`` low it is
      store-and-forward: a frame is offered to the MAC only once its last beat is in the FIFO, so
      ``s_axis`` may pause anywhere (frames must fit in the FIFO). With ``tx_cut_through`` high
      beats go to the MAC as soon as they are queued, so a pause inside a frame makes the MAC
      underrun (the frame is cut with /E/ and counted in ``tx_underruns``).
    * 32-bit counters of the receiver and transmitter strobes (see :data:`COUNTERS`).
    """

    def __init__(self, max_frame=1522, fifo_depth=512):
        self.max_frame = max_frame
        self.fifo_depth = fifo_depth
        super().__init__({
            **axis_members("s_axis", 64, sink=True),
            **axis_members("m_axis", 64, sink=False),
            "xgmii_txd": Out(64),
            "xgmii_txc": Out(8),
            "xgmii_rxd": In(64),
            "xgmii_rxc": In(8),
            "tx_cut_through": In(1),
            **{name: Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        tx = m.submodules.tx = XgmiiTx()
        rx = m.submodules.rx = XgmiiRx(max_frame=self.max_frame)
        fifo = m.submodules.fifo = SyncFIFO(width=64 + 8 + 2, depth=self.fifo_depth)

        # s_axis -> FIFO
        m.d.comb += [
            fifo.w_data.eq(Cat(self.s_axis_tdata, self.s_axis_tkeep, self.s_axis_tlast,
                               self.s_axis_tuser)),
            fifo.w_en.eq(self.s_axis_tvalid),
            self.s_axis_tready.eq(fifo.w_rdy),
        ]
        # whole frames in the FIFO (store-and-forward)
        frames = Signal(range(self.fifo_depth + 1))
        wrote_last = fifo.w_en & fifo.w_rdy & self.s_axis_tlast
        read_last = tx.i.valid & tx.i.ready & tx.i.payload.last
        m.d.sync += frames.eq(frames + wrote_last - read_last)
        m.d.comb += [
            tx.i.payload.data.eq(fifo.r_data[:64]),
            tx.i.payload.keep.eq(fifo.r_data[64:72]),
            tx.i.payload.last.eq(fifo.r_data[72]),
            tx.i.payload.error.eq(fifo.r_data[73]),
            tx.i.valid.eq(fifo.r_rdy & (self.tx_cut_through | (frames != 0))),
            fifo.r_en.eq(tx.i.ready & (self.tx_cut_through | (frames != 0))),
            self.xgmii_txd.eq(tx.txd),
            self.xgmii_txc.eq(tx.txc),
        ]

        # XGMII -> receiver -> m_axis (m_axis_tready ignored)
        m.d.comb += [
            rx.rxd.eq(self.xgmii_rxd),
            rx.rxc.eq(self.xgmii_rxc),
            self.m_axis_tdata.eq(rx.o.payload.data),
            self.m_axis_tkeep.eq(rx.o.payload.keep),
            self.m_axis_tlast.eq(rx.o.payload.last),
            self.m_axis_tuser.eq(rx.o.payload.error),
            self.m_axis_tvalid.eq(rx.o.valid),
        ]

        blocks = {"rx": rx, "tx": tx}
        for name, (block, strobe) in COUNTERS.items():
            counter = getattr(self, name)
            with m.If(getattr(blocks[block], strobe)):
                m.d.sync += counter.eq(counter + 1)
        return m
