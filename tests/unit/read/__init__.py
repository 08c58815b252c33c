"""Tests of the RDMA READ requester."""
