"""Reference models of the packet-stream library's blocks."""
