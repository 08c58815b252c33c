"""Tests of the synthesis tooling and the benchmark scripts."""
