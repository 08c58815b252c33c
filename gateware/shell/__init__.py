"""The portable part of the shell around the core: what every board top puts between the core and
the board, in plain Amaranth (no vendor primitive), so that it is simulated like the core.

The status LEDs (:mod:`.status_leds`, :mod:`.stretch`) and the counter watcher that feeds them
(:mod:`.stats_watch`); how a board top drives the core, its register block and the ports it
leaves unused (:mod:`.control`); the reset sequencing of an external memory behind an AXI clock
converter (:mod:`.mem_reset`). The synchronizers they use are in :mod:`rocegen.gateware.lib`
(:mod:`~rocegen.gateware.lib.reset_sync`, :mod:`~rocegen.gateware.lib.level_sync`) and carry
their own timing exceptions. The vendor IP and primitives are in :mod:`rocegen.boards`.
"""
