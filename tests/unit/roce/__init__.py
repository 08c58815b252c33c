"""Tests of what the RoCEv2 roles share: headers, the ICRC, the receive classifier."""
