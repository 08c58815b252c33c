"""Reference model of the 64-bit XGMII MAC (``rocegen.gateware.mac``), in plain Python.

Words are ``(data, ctrl)`` pairs of integers: ``data`` holds 8 octets, lane ``j`` in bits
``8*j .. 8*j+7`` (lane 0 first on the wire), ``ctrl`` bit ``j`` flags lane ``j`` as a control
character. The FCS is computed with :func:`zlib.crc32`, independently of the gateware.

:func:`encode` gives what the transmitter sends for one frame; :func:`decode` gives what the
receiver delivers for a stream of words, with the status it reports for each frame.
"""

import struct
import zlib

__all__ = [
    "IDLE", "START", "TERMINATE", "ERROR", "PREAMBLE", "SFD", "IDLE_WORD",
    "OK", "FCS_ERROR", "RUNT", "TOO_LONG", "BAD_CODE", "BAD_PREAMBLE",
    "fcs", "pad", "frame_lanes", "pack_words", "unpack_words", "idle_words", "encode", "decode",
]

IDLE, START, TERMINATE, ERROR = 0x07, 0xFB, 0xFD, 0xFE
PREAMBLE, SFD = 0x55, 0xD5
LANES = 8
IDLE_WORD = (int.from_bytes(bytes([IDLE] * LANES), "little"), 0xFF)

# Status of a frame reported by decode(), one per frame, by priority as the receiver does.
OK = "ok"
BAD_CODE = "bad_code"          # ended by a control character other than /T/
TOO_LONG = "too_long"          # more than max_frame octets, FCS included
RUNT = "runt"                  # fewer than 64 octets, FCS included
FCS_ERROR = "fcs_error"
BAD_PREAMBLE = "bad_preamble"  # start word not /S/ 55 55 55 55 55 55 D5: nothing delivered


def fcs(frame):
    """The 4 FCS octets of ``frame``, in wire order."""
    return struct.pack("<L", zlib.crc32(bytes(frame)))


def pad(frame, min_len=60):
    """``frame`` zero-padded to ``min_len`` octets (the transmitter pads to 60)."""
    frame = bytes(frame)
    return frame + bytes(max(min_len - len(frame), 0))


def frame_lanes(frame, *, error=False, padding=True):
    """The ``(octet, ctrl)`` lanes of one frame as the transmitter sends it, from /S/ to /T/.

    ``error`` sends the inverted FCS and /E/ instead of /T/, as the transmitter does for a frame
    whose last beat has ``error`` set."""
    body = pad(frame) if padding else bytes(frame)
    check = fcs(body)
    if error:
        check = bytes(b ^ 0xFF for b in check)
    lanes = [(START, 1)] + [(PREAMBLE, 0)] * 6 + [(SFD, 0)]
    lanes += [(b, 0) for b in body + check]
    lanes.append((ERROR if error else TERMINATE, 1))
    return lanes


def pack_words(lanes):
    """``(octet, ctrl)`` lanes -> words, the last word completed with idles."""
    lanes = list(lanes)
    lanes += [(IDLE, 1)] * (-len(lanes) % LANES)
    words = []
    for k in range(0, len(lanes), LANES):
        chunk = lanes[k:k + LANES]
        words.append((sum(b << (8 * j) for j, (b, _) in enumerate(chunk)),
                      sum(c << j for j, (_, c) in enumerate(chunk))))
    return words


def unpack_words(words):
    """Words -> ``(octet, ctrl)`` lanes."""
    return [((d >> (8 * j)) & 0xFF, (c >> j) & 1) for d, c in words for j in range(LANES)]


def idle_words(n):
    return [IDLE_WORD] * n


def encode(frame_bytes, *, start_lane=0, error=False):
    """The words the transmitter sends for ``frame_bytes`` (a frame without FCS): ``start_lane``
    idles (0 or 4), /S/, preamble, SFD, the frame padded to 60 octets, its FCS, /T/ (or, with
    ``error``, the inverted FCS and /E/), idles to the end of the word."""
    if start_lane not in (0, 4):
        raise ValueError(f"start_lane must be 0 or 4, not {start_lane!r}")
    return pack_words([(IDLE, 1)] * start_lane + frame_lanes(frame_bytes, error=error))


def _classify(body, end_octet, end_ctrl, max_frame):
    n = len(body)
    if not (end_ctrl and end_octet == TERMINATE):
        return BAD_CODE
    if n > max_frame:
        return TOO_LONG
    if n < 64:
        return RUNT
    if fcs(body[:-4]) != bytes(body[-4:]):
        return FCS_ERROR
    return OK


def decode(words, *, max_frame=1522):
    """What the receiver delivers for ``words``: a list of ``(frame_bytes, status)``.

    ``frame_bytes`` is the frame without preamble and FCS (``None`` for a ``BAD_PREAMBLE`` start,
    which delivers nothing); ``status`` is one of ``OK``, ``BAD_CODE``, ``TOO_LONG``, ``RUNT``,
    ``FCS_ERROR``, ``BAD_PREAMBLE``. Rules (those of :class:`~rocegen.gateware.mac.xgmii_rx.XgmiiRx`):

    * /S/ is looked for in lane 0 and lane 4; the frame is then read as 8-octet *realigned words*
      from the /S/ on. The first is the start word, which must be exactly /S/, six 0x55, 0xD5.
    * The frame ends at the first control character after the start word; the rest of that
      realigned word is skipped and the search resumes right after it (at lane 0 or lane 4).
    * The octets before the end character are the frame with its FCS; the last 4 are dropped.
    * When a realigned word with no control character would take the frame past ``max_frame``
      octets, the frame is delivered at once with the octets before that word (``TOO_LONG``)
      and the rest is skipped up to (the realigned word of) the next control character.
    * A frame still open when ``words`` end is not reported.
    """
    lanes = unpack_words(words)
    n = len(lanes)
    out = []
    pos = 0                               # search position, a multiple of 4

    def is_start(p):
        return lanes[p] == (START, 1)

    while True:
        if pos % LANES == 0:
            if pos + LANES > n:
                break
            if is_start(pos):
                s = pos
            elif is_start(pos + 4):
                s = pos + 4
            else:
                pos += LANES
                continue
        else:
            if pos + 4 > n:
                break
            if is_start(pos):
                s = pos
            else:
                pos += 4
                continue
        if s + LANES > n:
            break
        if lanes[s:s + LANES] != [(START, 1)] + [(PREAMBLE, 0)] * 6 + [(SFD, 0)]:
            out.append((None, BAD_PREAMBLE))
            pos = s + LANES
            continue
        q = s + LANES
        body = bytearray()
        finished = False
        while q + LANES <= n:
            word = lanes[q:q + LANES]
            ends = [j for j, (_, c) in enumerate(word) if c]
            if not ends:
                if len(body) + LANES > max_frame:
                    out.append((bytes(body), TOO_LONG))
                    q += LANES
                    while q + LANES <= n and not any(c for _, c in lanes[q:q + LANES]):
                        q += LANES
                    if q + LANES > n:
                        return out
                    pos = q + LANES
                    finished = True
                    break
                body += bytes(b for b, _ in word)
                q += LANES
                continue
            e = ends[0]
            body += bytes(b for b, _ in word[:e])
            status = _classify(body, *word[e], max_frame)
            out.append((bytes(body[:max(len(body) - 4, 0)]), status))
            pos = q + LANES
            finished = True
            break
        if not finished:
            break
    return out
