"""An offer that makes aiortc's SDP parser work in proportion to the product of two of its counts (issue 49).

A browser's offer with many codecs (a=rtpmap) and as many bytes of a=rtcp-fb wildcards added to its audio section:
aiortc gives every codec a feedback object for every wildcard, on the event loop. Sent by tests/test_rtc_bounds.py
and bench/abuse.py's `rtc-codecs`. Before rtc/offers.py screened offers, 32 KiB held the loop for 2.4 s, 64 KiB
for 6-9 s and 400 MB, and 128 KiB (the limit of /v1/realtime/calls) for 28 s and 1.9 GB; and the offer, otherwise
a browser's, was answered, its peer connection parsing it again.
"""

from __future__ import annotations

CODEC = "a=rtpmap:{} x/1\r\n"  # payload types 100-127: every line the same length
WILDCARD = "a=rtcp-fb:* x\r\n"


def swollen(offer: str, size: int) -> str:
    """`offer` (a browser's) with codecs and wildcards, in equal bytes, added to its audio section: `size` bytes."""
    room = size - len(offer)
    codecs = room // 2 // len(CODEC.format(100))
    wildcards = (room - codecs * len(CODEC.format(100))) // len(WILDCARD)
    added = "".join(CODEC.format(100 + n % 28) for n in range(codecs)) + WILDCARD * wildcards
    at = offer.index("a=rtpmap:")  # the audio section's first codec
    return offer[:at] + added + offer[at:]
