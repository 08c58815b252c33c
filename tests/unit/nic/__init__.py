"""Tests of the host RNIC model."""
