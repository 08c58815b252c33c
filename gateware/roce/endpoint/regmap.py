"""The register map of the endpoint's AXI4-Lite control and status interface: the one table from
which the gateware (:class:`~rocegen.gateware.roce.endpoint.regs.AxiLiteRegs`), ``docs/registers.md``, the
C header and the Python accessor are all generated.

Every register is 32 bits at a byte offset that is a multiple of 4; the space is 16 bits wide.
The map is made of

* :data:`REGISTERS`: single registers (identity, the configuration the core was built with, the
  addresses, the traffic class, the connection manager's settings, the traffic generator, the
  register block's own error counters);
* :data:`WINDOWS`: arrays: ``QP_OPEN`` (one bit per QP), ``COUNTER`` (every counter of
  :data:`~rocegen.gateware.roce.endpoint.endpoint.STATS`), ``QP_COUNTER`` (the per-QP counters of
  :data:`~rocegen.gateware.roce.endpoint.endpoint.QP_COUNTERS`, one block per QP), ``QP`` (the QP table
  read back: state, peer, PSN..., one block per QP) and ``CC`` (:data:`CC_WORDS`: DCQCN's
  parameters, staged and committed at once, and a QP's current rate; mapped in cores built
  with DCQCN only).

Access: ``ro`` registers ignore writes, ``rw`` registers take them (byte strobes honoured; bits
outside a register's fields read 0), ``wo`` registers act on a write and read 0. A write to a
read-only or unmapped address, or one a register refuses (its description says when), changes
nothing, answers SLVERR and counts in ``REG_BAD_WRITES``; a read of an unmapped address
(including the ``CC`` window of a core without DCQCN and the blocks of QPs beyond ``NUM_QPS``)
answers 0 with SLVERR and counts in ``REG_BAD_READS``.

The run-time settings (``TC``, the ``CC`` window) start from the configuration the core was
built with (:func:`settings_reset`): the endpoint's ``dscp``, ``ecn``, ``pcp`` and its DCQCN
parameters (``dcqcn_params``) as far as its configuration dict holds them.
"""

from dataclasses import dataclass

from amaranth.lib import data

from rocegen.gateware.roce.cc.dcqcn_layouts import DCQCN_CONFIG, RATE_FRAC, dcqcn_config
from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, STATS
from rocegen.gateware.roce.layouts import ECN_ECT0, TRAFFIC_CONFIG

__all__ = ["Register", "Window", "REGISTERS", "WINDOWS", "QP_WORDS", "TC_FIELDS", "CC_WORDS",
           "RDMA_CM_WORDS",
           "ADDR_WIDTH", "MAGIC", "VERSION", "register_values", "windows_for", "settings_reset",
           "tc_word", "cc_line_rate_max", "registers_markdown", "c_header", "python_accessor",
           "MEMORY_CODES"]

#: Bits of the AXI4-Lite byte address.
ADDR_WIDTH = 16
#: Value of ``ID``: "RoCE" in ASCII.
MAGIC = 0x526F4345
#: Value of ``VERSION``: bumped whenever the map changes incompatibly.
VERSION = 1
#: ``MEMORY`` codes.
MEMORY_CODES = {"onchip": 0, "axi4": 1}


@dataclass(frozen=True)
class Register:
    """One 32-bit register. ``source``: where its value comes from -- ``"const"`` (the
    configuration, see :func:`register_values`), ``"rw"`` (a register the block holds; reset
    value from :func:`register_values`, ``bits`` wide), or ``"status"`` (an input of the
    block of that name). ``fields``: ``(name, lsb, bits)`` of a register made of fields (the
    other bits read 0 and ignore writes)."""
    name: str
    offset: int
    access: str
    source: str
    doc: str
    bits: int = 32
    fields: tuple = ()


@dataclass(frozen=True)
class Window:
    """An array of registers: ``count`` blocks of ``stride`` bytes from ``base``; ``words``:
    the names of the 32-bit words of a block (``None``: the window is reserved)."""
    name: str
    base: int
    stride: int
    max_count: int
    words: tuple
    doc: str


#: Fields of ``TC``, ``(name, lsb, bits)``: the fields of
#: :data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG`.
TC_FIELDS = (("dscp", 0, 6), ("ecn", 8, 2), ("pcp", 16, 3))

REGISTERS = (
    Register("ID", 0x000, "ro", "const", 'Identifies the block: 0x526F4345 ("RoCE").'),
    Register("VERSION", 0x004, "ro", "const", "Version of this register map."),
    Register("WIDTH", 0x008, "ro", "const", "Datapath width W in bits."),
    Register("NUM_QPS", 0x00C, "ro", "const", "QPs in the QP table (QPN 256 + index)."),
    Register("MEMORY", 0x010, "ro", "const", "Payload memory: 0 on chip, 1 AXI4."),
    Register("MEM_BYTES_LOG2", 0x014, "ro", "const", "log2 of the payload memory in bytes."),
    Register("CLK_HZ", 0x018, "ro", "const", "Clock the retransmit timers count, in Hz."),
    Register("WR_DEPTH", 0x01C, "ro", "const", "Work requests held per QP until they complete."),
    Register("WINDOW", 0x020, "ro", "const", "Unacknowledged PSNs a QP may have outstanding."),
    Register("RING_BASE", 0x024, "ro", "const",
             "Streaming front end: byte address of its ring in local memory."),
    Register("RING_BYTES", 0x028, "ro", "const", "Streaming front end: bytes of its ring."),
    Register("MAX_MESSAGE", 0x02C, "ro", "const",
             "Streaming front end: longest message in bytes (longer ones are dropped and "
             "counted in stream_drop_too_long)."),
    Register("MAX_INFLIGHT", 0x030, "ro", "const",
             "Streaming front end: messages stored and not yet completed, at most."),
    Register("NUM_COUNTERS", 0x034, "ro", "const", "Counters in the COUNTER window."),
    Register("NUM_QP_COUNTERS", 0x038, "ro", "const", "Counters per QP in the QP_COUNTER window."),
    Register("MAC_HI", 0x040, "rw", "rw", "Our MAC address, bytes 0..1 (the first on the wire "
             "in bits 15:8). Reset: the generator's --mac.", bits=16),
    Register("MAC_LO", 0x044, "rw", "rw", "Our MAC address, bytes 2..5 (byte 2 in bits 31:24)."),
    Register("IP", 0x048, "rw", "rw", "Our IPv4 address (first byte in bits 31:24). Reset: the "
             "generator's --ip. Changing the addresses during traffic is allowed; packets in "
             "flight keep the old ones."),
    Register("TC", 0x04C, "rw", "rw", "Traffic class: `dscp` and `ecn`, the ECN code point of "
             "the data packets (2 = ECT(0), 0 = not ECN-capable), of the QPs the connection "
             "manager opens from then on (open QPs keep theirs); `pcp`, the 802.1Q priority of "
             "every frame sent with a VLAN tag from the next one. A write goes to the endpoint "
             "in the cycle after it is accepted. Reset: the generator's --dscp, --ecn, --pcp.",
             bits=19, fields=TC_FIELDS),
    Register("CM_PORT", 0x060, "ro", "const", "UDP port of the connection manager."),
    Register("CM_ALLOW_NET", 0x064, "ro", "const",
             "Only hosts in CM_ALLOW_NET/CM_ALLOW_MASK may open QPs (both 0: any host)."),
    Register("CM_ALLOW_MASK", 0x068, "ro", "const", "Network mask of CM_ALLOW_NET."),
    Register("CM_PMTU", 0x06C, "ro", "const", "Path MTU of QPs opened without one, in bytes."),
    Register("CM_TIMEOUT", 0x070, "ro", "const",
             "Retransmit timeout code of QPs opened without one (4.096 us x 2^code, 0 = never)."),
    Register("CM_RETRY", 0x074, "ro", "const", "Retry count of QPs opened without one."),
    Register("CM_RNR_RETRY", 0x078, "ro", "const",
             "RNR retry count of QPs opened without one (7 = forever)."),
    Register("REG_BAD_WRITES", 0x080, "ro", "status",
             "Writes refused (read-only or unmapped address), saturating."),
    Register("REG_BAD_READS", 0x084, "ro", "status", "Reads of unmapped addresses, saturating."),
    Register("GEN_BUSY", 0x090, "ro", "status", "Traffic generator: 1 while a run is going."),
    Register("GEN_POSTED", 0x094, "ro", "status", "Traffic generator: work requests posted."),
    Register("GEN_OK", 0x098, "ro", "status", "Traffic generator: completed OK."),
    Register("GEN_ERR", 0x09C, "ro", "status", "Traffic generator: completed with an error."),
    Register("GEN_CYCLES", 0x0A0, "ro", "status",
             "Traffic generator: cycles of the last (or current) run."),
)

#: Words of a QP's block in the ``QP`` window, with their fields ``(name, lsb, bits, shift)``:
#: bits ``lsb + bits - 1 .. lsb`` of the word are bits ``shift + bits - 1 .. shift`` of the QP
#: table's field ``name`` (``psn`` is the next PSN to send).
QP_WORDS = (
    ("STATE", (("state", 0, 3, 0),)),
    ("PEER_IP", (("peer_ip", 0, 32, 0),)),
    ("PEER_QPN", (("peer_qpn", 0, 24, 0),)),
    ("RKEY", (("rkey", 0, 32, 0),)),
    ("BASE_VA_LO", (("base_va", 0, 32, 0),)),
    ("BASE_VA_HI", (("base_va", 0, 32, 32),)),
    ("PSN", (("psn", 0, 24, 0),)),
    ("PATH", (("udp_sport", 0, 16, 0), ("dscp", 16, 6, 0), ("ecn", 22, 2, 0))),
    ("TIMERS", (("pmtu_log2", 0, 4, 0), ("ack_every_log2", 4, 3, 0), ("timeout", 7, 5, 0),
                ("retry_cnt", 12, 3, 0), ("rnr_retry", 15, 3, 0))),
)

#: Words of the ``CC`` window, ``(name, access, field, doc)``: control words, then one word
#: per field of :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG` (``field``), which
#: holds the value the next ``CC_COMMIT`` sends (reset: the configuration after reset).
CC_WORDS = (
    ("CC_COMMIT", "wo", None,
     "Write any value: the parameter words below, all at once, become DCQCN's configuration "
     "(in force a few cycles later), so a set half written never takes effect. Refused "
     "(SLVERR, counted, nothing sent) when the set is out of range: CC_G_LOG2 above 16, "
     "CC_ALPHA_INIT above 65536, a period or CC_BYTE_COUNT of 0, CC_LINE_RATE 0 or above "
     "W/8 bytes per cycle, CC_MIN_RATE above CC_LINE_RATE."),
    ("CC_RATE_QP", "rw", None,
     "The QP whose rate CC_RATE shows (index 0..NUM_QPS-1, bits 7:0; a write of a larger index "
     "is refused). Reset 0."),
    ("CC_RATE", "ro", None,
     "Current rate of QP CC_RATE_QP: bytes per cycle, Q7.20 (bits per second = value x 8 x "
     "CLK_HZ / 2^20)."),
    ("CC_BYPASS", "rw", "bypass", "1: every QP at line rate, CNPs ignored (0: DCQCN on)."),
    ("CC_G_LOG2", "rw", "g_log2", "Gain of alpha's updates, g = 2^-CC_G_LOG2 (0..16)."),
    ("CC_ALPHA_INIT", "rw", "alpha_init",
     "alpha of a QP after reset and after a bypass: Q16 (65536 = 1.0)."),
    ("CC_ALPHA_PERIOD", "rw", "alpha_period", "K, the alpha timer: cycles (1..2^24-1)."),
    ("CC_RATE_PERIOD", "rw", "rate_period", "T, the rate-increase timer: cycles (1..2^24-1)."),
    ("CC_BYTE_COUNT", "rw", "byte_count",
     "B, the rate-increase byte counter: wire bytes (1..2^32-1)."),
    ("CC_FAST_STEPS", "rw", "fast_steps", "F, the fast-recovery steps (0..255)."),
    ("CC_R_AI", "rw", "r_ai", "R_AI, the additive increase: bytes per cycle, Q7.20."),
    ("CC_R_HAI", "rw", "r_hai",
     "R_HAI, the hyper increase (times the hyper step number): bytes per cycle, Q7.20."),
    ("CC_MIN_RATE", "rw", "min_rate", "The lowest rate a QP is cut to: bytes per cycle, Q7.20."),
    ("CC_LINE_RATE", "rw", "line_rate",
     "Every QP's highest rate and its rate after a bypass: wire bytes (preamble, gap and FCS "
     "counted) per cycle, Q7.20."),
)

#: Words of the ``RDMA_CM`` window, ``(name, access, field, doc)`` (``field`` always None: the
#: shape of :data:`CC_WORDS`): the IB CM's connections started and ended by software.
RDMA_CM_WORDS = (
    ("RDMA_CM_DST_IP", "rw", None,
     "The host's IPv4 address the next RDMA_CM_CONNECT connects to (first byte in bits "
     "31:24)."),
    ("RDMA_CM_PORTS", "rw", None,
     "Bits 15:0: the host's TCP port the next RDMA_CM_CONNECT connects to (its "
     "`rdma_listen`); bits 31:16: ours, in the REQ's `cma_hdr`."),
    ("RDMA_CM_CONNECT", "wo", None,
     "Write any value: connect to RDMA_CM_DST_IP, port RDMA_CM_PORTS[15:0], as librdmacm's "
     "`rdma_connect` (the core's `rdma_cm_connect`); how it went comes in RDMA_CM_EVENT."),
    ("RDMA_CM_DISCONNECT", "wo", None,
     "Write a QP index (bits 7:0): close its IB CM connection (a DREQ; the core's "
     "`rdma_cm_disconnect`). Refused for an index of no QP."),
    ("RDMA_CM_EVENTS", "ro", None,
     "How many connects have been answered (RDMA_CM_EVENT holds the last), counting."),
    ("RDMA_CM_EVENT", "ro", None,
     "The last answer: bit 31 set: established, bits 7:0 its QP index; clear: refused, bits "
     "23:8 the reason (the host's REJ reason, 1 no QP free, 3 no answer)."),
)

WINDOWS = (
    Window("QP_OPEN", 0x0C0, 4, 8, tuple(f"QP_OPEN_{j}" for j in range(8)),
           "QPs the connection manager has open: bit k of word j is QP 32 j + k."),
    Window("RDMA_CM", 0x0E0, 4, 8, tuple(w[0] for w in RDMA_CM_WORDS),
           "The standard RDMA connection manager's connections started and ended by "
           "software, in cores built with it (`--rdma-cm-port`; elsewhere unmapped: reads and "
           "writes answer SLVERR and are counted). After a write of RDMA_CM_CONNECT or "
           "RDMA_CM_DISCONNECT, the next write waits until the core has taken the request."),
    Window("CC", 0x100, 4, 64, tuple(w[0] for w in CC_WORDS),
           "Congestion control: DCQCN's reaction point, in cores built with DCQCN (elsewhere "
           "unmapped: reads and writes answer SLVERR and are counted). Units: times in cycles "
           "of CLK_HZ, rates in bytes per cycle as unsigned fixed point Q7.20 (a rate in bits "
           "per second is value x 8 x CLK_HZ / 2^20), alpha in Q16."),
    Window("COUNTER", 0x1000, 4, 1024, tuple(n.upper() for n in STATS),
           "Every counter of the endpoint, 32 bits, saturating, cleared by reset only: the "
           "network stack's, then the RoCE layers' and the connection manager's."),
    Window("QP_COUNTER", 0x4000, 0x40, 256, tuple(n.upper() for n in QP_COUNTERS),
           "Per-QP counters (QP k's block at 0x4000 + 0x40 k), 32 bits, saturating."),
    Window("QP", 0x8000, 0x40, 256, tuple(w for w, _ in QP_WORDS),
           "The QP table read back (QP k's block at 0x8000 + 0x40 k), through a read port of "
           "its own: state (0 RESET, 1 INIT, 2 RTR, 3 RTS, 4 ERROR), peer, rkey, base address, "
           "next PSN to send, path and timer settings."),
)


def windows_for(config):
    """``(window, count)`` for each window in a core of ``config`` (the endpoint's
    :attr:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint.config`): how many blocks exist."""
    n = config["num_qps"]
    counts = {"QP_OPEN": (n + 31) // 32, "CC": len(CC_WORDS) if config.get("dcqcn") else 0,
              "RDMA_CM": len(RDMA_CM_WORDS) if config.get("rdma_cm_ports") else 0,
              "COUNTER": len(STATS), "QP_COUNTER": n, "QP": n}
    return [(w, counts[w.name]) for w in WINDOWS]


def _cc_reset(config):
    """The DCQCN configuration after reset of a core of ``config`` if it were built with DCQCN
    (its ``dcqcn_params``, default the published ones, at its clock and line rate)."""
    params = dict(config.get("dcqcn_params") or {})
    bypass = params.pop("bypass", False)
    return dcqcn_config(config["clk_hz"], config["line_gbps"], bypass=bypass, **params)


def settings_reset(config):
    """``(tc, cc)``: the run-time settings of a core of ``config`` after reset, as the endpoint
    starts with them -- the :data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG` fields and
    the :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG` fields (``None`` without
    DCQCN). ``pcp`` and ``dcqcn_params`` count when ``config`` has them (0 and the published
    DCQCN parameters otherwise)."""
    tc = {"dscp": config.get("dscp", 0), "ecn": ECN_ECT0 if config.get("ecn", True) else 0,
          "pcp": config.get("pcp", 0)}
    return tc, (_cc_reset(config) if config.get("dcqcn") else None)


def tc_word(tc):
    """The ``TC`` word of the traffic class ``tc`` (a dict of :data:`TC_FIELDS`)."""
    return sum(tc[name] << lsb for name, lsb, _ in TC_FIELDS)


def cc_line_rate_max(config):
    """Highest ``line_rate`` a core of ``config`` takes: W/8 bytes per cycle, Q7.20."""
    return config["width"] // 8 << RATE_FRAC


def register_values(config, mac, ip):
    """The value of every ``const`` register and the reset value of every ``rw`` register of a
    core of ``config`` with addresses ``mac``, ``ip`` (integers), and with DCQCN the reset
    values of the ``rw`` words of the ``CC`` window."""
    tc, cc = settings_reset(config)
    cc_words = {} if cc is None else {
        "CC_RATE_QP": 0, **{name: cc[field] for name, _, field, _ in CC_WORDS if field}}
    net = config["cm_allow_net"]
    net, mask = (0, 0) if net is None else net
    mem_log2 = config["mem_bytes"].bit_length() - 1
    return {
        "ID": MAGIC, "VERSION": VERSION, "WIDTH": config["width"], "NUM_QPS": config["num_qps"],
        "MEMORY": MEMORY_CODES[config["memory"]], "MEM_BYTES_LOG2": mem_log2,
        "CLK_HZ": config["clk_hz"], "WR_DEPTH": config["wr_depth"], "WINDOW": config["window"],
        "RING_BASE": config["ring_base"], "RING_BYTES": config["ring_bytes"],
        "MAX_MESSAGE": config["max_message"], "MAX_INFLIGHT": config["max_inflight"],
        "NUM_COUNTERS": len(STATS), "NUM_QP_COUNTERS": len(QP_COUNTERS),
        "MAC_HI": mac >> 32, "MAC_LO": mac & 0xFFFF_FFFF, "IP": ip, "TC": tc_word(tc),
        "CM_PORT": config["cm_port"], "CM_ALLOW_NET": net, "CM_ALLOW_MASK": mask,
        "CM_PMTU": config["pmtu"], "CM_TIMEOUT": config["cm_timeout"],
        "CM_RETRY": config["cm_retry"], "CM_RNR_RETRY": config["cm_rnr_retry"],
        **cc_words,
    }


def _check_map():
    """The map's own consistency: aligned, inside the space, nothing overlapping."""
    spans = [(r.offset, r.offset + 4, r.name) for r in REGISTERS]
    spans += [(w.base, w.base + w.stride * w.max_count, w.name) for w in WINDOWS]
    for lo, hi, name in spans:
        assert lo % 4 == 0 and hi <= 1 << ADDR_WIDTH, name
    spans.sort()
    for (_, hi, a), (lo, _, b) in zip(spans, spans[1:]):
        assert hi <= lo, f"registers {a} and {b} overlap"
    for w in WINDOWS:
        if w.words is not None:
            assert (len(w.words) <= w.max_count if w.stride == 4
                    else 4 * len(w.words) <= w.stride), w.name
            assert w.stride & (w.stride - 1) == 0 and w.base % (w.stride * w.max_count) == 0, w.name
    for r in REGISTERS:
        for _, lsb, bits in r.fields:
            assert lsb + bits <= r.bits, r.name
    tc = data.Layout.cast(TRAFFIC_CONFIG)
    assert {n: b for n, _, b in TC_FIELDS} == {n: f.width for n, f in tc}, "TC_FIELDS"
    cc = data.Layout.cast(DCQCN_CONFIG)
    assert [f for _, _, f, _ in CC_WORDS if f] == [n for n, _ in cc], "CC_WORDS"
    assert all(f.width <= 32 for _, f in cc), "CC_WORDS"


_check_map()


def registers_markdown(config, mac, ip, *, title="Registers"):
    """The register map of a core of ``config`` as Markdown."""
    values = register_values(config, mac, ip)
    out = [f"# {title}", "",
           "Generated by rocegen from the register table (`gateware/roce/endpoint/regmap.py`); do not "
           "edit.", "",
           f"The core's AXI4-Lite slave (`s_axil_*`, {ADDR_WIDTH}-bit byte addresses, 32-bit "
           "data) in this configuration: W = {width}, {num_qps} QPs, {memory} memory{cc}. "
           "Reads take a few cycles and never disturb traffic (the counters and the QP table "
           "have read ports of their own). `ro` registers ignore writes, `rw` registers take "
           "them (byte strobes honoured; bits outside a register's fields read 0), `wo` "
           "registers act on a write and read 0. A write to a read-only or unmapped address, "
           "or one a register refuses, changes nothing, answers SLVERR and counts in "
           "`REG_BAD_WRITES`; a read of an unmapped address answers 0 with SLVERR and counts "
           "in `REG_BAD_READS`. Counters are 32 bits, saturate, and are cleared by reset "
           "only.".format(**config, cc=", DCQCN" if config.get("dcqcn") else ""), "",
           "## Registers", "", "| Offset | Name | Access | Value / reset | Description |",
           "|---|---|---|---|---|"]
    for r in REGISTERS:
        v = values.get(r.name)
        shown = "" if v is None else f"{v:#x}"
        doc = r.doc + ("" if not r.fields else " Fields: " + ", ".join(
            f"`{n}` [{lsb + bits - 1}:{lsb}]" for n, lsb, bits in r.fields) + ".")
        out.append(f"| `{r.offset:#06x}` | `{r.name}` | {r.access} | {shown} | {doc} |")
    out += ["", "## Windows", ""]
    for w, count in windows_for(config):
        end = w.base + w.stride * (count or w.max_count) - 1
        out += [f"### `{w.name}`: `{w.base:#06x}`..`{end:#06x}`", "", w.doc, ""]
        if w.words is None:
            continue
        if w.name == "CC":
            out += _cc_markdown(w, config, values)
            continue
        if w.name == "RDMA_CM":
            out += _words_markdown(w, RDMA_CM_WORDS, values) if count else [
                "Not in this core (built without `--rdma-cm-port`): every word answers "
                "SLVERR.", ""]
            continue
        if w.stride == 4:
            out += [f"{count} words, word k at `{w.base:#06x} + 4 k`.", ""]
        else:
            out += [f"{count} blocks of {w.stride} bytes, block k at `{w.base:#06x} + "
                    f"{w.stride:#x} k`.", ""]
        out += ["| Offset in block | Name | Fields |" if w.stride > 4 else "| Offset | Name | |",
                "|---|---|---|"]
        fields = dict(QP_WORDS) if w.name == "QP" else {}
        for k, name in enumerate(w.words[:count] if w.stride == 4 else w.words):
            f = ", ".join(f"`{n}` [{sh + bits - 1}:{sh}] in bits [{lsb + bits - 1}:{lsb}]"
                          for n, lsb, bits, sh in fields.get(name, ()))
            off = w.base + 4 * k if w.stride == 4 else 4 * k
            out.append(f"| `{off:#06x}` | `{name}` | {f} |")
        out.append("")
    return "\n".join(out)


def _cc_markdown(w, config, values):
    """The table of the ``CC`` window's words (with their reset values)."""
    if values.get("CC_RATE_QP") is None:
        values = register_values({**config, "dcqcn": True}, 0, 0)
        out = ["Not in this core (built without DCQCN): every word answers SLVERR. In a core "
               "built with DCQCN (`--dcqcn`) at this clock and line rate:", ""]
    else:
        out = [f"{len(CC_WORDS)} words, word k at `{w.base:#06x} + 4 k`.", ""]
    return out + _words_markdown(w, CC_WORDS, values)[2:]


def _words_markdown(w, words, values):
    """The table of the words of window ``w`` (``(name, access, field, doc)`` each)."""
    out = [f"{len(words)} words, word k at `{w.base:#06x} + 4 k`.", "",
           "| Offset | Name | Access | Reset | Description |", "|---|---|---|---|---|"]
    for k, (name, access, _, doc) in enumerate(words):
        v = values.get(name)
        shown = "" if v is None else f"{v:#x}"
        out.append(f"| `{w.base + 4 * k:#06x}` | `{name}` | {access} | {shown} | {doc} |")
    return out + [""]


def c_header(config, mac, ip, *, prefix="ROCEGEN"):
    """A C header with every register's offset of a core of ``config``."""
    guard = f"{prefix}_REGS_H"
    values = register_values(config, mac, ip)
    out = ["/* Register map of the rocegen endpoint's AXI4-Lite slave. Generated by rocegen; do "
           "not edit. */", f"#ifndef {guard}", f"#define {guard}", "",
           f"#define {prefix}_ADDR_WIDTH {ADDR_WIDTH}", ""]
    for r in REGISTERS:
        out.append(f"#define {prefix}_{r.name} 0x{r.offset:04X}u  /* {r.access} */")
        if r.source == "const":
            out.append(f"#define {prefix}_{r.name}_VALUE 0x{values[r.name]:08X}u")
    out.append("")
    for w, count in windows_for(config):
        out.append(f"#define {prefix}_{w.name}_BASE 0x{w.base:04X}u")
        out.append(f"#define {prefix}_{w.name}_COUNT {count}u")
        if w.words is None:
            continue
        if w.stride == 4:
            out.append(f"#define {prefix}_{w.name}(k) ({prefix}_{w.name}_BASE + 4u * (k))")
            if w.name == "COUNTER":
                for k, name in enumerate(w.words):
                    out.append(f"#define {prefix}_COUNTER_{name} 0x{w.base + 4 * k:04X}u")
            if w.name in ("CC", "RDMA_CM"):     # fixed offsets; COUNT 0: not in the core
                for k, name in enumerate(w.words):
                    out.append(f"#define {prefix}_{name} 0x{w.base + 4 * k:04X}u")
        else:
            out.append(f"#define {prefix}_{w.name}_STRIDE 0x{w.stride:X}u")
            for k, name in enumerate(w.words):
                out.append(f"#define {prefix}_{w.name}_{name}(qp) ({prefix}_{w.name}_BASE + "
                           f"0x{w.stride:X}u * (qp) + 0x{4 * k:X}u)")
        out.append("")
    for name, fields in QP_WORDS:
        for f, lsb, bits, _ in fields:
            if bits < 32:
                out.append(f"#define {prefix}_QP_{name}_{f.upper()}(v) "
                           f"(((v) >> {lsb}) & 0x{(1 << bits) - 1:X}u)")
    for r in REGISTERS:
        for f, lsb, bits in r.fields:
            out.append(f"#define {prefix}_{r.name}_{f.upper()}(v) "
                       f"(((v) >> {lsb}) & 0x{(1 << bits) - 1:X}u)")
        if r.fields:
            args = ", ".join(f for f, _, _ in r.fields)
            packed = " | ".join(f"(((unsigned)({f}) & 0x{(1 << bits) - 1:X}u) << {lsb})"
                                for f, lsb, bits in r.fields)
            out.append(f"#define {prefix}_{r.name}_MAKE({args}) ({packed})")
    out += ["", f"#endif /* {guard} */", ""]
    return "\n".join(out)


_ACCESSOR = '''"""Register accessor of the rocegen endpoint's AXI4-Lite slave. Generated by rocegen; do not
edit.

``Registers(bus)``: ``bus`` has ``read(offset) -> int`` and ``write(offset, value)`` for 32-bit
words at byte offsets (an mmap of the AXI4-Lite space, a JTAG-to-AXI master, a simulation
master...). When they return awaitables (an asynchronous bus, as cocotb's), so do the methods
here: ``await regs.counter("tx_frames")``.
"""

import inspect

ADDR_WIDTH = {addr_width}
REGISTERS = {registers!r}
VALUES = {values!r}
WINDOWS = {windows!r}
COUNTERS = {counters!r}
QP_COUNTERS = {qp_counters!r}
QP_WORDS = {qp_words!r}
QP_STATES = ("RESET", "INIT", "RTR", "RTS", "ERROR")
TC_FIELDS = {tc_fields!r}
CC_WORDS = {cc_words!r}
RDMA_CM_WORDS = {rdma_cm_words!r}
#: The CC window's parameter words and the DCQCN fields they hold.
CC_FIELDS = {cc_fields!r}


def _then(values, fn):
    """``fn(*values)``, awaiting the values first when they are awaitables."""
    if any(inspect.isawaitable(v) for v in values):
        async def run():
            return fn(*[(await v) if inspect.isawaitable(v) else v for v in values])
        return run()
    return fn(*values)


def _seq(*steps):
    """Call ``steps`` one after the other (each once the previous one's result, awaited when it
    is an awaitable, is there); the last one's result."""
    for k, step in enumerate(steps):
        result = step()
        if inspect.isawaitable(result):
            async def rest(result=result, later=steps[k + 1:]):
                value = await result
                for step in later:
                    value = step()
                    if inspect.isawaitable(value):
                        value = await value
                return value
            return rest()
    return result


class Registers:
    def __init__(self, bus):
        self.bus = bus

    def read(self, name):
        """A single register by name (see REGISTERS)."""
        return self.bus.read(REGISTERS[name])

    def write(self, name, value):
        return self.bus.write(REGISTERS[name], value)

    def counter(self, name):
        """A counter by name (see COUNTERS)."""
        return self.bus.read(WINDOWS["COUNTER"][0] + 4 * COUNTERS.index(name))

    def counters(self):
        """Every counter, as a dict."""
        reads = [self.counter(n) for n in COUNTERS]
        return _then(reads, lambda *v: dict(zip(COUNTERS, v)))

    def qp_counter(self, qp, name):
        base, stride = WINDOWS["QP_COUNTER"][:2]
        return self.bus.read(base + stride * qp + 4 * QP_COUNTERS.index(name))

    def qp(self, qp):
        """QP ``qp``'s entry of the QP table, as a dict of fields."""
        base, stride = WINDOWS["QP"][:2]
        reads = [self.bus.read(base + stride * qp + 4 * k) for k in range(len(QP_WORDS))]

        def decode(*words):
            out = {{}}
            for (_, fields), word in zip(QP_WORDS, words):
                for f, lsb, bits, shift in fields:
                    out[f] = out.get(f, 0) | ((word >> lsb) & ((1 << bits) - 1)) << shift
            out["state_name"] = QP_STATES[out["state"]] if out["state"] < 5 else "?"
            return out
        return _then(reads, decode)

    def qp_open(self):
        """The set of QP indices the connection manager has open."""
        base, _, count = WINDOWS["QP_OPEN"]
        reads = [self.bus.read(base + 4 * j) for j in range(count)]
        return _then(reads, lambda *w: {{32 * j + k for j, v in enumerate(w) for k in range(32)
                                         if v >> k & 1}})

    def mac(self):
        return _then([self.read("MAC_HI"), self.read("MAC_LO")], lambda hi, lo: hi << 32 | lo)

    def set_mac(self, mac):
        done = [self.write("MAC_HI", mac >> 32), self.write("MAC_LO", mac & 0xFFFFFFFF)]
        return _then(done, lambda *_: None)

    def tc(self):
        """The traffic class (TC), as a dict: dscp, ecn (2 = ECT(0)), pcp."""
        return _then([self.read("TC")], lambda v: {{f: (v >> lsb) & ((1 << bits) - 1)
                                                    for f, lsb, bits in TC_FIELDS}})

    def set_tc(self, dscp, ecn, pcp=0):
        """Set the traffic class: QPs opened from then on, frames from the next one."""
        values = {{"dscp": dscp, "ecn": ecn, "pcp": pcp}}
        for f, _, bits in TC_FIELDS:
            if not 0 <= values[f] < 1 << bits:
                raise ValueError(f"{{f}} must be 0..{{(1 << bits) - 1}}, not {{values[f]}}")
        return self.write("TC", sum(values[f] << lsb for f, lsb, _ in TC_FIELDS))

    def _cc(self, name):
        base, _, count = WINDOWS["CC"]
        if not count:
            raise RuntimeError("this core was built without DCQCN: it has no CC registers")
        return base + 4 * CC_WORDS.index(name)

    def cc_config(self):
        """DCQCN's parameters as the next commit sends them (those in force, unless written
        since), as a dict of fields (times in cycles, rates in bytes per cycle Q7.20, alpha
        in Q16)."""
        reads = [self.bus.read(self._cc(w)) for w in CC_FIELDS]
        return _then(reads, lambda *v: dict(zip(CC_FIELDS.values(), v)))

    def set_cc_config(self, **fields):
        """Write the given DCQCN parameters (fields of CC_FIELDS' values; the others keep the
        values written last) and commit the whole set at once."""
        words = {{f: w for w, f in CC_FIELDS.items()}}
        unknown = sorted(set(fields) - set(words))
        if unknown:
            raise KeyError(f"unknown DCQCN parameter(s) {{unknown}}; they are {{list(words)}}")
        steps = [lambda a=self._cc(words[f]), v=v: self.bus.write(a, v)
                 for f, v in fields.items()]
        commit = self._cc("CC_COMMIT")
        return _seq(*steps, lambda: self.bus.write(commit, 1), lambda: None)

    def cc_rate(self, qp):
        """QP ``qp``'s current DCQCN rate, bytes per cycle Q7.20 (through CC_RATE_QP)."""
        select, rate = self._cc("CC_RATE_QP"), self._cc("CC_RATE")
        return _seq(lambda: self.bus.write(select, qp), lambda: self.bus.read(rate))

    def _rdma_cm(self, name):
        base, _, count = WINDOWS["RDMA_CM"]
        if not count:
            raise RuntimeError("this core was built without the IB CM: it has no RDMA_CM "
                               "registers")
        return base + 4 * RDMA_CM_WORDS.index(name)

    def rdma_cm_connect(self, ip, port, src_port=0xC000):
        """Connect to TCP port ``port`` of ``ip`` (an integer IPv4 address); watch
        :meth:`rdma_cm_event` for the answer."""
        return _seq(lambda: self.bus.write(self._rdma_cm("RDMA_CM_DST_IP"), ip),
                    lambda: self.bus.write(self._rdma_cm("RDMA_CM_PORTS"),
                                           port | src_port << 16),
                    lambda: self.bus.write(self._rdma_cm("RDMA_CM_CONNECT"), 1), lambda: None)

    def rdma_cm_disconnect(self, qp):
        """Close QP ``qp``'s IB CM connection (a DREQ)."""
        return self.bus.write(self._rdma_cm("RDMA_CM_DISCONNECT"), qp)

    def rdma_cm_event(self):
        """The connects answered so far and the last answer, as a dict: count, ok, qp (when
        ok), reason (when not)."""
        reads = [self.bus.read(self._rdma_cm("RDMA_CM_EVENTS")),
                 self.bus.read(self._rdma_cm("RDMA_CM_EVENT"))]
        return _then(reads, lambda n, v: {{"count": n, "ok": v >> 31, "qp": v & 0xFF,
                                           "reason": v >> 8 & 0xFFFF}})
'''


def python_accessor(config, mac, ip):
    """The source of a self-contained Python module to read and write the registers of a core
    of ``config``."""
    return _ACCESSOR.format(
        addr_width=ADDR_WIDTH,
        registers={r.name: r.offset for r in REGISTERS},
        values={k: v for k, v in register_values(config, mac, ip).items()},
        windows={w.name: (w.base, w.stride, count) for w, count in windows_for(config)},
        counters=tuple(STATS), qp_counters=tuple(QP_COUNTERS),
        qp_words=tuple((w, tuple(f)) for w, f in QP_WORDS), tc_fields=TC_FIELDS,
        cc_words=tuple(w[0] for w in CC_WORDS), rdma_cm_words=tuple(w[0] for w in RDMA_CM_WORDS),
        cc_fields={name: field for name, _, field, _ in CC_WORDS if field})


def default_docs():
    """``docs/registers.md``: the map of the default core (``rocegen verilog --axil``: W = 512,
    8 QPs, on-chip memory, the default addresses)."""
    from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
    from rocegen.wire.addr import parse_ip, parse_mac
    config = RoceEndpoint(512, 8).config
    return registers_markdown(config, parse_mac("02:00:00:00:00:01"), parse_ip("10.0.0.2"),
                              title="Registers of the endpoint core (AXI4-Lite)")


if __name__ == "__main__":      # python -m rocegen.gateware.roce.endpoint.regmap > docs/registers.md
    print(default_docs(), end="")
