"""Uploads that are not audio but tell FFmpeg to open something else (issue 36): a socket, a file by its path.

Sent as an uploaded recording by tests/test_decode_bounds.py and bench/abuse.py's `demuxers`. Before uploads were
read by a whitelist of demuxers and no protocol, the SDP file bound two UDP ports and waited on them forever in a
codec thread, and the ffconcat file was answered with the transcript of the file it named.
"""

from __future__ import annotations

import os
from pathlib import Path

# An RTP session description: FFmpeg's sdp demuxer binds its port (0: any) and the next for RTCP, and waits for
# packets. 106 bytes.
SDP = (
    b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
    b"m=audio 0 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
)


def ffconcat(path: str) -> bytes:
    """A concat playlist of one file, by a path relative to the server's working directory (FFmpeg's `safe` mode
    refuses absolute paths and '..', not these); in the Docker image that directory is the data dir."""
    return f"ffconcat version 1.0\nfile {path}\n".encode()


def hls(path: str) -> bytes:
    """An HLS playlist (.m3u8) of one segment, the file at `path`."""
    return f"#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXTINF:10.0,\n{path}\n#EXT-X-ENDLIST\n".encode()


def naming(path: str) -> dict[str, tuple[str, bytes]]:
    """Each attack as an upload: {kind: (file name, content)}; the playlists name `path`."""
    return {"sdp": ("take.sdp", SDP), "ffconcat": ("take.ffconcat", ffconcat(path)), "hls": ("take.m3u8", hls(path))}


def udp_sockets(pid: int) -> int:
    """UDP sockets the process holds: its descriptors' sockets that its network namespace lists as UDP."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            held.add(os.readlink(fd))
        except FileNotFoundError:  # closed since it was listed
            continue
    count = 0
    for table in ("udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            count += f"socket:[{line.split()[9]}]" in held
    return count
