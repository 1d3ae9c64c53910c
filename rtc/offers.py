"""What an offer may hold: checked before any connection is made for it, and before aiortc reads it.

aiortc reads a session description on the event loop (`check_offer`, and again in `setRemoteDescription`), and
part of that reading grows with the product of two counts of a media section: each a=rtcp-fb and a=fmtp line is
read against the section's codecs (an a=rtcp-fb line gives each codec it names a feedback object: a wildcard,
every one), each a=ssrc line against the sources named before it. One audio section of a thousand codecs and a
thousand wildcards, 64 KiB, held the loop for 6-9 s and took 400 MB. So `screen` counts those first, as aiortc
would read them, at the cost of splitting the text into lines: at most MAX_LINES lines of MAX_LINE characters,
MAX_SECTIONS sections, MAX_SSRC a=ssrc lines in a section, MAX_PAIRS codecs-times-lines and MAX_FEEDBACK feedback
entries in the offer. A browser's offer has a fraction of each (Chrome's video section, the largest, has 30
codecs, 67 a=rtcp-fb and 28 a=fmtp lines); the worst offer that passes, aiortc reads in a few ms.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from aiortc import sdp

from wyoming_wis.values import quote

MAX_LINES = 512  # an offer's; Chrome's with audio, two videos and a data channel has about 350, with audio alone 60
MAX_LINE = 1024  # characters of a line; a browser's longest (a fingerprint, a candidate, an m=video) are under 200
MAX_SECTIONS = 4  # media sections in an offer; a browser's has two (the microphone, the data channel)
MAX_PAIRS = 8192  # a section's codecs times its a=rtcp-fb and a=fmtp lines, summed: Chrome's video has 30 x 95
MAX_FEEDBACK = 1024  # feedback entries made: an a=rtcp-fb line's for each codec it names; Chrome's video has 67
MAX_SSRC = 64  # a=ssrc lines in a section; Chrome's: 2 for each source it sends (its RTX, its simulcast layers)
SENDING = ("sendrecv", "sendonly")  # an offer's audio directions that send the microphone
NO_AUDIO = "The offer has no audio track: add the microphone's track before making the offer"
NO_CHANNEL = 'The offer has no data channel: create one (e.g. "chat") before making the offer'


class BadOffer(Exception):
    """An offer this server cannot answer (unreadable, no audio, no data channel, past a bound)."""


def check_offer(text: str) -> None:
    """Raise BadOffer for an offer this server cannot use, before any connection is made for it.

    aiortc's parser asserts and indexes its way through a description, so any error it raises is
    the text's. What it reads but its peer connection would trip over later (a section without
    its own mid or DTLS setup, a BUNDLE naming none) is refused here too.
    """
    screen(text)
    try:
        description = sdp.SessionDescription.parse(text)
    except Exception as err:  # see the docstring
        raise BadOffer(f"Not a session description aiortc can read ({aiortc_error(err)})") from None
    media = description.media
    mids = [section.rtp.muxId for section in media]
    if "" in mids or len(set(mids)) < len(mids):
        raise BadOffer("Each media section needs its own a=mid")
    if any(section.dtls is None or not section.dtls.fingerprints for section in media):
        raise BadOffer("Each media section needs DTLS parameters: a=setup and a=fingerprint")
    for group in description.group:
        if group.semantic == "BUNDLE" and not set(group.items) <= set(mids):
            raise BadOffer(f"a=group:BUNDLE names a mid no section has: {quote(' '.join(group.items))}")
    if not any(section.kind == "audio" and section.direction in SENDING for section in media):
        raise BadOffer(NO_AUDIO)
    if not any(section.kind == "application" for section in media):
        raise BadOffer(NO_CHANNEL)


def screen(text: str) -> None:
    """Raise BadOffer for an offer past a bound of the module's; the work is a split and a pass over MAX_LINES.

    Lines are split, and grouped into sections, as aiortc does, so that what is counted is what it reads.
    """
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise BadOffer(f"The offer has {len(lines)} lines; at most {MAX_LINES} are read")
    sections: list[_Section] = []
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE:
            raise BadOffer(f"Line {number} of the offer has {len(line)} characters; at most {MAX_LINE} are read")
        if line.startswith("m="):
            sections.append(_Section())
        elif sections and line.startswith("a="):
            sections[-1].read(line[2:])
    if len(sections) > MAX_SECTIONS:
        raise BadOffer(f"The offer has {len(sections)} media sections; at most {MAX_SECTIONS} are answered")
    for number, section in enumerate(sections, 1):
        if section.ssrc > MAX_SSRC:
            raise BadOffer(f"Media section {number} has {section.ssrc} a=ssrc lines; at most {MAX_SSRC} are read")
    pairs = sum(section.pairs() for section in sections)
    if pairs > MAX_PAIRS:
        raise BadOffer(
            f"The offer's codecs, each read against the a=rtcp-fb and a=fmtp lines of its section, make {pairs} pairs;"
            f" at most {MAX_PAIRS} are read"
        )
    feedback = sum(section.feedback_entries() for section in sections)
    if feedback > MAX_FEEDBACK:
        raise BadOffer(
            f"The offer's a=rtcp-fb lines make {feedback} feedback entries, one for each codec a line names (a wildcard"
            f" names every codec of its section); at most {MAX_FEEDBACK} are read"
        )


@dataclasses.dataclass
class _Section:
    """What a media section holds of what aiortc reads against its codecs."""

    codecs: Counter[str] = dataclasses.field(default_factory=Counter)  # a=rtpmap lines by payload type, as aiortc's
    feedback: list[str] = dataclasses.field(default_factory=list)  # each a=rtcp-fb line's payload type, or "*"
    fmtp: int = 0  # a=fmtp lines: each searches the codecs for its payload type
    ssrc: int = 0  # a=ssrc lines: each searches the sources named before it

    def read(self, attribute: str) -> None:
        """An a= line, without its "a=": aiortc's name is before the first colon, a payload type after it."""
        name, _, value = attribute.partition(":")
        if name == "rtpmap":
            self.codecs[_payload_type(value.partition(" ")[0])] += 1
        elif name == "rtcp-fb":
            self.feedback.append(value.partition(" ")[0])
        elif name == "fmtp":
            self.fmtp += 1
        elif name == "ssrc":
            self.ssrc += 1

    def pairs(self) -> int:
        """Codecs times the lines aiortc reads against each of them."""
        return self.codecs.total() * (len(self.feedback) + self.fmtp)

    def feedback_entries(self) -> int:
        """The feedback objects aiortc makes: one for each codec a line names, every codec for a wildcard."""
        return sum(self.codecs.total() if named == "*" else self.codecs[named] for named in self.feedback)


def _payload_type(text: str) -> str:
    """A codec's payload type as aiortc matches a=rtcp-fb lines to it (str(int(...))); aiortc refuses what int
    does not read."""
    try:
        return str(int(text))
    except ValueError:
        return text


def aiortc_error(err: Exception) -> str:
    """aiortc's error as the client may be told it: its words may hold the offer's text, so they are quoted."""
    return quote(str(err)) if str(err) else type(err).__name__
