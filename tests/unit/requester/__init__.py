"""Tests of the RC requester."""
