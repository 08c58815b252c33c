"""Reference model of the connection manager and its datagram functions."""
