"""Tests of the InfiniBand Communication Manager: its wire tables and reference model."""
