"""Congestion control of the requester: DCQCN's reaction point and the per-QP rate limiter."""
