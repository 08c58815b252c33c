"""The InfiniBand Communication Manager on QP1 (IB CM, as librdmacm speaks it): the MAD receiver,
the passive side's decision and the reply builder (:mod:`rocegen.wire.ibcm` has the wire
layouts; the reference model is ``rocegen.sim.models.ibcm``)."""
