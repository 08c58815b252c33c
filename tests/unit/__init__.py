"""Unit tests, by the part of the project they test."""
