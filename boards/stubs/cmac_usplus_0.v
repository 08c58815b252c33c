// Port-compatible stand-in for the Vivado-generated cmac_usplus_0 (UltraScale+ integrated 100G
// Ethernet, CAUI-4, RS-FEC, AXI-Stream user interface, no AXI4-Lite, TX and RX flow control, no
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
    // flow control: received pause frames (terminated by the MAC when enabled)
    input  wire         ctl_rx_enable_gcp,
    input  wire         ctl_rx_enable_gpp,
    input  wire         ctl_rx_enable_pcp,
    input  wire         ctl_rx_enable_ppp,
    input  wire         ctl_rx_check_etype_gcp,
    input  wire         ctl_rx_check_etype_gpp,
    input  wire         ctl_rx_check_etype_pcp,
    input  wire         ctl_rx_check_etype_ppp,
    input  wire         ctl_rx_check_mcast_gcp,
    input  wire         ctl_rx_check_mcast_gpp,
    input  wire         ctl_rx_check_mcast_pcp,
    input  wire         ctl_rx_check_mcast_ppp,
    input  wire         ctl_rx_check_opcode_gcp,
    input  wire         ctl_rx_check_opcode_gpp,
    input  wire         ctl_rx_check_opcode_pcp,
    input  wire         ctl_rx_check_opcode_ppp,
    input  wire         ctl_rx_check_sa_gcp,
    input  wire         ctl_rx_check_sa_gpp,
    input  wire         ctl_rx_check_sa_pcp,
    input  wire         ctl_rx_check_sa_ppp,
    input  wire         ctl_rx_check_ucast_gcp,
    input  wire         ctl_rx_check_ucast_gpp,
    input  wire         ctl_rx_check_ucast_pcp,
    input  wire         ctl_rx_check_ucast_ppp,
    input  wire [8:0]   ctl_rx_pause_enable,
    input  wire [8:0]   ctl_rx_pause_ack,
    output wire         stat_rx_pause,
    output wire [15:0]  stat_rx_pause_quanta0,
    output wire [15:0]  stat_rx_pause_quanta1,
    output wire [15:0]  stat_rx_pause_quanta2,
    output wire [15:0]  stat_rx_pause_quanta3,
    output wire [15:0]  stat_rx_pause_quanta4,
    output wire [15:0]  stat_rx_pause_quanta5,
    output wire [15:0]  stat_rx_pause_quanta6,
    output wire [15:0]  stat_rx_pause_quanta7,
    output wire [15:0]  stat_rx_pause_quanta8,
    output wire [8:0]   stat_rx_pause_req,
    output wire [8:0]   stat_rx_pause_valid,
    output wire         stat_rx_user_pause,
    // flow control: pause frames sent on request
    input  wire [8:0]   ctl_tx_pause_enable,
    input  wire [15:0]  ctl_tx_pause_quanta0,
    input  wire [15:0]  ctl_tx_pause_quanta1,
    input  wire [15:0]  ctl_tx_pause_quanta2,
    input  wire [15:0]  ctl_tx_pause_quanta3,
    input  wire [15:0]  ctl_tx_pause_quanta4,
    input  wire [15:0]  ctl_tx_pause_quanta5,
    input  wire [15:0]  ctl_tx_pause_quanta6,
    input  wire [15:0]  ctl_tx_pause_quanta7,
    input  wire [15:0]  ctl_tx_pause_quanta8,
    input  wire [15:0]  ctl_tx_pause_refresh_timer0,
    input  wire [15:0]  ctl_tx_pause_refresh_timer1,
    input  wire [15:0]  ctl_tx_pause_refresh_timer2,
    input  wire [15:0]  ctl_tx_pause_refresh_timer3,
    input  wire [15:0]  ctl_tx_pause_refresh_timer4,
    input  wire [15:0]  ctl_tx_pause_refresh_timer5,
    input  wire [15:0]  ctl_tx_pause_refresh_timer6,
    input  wire [15:0]  ctl_tx_pause_refresh_timer7,
    input  wire [15:0]  ctl_tx_pause_refresh_timer8,
    input  wire [8:0]   ctl_tx_pause_req,
    input  wire         ctl_tx_resend_pause,
    output wire         stat_tx_pause,
    output wire [8:0]   stat_tx_pause_valid,
    output wire         stat_tx_user_pause,
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
    assign stat_rx_pause = 1'b0;
    assign stat_rx_pause_quanta0 = 16'b0;
    assign stat_rx_pause_quanta1 = 16'b0;
    assign stat_rx_pause_quanta2 = 16'b0;
    assign stat_rx_pause_quanta3 = 16'b0;
    assign stat_rx_pause_quanta4 = 16'b0;
    assign stat_rx_pause_quanta5 = 16'b0;
    assign stat_rx_pause_quanta6 = 16'b0;
    assign stat_rx_pause_quanta7 = 16'b0;
    assign stat_rx_pause_quanta8 = 16'b0;
    assign stat_rx_pause_req = 9'b0;
    assign stat_rx_pause_valid = 9'b0;
    assign stat_rx_user_pause = 1'b0;
    assign stat_tx_pause = 1'b0;
    assign stat_tx_pause_valid = 9'b0;
    assign stat_tx_user_pause = 1'b0;
    assign drp_do = 16'b0;
    assign drp_rdy = drp_en;
endmodule
