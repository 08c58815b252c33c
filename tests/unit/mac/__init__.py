"""Tests of the MAC side: the XGMII MAC, pause and PFC."""
