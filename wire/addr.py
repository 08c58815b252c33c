"""MAC and IPv4 addresses as the wire carries them: 48- and 32-bit integers, first byte on the
wire most significant."""

import ipaddress

__all__ = ["parse_ip", "format_ip", "parse_mac", "format_mac", "parse_net", "in_net"]


def parse_ip(text):
    """Dotted IPv4 text (or an integer) -> 32-bit integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 <= text < 1 << 32:
            raise ValueError(f"not an IPv4 address: {text!r}")
        return text
    try:
        return int(ipaddress.IPv4Address(str(text)))
    except ValueError:
        raise ValueError(f"not an IPv4 address: {text!r}") from None


def format_ip(value):
    """32-bit integer -> dotted text."""
    return str(ipaddress.IPv4Address(value))


def parse_mac(text):
    """``aa:bb:cc:dd:ee:ff`` -> 48-bit integer."""
    parts = str(text).split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"not a MAC address (aa:bb:cc:dd:ee:ff): {text!r}")
    try:
        return int.from_bytes(bytes(int(p, 16) for p in parts), "big")
    except ValueError:
        raise ValueError(f"not a MAC address (aa:bb:cc:dd:ee:ff): {text!r}") from None


def format_mac(value):
    """48-bit integer -> ``aa:bb:cc:dd:ee:ff``."""
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def parse_net(allow_net):
    """``None`` or ``(ip, prefix_len)`` -> ``None`` or ``(network, mask)`` as 32-bit integers.

    ``ip`` is an integer or a dotted string; its host bits must be zero."""
    if allow_net is None:
        return None
    if not isinstance(allow_net, tuple) or len(allow_net) != 2:
        raise TypeError(f"allow_net must be None or an (ip, prefix_len) tuple, not {allow_net!r}")
    ip, prefix = allow_net
    if not isinstance(prefix, int) or isinstance(prefix, bool) or not 0 <= prefix <= 32:
        raise ValueError(f"allow_net prefix length must be 0..32, not {prefix!r}")
    if isinstance(ip, bool) or not isinstance(ip, (int, str)):
        raise TypeError(f"allow_net address must be an integer or a dotted string, not {ip!r}")
    try:
        net = ipaddress.IPv4Network((ip, prefix), strict=True)
    except ValueError as e:
        raise ValueError(f"allow_net {allow_net!r} is not an IPv4 network: {e}") from None
    return int(net.network_address), int(net.netmask)


def in_net(net, ip):
    """Whether ``ip`` is inside ``net`` (from :func:`parse_net`; ``None`` allows any address)."""
    return net is None or (ip & net[1]) == net[0]
