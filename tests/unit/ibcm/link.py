"""Two or more CM models talking to each other through their MADs, for the tests: a queue of
MADs in flight that a test may drop, repeat or let through, and readers of what was sent."""

from rocegen.wire import ibcm as I

#: Attribute ID -> message name, for the log.
NAMES = {I.ATTR_REQ: "REQ", I.ATTR_MRA: "MRA", I.ATTR_REJ: "REJ", I.ATTR_REP: "REP",
         I.ATTR_RTU: "RTU", I.ATTR_DREQ: "DREQ", I.ATTR_DREP: "DREP",
         I.ATTR_CLASS_PORT_INFO: "ClassPortInfo"}


def parse(mad):
    """``(name, MAD header fields, message fields or None)`` of a MAD."""
    hdr = I.MAD_HDR.unpack(mad)
    layout = I.MESSAGES.get(hdr["attribute_id"])
    fields = layout.unpack(mad[I.MAD_HDR_LENGTH:]) if layout is not None else None
    return NAMES.get(hdr["attribute_id"], hex(hdr["attribute_id"])), hdr, fields


class Link:
    """Nodes by IP address. :meth:`post` queues what a node sent; :meth:`run` delivers the queue
    (and whatever the deliveries send) at time ``now`` until nothing is left, asking ``drop``
    (a function of ``(src_ip, dst_ip, mad)``) whether each MAD is lost on the way. :attr:`log`
    holds every MAD sent: ``(src_ip, dst_ip, name, mad)``."""

    def __init__(self, nodes, drop=None):
        self.nodes = dict(nodes)
        self.drop = drop
        self.queue = []
        self.log = []

    def post(self, src_ip, outs):
        for o in outs:
            self.log.append((src_ip, o.dst_ip, parse(o.mad)[0], o.mad))
            self.queue.append((src_ip, o.dst_ip, o.mad))

    def run(self, now):
        while self.queue:
            src, dst, mad = self.queue.pop(0)
            if self.drop is not None and self.drop(src, dst, mad):
                continue
            if dst in self.nodes:
                self.post(dst, self.nodes[dst].receive(now, mad, src_ip=src))

    def poll(self, now):
        """Every node's timers at ``now``, then :meth:`run`."""
        for ip, node in self.nodes.items():
            self.post(ip, node.poll(now))
        self.run(now)

    def sent(self, name, src=None):
        """The MADs named ``name`` sent (by ``src``)."""
        return [m for s, _, n, m in self.log if n == name and (src is None or s == src)]
