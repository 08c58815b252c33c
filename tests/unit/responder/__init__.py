"""Tests of the RC responder."""
