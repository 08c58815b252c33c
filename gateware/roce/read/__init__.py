"""The RDMA READ requester: outstanding READs tracked, responses placed, lost parts asked again."""
