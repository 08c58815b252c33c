"""Simulation tools behind ``rocegen`` subcommands: ``sim serve`` (with its host side and TAP),
``sim replay``, ``demo`` and the benchmark suite with its reports."""
