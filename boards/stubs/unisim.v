// Behavioural stand-ins for the Xilinx UNISIM primitives the board tops instantiate, for lint
// and simulation only (Vivado uses its own library).
module IBUFDS (input wire I, input wire IB, output wire O);
    assign O = I;
endmodule

module BUFG (input wire I, output wire O);
    assign O = I;
endmodule
