"""Reference models of the MAC side: the XGMII MAC and the pause blocks."""
