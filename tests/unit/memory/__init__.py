"""Tests of the payload memory, its readers and writers."""
