// Example user design: a data source streams into host memory through the rocegen endpoint.
//
// The source stands for an ADC or a detector readout: once a host has opened QP 0 through the
// core's connection manager (qp_open[0]) and `start` is high, it produces `msg_count` messages
// of `msg_bytes` bytes each, byte n of message k being (k + n) mod 256, and hands them to the
// core's streaming front end (s_msg_axis_* with msg_meta). Message k goes to the remote offset
// k * msg_bytes of the QP's memory region, as an RDMA WRITE. `sent` counts the messages the
// front end has taken; `done` rises after the last one.
//
// Everything else about the core is left as the generated instantiation template has it: the
// MAC port goes to the top level, the AXI4-Lite slave too (status: counters, QP table), the
// work-request, QP-control, generator and memory ports are idle.
//
// Written against the generated files only: rocegen_endpoint_pkg.sv (types),
// rocegen_endpoint_inst.sv (ports), rocegen_endpoint_ports.md and _registers.md (behaviour).

module stream_to_host
  import rocegen_endpoint_pkg::*;
#(
  parameter int MSG_BYTES_MAX = 65536
) (
  input  logic           clk,
  input  logic           rst,
  // data source control
  input  logic           start,
  input  logic [31:0]    msg_count,
  input  logic [16:0]    msg_bytes,       // 1 .. MSG_BYTES_MAX, at most MAX_MESSAGE
  output logic [31:0]    sent,
  output logic           done,
  // MAC (CMAC-shaped AXI-Stream, frames without FCS)
  input  logic [W-1:0]   s_axis_tdata,
  input  logic [W/8-1:0] s_axis_tkeep,
  input  logic           s_axis_tlast,
  input  logic           s_axis_tuser,
  input  logic           s_axis_tvalid,
  output logic           s_axis_tready,
  output logic [W-1:0]   m_axis_tdata,
  output logic [W/8-1:0] m_axis_tkeep,
  output logic           m_axis_tlast,
  output logic           m_axis_tuser,
  output logic           m_axis_tvalid,
  input  logic           m_axis_tready,
  // AXI4-Lite status and control
  input  logic [15:0]    s_axil_awaddr,
  input  logic [2:0]     s_axil_awprot,
  input  logic           s_axil_awvalid,
  output logic           s_axil_awready,
  input  logic [31:0]    s_axil_wdata,
  input  logic [3:0]     s_axil_wstrb,
  input  logic           s_axil_wvalid,
  output logic           s_axil_wready,
  output logic [1:0]     s_axil_bresp,
  output logic           s_axil_bvalid,
  input  logic           s_axil_bready,
  input  logic [15:0]    s_axil_araddr,
  input  logic [2:0]     s_axil_arprot,
  input  logic           s_axil_arvalid,
  output logic           s_axil_arready,
  output logic [31:0]    s_axil_rdata,
  output logic [1:0]     s_axil_rresp,
  output logic           s_axil_rvalid,
  input  logic           s_axil_rready
);

  localparam int B = W / 8;

  // ---- the data source: messages of msg_bytes, beat by beat
  logic [W-1:0]   src_tdata;
  logic [B-1:0]   src_tkeep;
  logic           src_tlast;
  logic           src_tvalid;
  logic           src_tready;
  msg_meta_t      src_meta;

  logic [7:0]     qp_open_bits;
  logic           running;
  logic [31:0]    msg;           // message being produced
  logic [16:0]    offset;        // its byte offset of the current beat
  logic [16:0]    left;          // bytes of the message from this beat on

  always_comb begin
    for (int i = 0; i < B; i++) begin
      src_tdata[8 * i +: 8] = 8'(msg + 32'(offset) + 32'(i));
      src_tkeep[i] = 17'(i) < left;
    end
    src_tlast = left <= 17'(B);
    src_tvalid = running;
    src_meta = '0;
    src_meta.qp = 8'd0;
    src_meta.opcode = WR_OPCODE_WRITE;
    src_meta.imm = 32'd0;
    src_meta.remote_offset = 64'(msg) * 64'(msg_bytes);
  end

  always_ff @(posedge clk) begin
    if (rst) begin
      running <= 1'b0;
      done <= 1'b0;
      sent <= 32'd0;
      msg <= 32'd0;
      offset <= 17'd0;
      left <= 17'd0;
    end else if (!running) begin
      if (start && !done && qp_open_bits[0] && msg_count != 0) begin
        running <= 1'b1;
        offset <= 17'd0;
        left <= msg_bytes;
      end
    end else if (src_tready) begin
      if (src_tlast) begin
        sent <= sent + 32'd1;
        msg <= msg + 32'd1;
        offset <= 17'd0;
        left <= msg_bytes;
        if (msg + 32'd1 == msg_count) begin
          running <= 1'b0;
          done <= 1'b1;
        end
      end else begin
        offset <= offset + 17'(B);
        left <= left - 17'(B);
      end
    end
  end

  // ---- the core, as the generated template instantiates it
  wr_t        wr_data;
  cpl_t       cpl_data;
  qp_ctl_t    qp_ctl_data;
  qp_psn_t    qp_psn_data;
  gen_t       gen_data;
  mem_w_t     mem_w_data;
  logic       wr_ready, cpl_valid, qp_ctl_ready, qp_psn_ready, gen_ready, mem_w_ready;
  logic       gen_busy;
  logic [31:0] gen_posted, gen_ok, gen_err, gen_cycles;

  assign wr_data = '0;
  assign qp_ctl_data = '0;
  assign qp_psn_data = '0;
  assign gen_data = '0;
  assign mem_w_data = '0;

  rocegen_endpoint u_core (
    .clk(clk),
    .rst(rst),
    .s_axil_awaddr(s_axil_awaddr), .s_axil_awprot(s_axil_awprot),
    .s_axil_awvalid(s_axil_awvalid), .s_axil_awready(s_axil_awready),
    .s_axil_wdata(s_axil_wdata), .s_axil_wstrb(s_axil_wstrb),
    .s_axil_wvalid(s_axil_wvalid), .s_axil_wready(s_axil_wready),
    .s_axil_bresp(s_axil_bresp), .s_axil_bvalid(s_axil_bvalid), .s_axil_bready(s_axil_bready),
    .s_axil_araddr(s_axil_araddr), .s_axil_arprot(s_axil_arprot),
    .s_axil_arvalid(s_axil_arvalid), .s_axil_arready(s_axil_arready),
    .s_axil_rdata(s_axil_rdata), .s_axil_rresp(s_axil_rresp),
    .s_axil_rvalid(s_axil_rvalid), .s_axil_rready(s_axil_rready),
    .wr_data(wr_data), .wr_valid(1'b0), .wr_ready(wr_ready),
    .cpl_data(cpl_data), .cpl_valid(cpl_valid), .cpl_ready(1'b1),
    .qp_ctl_data(qp_ctl_data), .qp_ctl_valid(1'b0), .qp_ctl_ready(qp_ctl_ready),
    .qp_psn_data(qp_psn_data), .qp_psn_valid(1'b0), .qp_psn_ready(qp_psn_ready),
    .gen_data(gen_data), .gen_valid(1'b0), .gen_ready(gen_ready),
    .gen_busy(gen_busy), .gen_posted(gen_posted), .gen_ok(gen_ok), .gen_err(gen_err),
    .gen_cycles(gen_cycles),
    .qp_open(qp_open_bits),
    .s_msg_axis_tdata(src_tdata), .s_msg_axis_tkeep(src_tkeep), .s_msg_axis_tlast(src_tlast),
    .s_msg_axis_tuser(1'b0), .s_msg_axis_tvalid(src_tvalid), .s_msg_axis_tready(src_tready),
    .msg_meta(src_meta),
    .mem_w_data(mem_w_data), .mem_w_valid(1'b0), .mem_w_ready(mem_w_ready),
    .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tlast(s_axis_tlast),
    .s_axis_tuser(s_axis_tuser), .s_axis_tvalid(s_axis_tvalid), .s_axis_tready(s_axis_tready),
    .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tlast(m_axis_tlast),
    .m_axis_tuser(m_axis_tuser), .m_axis_tvalid(m_axis_tvalid), .m_axis_tready(m_axis_tready)
  );

endmodule
