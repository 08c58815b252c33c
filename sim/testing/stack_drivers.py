"""Testbench pieces for the network stack in Amaranth's simulator."""

from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.net.netstack import NetStackModel, normalise
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["echo_meta", "udp_echo", "introduce_host", "check_udp_frame"]


def check_udp_frame(frame, payload, src_port, dst_port, *, icrc):
    """Assert that ``frame`` is the stack's frame to the host (``FPGA_*`` to ``HOST_*``) for
    ``payload`` sent on a UDP transmit port, as the network model builds it (the IPv4
    identification and checksum aside, :func:`normalise`); with ``icrc`` (a RoCEv2 packet) its
    ICRC checked by the ICRC model, the model's datagram carrying 4 zero bytes there (the IPv4
    total length and the UDP length count it)."""
    model = NetStackModel(FPGA_MAC, FPGA_IP)
    if icrc:
        assert icrc_model.check(frame), "bad ICRC"
        want = model.udp_frame(HOST_MAC, HOST_IP, src_port, dst_port, payload + bytes(4))
        at = 42 + len(payload)
        frame = frame[:at] + bytes(4) + frame[at + 4:]
    else:
        want = model.udp_frame(HOST_MAC, HOST_IP, src_port, dst_port, payload)
    assert normalise(frame) == normalise(want)


async def introduce_host(ctx, dut, rx, col):
    """Give the stack ``dut`` its addresses (``FPGA_MAC``, ``FPGA_IP``), send it the host's
    ARP request through the driver ``rx`` (on ``mac_rx``) and wait until the collector ``col``
    (on ``mac_tx``) has its reply: from then on the stack knows ``HOST_IP``'s MAC."""
    from scapy.layers.l2 import ARP, Ether
    ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
    ctx.set(dut.local_ip, parse_ip(FPGA_IP))
    await rx.send(ctx, [Packet(bytes(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP)))])
    while len(col.packets) < 1:
        await ctx.tick()


def echo_meta(meta):
    """Transmit metadata that sends a received datagram (``meta`` sampled from ``udp_rx``)
    back to its source, as the echo service of ``StackTop`` does."""
    return {"udp": {"dst_ip": meta.ipv4.src, "src_port": meta.udp.dst_port,
                    "dst_port": meta.udp.src_port, "length": meta.udp.length - 8,
                    "dscp": meta.ipv4.dscp, "ecn": 0}}


def udp_echo(dut, port=0, on_datagram=None):
    """A simulator process turning every datagram of ``dut.udp_rx[port]`` around onto
    ``dut.udp_tx[port]``, one beat at a time; ``on_datagram()`` is called per datagram."""
    async def run(ctx):
        rx, tx = dut.udp_rx[port], dut.udp_tx[port]
        while True:
            ctx.set(rx.ready, 1)
            _, _, valid, payload = await ctx.tick().sample(rx.valid, rx.payload)
            if not valid:
                continue
            ctx.set(rx.ready, 0)
            if payload.last and on_datagram:
                on_datagram()
            ctx.set(tx.payload, {"data": payload.data, "keep": payload.keep,
                                 "last": payload.last, "error": payload.error,
                                 "meta": echo_meta(payload.meta)})
            ctx.set(tx.valid, 1)
            await ctx.tick().until(tx.ready)
            ctx.set(tx.valid, 0)
    return run
