"""The REQ-to-REP latency ``bench/bench_rdma_cm.py`` measures through ``IbCmService`` (W = 64,
8 connections, the endpoint's parameters) is the one the blocks' docstrings give, added up
term by term."""

from bench.bench_rdma_cm import latency
from rocegen.wire import ibcm as I


def documented_req_to_rep(width, connections):
    """Cycles from the cycle a REQ's last beat is taken on ``IbCmService.i`` to the cycle its
    REP's first beat leaves on ``o`` (``o`` ready, the QP pool taking ``qp_req`` at once and
    offering its grant the cycle after), from each block's docstring. For a ``width`` at which
    the ingress's headers are whole beats (the MAD's last beat enters the queue with the
    datagram's)."""
    assert (I.UD_IN.length * 8) % width == 0, "the headers are not whole beats at this width"
    mad_beats = 8 * I.MAD_LENGTH // width
    terms = {
        # Qp1Ingress: the MAD's first beat is offered two cycles after its last beat enters
        "ingress": 2,
        # ... and moves into IbCmReceiver a beat a cycle (its i.ready high while it waits)
        "mad_into_receiver": mad_beats - 1,
        # IbCmReceiver: o.valid from the cycle after the last beat moves
        "receiver": 1,
        # IbCmPassive: offered in cycle t while idle, decided in t + connections + 2; then
        # qp_req, qp_grant and o, each offered the cycle after the one before, each taken at
        # once
        "passive_decision": connections + 2,
        "passive_handshakes": 3,
        # IbCmReply: a record taken in cycle t' has its first beat offered in t' + 1
        "reply": 1,
        # Qp1Egress: combinational from i to o
        "egress": 0,
    }
    return sum(terms.values())


def test_req_to_rep_latency_is_the_documented_one():
    row = latency(64, 8)
    assert row["req_to_rep_cycles"] == documented_req_to_rep(64, 8) == 48
