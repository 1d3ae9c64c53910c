"""Nothing leaves the house: without --allow-download, a whole run makes no DNS query and no connection
beyond loopback, this machine's own addresses (where its clients are) and its own mDNS announcement.

The server runs under strace, which sees every connect() and send of the process and
its threads, Python or native, so a dependency that starts phoning home (as
onnxruntime's telemetry and huggingface_hub's agent list did) fails this test.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import httpx
import ifaddr
import openai
from helpers import (
    CORPUS,
    Server,
    assert_clean_log,
    corpus,
    load_audio,
    read_until,
    start_server,
    synthesize,
    transcribe,
    wav_bytes,
    wer,
)
from rtc_client import Client, speech
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

TRACED = ("-f", "--seccomp-bpf", "-qq", "-e", "trace=connect,sendto,sendmsg,sendmmsg")  # every thread's sends
MDNS = {("224.0.0.251", 5353), ("ff02::fb", 5353)}  # the server's own announcement, on the local link only
_IPV4 = re.compile(r'sin_port=htons\((\d+)\), sin_addr=inet_addr\("([^"]+)"\)')
_IPV6 = re.compile(r'sin6_port=htons\((\d+)\).*?inet_pton\(AF_INET6, "([^"]+)"')


@dataclass(frozen=True)
class Reach:
    """One address the server sent to or connected to, and the syscall line that shows it."""

    address: str
    port: int
    line: str


def reaches(trace: str) -> list[Reach]:
    """Every IPv4 and IPv6 destination in an strace log of connect, sendto, sendmsg and sendmmsg."""
    found = []
    for line in trace.splitlines():
        for pattern in (_IPV4, _IPV6):
            found += [Reach(address, int(port), line) for port, address in pattern.findall(line)]
    return found


def own_addresses() -> set[str]:
    """This machine's addresses: its clients (the tests, a browser's WebRTC candidates) are there."""
    mine = set()
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            mine.add(ip.ip if isinstance(ip.ip, str) else ip.ip[0])
    return mine


def outside_the_house(found: list[Reach]) -> list[Reach]:
    """DNS queries anywhere, and anything sent beyond loopback, this machine and the mDNS groups."""
    mine = own_addresses()

    def inside(reach: Reach) -> bool:
        address = ipaddress.ip_address(reach.address.split("%")[0])
        here = address.is_loopback or address.is_unspecified or str(address) in mine
        return reach.port != 53 and (here or (str(address), reach.port) in MDNS)

    return [reach for reach in found if not inside(reach)]


def test_the_trace_parser_sees_what_a_dependency_would_send() -> None:
    """The lines strace writes for the lookups onnxruntime and huggingface_hub used to make."""
    trace = "\n".join(
        [
            '7 connect(11, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0',
            '8 sendto(5, "\\0", 1, 0, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
            'inet_pton(AF_INET6, "2600:1f18::1", &sin6_addr), sin6_scope_id=0}, 28) = 1',
            '9 connect(3, {sa_family=AF_INET, sin_port=htons(5353), sin_addr=inet_addr("224.0.0.251")}, 16) = 0',
            '9 connect(3, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
        ]
    )
    flagged = outside_the_house(reaches(trace))
    assert [(reach.address, reach.port) for reach in flagged] == [("10.255.255.53", 53), ("2600:1f18::1", 443)]


async def test_a_whole_run_stays_in_the_house(data_dir: Path, tmp_path: Path) -> None:
    strace = shutil.which("strace")
    assert strace, "strace is missing: ./run.sh test installs it (Debian's strace package)"
    trace_file = tmp_path / "network.trace"
    server = start_server(
        ["--data-dir", str(data_dir), "--zeroconf"],
        tmp_path,
        wrapper=(strace, *TRACED, "-o", str(trace_file)),
        env={"HF_HUB_OFFLINE": "0"},  # the tests' own offline switch off: the server must keep itself local
    )
    try:
        await use_every_frontend(server)
    finally:
        code = stop_traced(server)
    assert code == 0, server.log
    assert_clean_log(server.log)
    found = reaches(trace_file.read_text())
    assert any(reach.address.startswith("127.") for reach in found), "the trace saw none of the clients"
    leaks = outside_the_house(found)
    assert not leaks, "\n".join(reach.line for reach in leaks)


def stop_traced(server: Server) -> int:
    """SIGTERM to the server itself, strace's child; strace exits with its exit code."""
    pid = server.process.pid
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        os.kill(int(child), signal.SIGTERM)
    try:
        return server.process.wait(30)
    finally:
        server.stop()  # whatever is left


async def use_every_frontend(server: Server) -> None:
    """Speech in and out on Wyoming (both forms), the OpenAI API, Willow's API and WebRTC."""
    path, text = corpus()[0]
    async with server.client() as client:
        await client.write_event(Describe().event())
        await read_until(client, "info")
        heard = await transcribe(client, load_audio(path))
        assert wer([text], [heard.data["text"]]) < 0.2, heard.data
        assert (await synthesize(client, "Turned on the light")).pcm.seconds > 0.3
        pieces = ["The door is ", "locked"]
        streamed = [SynthesizeStart(), *map(SynthesizeChunk, pieces), Synthesize("".join(pieces)), SynthesizeStop()]
        for event in streamed:
            await client.write_event(event.event())
        await read_until(client, "synthesize-stopped")

    api = openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    with path.open("rb") as file:
        assert (await api.audio.transcriptions.create(file=file, model="whisper-1")).text
    assert (await api.audio.speech.create(model="tts-1", voice="alloy", input="Done")).content
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:
        body = wav_bytes(load_audio(path))
        willow = await http.post("/api/willow", content=body, headers={"x-audio-codec": "wav"})
        assert willow.status_code == 200 and willow.json()["text"], willow.text
        assert (await http.get("/api/tts", params={"text": "OK"})).status_code == 200
        assert (await http.get("/")).status_code == 200

    rtc = Client(f"{server.http_url}/api/rtc/asr")
    await rtc.connect()
    try:
        said = await rtc.utterance(speech(str(CORPUS / path.name)), trailing_silence=0.3)
        assert said.infer["type"] == "infer", said.messages
    finally:
        await rtc.close()
    await asyncio.sleep(1.0)  # a second in which anything started in the background may still reach out
