"""Timing exceptions that a component carries with it, and how a build finds them in a design.

A synchronizer knows which of its flip-flops sample a signal from another clock (or none): the
timing paths into them must not be timed. It states that once, as a class attribute
``FALSE_PATHS`` (a tuple of :class:`FalsePath`), and :func:`design_false_paths` collects the
exceptions of every such component in an elaborated design, so that a build writes each of them
into its constraints once, whatever board the component sits on.
"""

from fnmatch import fnmatchcase
from typing import NamedTuple

__all__ = ["FalsePath", "design_false_paths"]


class FalsePath(NamedTuple):
    """Paths ending at one input of a component's synchronizing flip-flops are not timed.

    ``cells`` is a pattern (``*`` matches anything, ``/`` separates the levels of the
    hierarchy) over the names the implementation tools give those flip-flops: the hierarchical
    path of the component's instance, ``/``, the register's name and ``_reg`` (as Vivado names
    an inferred flip-flop). It selects among the flip-flops with ``ASYNC_REG`` set only.
    ``pin`` is the flip-flop input the paths end at, as the primitive names it (``"D"``: the
    data input; ``"PRE"``: the asynchronous preset). ``register`` is the name of one register
    the exception is for (the first of its flip-flops): :func:`design_false_paths` checks that
    ``cells`` finds it in every instance. ``why`` is one line for the constraints file."""

    cells: str
    pin: str
    register: str
    why: str

    def covers(self, path):
        """Whether :attr:`cells` finds :attr:`register` of an instance at ``path`` (a tuple of
        instance names from the top level down)."""
        return fnmatchcase("/".join(path + (f"{self.register}_reg",)), self.cells)


def _walk(fragment, path):
    yield fragment, path
    for index, (sub, name, _src) in enumerate(fragment.subfragments):
        yield from _walk(sub, path + (name if name is not None else f"U${index}",))


def design_false_paths(fragment):
    """The timing exceptions of the components in ``fragment`` (an elaborated design,
    :meth:`amaranth.hdl.Fragment.get`), in the order they are first met, each once.

    A component states them in its class attribute ``FALSE_PATHS``. Raises :exc:`ValueError`
    when an instance sits where an exception of its class cannot find it (its submodule name
    does not match the exception's pattern), since its paths would then be timed."""
    found = {}
    for frag, path in _walk(fragment, ()):
        for origin in frag.origins or ():
            for fp in getattr(type(origin), "FALSE_PATHS", ()):
                if not fp.covers(path):
                    raise ValueError(
                        f"{type(origin).__name__} at {'/'.join(path) or 'the top level'}: its "
                        f"timing exception for {fp.cells} ({fp.why}) does not find register "
                        f"{fp.register} there; rename the submodule to match")
                found.setdefault(fp, None)
    return list(found)
