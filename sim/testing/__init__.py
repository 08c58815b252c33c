"""Verification infrastructure: the Verilator runner, test top levels with flat port names,
drivers and collectors for the Amaranth simulator and for cocotb, packet helpers, traffic
scenarios, fuzzing frames, pcap files and the test-vector reader."""
