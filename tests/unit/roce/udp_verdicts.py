"""The network stack's side of :class:`~rocegen.gateware.roce.rx.RoceRx`'s ``udp_checksum``
input, for the tests that drive the receive path alone: one verdict pulse per datagram the
stack delivers on UDP port 4791 with a UDP checksum other than 0, in order, at a random delay
after its last beat is offered on ``i`` (sometimes before that beat, never before its first)."""

import random

__all__ = ["UdpVerdicts"]


class UdpVerdicts:
    """Drives ``rx.udp_checksum`` as the stack would. ``verdicts``: one entry per datagram sent
    on ``rx.i``, in order: None when the stack gives it no verdict (foreign, or UDP checksum 0),
    else whether its checksum is right. Each verdict is due ``0..late`` cycles after the
    cycle its datagram's last beat is first offered, or (with chance ``early``) after its first
    beat is; a due verdict waits for those before it and pulses one cycle after them at the
    earliest. ``sent`` counts the pulses (all of them when the run is over)."""

    def __init__(self, rx, verdicts, *, seed, late=12, early=0.25):
        self.rx = rx
        self.verdicts = list(verdicts)
        self.rng = random.Random(seed)
        self.late = late
        self.early = early
        self.sent = 0

    @property
    def want(self):
        """The pulses the datagrams call for."""
        return sum(v is not None for v in self.verdicts)

    async def run(self, ctx):
        i, out = self.rx.i, self.rx.udp_checksum
        due = []                    # (cycle due, good), in the datagrams' order
        k, started, last_seen, early = 0, False, False, False
        cycle = 0
        async for _, _, valid, ready, last in ctx.tick().sample(i.valid, i.ready,
                                                                i.payload.last):
            # (the values of cycle ``cycle``; what is set now holds in the next)
            if valid and k < len(self.verdicts):
                good = self.verdicts[k]
                if not started:
                    started = True
                    early = good is not None and self.rng.random() < self.early
                    if early:
                        due.append((cycle + 1 + self.rng.randrange(self.late + 1), good))
                if last and not last_seen:
                    last_seen = True
                    if good is not None and not early:
                        due.append((cycle + 1 + self.rng.randrange(self.late + 1), good))
                if ready and last:
                    k, started, last_seen = k + 1, False, False
            cycle += 1
            fire = bool(due) and due[0][0] <= cycle
            ctx.set(out.valid, fire)
            if fire:
                ctx.set(out.payload, due.pop(0)[1])
                self.sent += 1
