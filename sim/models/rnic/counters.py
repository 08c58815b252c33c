"""What the host RNIC model counts (:attr:`Rnic.counters <rocegen.sim.models.rnic.Rnic.counters>`,
every event with a message in :attr:`~rocegen.sim.models.rnic.Rnic.log`), and which of those
events raise in strict mode."""

__all__ = ["COUNTERS", "STRICT_CHECKS"]

COUNTERS = (
    "rx_frames", "tx_frames",
    # Ethernet / ARP
    "eth_drop_runt", "eth_drop_mtu", "eth_drop_addr", "eth_drop_vlan", "eth_drop_ethertype",
    "arp_rx_request", "arp_rx_reply", "arp_tx_reply", "arp_drop_bad",
    # IPv4 / UDP
    "ip_drop_header", "ip_drop_checksum", "ip_drop_length", "ip_drop_options", "ip_drop_fragment",
    "ip_drop_addr", "ip_drop_protocol", "udp_drop_length", "udp_drop_checksum", "udp_drop_port",
    "udp_rx",
    # RoCEv2 silent drops
    "roce_rx", "drop_short", "drop_icrc", "drop_tver", "drop_transport", "drop_dest_qp",
    "drop_src_ip", "drop_pkey", "drop_malformed", "drop_response", "drop_qp_error", "cnp_rx",
    # responder
    "executed", "duplicate", "seq_drop", "ack_coalesced", "write_msgs", "write_bytes",
    "send_msgs", "send_bytes", "completions",
    "ack_tx", "nak_seq_tx", "rnr_nak_tx", "nak_inv_req_tx", "nak_rem_access_tx", "nak_rem_op_tx",
    "err_opcode_seq", "err_unsupported", "err_length", "err_rkey", "err_access", "err_bounds",
    "err_recv_len", "err_msg_size", "err_rd_atomic",
    # RDMA READ responder: READs executed, duplicates executed again and dropped, response
    # packets and their payload bytes
    "read_rx", "read_dup", "read_dup_drop", "read_resp_tx", "read_bytes",
    # atomic responder: atomics executed, duplicates answered from the results kept and dropped,
    # ATOMIC_ACKNOWLEDGEs sent, misaligned addresses refused
    "atomic_rx", "atomic_dup", "atomic_dup_drop", "atomic_ack_tx", "err_atomic_align",
    # faults injected towards the requester (Behaviour, read_fault)
    "ack_dup_tx", "ack_ghost_tx", "runt_tx", "oversize_tx", "read_dup_tx", "read_fault_tx",
    # requester (requester.py): data packets sent (resends included) and resent, AETHs
    # received by kind, stale and never-sent ones, timeouts, retries exhausted, completions
    "req_tx", "req_retx", "req_ack_rx", "req_nak_seq_rx", "req_rnr_rx", "req_nak_err_rx",
    "req_ack_stale", "req_ack_ghost", "req_timeouts", "req_retry_exc", "req_rnr_retry_exc",
    "req_completions",
    # requester READs: responses taken and their bytes, stale and bad ones dropped, reissues
    "req_read_rx", "req_read_bytes", "req_read_stale", "req_read_bad", "req_read_retry",
    # requester atomics: ATOMIC_ACKNOWLEDGEs taken, stale ones and bad ones dropped
    "req_atomic_rx", "req_atomic_stale", "req_atomic_bad",
    # deviations from the wire conventions that a receiver tolerates (strict mode raises)
    "warn_eth_bcast", "warn_ip_trailing", "warn_ip_df", "warn_ip_id", "warn_ip_ttl",
    "warn_udp_sport", "warn_bth_reserved", "warn_pad_nonzero", "warn_ackreq", "warn_cnp",
)

#: Counters whose events raise in strict mode (everything else is a legitimate situation).
STRICT_CHECKS = frozenset({
    "eth_drop_runt", "eth_drop_mtu", "err_msg_size", "eth_drop_addr", "eth_drop_vlan",
    "eth_drop_ethertype", "arp_drop_bad",
    "ip_drop_header", "ip_drop_checksum", "ip_drop_length", "ip_drop_options", "ip_drop_fragment",
    "ip_drop_addr", "ip_drop_protocol", "udp_drop_length", "udp_drop_checksum", "udp_drop_port",
    "drop_short", "drop_icrc", "drop_tver", "drop_transport", "drop_dest_qp", "drop_src_ip",
    "drop_pkey", "drop_malformed", "drop_response", "req_ack_ghost", "req_read_bad",
    "req_atomic_bad",
    "err_opcode_seq", "err_unsupported", "err_length", "err_rd_atomic",
    "warn_eth_bcast", "warn_ip_trailing", "warn_ip_df", "warn_ip_id", "warn_ip_ttl",
    "warn_udp_sport", "warn_bth_reserved", "warn_pad_nonzero", "warn_ackreq", "warn_cnp",
})
