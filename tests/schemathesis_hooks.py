"""Schemathesis hooks for the positive-data check in tests/test_fuzz_http.py: uploads that are audio.

The description says that an upload is audio (its part's contentType is audio/*) and which codec a Willow
body is in (x-audio-codec), but a schema cannot say what audio is: these give schemathesis recordings to
send in their place, as a client would. Half a second of silence: long enough to be accepted, and quick to
transcribe, since the VAD finds nothing to decode. Loaded through SCHEMATHESIS_HOOKS, in schemathesis's process.
"""

from __future__ import annotations

import schemathesis
from helpers import Pcm, amr_wb, silence, wav_bytes
from hypothesis import strategies as st

RECORDING = silence(0.5)

schemathesis.openapi.media_type("audio/wav", st.just(wav_bytes(RECORDING)))


@schemathesis.hook.apply_to(path="/api/willow")
def map_case(_ctx: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """Any bytes are PCM; wav is PCM after a RIFF header, and amrwb is AMR-WB frames."""
    codec = str((case.headers or {}).get("x-audio-codec", "pcm")).lower()
    if codec == "wav":
        case.body = wav_bytes(Pcm(bytes(case.body or b""), 16000, 1, 1))
    elif codec == "amrwb":
        case.body = amr_wb(RECORDING)
    return case


@schemathesis.hook.apply_to(path="/v1/audio/speech")
def filter_case(_ctx: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    """JSON only: speaking with a reference recording needs XTTS, which the shared test server does not load."""
    return case.media_type == "application/json"
