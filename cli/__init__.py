"""The ``rocegen`` command (:mod:`rocegen.cli.main`)."""

from rocegen.cli.main import main

__all__ = ["main"]
