"""Build tooling around the core: Yosys synthesis and its reports (:mod:`.synth`); the
Verilator install script ``tools/verilator.sh``."""
