"""HTTP limits: models still loading, an upload over --max-upload-mb, and a full queue, in OpenAI's envelope."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from helpers import CORPUS, Server, start_server, wait_ready

WHILE_LOADING: list[httpx.Response] = []  # what the small server answered before its models were loaded


@pytest.fixture(scope="module")
def small(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One Whisper worker and no queue, uploads of at most 1 MB; asked for its health from the moment it starts."""
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--asr-workers", "1", "--queue-size", "0"]
    running = start_server([*args, "--max-upload-mb", "1"], tmp_path_factory.mktemp("small"), wait=False)
    deadline = time.monotonic() + 120
    while not WHILE_LOADING or WHILE_LOADING[-1].status_code != 200:
        assert time.monotonic() < deadline and running.process.poll() is None, running.log
        try:
            WHILE_LOADING.append(httpx.get(running.http_url + "/health"))
        except httpx.TransportError:  # not listening yet
            time.sleep(0.05)
    wait_ready(running)
    yield running
    assert running.stop() == 0, running.log


def test_503_with_retry_after_while_the_models_load(small: Server) -> None:
    loading = [response for response in WHILE_LOADING if response.status_code != 200]
    assert loading, "the HTTP port opened only after the models were loaded"
    for response in loading:
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "loading"
    assert WHILE_LOADING[-1].json()["asr"]["tiny.en"]["state"] == "loaded"


def test_an_upload_over_the_limit_is_413(small: Server) -> None:
    client = openai.OpenAI(base_url=small.http_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.transcriptions.create(file=("big.wav", bytes(1_200_000)), model="whisper-1")
    assert caught.value.status_code == 413
    assert caught.value.response.json()["error"]["param"] == "file"
    assert httpx.get(small.http_url + "/health").status_code == 200  # and the server carries on


async def test_a_full_queue_is_429_with_retry_after(small: Server) -> None:
    client = openai.AsyncOpenAI(base_url=small.http_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    audio = (CORPUS / "LJ001-0001.flac").read_bytes()

    async def one() -> object:
        try:
            return await client.audio.transcriptions.create(file=("a.flac", audio), model="tiny.en")
        except openai.APIStatusError as err:
            return err

    results = await asyncio.gather(*(one() for _ in range(4)))
    refused = [r for r in results if isinstance(r, openai.APIStatusError)]
    assert refused and len(refused) < len(results), results
    for err in refused:
        assert err.status_code == 429 and err.response.headers["retry-after"] == "1"
        assert err.response.json()["error"]["code"] == "busy"
    later = await client.audio.transcriptions.create(file=("a.flac", audio), model="tiny.en")
    assert "printing" in later.text.lower()
