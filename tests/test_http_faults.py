"""Bad requests and bad clients over HTTP: each gets a clear error, nobody else notices.

The shared server's log is checked for errors, tracebacks and lost tasks when the run ends.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from helpers import CORPUS, Server, amr_wb, load_audio, wer

SPOKEN = CORPUS / "LJ001-0004.flac"
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
FORM = b"Content-Type: multipart/form-data; boundary=XX\r\n"
PART = b'--XX\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
MALFORMED = {  # content type, body
    "no boundary": ("multipart/form-data", PART + b"RIFF\r\n--XX--\r\n"),
    "no part": ("multipart/form-data; boundary=XX", b"just some bytes"),
    "cut short": ("multipart/form-data; boundary=XX", PART + b"RIFF...."),
    "broken part header": ("multipart/form-data; boundary=XX", b"--XX\r\nnot a header\r\n\r\nx\r\n--XX--\r\n"),
}


@pytest.mark.parametrize("route", ["/v1/audio/transcriptions", "/v1/audio/speech", "/api/asr"])
@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_multipart_is_a_400_that_says_so(server: Server, route: str, case: str) -> None:
    content_type, body = MALFORMED[case]
    response = httpx.post(server.http_url + route, content=body, headers={"Content-Type": content_type})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_multipart" and "multipart" in response.json()["error"]["message"]


def test_wrong_content_types(server: Server) -> None:
    url = server.http_url
    as_text = httpx.post(url + "/v1/audio/speech", content=b"hello", headers={"Content-Type": "text/plain"})
    assert as_text.status_code == 400 and as_text.json()["error"]["code"] == "bad_json"
    for route in ("/api/asr", "/v1/audio/translations"):
        as_json = httpx.post(url + route, json={"audio_file": "speech.flac"})
        assert as_json.status_code == 415 and as_json.json()["error"]["code"] == "bad_content_type", route


async def send_and_vanish(server: Server, head: bytes, body: bytes, pieces: int) -> None:
    """Send the request line, headers and the first `pieces` 2 KB chunks of a chunked body, then hang up."""
    _, writer = await asyncio.open_connection(server.host, server.http_port)
    writer.write(head + b"Transfer-Encoding: chunked\r\n\r\n")
    for at in range(0, 2048 * pieces, 2048):
        writer.write(b"%x\r\n%s\r\n" % (2048, body[at : at + 2048]))
        await writer.drain()
        await asyncio.sleep(0.05)
    writer.close()
    await writer.wait_closed()


async def test_clients_that_vanish_mid_request_leave_nothing_running(server: Server) -> None:
    pcm = load_audio(SPOKEN)
    device = b"POST /api/willow HTTP/1.1\r\nHost: wis\r\nx-audio-codec: %s\r\n"
    upload = b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: wis\r\n" + FORM
    await asyncio.gather(
        send_and_vanish(server, device % b"pcm", pcm.audio, 30),  # a device that lost Wi-Fi mid-sentence
        send_and_vanish(server, device % b"amrwb", amr_wb(pcm), 4),
        send_and_vanish(server, upload, PART + pcm.audio, 20),  # an upload cut off
    )
    async with httpx.AsyncClient(timeout=30) as client:
        deadline = time.monotonic() + 10
        while (await client.get(server.http_url + "/health")).json()["asr"]["base"]["pending"]:
            assert time.monotonic() < deadline, "decoding went on for clients that left"
            await asyncio.sleep(0.1)
        files = {"audio_file": ("speech.flac", SPOKEN.read_bytes())}
        after = await client.post(server.http_url + "/api/asr", files=files)
    assert after.status_code == 200 and wer([SPOKEN_TEXT], [after.json()["text"]]) < 0.15


async def test_a_slow_client_holds_up_nobody(server: Server) -> None:
    """An upload trickling in over seconds, while another client is served in full and a voice speaks."""
    data = SPOKEN.read_bytes()
    body = PART.replace(b'"a.wav"', b'"a.flac"') + data + b"\r\n--XX--\r\n"
    head = (
        b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: wis\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n"
        % (FORM, len(body))
    )
    reader, writer = await asyncio.open_connection(server.host, server.http_port)
    writer.write(head)
    trickling = True

    async def trickle() -> bytes:
        nonlocal trickling
        step = len(body) // 40 + 1
        for at in range(0, len(body), step):  # about 6 s for the whole body
            writer.write(body[at : at + step])
            await writer.drain()
            await asyncio.sleep(0.15)
        trickling = False
        answer = await reader.read()
        writer.close()
        return answer

    slow = asyncio.create_task(trickle())
    client = openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    await asyncio.sleep(0.5)
    transcript = await client.audio.transcriptions.create(file=("speech.flac", data), model="whisper-1")
    speech = await client.audio.speech.create(model="tts-1", voice="alloy", input="The kettle is on.")
    assert trickling, "the other requests waited for the slow upload"
    assert wer([SPOKEN_TEXT], [transcript.text]) < 0.15 and len(speech.content) > 1000
    answer = await asyncio.wait_for(slow, 60)
    assert answer.startswith(b"HTTP/1.1 200") and b'"text"' in answer, answer[:300]
