from scapy.all import IP, UDP, Ether, rdpcap

from rocegen.sim.testing.pcap import PcapWriter, read_pcap


def test_pcap_round_trip_and_scapy_reads_it(tmp_path):
    frames = [bytes(Ether(dst="02:00:00:00:00:01") / IP(dst="10.0.0.2") / UDP(dport=n) / bytes(n))
              for n in (0, 1, 100)]
    path = tmp_path / "x.pcap"
    with PcapWriter(path) as w:
        for n, f in enumerate(frames):
            w.write(f, 1_000_000_123 + 7 * n)
    got = read_pcap(path)
    assert [f for _, f in got] == frames
    assert [t for t, _ in got] == [1_000_000_123, 1_000_000_130, 1_000_000_137]
    pkts = rdpcap(str(path))
    assert [p[UDP].dport for p in pkts] == [0, 1, 100]
    assert abs(float(pkts[0].time) - 1.000000123) < 1e-9
