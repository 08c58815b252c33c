"""The cut link of ``rocegen sim serve`` (``Cut``): the whole cut begins at the FPGA's next RC
request and drops every frame both ways until the file is gone; a file that says ``dreq``
drops the CM's DREQs to the FPGA and nothing else, the lossy links losing nothing meanwhile."""

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.sim.apps.cut import Cut
from rocegen.sim.models.ibcm.frames import wrap
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import UDP_PORT_ROCEV2
from rocegen.wire.simwire import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC


def mad(attribute):
    """A CM MAD (a Send of ``attribute``) from the host to the FPGA, in its RoCEv2 frame."""
    hdr = I.MAD_HDR.pack(base_version=I.BASE_VERSION, mgmt_class=I.MGMT_CLASS_CM,
                         class_version=I.CM_CLASS_VERSION, method=I.METHOD_SEND, status=0,
                         class_specific=0, transaction_id=7,
                         attribute_id=attribute, reserved=0, attribute_modifier=0)
    body = hdr + bytes(I.MAD_LENGTH - len(hdr))
    return wrap(body, src_mac=parse_mac(HOST_MAC), dst_mac=parse_mac(FPGA_MAC),
                src_ip=parse_ip(HOST_IP), dst_ip=parse_ip(FPGA_IP))


def rc(opcode, src=HOST_IP, dst=FPGA_IP):
    """An RC packet on QP 256 (its ICRC not looked at)."""
    return bytes(Ether(src=HOST_MAC, dst=FPGA_MAC) / IP(src=src, dst=dst)
                 / UDP(sport=0xC000, dport=UDP_PORT_ROCEV2)
                 / BTH(opcode=opcode, dqpn=256, psn=1) / Raw(bytes(20)))


def test_dreq_mode_drops_only_the_dreqs_to_the_fpga(tmp_path):
    path = tmp_path / "serve.json.cut"
    cut = Cut(str(path))
    dreq, req, rtu = mad(I.ATTR_DREQ), mad(I.ATTR_REQ), mad(I.ATTR_RTU)
    send = rc(opc.OP_RC_SEND_ONLY)
    cut.look(0)
    assert not any(cut.to_fpga(f) for f in (dreq, req, send)) and not cut.lossless()
    path.write_text("dreq\n")
    cut.look(10)
    assert cut.counters["dreq"] == 1 and not cut.counters["armed"]
    # (the lossy links lose nothing meanwhile: the host's last ACK must not be lost)
    assert cut.lossless()
    assert [cut.to_fpga(f) for f in (req, rtu, send, dreq, dreq)] == \
        [False, False, False, True, True]
    # (nothing from the FPGA is dropped, its RC requests start no cut)
    assert not cut.from_fpga(rc(opc.OP_RC_SEND_ONLY, FPGA_IP, HOST_IP), 11)
    path.unlink()
    cut.look(20)
    assert not cut.to_fpga(dreq) and not cut.lossless()
    c = cut.counters
    assert (c["dreq"], c["dropped_dreqs"], c["cuts"], c["dropped_to_fpga"]) == (0, 2, 0, 0)


def test_whole_cut_from_the_fpgas_next_request(tmp_path):
    path = tmp_path / "serve.json.cut"
    cut = Cut(str(path))
    path.write_text("the host is gone\n")
    cut.look(5)
    ack = rc(opc.OP_RC_ACKNOWLEDGE, FPGA_IP, HOST_IP)
    assert cut.counters["armed"] and not cut.from_fpga(ack, 6) and not cut.to_fpga(mad(I.ATTR_REQ))
    assert cut.from_fpga(rc(opc.OP_RC_SEND_ONLY, FPGA_IP, HOST_IP), 7)
    assert cut.to_fpga(mad(I.ATTR_DREQ)) and cut.to_fpga(rc(opc.OP_RC_ACKNOWLEDGE))
    assert not cut.lossless()         # (a host that vanished: the cut drops all it must)
    path.unlink()
    cut.look(9)
    c = cut.counters
    assert (c["active"], c["cuts"], c["began"], c["ended"]) == (0, 1, 7, 9)
    assert (c["dropped_from_fpga"], c["dropped_to_fpga"], c["dropped_dreqs"]) == (1, 2, 0)
