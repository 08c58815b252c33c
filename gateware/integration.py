"""The integration kit of the portable endpoint core (:class:`~rocegen.gateware.core.CoreTop`),
generated from its signature and the Amaranth layouts of its record ports, so that it always
describes the Verilog it comes with:

* :func:`sv_package`: a SystemVerilog package with a ``typedef enum`` for every enumeration and
  a ``typedef struct packed`` for every record (work request, completion, QP control, generator
  run, message metadata, memory write...). Amaranth puts a layout's first field in the least
  significant bits; a packed struct puts its first member in the most significant ones, so the
  members are listed in reverse: ``wr_t'(wr_data).remote_offset`` is the field Amaranth calls
  ``remote_offset``.
* :func:`port_table`: every port of the core with its direction and width, the bit ranges of
  the record fields, the handshake rules, the values after reset and the latency and ordering
  promises, as Markdown.
  A field whose name is a SystemVerilog keyword (``context``) gets a ``_`` suffix.
* :func:`instantiation`: a SystemVerilog instantiation template with every port (record ports
  declared with the package's types).

Every port needs a description in :data:`PORT_DOCS`; a port without one is an error, so a new
port cannot go undocumented.
"""

from amaranth.hdl import Shape
from amaranth.lib import data
from amaranth.lib import enum as aenum

__all__ = ["sv_package", "port_table", "instantiation", "write_kit", "PORT_DOCS"]


#: One line per endpoint port (or top-level group), keyed by the name the core uses.
PORT_DOCS = {
    "clk": "The core clock; every port is synchronous to its rising edge.",
    "rst": "Synchronous reset, active high. Hold it for at least one cycle.",
    "s_axis": "Frames from the MAC (AXI-Stream, W bits, no FCS; `tuser` on the last beat = bad "
              "frame, dropped and counted). Byte 0 of a frame in `tdata[7:0]` of its first beat. "
              "Never backpressured (`tready` is high; frames that do not fit the receive FIFO "
              "are dropped and counted in `rx_overflow`).",
    "m_axis": "Frames to the MAC (AXI-Stream, W bits, without FCS; `tuser` = abort, never set). "
              "Each frame is sent whole, beat after beat, once it has started.",
    "xgmii": "The built-in 10G/25G XGMII MAC: `xgmii_rxd`/`xgmii_rxc` in, `xgmii_txd`/"
             "`xgmii_txc` out (64-bit XGMII words).",
    "mac_counters": "Counters of the built-in MAC (saturating, 32 bits).",
    "s_axil": "AXI4-Lite control and status slave (16-bit byte address, 32-bit data): see the "
              "register map beside this file. Bad accesses answer SLVERR and are counted.",
    "wr": "Work requests from the user logic. Taken when `wr_valid & wr_ready`; hold "
          "`wr_data` steady while `wr_valid` is high and `wr_ready` low. Every work request gets "
          "exactly one completion on `cpl`. `wr_ready` depends on registers and on the request's "
          "QP number (the QP's room, `wr_room`), never on `wr_valid`.",
    "wr_room": "Bit q: QP q's work-request queue has room. A request for a QP without room "
               "waits on `wr` (and holds the requests behind it); logic that serves several "
               "QPs offers a request only when its QP's bit is high.",
    "cpl": "Completions of the work requests posted on `wr`, one per work request. "
           "Hold `cpl_ready` low to stall them (nothing is lost).",
    "qp_ctl": "QP table writes from the user logic (a QP's whole context), beside "
              "the connection manager's (which opens QPs for hosts over UDP). Not needed when the "
              "hosts open QPs themselves. A write for a QP that is closed or in error and still "
              "has work requests to complete waits (`qp_ctl_ready` low) until their "
              "completions have left on `cpl`.",
    "qp_psn": "Next-PSN writes into the QP table, with `qp_ctl` (and waiting like it).",
    "gen": "Traffic generator runs: `count` WRITE/SEND messages of `length` bytes of "
           "a test pattern to QP `qp`.",
    "gen_busy": "The traffic generator is running.",
    "gen_posted": "Traffic generator: work requests posted in the current or last run.",
    "gen_ok": "Traffic generator: completed OK in the current or last run.",
    "gen_err": "Traffic generator: completed with an error in the current or last run.",
    "gen_cycles": "Traffic generator: cycles from the start of the current or last run to its "
                  "last completion.",
    "qp_open": "Bit k high: QP k (QPN 256 + k) was opened by a host through the connection "
               "manager and is not closed.",
    "service_qps": "With `--rping-server`: bit k high: QP k is the gateware rping server's (the "
                   "IB CM opened it on rping's port): its completions go to the server, and a "
                   "receive buffer posted on `recv` for it completes FLUSHED at once. Post on "
                   "the other QPs.",
    "rdma_cm_connect": "With `--rdma-cm-port`: a connection to ask for, as librdmacm's "
                       "`rdma_connect`: to TCP port `port` of `dst_ip` (the host listens with "
                       "`rdma_listen`), `src_port` ours in the REQ. The core takes a QP, sends "
                       "the REQ (again after 4.3 s, up to 15 times) and answers the host's REP "
                       "with the RTU; the QP then sends from the PSN the REP states, expects "
                       "the one the REQ stated, "
                       "and its WRITEs and READs name the region the REP's private data states "
                       "(address, R_Key, length: `docs/rdma-cm.md`).",
    "rdma_cm_event": "With `--rdma-cm-port`: one event per `rdma_cm_connect`: `ok` and the "
                     "QP (`qpn`) once established, or not `ok` and the reason (the host's REJ "
                     "reason, 1 NO_QP, 3 TIMEOUT); `dst_ip` and `port` as asked. Held until "
                     "`rdma_cm_event_ready`; the IB CM does nothing else meanwhile, so take "
                     "it.",
    "rdma_cm_disconnect": "With `--rdma-cm-port`: a QP index whose standard-CM connection to "
                          "close: the core sends the peer a DREQ (again until its DREP or the "
                          "REQ's CM retries run out), puts the QP in error (its work requests "
                          "complete FLUSHED) and gives it back after the time-wait. A QP of "
                          "no established connection is ignored (counted in "
                          "`ibcm_disconnect_unknown`). A QP that fails (retries exhausted: "
                          "the host is gone) is disconnected the same way by itself.",
    "msg": "The streaming front end: messages to send (AXI-Stream, W bits, `tlast` ends a "
           "message; `msg_meta` is sampled on the last beat: QP, opcode, "
           "immediate, remote offset). Bytes outside `tkeep` are ignored; `tuser` on the last "
           "beat discards the message (counted in `stream_drop_error`). The core stores each "
           "message in a ring of its local memory and sends it; its completion is internal "
           "(the ring space is freed). A message longer than MAX_MESSAGE bytes (package "
           "parameter) is dropped and counted in `stream_drop_too_long`. One beat per cycle while there "
           "is room in the ring; `tready` low otherwise.",
    "mem_w": "Word writes into the on-chip payload memory (word address, data, byte enables), "
             "for the payloads of the work requests posted on `wr`. The streaming front end "
             "has priority on the memory's write port.",
    "axi": "AXI4 master to the payload memory (with `--memory axi4`): payloads are read from "
           "and the streaming front end's ring is written to it.",
    "recv": "The responder's receive buffers (with `--responder`): user logic posts a buffer "
            "(QP, local byte address, length, id) for the SENDs and WRITEs with immediate of that "
            "QP; held (`recv_ready` low) while the QP's receive queue is full. Buffers are used "
            "in the order posted.",
    "recv_cpl": "The responder's receive completions: a SEND received (bytes, immediate if "
                "any), a WRITE with immediate (its DMA length and immediate), or a buffer ended "
                "by an error or flushed, with the buffer's id and a status. A completion leaves "
                "only once every payload byte of its request is in memory (with AXI4: "
                "acknowledged by write responses). Hold `recv_cpl_ready` low to stall them.",
    "resp_cfg": "Responder configuration writes: a QP's memory region (R_Key, base, length, "
                "write and read rights) and the RNR timer code of its RNR NAKs. Always taken.",
    "resp_cnp_cfg": "The responder's notification point: the shortest time between two CNPs "
                    "of a QP, in cycles (0: a CNP for every packet marked CE). Always taken.",
    "rd_wait_cfg": "The READ requester's timer: a step in cycles; a QP with READs outstanding "
                   "that hears no response for 4 steps asks again for its lost response (0: "
                   "never; after reset, rd_hole_wait). Always taken.",
    "tc_cfg": "The traffic class: DSCP and ECN code point (2 = ECT(0), 0 = not ECN-capable) of "
              "the data packets of QPs opened from then on, and the 802.1Q priority (PCP) of "
              "every frame from the next one (with a VLAN). Always taken.",
    "cc_cfg": "DCQCN's reaction point (with `--dcqcn`): every parameter at once (g, alpha, "
              "timers, byte counter, fast-recovery steps, increases, minimum and line rate, in "
              "cycles and bytes per cycle Q7.20) and `bypass` (line rate, CNPs ignored); in force "
              "a few cycles later. Always taken.",
    "pfc_cfg": "PFC (with `--pfc`): on/off and the priority of the endpoint's traffic (pause "
               "frames for it hold the transmitter at the next frame boundary; XOFF/XON name "
               "it). Always taken.",
    "pause_rx": "PFC with `--pfc mac`: bit n high while the MAC has priority n paused (the "
                "CMAC's stat_rx_pause_req).",
    "pause_tx": "PFC with `--pfc mac`: bit n asks the MAC to send XOFF for priority n (XON "
                "when it falls; the CMAC's ctl_tx_pause_req).",
    "cc_qp": "Rate read port (with `--dcqcn`): QP index...",
    "cc_rate": "... its current DCQCN rate, bytes per cycle in Q7.20, one cycle later.",
    "stats_addr": "Counter read port: the counter at this address (see the counter list)...",
    "stats_data": "... appears here one cycle later (32 bits, saturating).",
    "qp_stats_qp": "Per-QP counter read port: QP index...",
    "qp_stats_sel": "... and counter index (see the per-QP counter list)...",
    "qp_stats_data": "... the counter, one cycle later.",
}

_HANDSHAKE = """\
## Handshakes

* Record ports (`<name>_data`, `<name>_valid`, `<name>_ready`) and AXI-Stream ports follow the
  AXI-Stream rules: a transfer happens in a cycle where `valid` and `ready` are both high; the
  sender keeps `valid` high and the data steady until then, and never waits for `ready` before
  raising `valid`. The core never takes a record without `valid`, and may hold `ready` low for
  any number of cycles (queues full, arbitration with its own sources).
* Record data is the Amaranth layout's bits, first field in the least significant bits, as the
  package's packed structs describe; an enumeration field holding a value not listed is
  treated as described under the port.
* `rst` is synchronous and active high; all ports are in the `clk` domain.
"""

_RESET = """\
## After reset

Every `*_valid` / `*_tvalid` output of the core is low; `qp_open` is 0 (every QP in RESET, next
PSN 0); `gen_busy` is 0 and the `gen_*` counts are 0; every counter reads 0; the AXI4-Lite
address registers hold the generator's `--mac` / `--ip`. Present no transfer during reset.
"""

_PROMISES = """\
## Latency and ordering

* **Completion** (`cpl`): status `OK` means every packet of the message was acknowledged by
  the responder, so the data is in the remote memory (and, for SEND, delivered to a receive
  buffer). Completions of one QP come in the order their work requests were taken on `wr`;
  those of different QPs may interleave.
* **Buffer reuse**: the payload `[local_addr, local_addr + length)` is read from local memory
  while the message is sent and again for every retransmission: it must not change until the
  work request's completion has come out of `cpl` (whatever its status).
* **Refused work requests** complete at once with an error status (below), in order with the
  other work requests of their QP; one naming no QP completes on its own. They never stall
  the port. A zero-length WRITE or SEND is legal (one packet without payload).
* **Counters** (`stats_*`, `qp_stats_*`, or through AXI4-Lite) are 32 bits, saturate, and are
  cleared by reset only; an event is seen by a read a few cycles after it (two for the RoCE
  layers' counters).
"""


#: SystemVerilog keywords a field name could clash with; such a field gets a ``_`` suffix.
SV_KEYWORDS = {"context", "type", "bit", "byte", "int", "logic", "string", "event", "time",
               "real", "class", "package", "module", "begin", "end", "input", "output", "wire",
               "reg", "default", "case", "for", "if", "else", "return", "const", "static",
               "virtual", "priority", "unique", "final", "local", "protected", "ref", "var",
               "void", "table", "config", "library", "cell", "instance", "design", "use"}


def sv_name(field):
    """The SystemVerilog member name of layout field ``field``."""
    return field + "_" if field in SV_KEYWORDS else field


def _enum_name(shape):
    return "".join("_" + c.lower() if c.isupper() and i else c.lower()
                   for i, c in enumerate(shape.__name__)) + "_t"


def _is_enum(shape):
    return isinstance(shape, type) and issubclass(shape, aenum.Enum)


class _Types:
    """Names for the layouts and enumerations met, in definition order (dependencies first)."""

    def __init__(self):
        self.enums = []
        self.structs = []           # (name, layout)

    def layout(self, layout, name):
        layout = data.Layout.cast(layout)
        for n, known in self.structs:
            if known == layout:
                return n
        if not isinstance(layout, data.StructLayout):
            raise TypeError(f"record {name} has a layout that is not a struct: {layout!r}")
        for field_name, field in layout:
            self.field_type(field.shape, f"{name[:-2]}_{field_name}_t")
        taken = {n for n, _ in self.structs}
        if name in taken:
            raise ValueError(f"two different layouts named {name}")
        self.structs.append((name, layout))
        return name

    def field_type(self, shape, name):
        if _is_enum(shape):
            if shape not in self.enums:
                self.enums.append(shape)
            return _enum_name(shape)
        if isinstance(shape, (data.Layout, data.StructLayout)) or hasattr(shape, "members"):
            return self.layout(shape, name)
        width = Shape.cast(shape).width
        return "logic" if width == 1 else f"logic [{width - 1}:0]"


def record_ports(top):
    """``(flat name, what, layout, sink)`` for every port of ``top`` whose data has a layout:
    record ports (``<name>_data``) and packet metadata (``<name>_meta``)."""
    out = []
    for kind, name, flat in top.port_groups():
        member = top.endpoint.signature.members[name]
        sink = member.flow.name == "In"
        if kind == "record":
            shape = member.signature.members["payload"].shape
            if isinstance(shape, data.Layout) or (isinstance(shape, type) and
                                                  issubclass(shape, data.Struct)):
                out.append((f"{flat}_data", name, shape, sink))
            # (else a plain value, e.g. a QP index: a vector with no type of its own)
        elif kind == "packet":
            meta = data.Layout.cast(member.signature.members["payload"].shape).members["meta"]
            if data.Layout.cast(meta).size:
                out.append((f"{name}_meta", f"{name}_meta", meta, sink))
    return out


def _type_names(top):
    types = _Types()
    names = {}
    for flat, what, layout, _ in record_ports(top):
        names[flat] = types.layout(layout, f"{what}_t")
    return types, names


def sv_package(top, name):
    """The SystemVerilog package ``<name>_pkg`` of core ``top``."""
    types, _ = _type_names(top)
    cfg = top.endpoint.config
    out = [f"// Types of the ports of {name} (W = {top.width}, {top.num_qps} QPs). Generated by "
           f"rocegen from the core's layouts; do not edit.",
           "// Amaranth puts a record's first field in its least significant bits; packed structs",
           "// list their first member in the most significant ones: the members are reversed.",
           f"package {name}_pkg;", "",
           f"  localparam int W = {top.width};",
           f"  localparam int NUM_QPS = {top.num_qps};",
           "  localparam int QPN_BASE = 256;",
           f"  localparam longint MEM_BYTES = {cfg['mem_bytes']};",
           f"  localparam int MAX_MESSAGE = {cfg['max_message']};", ""]
    for e in types.enums:
        width = Shape.cast(e).width
        tname = _enum_name(e)
        prefix = tname[:-2].upper()
        out.append(f"  typedef enum logic [{width - 1}:0] {{")
        members = list(e)
        for k, member in enumerate(members):
            sep = "," if k < len(members) - 1 else ""
            out.append(f"    {prefix}_{member.name} = {width}'d{member.value}{sep}")
        out += [f"  }} {tname};", ""]
    for sname, layout in types.structs:
        out.append(f"  typedef struct packed {{   // {layout.size} bits")
        for field_name, field in reversed(list(layout)):
            t = types.field_type(field.shape, f"{sname[:-2]}_{field_name}_t")
            hi = field.offset + field.width - 1
            out.append(f"    {t} {sv_name(field_name)};".ljust(44) + f"// [{hi}:{field.offset}]")
        out += [f"  }} {sname};", ""]
    out += [f"endpackage : {name}_pkg", ""]
    return "\n".join(out)


def _ports(top):
    """``(name, direction, width)`` of every top-level port, ``clk`` and ``rst`` first."""
    rows = [("clk", "input", 1), ("rst", "input", 1)]
    for n, member in top.signature.members.items():
        rows.append((n, "input" if member.flow.name == "In" else "output",
                     Shape.cast(member.shape).width))
    return rows


def _group(top, port):
    """The :data:`PORT_DOCS` key that documents top-level ``port``."""
    for key in ("s_axil", "s_axis", "m_axis", "xgmii"):
        if port.startswith(key + "_"):
            return key
    if port.startswith("mac_"):
        return "mac_counters"
    for kind, name, flat in top.port_groups():
        if kind == "axi" and port.startswith(flat + "_"):
            return name
        if kind == "packet" and (port.startswith(flat + "_") or port == f"{name}_meta"):
            return name
        if kind == "record" and port in (f"{flat}_data", f"{flat}_valid", f"{flat}_ready"):
            return name
        if kind == "port" and port == flat:
            return name
    return port


def port_table(top, name):
    """The port table of core ``top`` (module ``name``) as Markdown."""
    from rocegen.gateware.roce.layouts import CplStatus

    types, type_names = _type_names(top)
    cfg = top.endpoint.config
    rows = _ports(top)
    missing = sorted({_group(top, p) for p, _, _ in rows} - set(PORT_DOCS))
    if missing:
        raise KeyError(f"ports without a description in PORT_DOCS: {missing}")
    out = [f"# Ports of `{name}`", "",
           "Generated by rocegen from the core's signature; do not edit. Configuration: "
           f"W = {top.width}, {top.num_qps} QPs (QPN 256..{255 + top.num_qps}), "
           f"{top.memory} payload memory of {cfg['mem_bytes']} bytes, MAC side {top.phy}, "
           f"AXI4-Lite registers {'on' if top.axil else 'off'}. Types: `{name}_pkg` "
           f"(`{name}_pkg.sv`); instantiation: `{name}_inst.sv`"
           + (f"; registers: `{name}_registers.md`." if top.axil else "."), "",
           "## Ports", "", "| Port | Dir | Width | Description |", "|---|---|---|---|"]
    seen = set()
    for port, direction, width in rows:
        group = _group(top, port)
        doc = PORT_DOCS[group] if group not in seen else "(see above)"
        seen.add(group)
        if port in type_names:
            doc = f"`{type_names[port]}`. " + doc
        out.append(f"| `{port}` | {direction} | {width} | {doc} |")
    out += ["", "## Record fields", "",
            "Bit ranges inside the port (first field in the least significant bits).", ""]
    for flat, _, layout, _ in record_ports(top):
        layout = data.Layout.cast(layout)
        out += [f"### `{flat}` (`{type_names[flat]}`, {layout.size} bits)", "",
                "| Field | Bits | Type |", "|---|---|---|"]

        def walk(lay, base, prefix, out=out):
            for fname, field in lay:
                lo = base + field.offset
                hi = lo + field.width - 1
                shape = field.shape
                if _is_enum(shape):
                    t = f"`{_enum_name(shape)}`"
                elif hasattr(shape, "members"):
                    out.append(f"| `{prefix}{sv_name(fname)}` | [{hi}:{lo}] | struct |")
                    walk(data.Layout.cast(shape), lo, f"{prefix}{sv_name(fname)}.")
                    continue
                else:
                    t = "unsigned"
                out.append(f"| `{prefix}{sv_name(fname)}` | [{hi}:{lo}] | {t} |")
        walk(layout, 0, "")
        out.append("")
    out += ["## Enumerations", ""]
    for e in types.enums:
        out += [f"### `{_enum_name(e)}`", "", "| Name | Value |", "|---|---|"]
        out += [f"| `{m.name}` | {m.value} |" for m in e]
        out.append("")
    out += [_HANDSHAKE, _RESET, _PROMISES, "### Completion status (`cpl_status_t`)", "",
            "| Status | Value | Meaning |", "|---|---|---|"]
    out += [f"| `{s.name}` | {s.value} | {_STATUS_DOCS[s.name]} |" for s in CplStatus]
    if "stats_addr" in top.signature.members:
        from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, STATS
        out += ["", "## Counters", "", "`stats_addr` -> `stats_data`:", "",
                "| Address | Counter |", "|---|---|"]
        out += [f"| {k} | `{n}` |" for k, n in enumerate(STATS)]
        out += ["", "`qp_stats_sel` -> `qp_stats_data` (of QP `qp_stats_qp`):", "",
                "| Select | Counter |", "|---|---|"]
        out += [f"| {k} | `{n}` |" for k, n in enumerate(QP_COUNTERS)]
    if top.endpoint.memory == "onchip":
        out += ["", f"Local addresses are byte addresses in the on-chip payload memory of "
                f"{cfg['mem_bytes']} bytes; `local_addr` must be a multiple of {top.width // 8} "
                f"(W/8), but a READ's may be any byte address. The streaming front end's ring is "
                f"[{cfg['ring_base']:#x}, {cfg['ring_base'] + cfg['ring_bytes']:#x}): do not "
                f"post work requests with payloads there while `msg` is used."]
    out.append("")
    return "\n".join(out)


_STATUS_DOCS = {
    "OK": "Every packet was acknowledged: the data is at the responder (a READ: its data is in "
          "local memory).",
    "BAD_QP": "`qp` is not a QP of the table (>= NUM_QPS); refused, nothing sent.",
    "QP_NOT_READY": "The QP was not ready to send (RTS) when the request came to be sent; "
                    "nothing sent.",
    "LOCAL_ALIGN": "`local_addr` is not a multiple of W/8 (a READ's may be any byte address); "
                   "refused, nothing sent.",
    "LOCAL_LENGTH": "`[local_addr, local_addr + length)` is not inside local memory (too "
                    "long); refused, nothing sent.",
    "FLUSHED": "The QP went to the error state (or was closed) before the request completed.",
    "RETRY_EXCEEDED": "Timeouts or sequence-error rewinds ran out of retries; the QP is in "
                      "error.",
    "RNR_RETRY_EXCEEDED": "RNR NAKs ran out of retries; the QP is in error.",
    "REMOTE_INVALID": "The responder answered NAK invalid request.",
    "REMOTE_ACCESS": "The responder answered NAK remote access error (rkey, bounds).",
    "REMOTE_OP": "The responder answered NAK remote operational error.",
    "UNSUPPORTED": "An opcode the core was built without (READ without `--reads`, or codes "
                   "5..7); refused, nothing sent.",
}


def instantiation(top, name):
    """A SystemVerilog instantiation template of core ``top`` (module ``name``)."""
    _, type_names = _type_names(top)
    rows = _ports(top)
    out = [f"// Instantiation template of {name}. Generated by rocegen; do not edit.",
           f"// Record ports use the types of {name}_pkg ({name}_pkg.sv).", "",
           f"import {name}_pkg::*;", ""]
    for port, direction, width in rows:
        if port in ("clk", "rst"):
            continue
        if width == 0:
            continue                # e.g. a QP index with one QP: nothing to connect
        t = type_names.get(port) or ("logic" if width == 1 else f"logic [{width - 1}:0]")
        out.append(f"{t} {port};".ljust(48) + f"// {direction}")
    out += ["", f"{name} u_{name} ("]
    for k, (port, direction, width) in enumerate(rows):
        sep = "," if k < len(rows) - 1 else ""
        if width == 0:
            out.append(f"  .{port}(){sep}".ljust(48) + f"// {direction}, 0 bits: unconnected")
        else:
            out.append(f"  .{port}({port}){sep}".ljust(48) + f"// {direction} [{width - 1}:0]")
    out += [");", ""]
    return "\n".join(out)


def write_kit(top, name, folder):
    """Write ``<name>_pkg.sv``, ``<name>_ports.md``, ``<name>_inst.sv`` and, with the AXI4-Lite
    registers, ``<name>_registers.md``, ``<name>_regs.h`` and ``<name>_regs.py`` into
    ``folder``; returns their paths."""
    from pathlib import Path

    folder = Path(folder)
    files = {
        "package": (folder / f"{name}_pkg.sv", sv_package(top, name)),
        "ports": (folder / f"{name}_ports.md", port_table(top, name)),
        "template": (folder / f"{name}_inst.sv", instantiation(top, name)),
    }
    if top.axil:
        from rocegen.gateware.roce.endpoint import regmap
        cfg = top.endpoint.config
        files["registers"] = (folder / f"{name}_registers.md", regmap.registers_markdown(
            cfg, top.mac, top.ip, title=f"Registers of `{name}`"))
        files["c_header"] = (folder / f"{name}_regs.h",
                             regmap.c_header(cfg, top.mac, top.ip, prefix=name.upper()))
        files["python"] = (folder / f"{name}_regs.py",
                           regmap.python_accessor(cfg, top.mac, top.ip))
    for path, text in files.values():
        path.write_text(text)
    return {k: p for k, (p, _) in files.items()}
