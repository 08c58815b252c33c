"""Tests of the front ends: streaming input, traffic generator, pattern sink."""
