"""The endpoint that wires the roles together, its statistics and its AXI4-Lite registers."""
