"""The payload memory: on-chip buffer or AXI4 memory, its readers and writers."""
