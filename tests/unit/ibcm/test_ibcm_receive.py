"""IB CM receiver: every MAD held with its sender, its verdict the one the reference model
makes of it (the counter it counts), and the fields of the good ones as the wire tables read
them, the whole MAD on its read port while the record is held; idle cycles on the input and
a random hold on the output."""

import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_layouts import VERDICT_COUNTERS, Verdict
from rocegen.gateware.roce.ibcm.ibcm_receive import IbCmReceiver
from rocegen.sim.models.ibcm import IbCm, QpPool
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, StreamDriver, meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.ibcm_mads import FPGA, malformed, random_message, req
from rocegen.wire import ibcm as I

COUNTER_VERDICT = {c: v for v, c in VERDICT_COUNTERS.items()}


def model_verdict(data, error):
    """The verdict of the model (a fresh node listening nowhere): the counter it counts."""
    if error:
        return Verdict.LENGTH
    cm = IbCm(pool=QpPool([2]), local_ip=FPGA, ca_guid=1)
    cm.receive(0, data, src_ip=1)
    counted = {c for c, n in cm.counters.items() if n and c not in ("rx_mads", "tx_mads")}
    drops = counted & set(COUNTER_VERDICT)
    if drops:
        (c,) = drops
        return COUNTER_VERDICT[c]
    if counted & {"answered_bad_version", "answered_unsupported", "class_port_info"}:
        return Verdict.GET_SET
    return Verdict.OK


def expected_fields(data):
    """The record's fields as the wire tables read the MAD (those of its own message)."""
    hdr = I.MAD_HDR.unpack(data)
    body = data[I.MAD_HDR_LENGTH:]
    out = {"hdr": hdr}
    attr = hdr["attribute_id"]
    if attr not in I.MESSAGES:
        return out
    f = I.MESSAGES[attr].unpack(body)
    out["local_comm_id"] = f["local_comm_id"]
    if attr != I.ATTR_REQ:
        out["remote_comm_id"] = f["remote_comm_id"]
    if attr == I.ATTR_REQ:
        for name in ("service_id", "local_qpn", "responder_resources", "initiator_depth",
                     "transport_service_type", "starting_psn", "local_cm_response_timeout",
                     "retry_count", "path_mtu", "rnr_retry_count", "max_cm_retries"):
            out[name] = f[name]
        out["local_ack_timeout"] = f["primary_local_ack_timeout"]
        cma = I.CMA_HDR.unpack(I.private_bytes(I.REQ, f))
        out |= {"cma_version": cma["cma_version"], "cma_ip_version": cma["ip_version"],
                "cma_src_port": cma["src_port"], "cma_src_ip": cma["src_addr"] & 0xFFFFFFFF,
                "cma_dst_ip": cma["dst_addr"] & 0xFFFFFFFF,
                "cma_high_zero": int(cma["src_addr"] >> 32 == 0 == cma["dst_addr"] >> 32)}
    if attr == I.ATTR_REP:
        out |= {f"rep_{n}": f[n] for n in ("local_qpn", "starting_psn", "responder_resources",
                                           "initiator_depth", "rnr_retry_count")}
        out |= {f"rep_{n}": v for n, v in I.REGION.unpack(I.private_bytes(I.REP, f)).items()}
    if attr == I.ATTR_DREQ:
        out["remote_qpn"] = f["remote_qpn"]
    if attr == I.ATTR_REJ:
        out |= {"message": f["message_rejected"], "reason": f["reason"]}
    if attr == I.ATTR_MRA:
        out |= {"message": f["message_mraed"], "service_timeout": f["service_timeout"]}
    return out


def mads(rng):
    """``[Packet]``: good messages of every kind, REQs with odd cma_hdrs, Gets, malformed."""
    meta = lambda: {"src_ip": rng.getrandbits(32), "src_qp": rng.getrandbits(24),  # noqa: E731
                    "pkey": rng.getrandbits(16)}
    data = [random_message(rng, a) for a in I.MESSAGES for _ in range(3)]
    data += [req(rng), req(rng, cma_src_addr=1 << 100), req(rng, cma_dst_addr=1 << 40),
             req(rng, cma_ip_version=6)]
    data += [m for _, m in malformed(rng)]
    packets = [Packet(d, meta()) for d in data]
    packets += [Packet(random_message(rng, I.ATTR_DREQ), meta(), error=True)]
    rng.shuffle(packets)
    return packets


def run(width, packets, *, idle, hold, seed, read=False):
    dut = IbCmReceiver(width)
    rng = random.Random(seed)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    taken = HandshakeMonitor(dut.i)
    seen = []

    def read_mad(ctx):
        """The MAD on ``mad``, beat by beat."""
        words = []
        for k in range(2048 // width):
            ctx.set(dut.mad.addr, k)
            words.append(ctx.get(dut.mad.data))
        return b"".join(w.to_bytes(width // 8, "little") for w in words)

    async def consumer(ctx):
        for _ in packets:
            if not ctx.get(dut.o.valid):
                await ctx.tick().until(dut.o.valid)
            first = meta_dict(ctx.get(dut.o.payload))
            for _ in range(rng.randrange(hold + 1)):
                assert ctx.get(dut.o.valid) and not ctx.get(dut.i.ready)
                assert meta_dict(ctx.get(dut.o.payload)) == first, "held record changed"
                await ctx.tick()
            mad = read_mad(ctx) if read else None     # (after the hold)
            ctx.set(dut.o.ready, 1)
            await ctx.tick()
            ctx.set(dut.o.ready, 0)
            seen.append((first, mad))

    async def tb(ctx):
        await drv.send(ctx, packets)

    run_sim(dut, testbenches=[tb, consumer], processes=[taken.run])
    return seen, taken.cycles


@pytest.mark.parametrize("width", [64, 512])
def test_verdicts_and_fields_are_the_models(width):
    rng = random.Random(width)
    packets = mads(rng)
    seen, _ = run(width, packets, idle=0.3, hold=5, seed=width + 1)
    assert len(seen) == len(packets)
    verdicts = set()
    for n, (pkt, (rec, _)) in enumerate(zip(packets, seen)):
        verdict = model_verdict(pkt.data, pkt.error)
        verdicts.add(verdict)
        assert rec["verdict"] == verdict.value, (n, verdict)
        assert {k: rec[k] for k in ("src_ip", "src_qp", "pkey")} == pkt.meta, n
        if verdict in (Verdict.OK, Verdict.GET_SET):
            for name, value in expected_fields(pkt.data).items():
                assert rec[name] == value, (n, name)
    assert verdicts == set(Verdict)


@pytest.mark.parametrize("width", [64, 512])
def test_the_mad_is_kept_whole(width):
    """The MAD on ``mad`` as it came, after its record was held: Gets and Sets (which the
    reply builder echoes from it) and a REQ."""
    rng = random.Random(width + 7)
    data = [m for name, m in malformed(rng) if name.startswith("answered")] + [req(rng)]
    packets = [Packet(d, {}) for d in data]
    seen, _ = run(width, packets, idle=0.3, hold=5, seed=width, read=True)
    assert [mad for _, mad in seen] == data


@pytest.mark.parametrize("width", [64, 512])
def test_latency_and_release(width):
    """Released at once, the next MAD's first beat moves in the cycle after the release: one
    MAD every 2048/W + 2 cycles."""
    rng = random.Random(3)
    packets = [Packet(random_message(rng, I.ATTR_RTU), {}) for _ in range(4)]
    seen, cycles = run(width, packets, idle=0, hold=0, seed=1)
    beats = 2048 // width
    assert len(cycles) == 4 * beats
    starts = cycles[::beats]
    assert all(b - a == beats + 2 for a, b in zip(starts, starts[1:]))
    assert all(d["verdict"] == Verdict.OK.value for d, _ in seen)


def test_width_is_checked():
    raises(ValueError, "width", lambda: IbCmReceiver(32))
