"""Tests of the board targets."""
