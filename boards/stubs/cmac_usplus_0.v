// Port-compatible stand-in for the Vivado-generated cmac_usplus_0 (UltraScale+ integrated 100G
// Ethernet, CAUI-4, RS-FEC, AXI-Stream user interface, no AXI4-Lite, no flow control, no
// timestamping), for lint and simulation of the board top only: it carries no MAC. The port
// names and widths follow the core's instantiation template for that configuration.
module cmac_usplus_0 (
    input  wire [3:0]   gt_rxp_in,
    input  wire [3:0]   gt_rxn_in,
    output wire [3:0]   gt_txp_out,
    output wire [3:0]   gt_txn_out,
    output wire         gt_txusrclk2,
    input  wire [11:0]  gt_loopback_in,
    output wire         gt_ref_clk_out,
    output wire [3:0]   gt_rxrecclkout,
    output wire [3:0]   gt_powergoodout,
    input  wire         gtwiz_reset_tx_datapath,
    input  wire         gtwiz_reset_rx_datapath,
    input  wire         sys_reset,
    input  wire         gt_ref_clk_p,
    input  wire         gt_ref_clk_n,
    input  wire         init_clk,
    // RS-FEC control and status
    input  wire         ctl_tx_rsfec_enable,
    input  wire         ctl_rx_rsfec_enable,
    input  wire         ctl_rsfec_ieee_error_indication_mode,
    input  wire         ctl_rx_rsfec_enable_correction,
    input  wire         ctl_rx_rsfec_enable_indication,
    output wire         stat_rx_rsfec_hi_ser,
    output wire         stat_rx_rsfec_lane_alignment_status,
    // receive
    output wire         rx_axis_tvalid,
    output wire [511:0] rx_axis_tdata,
    output wire         rx_axis_tlast,
    output wire [63:0]  rx_axis_tkeep,
    output wire         rx_axis_tuser,
    output wire [55:0]  rx_preambleout,
    output wire         usr_rx_reset,
    output wire         gt_rxusrclk2,
    input  wire         ctl_rx_enable,
    input  wire         ctl_rx_force_resync,
    input  wire         ctl_rx_test_pattern,
    input  wire         core_rx_reset,
    input  wire         rx_clk,
    output wire         stat_rx_aligned,
    output wire         stat_rx_aligned_err,
    output wire [2:0]   stat_rx_bad_fcs,
    output wire [19:0]  stat_rx_block_lock,
    output wire         stat_rx_local_fault,
    output wire         stat_rx_remote_fault,
    output wire         stat_rx_status,
    // transmit
    input  wire         ctl_tx_enable,
    input  wire         ctl_tx_send_idle,
    input  wire         ctl_tx_send_rfi,
    input  wire         ctl_tx_send_lfi,
    input  wire         ctl_tx_test_pattern,
    input  wire         core_tx_reset,
    output wire         tx_axis_tready,
    input  wire         tx_axis_tvalid,
    input  wire [511:0] tx_axis_tdata,
    input  wire         tx_axis_tlast,
    input  wire [63:0]  tx_axis_tkeep,
    input  wire         tx_axis_tuser,
    output wire         tx_ovfout,
    output wire         tx_unfout,
    input  wire [55:0]  tx_preamblein,
    output wire         usr_tx_reset,
    output wire         stat_tx_local_fault,
    // DRP
    input  wire         core_drp_reset,
    input  wire         drp_clk,
    input  wire [9:0]   drp_addr,
    input  wire [15:0]  drp_di,
    input  wire         drp_en,
    output wire [15:0]  drp_do,
    output wire         drp_rdy,
    input  wire         drp_we
);
    assign gt_txp_out = 4'b0;
    assign gt_txn_out = 4'b1111;
    assign gt_txusrclk2 = init_clk;
    assign gt_ref_clk_out = gt_ref_clk_p;
    assign gt_rxrecclkout = {4{init_clk}};
    assign gt_powergoodout = 4'b1111;
    assign stat_rx_rsfec_hi_ser = 1'b0;
    assign stat_rx_rsfec_lane_alignment_status = 1'b1;
    assign rx_axis_tvalid = 1'b0;
    assign rx_axis_tdata = 512'b0;
    assign rx_axis_tlast = 1'b0;
    assign rx_axis_tkeep = 64'b0;
    assign rx_axis_tuser = 1'b0;
    assign rx_preambleout = 56'b0;
    assign usr_rx_reset = sys_reset;
    assign gt_rxusrclk2 = init_clk;
    assign stat_rx_aligned = ~sys_reset;
    assign stat_rx_aligned_err = 1'b0;
    assign stat_rx_bad_fcs = 3'b0;
    assign stat_rx_block_lock = {20{~sys_reset}};
    assign stat_rx_local_fault = 1'b0;
    assign stat_rx_remote_fault = 1'b0;
    assign stat_rx_status = ~sys_reset;
    assign tx_axis_tready = ctl_tx_enable;
    assign tx_ovfout = 1'b0;
    assign tx_unfout = 1'b0;
    assign usr_tx_reset = sys_reset;
    assign stat_tx_local_fault = 1'b0;
    assign drp_do = 16'b0;
    assign drp_rdy = drp_en;
endmodule
