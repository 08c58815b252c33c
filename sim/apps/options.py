"""Command-line options of the endpoint's generator parameters, shared by ``rocegen verilog``,
``rocegen build`` and ``rocegen sim serve``: made from the fields of
:class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig` (name, help, type, range), with the
checks of which options need which, and the renaming of parameter errors to the option that
set them.

The responder's options (``--responder``, ``--resp-region``, ``--rnr-timer``, ``--rq-depth``,
``--pattern-sink``, RDMA READ's ``--reads``, ``--rd-depth``, ``--max-rd-atomic``,
``--rd-hole-wait``, and ``--atomics``) are off
by default for ``rocegen verilog`` and ``rocegen build`` (the default cores keep their size)
and on for ``rocegen sim serve`` (``add_endpoint_options(..., responder=True)``), where
``--no-responder`` leaves it out; there ``--atomics`` also takes ``off``, and without it the
endpoint executes atomics little-endian whenever it has READs (:func:`serve_atomics`)."""

import argparse
import dataclasses

from rocegen.gateware.roce.endpoint.config import check_field, params

__all__ = ["ENDPOINT_OPTIONS", "add_endpoint_options", "endpoint_params", "option_error",
           "parse_region", "serve_atomics", "ATOMICS_OFF"]

#: ``--atomics off`` (with ``responder=True`` options): no atomics (refused, NAK invalid request)
ATOMICS_OFF = "off"


#: Endpoint parameters with a command-line option (the connection manager's port aside, whose
#: option each command names): option -> (parameter, how the error messages name it), from the
#: fields of :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig`.
ENDPOINT_OPTIONS = {p.cli: (name, (*p.aliases, name)) for name, (_, p) in params().items()
                    if p.cli and name != "cm_port"}


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


def parse_ports(text):
    """``PORT[,PORT...]`` -> a tuple of integers."""
    try:
        return tuple(int(v, 0) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"ports are PORT[,PORT...] (e.g. 7471,20079), not {text!r}") from None


def _add_option(parser, option, p, default):
    kw = {"default": default, "help": p.help}
    if p.metavar:
        kw["metavar"] = p.metavar
    if p.kind == "bool":
        kw["action"] = argparse.BooleanOptionalAction
    elif p.kind == "str":
        kw["choices"] = p.choices
    elif p.kind in ("int", "number", "region", "ports"):
        kw["type"] = {"int": int, "number": float, "region": parse_region,
                      "ports": parse_ports}[p.kind]
    parser.add_argument(option, **kw)


def add_endpoint_options(parser, port_option, *, responder=False):
    """The endpoint's options on ``parser``, one per field of
    :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig` that has one (``port_option``: the
    name of the connection manager's port option); ``responder``: whether the RC responder is
    on unless told. Every option defaults to None (the config's default), ``--responder`` to
    ``responder``."""
    for name, (_, p) in params().items():
        if not p.cli:
            continue
        if name == "cm_port":
            parser.add_argument(port_option, dest="cm_port", type=int, default=None, help=p.help)
        elif name == "responder":
            _add_option(parser, p.cli, dataclasses.replace(
                p, help=f"{p.help} (default {'on' if responder else 'off'})"),
                True if responder else None)
        elif name == "atomics" and responder:
            _add_option(parser, p.cli, dataclasses.replace(
                p, choices=(*p.choices, ATOMICS_OFF),
                help="hosts' RDMA atomics (COMPARE_SWAP, FETCH_ADD) executed on the FPGA's "
                "regions, the 64-bit value stored in this byte order (little: as a host CPU "
                "reads a counter; big: the wire's); default little with READs, off: refused "
                "(NAK invalid request)"), None)
        else:
            _add_option(parser, p.cli, p, None)


def endpoint_params(args, port_option="--cm-port"):
    """The endpoint parameters the options name (only those given), each checked against its
    field's type and range (errors named by their option; ``port_option``: the connection
    manager's port option)."""
    params = {} if args.cm_port is None else {"cm_port": args.cm_port}
    for option, (param, _) in ENDPOINT_OPTIONS.items():
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None and not (param == "atomics" and value == ATOMICS_OFF):
            params[param] = value
    if not params.get("responder"):
        given = [o for o in ("--resp-region", "--rnr-timer", "--rq-depth", "--pattern-sink",
                             "--reads", "--rd-depth", "--max-rd-atomic", "--rd-hole-wait",
                             "--atomics")
                 if ENDPOINT_OPTIONS[o][0] in params and
                 (o != "--reads" or params["reads"])]
        if given:
            raise ValueError(f"{', '.join(given)} need{'s' * (len(given) == 1)} the responder "
                             f"(--responder)")
        params.pop("responder", None)
    if params.get("reads") is False:
        given = [o for o in ("--rd-depth", "--max-rd-atomic", "--rd-hole-wait", "--atomics")
                 if ENDPOINT_OPTIONS[o][0] in params]
        if given:
            raise ValueError(f"{', '.join(given)} need{'s' * (len(given) == 1)} --reads")
    if "pfc_prio" in params and not params.get("pfc"):
        raise ValueError("--pfc-prio needs --pfc")
    if "cm_allow_net" in params:
        net, _, prefix = params["cm_allow_net"].partition("/")
        if not prefix.isdigit():
            raise ValueError(f"--allow-net must be A.B.C.D/N, not {params['cm_allow_net']!r}")
        params["cm_allow_net"] = (net, int(prefix))
    for name, value in params.items():
        try:
            check_field(name, value)
        except (ValueError, TypeError) as e:
            raise ValueError(option_error(str(e), port_option)) from None
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


def serve_atomics(args, params):
    """``rocegen sim serve``'s atomics: ``params`` (from :func:`endpoint_params`) with
    ``atomics="little"`` added when the endpoint has the responder with READs (on-chip memory,
    the simulated FPGA's) and ``--atomics`` was not given (``off`` leaves them out)."""
    if getattr(args, "atomics", None) is None and params.get("responder") and \
            params.get("reads") is not False and params.get("memory", "onchip") == "onchip":
        return {**params, "atomics": "little"}
    return params
