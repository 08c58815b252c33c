"""Reference models of the Ethernet/ARP/IPv4/ICMP/UDP stack and the Internet checksum."""
