"""Tests of the Ethernet/ARP/IPv4/ICMP/UDP stack."""
