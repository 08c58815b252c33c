"""Tests of the verification infrastructure and the simulation tools."""
