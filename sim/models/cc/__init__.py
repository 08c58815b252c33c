"""Reference models of DCQCN's reaction point and the per-QP rate limiter."""
