"""Tests of the packet-stream library."""
