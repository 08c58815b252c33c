"""Command-line options of the endpoint's generator parameters, shared by ``rocegen verilog``,
``rocegen build`` and ``rocegen sim serve``: one definition of each option, its checks and the
renaming of parameter errors to the option that set them."""

__all__ = ["ENDPOINT_OPTIONS", "add_endpoint_options", "endpoint_params", "option_error"]


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
}


def add_endpoint_options(parser, port_option):
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


def endpoint_params(args):
    """The endpoint parameters the options name (only those given)."""
    params = {} if args.cm_port is None else {"cm_port": args.cm_port}
    if args.cm_port is not None and not 1 <= args.cm_port <= 65535:
        raise ValueError(f"the connection manager's port must be 1..65535, not {args.cm_port}")
    for option, (param, _) in ENDPOINT_OPTIONS.items():
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None:
            params[param] = value
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
