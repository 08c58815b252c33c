"""Tests of the whole endpoint: parameters, statistics, registers, integration kit."""
