"""Reference models of the payload memory: AXI4 memories and the payload readers."""
