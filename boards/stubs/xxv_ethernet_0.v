// Port-compatible stand-in for the Vivado-generated xxv_ethernet_0 (10G/25G Ethernet subsystem,
// "Ethernet PCS/PMA 64-bit", BASE-R, MII data path, one core, user FIFO included), for lint and
// simulation of the board top only: it carries no PCS. The port names and widths follow the
// core's instantiation template for that configuration.
module xxv_ethernet_0 (
    input  wire         gt_rxp_in_0,
    input  wire         gt_rxn_in_0,
    output wire         gt_txp_out_0,
    output wire         gt_txn_out_0,
    input  wire         gt_refclk_p,
    input  wire         gt_refclk_n,
    output wire         gt_refclk_out,
    input  wire         sys_reset,
    input  wire         dclk,
    input  wire         qpllreset_in_0,
    input  wire [2:0]   gt_loopback_in_0,
    input  wire         gtwiz_reset_tx_datapath_0,
    input  wire         gtwiz_reset_rx_datapath_0,
    output wire         gtpowergood_out_0,
    input  wire [2:0]   txoutclksel_in_0,
    input  wire [2:0]   rxoutclksel_in_0,
    output wire         rxrecclkout_0,
    // receive
    input  wire         rx_core_clk_0,
    output wire         rx_clk_out_0,
    input  wire         rx_reset_0,
    output wire         user_rx_reset_0,
    output wire [63:0]  rx_mii_d_0,
    output wire [7:0]   rx_mii_c_0,
    input  wire         ctl_rx_test_pattern_0,
    input  wire         ctl_rx_test_pattern_enable_0,
    input  wire         ctl_rx_data_pattern_select_0,
    input  wire         ctl_rx_prbs31_test_pattern_enable_0,
    output wire         stat_rx_block_lock_0,
    output wire         stat_rx_framing_err_valid_0,
    output wire         stat_rx_framing_err_0,
    output wire         stat_rx_hi_ber_0,
    output wire         stat_rx_valid_ctrl_code_0,
    output wire         stat_rx_bad_code_0,
    output wire         stat_rx_bad_code_valid_0,
    output wire         stat_rx_error_valid_0,
    output wire [7:0]   stat_rx_error_0,
    output wire         stat_rx_fifo_error_0,
    output wire         stat_rx_local_fault_0,
    output wire         stat_rx_status_0,
    // transmit
    output wire         tx_mii_clk_0,
    input  wire         tx_reset_0,
    output wire         user_tx_reset_0,
    input  wire [63:0]  tx_mii_d_0,
    input  wire [7:0]   tx_mii_c_0,
    input  wire         ctl_tx_test_pattern_0,
    input  wire         ctl_tx_test_pattern_enable_0,
    input  wire         ctl_tx_test_pattern_select_0,
    input  wire         ctl_tx_data_pattern_select_0,
    input  wire [57:0]  ctl_tx_test_pattern_seed_a_0,
    input  wire [57:0]  ctl_tx_test_pattern_seed_b_0,
    input  wire         ctl_tx_prbs31_test_pattern_enable_0,
    output wire         stat_tx_local_fault_0
);
    assign gt_txp_out_0 = 1'b0;
    assign gt_txn_out_0 = 1'b1;
    assign gt_refclk_out = gt_refclk_p;
    assign gtpowergood_out_0 = 1'b1;
    assign rxrecclkout_0 = dclk;
    assign rx_clk_out_0 = dclk;
    assign user_rx_reset_0 = rx_reset_0;
    // XGMII idles: /I/ in every lane
    assign rx_mii_d_0 = {8{8'h07}};
    assign rx_mii_c_0 = 8'hff;
    assign stat_rx_block_lock_0 = ~sys_reset;
    assign stat_rx_framing_err_valid_0 = 1'b0;
    assign stat_rx_framing_err_0 = 1'b0;
    assign stat_rx_hi_ber_0 = 1'b0;
    assign stat_rx_valid_ctrl_code_0 = 1'b0;
    assign stat_rx_bad_code_0 = 1'b0;
    assign stat_rx_bad_code_valid_0 = 1'b0;
    assign stat_rx_error_valid_0 = 1'b0;
    assign stat_rx_error_0 = 8'b0;
    assign stat_rx_fifo_error_0 = 1'b0;
    assign stat_rx_local_fault_0 = 1'b0;
    assign stat_rx_status_0 = ~sys_reset;
    assign tx_mii_clk_0 = dclk;
    assign user_tx_reset_0 = tx_reset_0;
    assign stat_tx_local_fault_0 = 1'b0;
endmodule
