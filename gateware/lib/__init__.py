"""The packet-stream library every protocol layer is built from.

The packet stream (:mod:`.stream`: ``data``/``keep``/``last``/``error``/``meta``), blocks that put
headers on and take them off (:mod:`.packetizer`, :mod:`.depacketizer`, :mod:`.varpacketizer`),
storage (:mod:`.fifo`, :mod:`.checked_fifo`, :mod:`.buffer`, :mod:`.pipe`), packet shaping
(:mod:`.trim`, :mod:`.pad`, :mod:`.gate`), joining and splitting (:mod:`.arbiter`,
:mod:`.stream_arbiter`, :mod:`.demux`), checksums and CRCs (:mod:`.checksum`, :mod:`.crc`),
counters (:mod:`.stats`) and the port conventions of top levels (:mod:`.axi`, :mod:`.axis`,
:mod:`.records`, :mod:`.memport`, :mod:`.mapmeta`). Nothing here knows a protocol.
"""
