"""The RC requester: scheduler, segmenter, packet builder, QP table, completer, retry."""
