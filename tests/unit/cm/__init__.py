"""Tests of the connection manager."""
