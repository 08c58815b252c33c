"""Command-line options of the endpoint's generator parameters, shared by ``rocegen verilog``,
``rocegen build`` and ``rocegen sim serve``: one definition of each option, its checks and the
renaming of parameter errors to the option that set them.

The responder's options (``--responder``, ``--resp-region``, ``--rnr-timer``, ``--rq-depth``,
``--pattern-sink``, and RDMA READ's ``--reads``, ``--rd-depth``, ``--max-rd-atomic``,
``--rd-hole-wait``) are off
by default for ``rocegen verilog`` and ``rocegen build`` (the default cores keep their size)
and on for ``rocegen sim serve`` (``add_endpoint_options(..., responder=True)``), where
``--no-responder`` leaves it out."""

import argparse

__all__ = ["ENDPOINT_OPTIONS", "add_endpoint_options", "endpoint_params", "option_error",
           "parse_region"]


#: Endpoint parameters shared by ``rocegen verilog`` and ``rocegen build``: option -> (parameter,
#: how the error messages of the endpoint name it).
ENDPOINT_OPTIONS = {
    "--pmtu": ("pmtu", ("default_pmtu", "pmtu")),
    "--allow-net": ("cm_allow_net", ("allow_net", "cm_allow_net")),
    "--timeout": ("cm_timeout", ("default_timeout", "cm_timeout")),
    "--retry-cnt": ("cm_retry", ("default_retry", "cm_retry")),
    "--rnr-retry": ("cm_rnr_retry", ("default_rnr_retry", "cm_rnr_retry")),
    "--wr-depth": ("wr_depth", ("depth", "wr_depth")),
    "--window": ("window", ("window",)),
    "--responder": ("responder", ("responder",)),
    "--resp-region": ("resp_region", ("resp_region",)),
    "--rnr-timer": ("rnr_timer", ("rnr_timer",)),
    "--rq-depth": ("rq_depth", ("rq_depth",)),
    "--pattern-sink": ("pattern_sink", ("pattern_sink",)),
    "--reads": ("reads", ("reads",)),
    "--rd-depth": ("rd_depth", ("rd_depth",)),
    "--max-rd-atomic": ("max_rd_atomic", ("max_rd_atomic",)),
    "--rd-hole-wait": ("rd_hole_wait", ("rd_hole_wait",)),
    "--dscp": ("dscp", ("dscp",)),
    "--ecn": ("ecn", ("ecn",)),
    "--pcp": ("pcp", ("pcp", "VLAN priority (PCP)")),
    "--dcqcn": ("dcqcn", ("dcqcn", "dcqcn_params")),
    "--pfc": ("pfc", ("pfc", "mode", "buffers['rx']")),
    "--pfc-prio": ("pfc_prio", ("pfc_prio", "prio")),
}


def parse_region(text):
    """``BASE:LENGTH`` (bytes, decimal or 0x hexadecimal) -> ``(base, length)``."""
    base, sep, length = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(base, 0), int(length, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a region is BASE:LENGTH in bytes (e.g. 0:0x20000), not {text!r}") from None


def add_endpoint_options(parser, port_option, *, responder=False):
    """The endpoint's options on ``parser`` (``port_option``: the name of the connection
    manager's port option); ``responder``: whether the RC responder is on unless told."""
    parser.add_argument(port_option, dest="cm_port", type=int, default=None,
                        help="UDP port of the connection manager (default 17185)")
    parser.add_argument("--pmtu", type=int, default=None,
                        help="path MTU a QP gets unless its OPEN_QP names one (256..4096, "
                        "default 4096)")
    parser.add_argument("--allow-net", default=None, metavar="A.B.C.D/N",
                        help="only hosts in this IPv4 subnet may open QPs (default: any host)")
    parser.add_argument("--timeout", type=int, default=None, metavar="CODE",
                        help="default retransmit timeout code: 4.096 us x 2^CODE (0 = never; "
                        "default 14, 67 ms)")
    parser.add_argument("--retry-cnt", type=int, default=None,
                        help="default retries after timeouts / sequence NAKs (0..7, default 7)")
    parser.add_argument("--rnr-retry", type=int, default=None,
                        help="default retries after RNR NAKs (0..7, 7 = forever; default 7)")
    parser.add_argument("--wr-depth", type=int, default=None,
                        help="work requests held per QP until they complete (default 64)")
    parser.add_argument("--window", type=int, default=None,
                        help="unacknowledged PSNs per QP (default 1024)")
    parser.add_argument("--responder", action=argparse.BooleanOptionalAction,
                        default=True if responder else None,
                        help="the RC responder: hosts RDMA WRITE and SEND into, and READ from, "
                        f"the FPGA's memory (default {'on' if responder else 'off'})")
    parser.add_argument("--resp-region", type=parse_region, default=None, metavar="BASE:LENGTH",
                        help="with the responder: the region of local memory every QP may be "
                        "written in after reset, in bytes (default the lower half of local "
                        "memory)")
    parser.add_argument("--rnr-timer", type=int, default=None, metavar="CODE",
                        help="with the responder: the RNR timer code of its RNR NAKs (0..31, "
                        "default 1)")
    parser.add_argument("--rq-depth", type=int, default=None,
                        help="with the responder: receive buffers each QP can have posted "
                        "(a power of two 1..1024, default 16)")
    parser.add_argument("--pattern-sink", action=argparse.BooleanOptionalAction, default=None,
                        help="with the responder: check every byte written against the test "
                        "pattern of its address (counters, and the connection manager's QUERY; "
                        "default on with the responder)")
    parser.add_argument("--reads", action=argparse.BooleanOptionalAction, default=None,
                        help="with the responder: RDMA READ both ways, hosts READ the FPGA's "
                        "regions and the FPGA READs theirs (work-request opcode READ; default "
                        "on with the responder)")
    parser.add_argument("--rd-depth", type=int, default=None,
                        help="with --reads: READ requests each QP can have queued as responder "
                        "(a power of two 16..1024, default 16)")
    parser.add_argument("--max-rd-atomic", type=int, default=None,
                        help="with --reads: READs each QP may have outstanding as requester "
                        "(1..16, default 16; a QP the connection manager opens gets at most "
                        "what its peer accepts)")
    parser.add_argument("--rd-hole-wait", type=float, default=None, metavar="US",
                        help="with --reads: microseconds a QP waits for a response while a lost "
                        "one is asked for again before it asks once more (more than the round "
                        "trip; default 32, 0: leave it to the retransmit timeout)")
    parser.add_argument("--dscp", type=int, default=None,
                        help="DSCP of the QPs' packets after reset (0..63, default 0; at run "
                        "time through the tc_cfg port)")
    parser.add_argument("--ecn", action=argparse.BooleanOptionalAction, default=None,
                        help="send data packets ECN-capable, ECT(0), so that switches mark "
                        "rather than drop them (default on)")
    parser.add_argument("--pcp", type=int, default=None,
                        help="802.1Q priority of the frames sent with a VLAN, after reset "
                        "(0..7, default 0)")
    parser.add_argument("--dcqcn", action=argparse.BooleanOptionalAction, default=None,
                        help="DCQCN's reaction point: a rate limiter per QP driven by the CNPs "
                        "it receives, against a line of 100 Gb/s (10 at W = 64); parameters "
                        "and bypass at run time through cc_cfg; default off)")
    parser.add_argument("--pfc", choices=("mac", "core"), default=None,
                        help="PFC on one priority: obey the link partner's pause frames and "
                        "send XOFF/XON for the receive FIFO (made large enough for the "
                        "headroom); mac: the MAC decodes and sends them (pause_rx/pause_tx, "
                        "the CMAC's pause interface), core: the endpoint does (the XGMII MAC); "
                        "default off")
    parser.add_argument("--pfc-prio", type=int, default=None,
                        help="with --pfc: the priority of the endpoint's traffic after reset "
                        "(0..7, default 3; at run time through pfc_cfg)")


def endpoint_params(args):
    """The endpoint parameters the options name (only those given)."""
    params = {} if args.cm_port is None else {"cm_port": args.cm_port}
    if args.cm_port is not None and not 1 <= args.cm_port <= 65535:
        raise ValueError(f"the connection manager's port must be 1..65535, not {args.cm_port}")
    for option, (param, _) in ENDPOINT_OPTIONS.items():
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            params[param] = value
    if not params.get("responder"):
        given = [o for o in ("--resp-region", "--rnr-timer", "--rq-depth", "--pattern-sink",
                             "--reads", "--rd-depth", "--max-rd-atomic", "--rd-hole-wait")
                 if ENDPOINT_OPTIONS[o][0] in params and
                 (o != "--reads" or params["reads"])]
        if given:
            raise ValueError(f"{', '.join(given)} need{'s' * (len(given) == 1)} the responder "
                             f"(--responder)")
        params.pop("responder", None)
    if params.get("reads") is False:
        given = [o for o in ("--rd-depth", "--max-rd-atomic", "--rd-hole-wait")
                 if ENDPOINT_OPTIONS[o][0] in params]
        if given:
            raise ValueError(f"{', '.join(given)} need{'s' * (len(given) == 1)} --reads")
    if "pfc_prio" in params and not params.get("pfc"):
        raise ValueError("--pfc-prio needs --pfc")
    rq = params.get("rq_depth")
    if rq is not None and not (1 <= rq <= 1024 and rq & (rq - 1) == 0):
        raise ValueError(f"--rq-depth must be a power of two 1..1024, not {rq}")
    if "cm_allow_net" in params:
        net, _, prefix = params["cm_allow_net"].partition("/")
        if not prefix.isdigit():
            raise ValueError(f"--allow-net must be A.B.C.D/N, not {params['cm_allow_net']!r}")
        params["cm_allow_net"] = (net, int(prefix))
    return params


def option_error(message, port_option="--cm-port"):
    """An endpoint parameter error, renamed to the command-line option."""
    for option, (_, names) in [("--mem-bytes", (None, ("mem_bytes",))),
                               (port_option, (None, ("port", "cm_port"))),
                               *ENDPOINT_OPTIONS.items()]:
        for name in names:
            if message.startswith(name + " ") or message.startswith(name + ":"):
                return f"{option}: {message}"
    return message
