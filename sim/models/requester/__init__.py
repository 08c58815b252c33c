"""Reference models of the RC requester: segmentation, completions, retransmission."""
