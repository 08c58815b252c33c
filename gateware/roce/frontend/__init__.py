"""The front ends: streaming input, traffic generator, pattern sink, WR merge, completions."""
