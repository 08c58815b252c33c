from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.arp_resolve import ArpResolver
from rocegen.gateware.net.arp_tx import OPER_REPLY, OPER_REQUEST, ArpTransmitter
from rocegen.gateware.net.layouts import ARP_LOOKUP, ARP_PEEK, ETH_META
from rocegen.wire.headers import ARP, ETHERTYPE_IPV4

__all__ = ["Arp"]


class Arp(wiring.Component):
    """ARP for IPv4 over Ethernet: responder, cache and resolver.

    Receive (``i``: ARP payloads with the Ethernet header in ``meta.eth``):

    * a packet that is not Ethernet/IPv4 ARP (htype 1, ptype 0x0800, hlen 6, plen 4, oper 1 or
      2), whose sender hardware address is not a unicast MAC, that is shorter than 28 bytes, or
      has ``error`` set is dropped and pulses ``drop_bad``;
    * a request for ``local_ip`` is answered (``tx_reply``);
    * the sender is learned when we are the target (RFC 826 merge), and refreshed whenever an
      entry for its address exists; a sender address of 0.0.0.0 (RFC 5227 probe),
      255.255.255.255 or our own is never learned (a probe for our address is still answered).

    Cache: ``entries`` fully associative entries, replaced round robin; entries do not expire
    (a changed MAC is learned from the peer's next request or reply).

    Resolver (for the IPv4 transmitter, port ``lookup`` of
    :data:`~rocegen.gateware.net.layouts.ARP_LOOKUP`): ``ip`` -> ``hit`` / ``mac`` and
    ``wait_ip`` -> ``wait_hit`` / ``wait_mac`` one cycle later (the address compares are
    registered; an entry rewritten meanwhile does not match).
    Holding ``resolve`` high for a ``wait_ip`` that missed sends a request (the resolution
    starts in the next cycle), then
    repeats it every ``retry_cycles`` + 2 cycles, up to ``retries`` times; if no answer came,
    ``failed`` pulses for one cycle, from a register (the cycle after the last wait ended; the
    transmitter drops its packet), and the resolver is free again from the cycle after it.

    Peek (with ``peek=True``, port ``peek`` of :data:`~rocegen.gateware.net.layouts.ARP_PEEK`):
    ``ip`` -> ``hit`` / ``mac`` combinationally, from the cache's current contents, as
    ``lookup.ip`` is answered; a miss starts no resolution (for a block that builds whole
    frames and needs only the MAC of a peer the cache already knows).

    Transmit (``o``): replies and requests as 28-byte ARP payloads with ``meta.eth`` set; the
    Ethernet transmitter pads them. Replies go first.

    Structure: the cache and the receive path are here; the resolver is an
    :class:`~rocegen.gateware.net.arp_resolve.ArpResolver`, the transmit side an
    :class:`~rocegen.gateware.net.arp_tx.ArpTransmitter`.

    Latency: a packet's checks are registered with its last beat; in the next cycle the match of
    its sender address is registered, and in the one after the cache, the reply and the strobes
    ``rx_request``/``rx_reply`` act (``drop_bad`` comes one cycle after the last beat, or after
    ``runt`` of the depacketizer). A reply leaves 4 cycles after the request's last beat at the
    earliest. The resolver sees an answer learned in the cycle after it was learned (the match
    of its target is registered). Backpressure: the input is held (``ready`` from registers
    only) in the cycle after a packet's last beat, so that the next packet's match sees this
    one's update (ARP packets are taken every other cycle at most), while a request for us
    waits for its reply to be queued, and while a reply is queued.
    """

    def __init__(self, width, *, entries=4, retry_cycles=100_000, retries=3, peek=False):
        check_width(width)
        if not isinstance(peek, bool):
            raise TypeError(f"peek must be a bool, not {peek!r}")
        if not isinstance(entries, int) or not 1 <= entries <= 64:
            raise ValueError(f"ARP cache entries must be 1..64, not {entries!r}")
        if not isinstance(retry_cycles, int) or retry_cycles < 16:
            raise ValueError(f"retry_cycles must be an integer >= 16, not {retry_cycles!r}")
        if not isinstance(retries, int) or not 0 <= retries <= 255:
            raise ValueError(f"retries must be 0..255, not {retries!r}")
        self.width = width
        self.entries = entries
        self.retry_cycles = retry_cycles
        self.retries = retries
        self.peek_port = peek
        ports = {"peek": In(ARP_PEEK)} if peek else {}
        super().__init__({
            "local_mac": In(48),
            "local_ip": In(32),
            "i": In(PacketSignature(width, ETH_META)),
            "o": Out(PacketSignature(width, ETH_META)),
            "lookup": In(ARP_LOOKUP),
            "drop_bad": Out(1),
            "rx_request": Out(1),
            "rx_reply": Out(1),
            "tx_reply": Out(1),
            "tx_request": Out(1),
            **ports,
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width

        # ---- cache ----
        valid = Array(Signal(name=f"valid{k}") for k in range(self.entries))
        ips = Array(Signal(32, name=f"ip{k}") for k in range(self.entries))
        macs = Array(Signal(48, name=f"mac{k}") for k in range(self.entries))
        victim = Signal(range(self.entries))

        def match(ip):
            hits = [valid[k] & (ips[k] == ip) for k in range(self.entries)]
            index = Signal(range(self.entries))
            for k in reversed(range(self.entries)):
                with m.If(hits[k]):
                    m.d.comb += index.eq(k)
            hit = Signal()
            m.d.comb += hit.eq(Cat(*hits).any())     # an OR tree, not an adder
            return hit, index, hits

        def answer(ip, hit_port, mac_port):
            # the MAC of the entry that matches, as an AND-OR of the entries (no index: an
            # address is in one entry at most, since one is learned only when it misses)
            hit, _, hits = match(ip)
            mac = 0
            for k in range(self.entries):
                mac = mac | Mux(hits[k], macs[k], 0)
            m.d.comb += [hit_port.eq(hit), mac_port.eq(mac)]
            return hit

        answer(self.lookup.ip, self.lookup.hit, self.lookup.mac)
        if self.peek_port:
            answer(self.peek.ip, self.peek.hit, self.peek.mac)
        return self._elaborate_receive(m, W, ips, macs, match, valid, victim)

    def _elaborate_receive(self, m, W, ips, macs, match, valid, victim):
        """The wait port, the receive side (requests and replies checked, the cache learnt) and the
        replies sent."""
        # the wait port answers a cycle later: the compare of each entry's address with
        # ``wait_ip`` is registered, and counts only if that entry's address was not written
        # since (``ip_written``); valid bits and MACs are read when answering
        wait_eq = Signal(self.entries)
        ip_written = Signal(self.entries)       # entry k's address was written last cycle
        m.d.sync += [wait_eq.eq(Cat(*(ips[k] == self.lookup.wait_ip
                                      for k in range(self.entries)))),
                     ip_written.eq(0)]
        wait_hits = [valid[k] & wait_eq[k] & ~ip_written[k] for k in range(self.entries)]
        wait_mac = 0
        for k in range(self.entries):
            wait_mac = wait_mac | Mux(wait_hits[k], macs[k], 0)
        m.d.comb += [self.lookup.wait_hit.eq(Cat(*wait_hits).any()),
                     self.lookup.wait_mac.eq(wait_mac)]

        # ---- receive ----
        rx = m.submodules.rx = Depacketizer(ARP, W, ETH_META)
        wiring.connect(m, wiring.flipped(self.i), rx.i)
        arp = rx.o.payload.meta.arp
        well_formed = ((arp.htype == 1) & (arp.ptype == ETHERTYPE_IPV4) & (arp.hlen == 6) &
                       (arp.plen == 4) & ((arp.oper == OPER_REQUEST) | (arp.oper == OPER_REPLY)))
        reply_pending = Signal()
        reply_mac = Signal(48)
        reply_ip = Signal(32)
        end = rx.o.valid & rx.o.payload.last
        for_us = arp.tpa == self.local_ip
        is_request = arp.oper == OPER_REQUEST
        # a sender hardware address must be a unicast MAC; a sender IP of 0 (an RFC 5227 probe),
        # the broadcast address or our own address is answered but never learned
        sha_ok = (arp.sha != 0) & ~arp.sha[40]
        learnable = (arp.spa != 0) & (arp.spa != 0xFFFFFFFF) & (arp.spa != self.local_ip)
        well_formed = well_formed & sha_ok

        # action stage: a packet's checks are registered with its last beat, and the cache and
        # the reply act on those registers in the next cycle (the match of the sender address
        # then sees every earlier packet's update)
        act = Signal()              # a good packet's last beat was taken in the last cycle
        a_request = Signal()
        a_for_us = Signal()
        a_learnable = Signal()
        a_sha = Signal(48)
        a_spa = Signal(32)
        bad = Signal()
        upd = Signal()              # ... two cycles ago: its update of the cache is due
        u_hits = Signal(self.entries)
        u_request = Signal()
        u_for_us = Signal()
        u_learnable = Signal()
        u_sha = Signal(48)
        u_spa = Signal(32)
        # while a request for us waits for its reply to be queued, or a reply is still queued,
        # the input is held (from registers only); a packet is taken every other cycle at most,
        # so that the next one's match sees this one's update of the cache
        m.d.comb += rx.o.ready.eq(~(reply_pending | act | (upd & u_for_us & u_request)))
        take = end & rx.o.ready
        good = take & ~rx.o.payload.error & well_formed
        m.d.sync += [
            act.eq(good), a_request.eq(is_request), a_for_us.eq(for_us),
            a_learnable.eq(learnable), a_sha.eq(arp.sha), a_spa.eq(arp.spa),
            bad.eq(rx.runt | (take & (rx.o.payload.error | ~well_formed))),
        ]
        m.d.comb += self.drop_bad.eq(bad)

        # second cycle of the action: the match of the sender address, per entry, registered
        # (the cache is not written while a packet is in the first cycle)
        _, _, s_hits = match(a_spa)
        m.d.sync += [
            upd.eq(act), u_hits.eq(Cat(*s_hits)), u_request.eq(a_request),
            u_for_us.eq(a_for_us), u_learnable.eq(a_learnable), u_sha.eq(a_sha),
            u_spa.eq(a_spa),
        ]
        with m.If(upd):
            m.d.comb += [self.rx_request.eq(u_request), self.rx_reply.eq(~u_request)]
            with m.If(u_hits.any() & u_learnable):
                for k in range(self.entries):
                    with m.If(u_hits[k]):
                        m.d.sync += macs[k].eq(u_sha)
            with m.Elif(u_for_us & u_learnable):
                m.d.sync += [valid[victim].eq(1), ips[victim].eq(u_spa), macs[victim].eq(u_sha),
                             victim.eq(Mux(victim == self.entries - 1, 0, victim + 1))]
                for k in range(self.entries):
                    with m.If(victim == k):
                        m.d.sync += ip_written[k].eq(1)
            with m.If(u_for_us & u_request):
                m.d.sync += [reply_pending.eq(1), reply_mac.eq(u_sha), reply_ip.eq(u_spa)]

        # ---- resolver and transmitter ----
        res = m.submodules.resolve = ArpResolver(retry_cycles=self.retry_cycles,
                                                 retries=self.retries)
        m.d.comb += [res.resolve.eq(self.lookup.resolve), res.wait_ip.eq(self.lookup.wait_ip),
                     self.lookup.failed.eq(res.failed), res.target_hit.eq(match(res.target)[0])]
        tx = m.submodules.transmit = ArpTransmitter(W)
        wiring.connect(m, res.request, tx.request)
        wiring.connect(m, tx.o, wiring.flipped(self.o))
        m.d.comb += [tx.local_mac.eq(self.local_mac), tx.local_ip.eq(self.local_ip),
                     tx.reply.valid.eq(reply_pending), tx.reply.payload.mac.eq(reply_mac),
                     tx.reply.payload.ip.eq(reply_ip),
                     self.tx_reply.eq(tx.reply.valid & tx.reply.ready),
                     self.tx_request.eq(tx.request.valid & tx.request.ready)]
        with m.If(tx.reply.valid & tx.reply.ready):
            m.d.sync += reply_pending.eq(0)
        return m
