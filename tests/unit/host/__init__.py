"""Tests of the host agent."""
