"""The endpoint's feature blocks: each builds the blocks of one feature from the
:class:`~rocegen.gateware.roce.config.EndpointConfig`, states the endpoint ports it brings (its
``signature``) and wires its blocks inside the endpoint's module;
:class:`~rocegen.gateware.roce.endpoint.RoceEndpoint` composes them."""
