"""Tests of the link and switch models."""
