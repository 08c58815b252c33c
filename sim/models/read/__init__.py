"""Reference model of the RDMA READ requester."""
