"""The endpoint's generator parameters: :class:`EndpointConfig`, one validated, frozen record of
every parameter :class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` and its feature blocks
take.

Plain Python (no Amaranth): the command line and the boards import it to check parameters
before anything is built. Each field carries its help text, its range or choices and, when the
commands have one, its command-line option (:func:`params`); the options of ``rocegen
verilog``, ``rocegen build`` and ``rocegen sim serve`` and the README's parameter table
(:func:`markdown_table`, ``python -m rocegen.cli.main params --markdown``) are made from them.
A validation error starts with the field's name (``rq_depth must be ...``).
"""

import dataclasses
from dataclasses import dataclass, field

from rocegen.wire.addr import parse_net
from rocegen.wire.atomics import BYTE_ORDERS
from rocegen.wire.cm import CM_PORT
from rocegen.wire.headers import UDP_PORT_ROCEV2
from rocegen.wire.roce import PMTUS

__all__ = ["EndpointConfig", "Param", "params", "check_field", "markdown_table", "default_clk_hz",
           "default_line_gbps", "WIDTHS", "MAX_QPS", "MAX_WR_DEPTH", "MEMORIES", "PFC_MODES",
           "MAX_RD_ATOMIC", "RD_HOLE_WAIT"]

#: Data widths of the endpoint's streams.
WIDTHS = (64, 128, 256, 512)
#: Most QPs of an endpoint.
MAX_QPS = 256
#: Most work requests a QP holds (``wr_depth``).
MAX_WR_DEPTH = 1024
#: Where payloads live.
MEMORIES = ("onchip", "axi4")
#: Where PFC's pause frames are decoded and sent.
PFC_MODES = ("mac", "core")
#: Most READs a QP may have outstanding as requester.
MAX_RD_ATOMIC = 16
#: Default hole wait of the READ requester, in microseconds (``rd_hole_wait``).
RD_HOLE_WAIT = 32


def default_clk_hz(width):
    """The clock a W-bit endpoint runs at on the boards: the CMAC's 322.266 MHz from 128 bits
    up, the 10G XGMII clock (156.25 MHz) at 64 bits."""
    return 156_250_000 if width == 64 else 322_265_625


def default_line_gbps(width):
    """The line a W-bit endpoint drives on the boards: 10 Gb/s XGMII at 64 bits, else the
    CMAC's 100 Gb/s."""
    return 10 if width == 64 else 100


class ConfigError(ValueError):
    """A parameter out of its range; ``field``: the parameter."""

    def __init__(self, name, message):
        super().__init__(message)
        self.field = name


class ConfigTypeError(TypeError):
    """A parameter of the wrong type; ``field``: the parameter."""

    def __init__(self, name, message):
        super().__init__(message)
        self.field = name


@dataclass(frozen=True)
class Param:
    """What a field of :class:`EndpointConfig` is: ``help`` (one paragraph), ``kind``
    (``"int"``, ``"bool"``, ``"number"``, ``"str"``, ``"region"``, ``"net"``, ``"dict"``,
    ``"ports"``: a tuple of distinct integers in ``lo..hi``),
    ``lo``/``hi`` (inclusive range) or ``choices``, ``power_of_two``, ``what`` (how an error
    states the range, else made from them), ``cli`` (the command-line option, or None),
    ``metavar`` and ``aliases`` (the names the blocks' own errors give the parameter)."""

    help: str
    kind: str = "int"
    lo: object = None
    hi: object = None
    choices: tuple = None
    power_of_two: bool = False
    what: str = None
    cli: str = None
    metavar: str = None
    aliases: tuple = ()

    def describe(self):
        if self.what:
            return self.what
        if self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        rng = f"{self.lo}..{self.hi}" if self.hi is not None else f"at least {self.lo}"
        return f"a power of two {rng}" if self.power_of_two else rng


#: Work-request slots of all QPs together, at most (the scheduler's ring addresses 14 bits).
WR_SLOTS = 1 << 14


def _p(default, help, **kw):
    return field(default=default, metadata={"param": Param(help, **kw)})


def _check(name, p, value):
    """Type and range of one given value (None: left to its default)."""
    if value is None:
        return
    if p.kind == "bool":
        if not isinstance(value, bool):
            raise ConfigTypeError(name, f"{name} must be a bool or None, not {value!r}")
        return
    if p.kind in ("int", "number"):
        types = int if p.kind == "int" else (int, float)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ConfigTypeError(name, f"{name} must be {'an integer' if p.kind == 'int' else 'a number'}, "
                                  f"not {value!r}")
        bad = (p.lo is not None and value < p.lo) or (p.hi is not None and value > p.hi) or \
            (p.power_of_two and value & (value - 1)) or (p.choices and value not in p.choices)
    elif p.kind == "str":
        bad = value not in p.choices
    elif p.kind == "region":
        if not (isinstance(value, tuple) and len(value) == 2 and
                all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise ConfigTypeError(name, f"{name} must be a (base, length) tuple of bytes, "
                                  f"not {value!r}")
        return
    elif p.kind == "ports":
        if not (isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool)
                                                 for v in value)):
            raise ConfigTypeError(name, f"{name} must be a tuple of port numbers, not {value!r}")
        bad = any(not p.lo <= v <= p.hi for v in value) or len(set(value)) != len(value)
    elif p.kind == "net":
        try:
            parse_net(value)
        except (ValueError, TypeError) as e:
            text = str(e).replace("allow_net", name, 1)
            raise (ConfigError if isinstance(e, ValueError) else ConfigTypeError)(name, text) \
                from None
        return
    elif p.kind == "dict":
        if not isinstance(value, dict):
            raise ConfigTypeError(name, f"{name} must be a dict or None, not {value!r}")
        return
    if bad:
        raise ConfigError(name, f"{name} must be {p.describe()}, not {value!r}")


#: How long a connection of the rping server or the SEND echo may go without a request by
#: default, in microseconds (``service_idle_us``).
SERVICE_IDLE_US = 10_000_000
#: The gateware services' bytes per QP by default: rping's ``-S 4096`` and more, at every width.
SERVICE_BYTES_PER_QP = 8192


@dataclass(frozen=True)
class EndpointConfig:
    """Every generator parameter of the endpoint, validated when made; the fields left None
    get their defaults then (``mem_bytes``, the ring, ``clk_hz``, ``line_gbps``,
    ``pattern_sink``, ``reads``, ``resp_region``). :func:`params` lists the fields with their
    help, range and option; the README's table is :func:`markdown_table`."""

    width: int = _p(512, "data width W of the MAC port and every stream", choices=WIDTHS,
                    what="one of 64, 128, 256, 512 bits")
    num_qps: int = _p(8, "QPs in the QP table, numbered from 256", lo=1, hi=MAX_QPS)
    memory: str = _p("onchip", "where payloads live: an on-chip buffer of `mem_bytes` (written "
                     "through `mem_w` and by the streaming front end), or an external memory "
                     "through the AXI4 master `axi`", kind="str", choices=MEMORIES)
    mem_bytes: int = _p(None, "local memory size, a power of two (default 256 KiB on chip, "
                        "4 GiB of AXI4 address space)", lo=1, hi=1 << 32, power_of_two=True,
                        what="a power of two from 16 words to 2^32")
    wr_depth: int = _p(None, "work requests held per QP until they complete, in block RAM; "
                       "num_qps x wr_depth at most 16384 (default 128: one QP keeps a 100 Gb/s "
                       "line busy with 64-byte messages while its peer's ACKs come back up to "
                       "some 1.5 us after the packet; 64 with more than 128 QPs)",
                       lo=1, hi=MAX_WR_DEPTH, power_of_two=True,
                       what=f"a power of two from 1 to {MAX_WR_DEPTH}", cli="--wr-depth",
                       aliases=("depth",))
    window: int = _p(1024, "unacknowledged PSNs per QP (default 1024)", lo=1, hi=(1 << 23) - 1,
                     what="1..2^23-1 packets", cli="--window")
    clk_hz: float = _p(None, "the clock the retransmit, RNR and READ timers count (default "
                       "322.265625 MHz, 156.25 MHz at W = 64)", kind="number", lo=1)
    ring_base: int = _p(None, "the streaming front end's ring in local memory: its base "
                        "(default: the ring ends at the end of local memory)", lo=0)
    ring_bytes: int = _p(None, "the ring's size (default the upper half of an on-chip buffer, "
                         "or 1 MiB of an AXI4 space)", lo=1)
    max_message: int = _p(None, "the front end's longest message (default a quarter of the "
                          "ring, at most 64 KiB)", lo=1)
    max_inflight: int = _p(64, "the front end's messages in flight", lo=1, hi=4096)
    cm_port: int = _p(CM_PORT, f"UDP port of the connection manager (default {CM_PORT})",
                      lo=1, hi=65535, cli="--cm-port", aliases=("port",))
    cm_allow_net: tuple = _p(None, "only hosts in this IPv4 subnet may open QPs "
                             "(default: any host)", kind="net", cli="--allow-net",
                             metavar="A.B.C.D/N", aliases=("allow_net",))
    rdma_cm_ports: tuple = _p((), "TCP ports the standard RDMA connection manager (the IB CM "
                              "over QP1, as librdmacm's rdma_connect reaches it) listens on "
                              "(service ID 0x01060000 + port); its QPs come from the same "
                              "pool as the UDP connection manager's; default none: no IB CM",
                              kind="ports", lo=0, hi=65535,
                              what="distinct TCP ports 0..65535", cli="--rdma-cm-port",
                              metavar="PORT[,PORT...]")
    rdma_cm_time_wait_us: float = _p(None, "with rdma_cm_ports: how long a disconnected "
                                     "connection's QP stays in time-wait before it is free "
                                     "again, in microseconds (default 67108.864: 4.096 us x "
                                     "2^14)", kind="number", lo=0, hi=4096 * 2 ** 31 / 1000,
                                     cli="--rdma-cm-time-wait", metavar="US")
    rdma_cm_queue: int = _p(8, "with rdma_cm_ports: MADs QP1's receive queue holds while "
                            "the IB CM answers the one before (default 8); a longer burst "
                            "(many REQs or DREQs at once) loses the last ones until the peer's "
                            "CM sends them again", lo=1, hi=16, what="1..16 MADs",
                            cli="--rdma-cm-queue", metavar="MADS")
    rdma_cm_max_response_timeout: int = _p(31, "with rdma_cm_ports: the longest wait for a "
                                           "host's answer to the IB CM's REQ, REP or DREQ, as "
                                           "a CM time code (4.096 us x 2^CODE): a longer CM "
                                           "response timeout of a REQ (the host's: Linux "
                                           "states 20, 4.3 s, each sent again 15 times; or "
                                           "the 20 ours state) is cut to this for the FPGA's "
                                           "timers; default 31: none cut", lo=0, hi=31,
                                           cli="--rdma-cm-max-response-timeout",
                                           metavar="CODE")
    rping_port: int = _p(None, "with rdma_cm_ports and reads: the port (one of "
                         "rdma_cm_ports) whose connections the gateware rping server serves, "
                         "as `rping -s` does (rping's default port is 7174); default none",
                         lo=0, hi=65535, cli="--rping-server", metavar="PORT")
    echo_port: int = _p(None, "with rdma_cm_ports and the responder: the port (one of "
                        "rdma_cm_ports) whose connections the gateware SEND echo serves, each "
                        "message SENT back, as librdmacm's rdma_server answers rdma_client "
                        "(whose default port is 7471); default none", lo=0, hi=65535,
                        cli="--send-echo", metavar="PORT")
    rping_client_port: int = _p(None, "with rdma_cm_ports, the responder and on-chip memory: "
                                "the host's port (its `rping -s -p PORT`; rping's default is "
                                "7174) whose connections the FPGA opens (rdma_cm_connect, or "
                                "the RDMA_CM registers) the gateware rping client serves, as "
                                "`rping -c -V` does, one connection at a time; default none",
                                lo=0, hi=65535, cli="--rping-client", metavar="PORT")
    rping_client_size: int = _p(64, "with rping_client_port: the client's ping size in bytes, "
                                "rping's -S (26..65535, default 64, rping's)", lo=26, hi=65535,
                                cli="--rping-client-size", metavar="BYTES")
    rping_client_count: int = _p(10, "with rping_client_port: pings a connection runs before "
                                 "the client disconnects, rping's -C (1..99999, default 10)",
                                 lo=1, hi=99999, cli="--rping-client-count", metavar="N")
    service_idle_us: float = _p(None, "with rping_port or echo_port: a connection of the rping "
                                "server or the SEND echo on which no request arrives for this "
                                "long (up to twice as long) is closed by the FPGA (a DREQ), so "
                                "that a client whose DREQ was lost does not keep its QP; in "
                                "microseconds (default 10000000: 10 s; 0: never)", kind="number",
                                lo=0, hi=1_000_000_000, cli="--service-idle", metavar="US")
    service_region: tuple = _p(None, "with rping_port, echo_port or rping_client_port: the "
                               "local memory the "
                               "gateware services' buffers take, an equal slice of a power of "
                               "two bytes per QP (default the upper num_qps x 8 KiB of "
                               "resp_region)", kind="region", cli="--service-region",
                               metavar="BASE:LENGTH")
    pmtu: int = _p(4096, "path MTU a QP gets unless its OPEN_QP names one (256..4096, "
                   "default 4096)", choices=PMTUS, cli="--pmtu", aliases=("default_pmtu",))
    cm_timeout: int = _p(14, "default retransmit timeout code: 4.096 us x 2^CODE (0 = never; "
                         "default 14, 67 ms)", lo=0, hi=31, cli="--timeout", metavar="CODE",
                         aliases=("default_timeout",))
    cm_retry: int = _p(7, "default retries after timeouts / sequence NAKs (0..7, default 7)",
                       lo=0, hi=7, cli="--retry-cnt", aliases=("default_retry",))
    cm_rnr_retry: int = _p(7, "default retries after RNR NAKs (0..7, 7 = forever; default 7)",
                           lo=0, hi=7, cli="--rnr-retry", aliases=("default_rnr_retry",))
    vlan: int = _p(None, "tag every frame 802.1Q with this VLAN ID and take only frames of it "
                   "(default untagged)", lo=1, hi=4094, what="a VLAN ID 1..4094")
    pcp: int = _p(0, "802.1Q priority of the frames sent with a VLAN, after reset (0..7, "
                  "default 0)", lo=0, hi=7, cli="--pcp", aliases=("VLAN priority (PCP)",))
    arp_entries: int = _p(4, "entries of the ARP cache", lo=1)
    arp_retry_cycles: int = _p(100_000, "cycles between two ARP requests for an address",
                               lo=1)
    arp_retries: int = _p(3, "ARP requests sent for an address before its packets are dropped",
                          lo=0)
    qp_info: bool = _p(False, "a read port of the QP table (`qp_info_*`)", kind="bool")
    responder: bool = _p(False, "the RC responder: hosts RDMA WRITE and SEND into, and READ "
                         "from, the FPGA's memory", kind="bool", cli="--responder")
    resp_region: tuple = _p(None, "with the responder: the region of local memory every QP may "
                            "be written in after reset, in bytes (default the lower half of "
                            "local memory)", kind="region", cli="--resp-region",
                            metavar="BASE:LENGTH")
    rkey_seed: int = _p(0x5EED, "with the responder: the seed of the QPs' R_Keys", lo=0,
                        hi=(1 << 32) - 1)
    rnr_timer: int = _p(1, "with the responder: the RNR timer code of its RNR NAKs (0..31, "
                        "default 1)", lo=0, hi=31, what="an RNR timer code 0..31",
                        cli="--rnr-timer", metavar="CODE")
    rq_depth: int = _p(16, "with the responder: receive buffers each QP can have posted (a "
                       "power of two 1..1024, default 16)", lo=1, hi=1024, power_of_two=True,
                       cli="--rq-depth")
    pattern_sink: bool = _p(None, "with the responder: check every byte written against the "
                            "test pattern of its address (counters, and the connection "
                            "manager's QUERY; default on with the responder)", kind="bool",
                            cli="--pattern-sink")
    resp_ack_every: int = _p(0, "with the responder: an ACK of every N-th request a QP executes "
                             "without an answer, besides AckReq (0: on AckReq only)", lo=0,
                             hi=255, what="0..255 requests")
    cnp_interval: int = _p(None, "with the responder: the shortest time between two CNPs of a "
                           "QP, in cycles (default 4 us; 0: a CNP for every request marked CE)",
                           lo=0, hi=(1 << 24) - 1, what=f"0..{(1 << 24) - 1} cycles")
    dscp: int = _p(0, "DSCP of the QPs' packets after reset (0..63, default 0; at run time "
                   "through the tc_cfg port)", lo=0, hi=63, what="a DSCP value 0..63",
                   cli="--dscp")
    ecn: bool = _p(True, "send data packets ECN-capable, ECT(0), so that switches mark rather "
                   "than drop them (default on)", kind="bool", cli="--ecn")
    dcqcn: bool = _p(False, "DCQCN's reaction point: a rate limiter per QP driven by the CNPs "
                     "it receives, against a line of 100 Gb/s (10 at W = 64); parameters and "
                     "bypass at run time through cc_cfg; default off", kind="bool",
                     cli="--dcqcn", aliases=("dcqcn_params",))
    dcqcn_params: dict = _p(None, "with dcqcn: the reaction point's parameters after reset, in "
                            "physical units (`timer_us`, `ai_mbps`, `min_mbps`, ..., `bypass`; "
                            "default the DCQCN paper's)", kind="dict")
    line_gbps: float = _p(None, "the line rate DCQCN's rates and PFC's pause quanta count "
                          "against, in Gb/s (default 100, 10 at W = 64)", kind="number", lo=0)
    pfc: str = _p(None, "PFC on one priority: obey the link partner's pause frames and send "
                  "XOFF/XON for the receive FIFO (made large enough for the headroom); mac: the "
                  "MAC decodes and sends them (pause_rx/pause_tx, the CMAC's pause interface), "
                  "core: the endpoint does (the XGMII MAC); default off", kind="str",
                  choices=PFC_MODES, cli="--pfc", aliases=("mode", "buffers['rx']"))
    pfc_prio: int = _p(3, "with pfc: the priority of the endpoint's traffic after reset (0..7, "
                       "default 3; at run time through pfc_cfg)", lo=0, hi=7, cli="--pfc-prio",
                       aliases=("prio",))
    pfc_cable_ns: float = _p(100, "with pfc: the one-way cable delay the headroom allows for, "
                             "in ns", kind="number", lo=0)
    rx_fifo_beats: int = _p(None, "the stack's receive FIFO in beats (with pfc: at least what "
                            "the headroom needs)", lo=1)
    reads: bool = _p(None, "with the responder: RDMA READ both ways, hosts READ the FPGA's "
                     "regions and the FPGA READs theirs (work-request opcode READ; default on "
                     "with the responder)", kind="bool", cli="--reads")
    rd_depth: int = _p(16, "with reads: READ requests each QP can have queued as responder (a "
                       "power of two 16..1024, default 16)", lo=16, hi=1024, power_of_two=True,
                       cli="--rd-depth")
    max_rd_atomic: int = _p(MAX_RD_ATOMIC, "with reads: READs each QP may have outstanding as "
                            f"requester (1..{MAX_RD_ATOMIC}, default {MAX_RD_ATOMIC}; a QP the "
                            "connection manager opens gets at most what its peer accepts)",
                            lo=1, hi=MAX_RD_ATOMIC, cli="--max-rd-atomic")
    atomics: str = _p(None, "with reads: hosts' RDMA atomics (COMPARE_SWAP, FETCH_ADD) "
                      "executed on the FPGA's regions, the 64-bit value stored in this byte "
                      "order (little: as a host CPU reads a counter; big: the wire's); on chip "
                      "one every 3 cycles, on AXI4 one every two memory round trips (each "
                      "holds the memory's other writes); default off (refused: NAK invalid "
                      "request)", kind="str", choices=BYTE_ORDERS, cli="--atomics")
    rd_hole_wait: float = _p(RD_HOLE_WAIT, "with reads: microseconds a QP waits for a response "
                             "while a lost one is asked for again before it asks once more "
                             f"(more than the round trip; default {RD_HOLE_WAIT}, 0: leave it "
                             "to the retransmit timeout)", kind="number", lo=0,
                             what="a non-negative number of microseconds", cli="--rd-hole-wait",
                             metavar="US")

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check(f.name, f.metadata["param"], getattr(self, f.name))
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        self._resolve_memory(set_)
        if self.cm_port == UDP_PORT_ROCEV2:
            raise ConfigError("cm_port", f"cm_port must not be {UDP_PORT_ROCEV2}, the RoCEv2 "
                              f"port")
        if self.wr_depth is None:
            set_("wr_depth", 128 if self.num_qps <= 128 else 64)
        if self.num_qps * self.wr_depth > WR_SLOTS:
            raise ConfigError("wr_depth", f"num_qps x wr_depth must be at most {WR_SLOTS} (the "
                              f"scheduler's ring), not {self.num_qps} x {self.wr_depth}")
        if self.clk_hz is None:
            set_("clk_hz", default_clk_hz(self.width))
        if self.line_gbps is None:
            set_("line_gbps", default_line_gbps(self.width))
        for name in ("pattern_sink", "reads"):
            if getattr(self, name) is None:
                set_(name, self.responder)
        if self.pattern_sink and not self.responder:
            raise ConfigError("pattern_sink", "pattern_sink checks the responder's writes: it "
                              "needs responder=True")
        if self.reads and not self.responder:
            raise ConfigError("reads", "reads are answered by the responder, and their "
                              "responses placed by its memory path: they need responder=True")
        if self.atomics is not None and not self.reads:
            raise ConfigError("atomics", "atomics share the responder's READ queues and are "
                              "executed where the payload reader reads: they need reads=True")
        if self.resp_region is None:
            set_("resp_region", (0, self.mem_bytes // 2))
        base, length = self.resp_region
        if not 0 <= base < base + length <= self.mem_bytes:
            raise ConfigError("resp_region", f"resp_region [{base:#x}, +{length:#x}) is not "
                              f"inside local memory of {self.mem_bytes:#x} bytes")
        if self.rdma_cm_time_wait_us is not None and not self.rdma_cm_ports:
            raise ConfigError("rdma_cm_time_wait_us", "rdma_cm_time_wait_us needs rdma_cm_ports")
        self._check_services(set_)
        if self.dcqcn_params is not None and not self.dcqcn:
            raise ConfigError("dcqcn_params", "dcqcn_params needs dcqcn=True")

    def _check_services(self, set_):
        """``rping_port``, ``echo_port``, ``rping_client_port`` and ``service_region`` (its
        default made)."""
        ports = {"rping_port": self.rping_port, "echo_port": self.echo_port}
        client = self.rping_client_port is not None
        served = self.rping_port is not None or self.echo_port is not None
        if self.service_idle_us is not None and not served:
            raise ConfigError("service_idle_us", "service_idle_us needs rping_port or echo_port "
                              "(it closes their quiet connections)")
        if self.service_idle_us is None and served:
            set_("service_idle_us", SERVICE_IDLE_US)
        if all(p is None for p in ports.values()) and not client:
            if self.service_region is not None:
                raise ConfigError("service_region", "service_region needs rping_port, "
                                  "echo_port or rping_client_port")
            return
        if client:
            self._check_client()
        for name, port in ports.items():
            if port is not None and port not in self.rdma_cm_ports:
                raise ConfigError(name, f"{name} {port} must be one of rdma_cm_ports "
                                  f"{list(self.rdma_cm_ports)}: its connections come through "
                                  f"the IB CM")
        if self.rping_port is not None and self.rping_port == self.echo_port:
            raise ConfigError("echo_port", f"echo_port must not be rping_port "
                              f"({self.rping_port}): a port has one service")
        if self.rping_port is not None and not self.reads:
            raise ConfigError("rping_port", "the rping server READs the client's buffer: "
                              "rping_port needs reads=True")
        if not self.responder:
            raise ConfigError("echo_port", "the SEND echo receives into the responder's "
                              "buffers: echo_port needs responder=True")
        if self.service_region is None:
            base, length = self.resp_region
            size = self.num_qps * SERVICE_BYTES_PER_QP
            if size > length // 2:
                raise ConfigError("service_region", f"the default service_region (the upper "
                                  f"{size:#x} bytes of resp_region) takes more than half of "
                                  f"resp_region ({length:#x} bytes): give service_region")
            set_("service_region", (base + length - size, size))
        base, length = self.service_region
        if not 0 <= base < base + length <= self.mem_bytes:
            raise ConfigError("service_region", f"service_region [{base:#x}, +{length:#x}) is "
                              f"not inside local memory of {self.mem_bytes:#x} bytes")
        align = max(16, self.width // 8)
        if base % align or length < self.num_qps or self.service_slices[1] <= 2 * align:
            raise ConfigError("service_region", f"service_region must start at a multiple of "
                              f"{align} bytes and give each of the {self.num_qps} QPs more "
                              f"than {2 * align} bytes, not [{base:#x}, +{length:#x})")
        need = 3 * align + 2 * -(-self.rping_client_size // align) * align
        if client and self.service_slices[1] < need:
            raise ConfigError("service_region", f"the rping client's pings of "
                              f"{self.rping_client_size} bytes need {need} bytes a QP, "
                              f"service_region gives {self.service_slices[1]}")

    def _check_client(self):
        if not self.rdma_cm_ports:
            raise ConfigError("rping_client_port", "the rping client's connections are the IB "
                              "CM's: rping_client_port needs rdma_cm_ports")
        if not self.responder:
            raise ConfigError("rping_client_port", "the host's rping server READs and WRITEs "
                              "the client's buffers: rping_client_port needs responder=True")
        if self.memory != "onchip":
            raise ConfigError("rping_client_port", "the rping client writes its buffers "
                              "through the on-chip memory's write port: rping_client_port "
                              "needs memory='onchip'")

    @property
    def service_sides(self):
        """The gateware services present, in their order (the rping server, the SEND echo,
        the rping client): (port, whether its connections are those the FPGA asks for)."""
        return tuple((p, active) for p, active in ((self.rping_port, False),
                                                  (self.echo_port, False),
                                                  (self.rping_client_port, True))
                     if p is not None)

    @property
    def service_ports(self):
        """The ports of the gateware services present (:attr:`service_sides`' ports)."""
        return tuple(p for p, _ in self.service_sides)

    @property
    def service_slices(self):
        """With a gateware service: its buffers' (base, bytes per QP), a power of two."""
        base, length = self.service_region
        return base, 1 << ((length // self.num_qps).bit_length() - 1)

    def _resolve_memory(self, set_):
        width, mem_bytes = self.width, self.mem_bytes
        if mem_bytes is None:
            mem_bytes = 256 * 1024 if self.memory == "onchip" else 1 << 32
            set_("mem_bytes", mem_bytes)
        if mem_bytes < width // 8 * 16:
            raise ConfigError("mem_bytes", f"mem_bytes must be a power of two from "
                              f"{width // 8 * 16} to 2^32, not {mem_bytes!r}")
        if self.ring_bytes is None:
            set_("ring_bytes", mem_bytes // 2 if self.memory == "onchip" else 1 << 20)
        if self.ring_base is None:
            set_("ring_base", mem_bytes - self.ring_bytes)
        if self.max_message is None:
            set_("max_message", min(self.ring_bytes // 4, 64 * 1024))
        if self.ring_base < 0 or self.ring_base + self.ring_bytes > mem_bytes:
            raise ConfigError("ring_base", f"ring_base, ring_bytes: the ring [{self.ring_base:#x}, "
                              f"+{self.ring_bytes:#x}) is not inside local memory of "
                              f"{mem_bytes:#x} bytes")

    @property
    def addr_bits(self):
        """Bits of a byte address of local memory."""
        return (self.mem_bytes - 1).bit_length()


def params():
    """``{name: (default, Param)}`` of every field of :class:`EndpointConfig`, in order."""
    return {f.name: (f.default, f.metadata["param"]) for f in dataclasses.fields(EndpointConfig)}


def _range_text(p):
    if p.kind == "bool":
        return "bool"
    if p.kind == "region":
        return "(base, length)"
    if p.kind == "net":
        return "(ip, prefix_len)"
    if p.kind == "ports":
        return "tuple of " + p.describe()
    if p.kind == "dict":
        return "dict"
    if p.choices:
        return ", ".join(f"`{c}`" for c in p.choices)
    return p.describe() if p.lo is not None else p.kind


def markdown_table():
    """The README's table of the generator parameters (Markdown)."""
    lines = ["| parameter | default | range | option | meaning |",
             "|---|---|---|---|---|"]
    for name, (default, p) in params().items():
        opt = f"`{p.cli}`" if p.cli else ""
        dflt = f"`{default!r}`"
        lines.append(f"| `{name}` | {dflt} | {_range_text(p)} | {opt} | {p.help} |")
    return "\n".join(lines) + "\n"


def check_field(name, value):
    """Check one parameter's type and range alone (None passes: its default); the error names
    it, as :class:`EndpointConfig` would."""
    _check(name, params()[name][1], value)
