"""The endpoint's feature blocks: each builds the blocks of one feature from the
:class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig`, states the endpoint ports it brings (its
``signature``) and wires its blocks inside the endpoint's module;
:class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` composes them."""
