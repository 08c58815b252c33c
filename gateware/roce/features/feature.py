"""What every feature block of the endpoint has."""

from amaranth.lib import wiring

__all__ = ["Feature"]


class Feature:
    """A feature of :class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint`: the blocks it
    builds from the :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig` ``cfg`` (made when
    the feature is), the endpoint ports it brings (:meth:`members`, as a
    :class:`~amaranth.lib.wiring.Signature`: :attr:`signature`) and, in its ``connect``
    methods, the wiring of its blocks inside the endpoint's module, to the endpoint's ports
    and to the other features' blocks. Its blocks are submodules of the endpoint, so that the
    design's hierarchy names the protocol blocks themselves.
    """

    def __init__(self, cfg):
        self.cfg = cfg

    def members(self):
        """The endpoint ports this feature brings: ``{name: In/Out(...)}``."""
        return {}

    @property
    def signature(self):
        """The endpoint ports this feature brings, as a signature."""
        return wiring.Signature(self.members())
