"""MADs for the tests and testbenches of the IB CM, made with the wire tables
(:mod:`rocegen.wire.ibcm`) and the reference model's active side: good messages with random
fields, Gets, and one malformed MAD of each kind the model drops."""

from rocegen.sim.models.ibcm import IbCm, QpPool
from rocegen.wire import ibcm as I

__all__ = ["HOST", "HOST2", "FPGA", "mad", "random_fields", "random_message", "req", "malformed"]

HOST, HOST2, FPGA = 0x0A000001, 0x0A000003, 0x0A000002


def mad(attr, tid, data=b"", *, method=I.METHOD_SEND, base=I.BASE_VERSION,
        mclass=I.MGMT_CLASS_CM, version=I.CM_CLASS_VERSION, **hdr):
    """A MAD: its header (the rest of ``hdr`` by field) and class data ``data``, zero-padded."""
    return I.MAD_HDR.pack(base_version=base, mgmt_class=mclass, class_version=version,
                          method=method, transaction_id=tid, attribute_id=attr,
                          **hdr) + I.class_data(data)


def random_fields(rng, header, **fixed):
    """``header``'s fields, random but for ``fixed``."""
    return {name: fixed.get(name, rng.getrandbits(bits)) for name, bits in header.fields}


def random_message(rng, attr):
    """A Send of message ``attr`` with random fields and transaction ID."""
    header = I.MESSAGES[attr]
    return mad(attr, rng.getrandbits(64), header.pack(**random_fields(rng, header)))


def req(rng, *, src_ip=HOST, dst_ip=FPGA, port=7174, comm_id=None, qpn=None, **fields):
    """A REQ as librdmacm sends it (made by the model's active side), then ``fields`` of the
    REQ (and ``cma_*`` of its cma_hdr) changed."""
    host = IbCm(pool=QpPool([rng.randrange(2, 1 << 24)]), local_ip=src_ip, ca_guid=0x1111,
                seed=rng.getrandbits(32), initiator_depth=rng.randrange(0, 4),
                responder_resources=rng.randrange(0, 4))
    _, (out,) = host.connect(0, dst_ip=dst_ip, port=port, private_data=b"app")
    hdr = I.MAD_HDR.unpack(out.mad)
    f = I.REQ.unpack(out.mad[I.MAD_HDR_LENGTH:])
    if comm_id is not None:
        f["local_comm_id"] = comm_id
    if qpn is not None:
        f["local_qpn"] = qpn
    cma_changes = {k[4:]: v for k, v in fields.items() if k.startswith("cma_")}
    if cma_changes:
        pd = bytearray(I.private_bytes(I.REQ, f))
        cma = I.CMA_HDR.unpack(pd) | cma_changes
        pd[:I.CMA_HDR.length] = I.CMA_HDR.pack(**cma)
        f["private_data"] = int.from_bytes(pd, "big")
    f.update({k: v for k, v in fields.items() if not k.startswith("cma_")})
    return I.MAD_HDR.pack(**hdr) + I.REQ.pack(**f)


def malformed(rng):
    """``[(name, mad)]``: one MAD the model drops for each reason (its counter's name), and
    some it answers with an echo or drops for the same reason in other ways."""
    good = random_message(rng, I.ATTR_RTU)

    def hdr(**changes):
        h = I.MAD_HDR.unpack(good) | changes
        return I.MAD_HDR.pack(**h) + good[I.MAD_HDR_LENGTH:]

    return [
        ("drop_length", good[:255]), ("drop_length", good + b"\0"), ("drop_length", b""),
        ("drop_length", good[:8]), ("drop_length", good + bytes(100)),
        ("drop_base_version", hdr(base_version=2)), ("drop_class", hdr(mgmt_class=0x04)),
        ("drop_response", hdr(method=I.METHOD_GET_RESP)), ("drop_response", hdr(method=0x93)),
        ("drop_method", hdr(method=0x05)), ("drop_method", hdr(method=0x7F)),
        ("drop_class_version", hdr(class_version=1)),
        ("drop_attribute", hdr(attribute_id=I.ATTR_SIDR_REQ)),
        ("drop_attribute", hdr(attribute_id=I.ATTR_CLASS_PORT_INFO)),
        ("answered_bad_version", hdr(method=I.METHOD_GET, class_version=3)),
        ("answered_unsupported", hdr(method=I.METHOD_SET)),
        ("answered_unsupported", hdr(method=I.METHOD_GET, attribute_id=I.ATTR_REQ)),
    ]
