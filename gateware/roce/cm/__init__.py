"""The out-of-band connection manager: QP set-up over 64-byte UDP datagrams."""
