"""Tests of congestion control: DCQCN, the rate limiter, the incast model."""
