"""What the wire defines, in plain Python: the one header table (:mod:`.headers`), the RoCEv2
transport facts (:mod:`.roce`: opcodes and their names, path MTUs, AETH syndromes, timer tables),
the connection manager's datagram (:mod:`.cm`), the InfiniBand Communication Manager's MADs
that librdmacm exchanges over QP1 (:mod:`.ibcm`), the MAC control frames of pause and priority
flow control (:mod:`.pfc`) and address parsing (:mod:`.addr`).

Gateware, reference models and the host agent all take these from here. Nothing in this package
needs Amaranth except the gateware side of :class:`.headers.Header` (its ``layout`` and lane
conversions), which imports it when first used; ``rocegen.wire`` and ``rocegen.host`` install and
run without it.
"""
