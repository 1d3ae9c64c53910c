"""The pages in a real browser: the console (GET /), press to talk (GET /rtc) and realtime transcription
(GET /realtime), against real servers.

Debian's chromium, driven by Playwright (no browser download: `executable_path`), hears a corpus
recording as its microphone (`--use-file-for-fake-audio-capture`). Every request a page makes must go
to the server itself. Screenshots go to each test's tmp_path. The console needs nothing of the
WebRTC backend; the press-to-talk round trip runs where the tree has `POST /api/rtc/asr`.
"""

from __future__ import annotations

import base64
import json
import math
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from helpers import (
    CORPUS,
    Pcm,
    Server,
    assert_stops_cleanly,
    load_audio,
    normalise,
    silence,
    start_server,
    wav_bytes,
    wer,
)
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, Request, WebSocket, sync_playwright
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"  # ./run.sh test installs Debian's
SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
UPLOADED = CORPUS / "LJ001-0006.flac"  # 5.7 s
UPLOADED_TEXT = (CORPUS / "LJ001-0006.txt").read_text().strip()
SECOND = CORPUS / "LJ001-0002.flac"  # 1.9 s
SECOND_TEXT = (SECOND.with_suffix(".txt")).read_text().strip()
LEAD_SECONDS = 3.0  # silence before the speech: the page connects while the fake microphone plays it
GAP_SECONDS = 4.0  # between the two sentences: the first one's text comes back
TAIL_SECONDS = 30.0  # silence after them: Chromium loops the file, and the test is over long before it repeats
KEY = "sk-pages-7e1b44"
TIMEOUT_MS = 30_000


def microphone_wav(path: Path) -> Path:
    """What Chromium's fake microphone plays (48 kHz mono): silence, a sentence, silence, a short one, silence."""
    first, second = load_audio(SPOKEN, rate=48000), load_audio(SECOND, rate=48000)
    pause = silence(GAP_SECONDS, 48000).audio
    audio = silence(LEAD_SECONDS, 48000).audio + first.audio + pause + second.audio + silence(TAIL_SECONDS, 48000).audio
    path.write_bytes(wav_bytes(Pcm(audio, 48000, 2, 1)))
    return path


# When each sentence starts and ends, in seconds from the start of the file.
SPOKEN_AT = (LEAD_SECONDS, LEAD_SECONDS + load_audio(SPOKEN).seconds)
SECOND_AT = (SPOKEN_AT[1] + GAP_SECONDS, SPOKEN_AT[1] + GAP_SECONDS + load_audio(SECOND).seconds)


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


@dataclass
class Watched:
    """What the pages of a browser context did: every URL they requested, and anything that went wrong."""

    origin: str
    urls: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))

    def foreign(self) -> list[str]:
        """URLs not served by the origin itself (a blob: URL made by the page counts as its own)."""
        outside = []
        for url in self.urls:
            parts = urlsplit(url[len("blob:") :] if url.startswith("blob:") else url)
            if f"{parts.scheme}://{parts.netloc}" != self.origin:
                outside.append(url)
        return outside

    def check(self) -> None:
        assert self.urls, "no request seen"
        assert not self.foreign(), f"requests outside the server: {self.foreign()}"
        assert not self.page_errors, f"uncaught errors in the page: {self.page_errors}"
        # The server's error answers are logged as "Failed to load resource"; anything else is the page's fault.
        unexpected = [text for text in self.console_errors if not text.startswith("Failed to load resource")]
        assert not unexpected, f"console errors: {unexpected}"


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    assert shutil.which(CHROMIUM), "this test needs Debian's chromium, which ./run.sh test installs"
    with sync_playwright() as running:
        yield running


def chromium(playwright: Playwright, microphone: Path) -> Browser:
    """A headless chromium whose microphone plays `microphone` (a WAV, over and over)."""
    return playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=[
            "--no-sandbox",
            "--use-fake-ui-for-media-stream",
            "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={microphone}",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # nothing else even resolves
        ],
    )


@pytest.fixture(scope="module")
def browser(playwright: Playwright, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless chromium for the module, its microphone playing the corpus recording."""
    launched = chromium(playwright, microphone_wav(tmp_path_factory.mktemp("microphone") / "microphone.wav"))
    yield launched
    launched.close()


Browsing = tuple[BrowserContext, Watched]


@contextmanager
def browsing(browser: Browser, server: Server) -> Iterator[Browsing]:
    """A fresh profile (no stored key) whose every request is recorded; checked at the end."""
    made = browser.new_context(base_url=server.http_url, viewport={"width": 1000, "height": 1400})
    made.set_default_timeout(TIMEOUT_MS)
    watched = Watched(server.http_url)
    made.on("request", lambda request: watched.urls.append(request.url))
    made.on("page", watched.watch)
    yield made, watched
    made.close()
    watched.check()


@pytest.fixture
def context(browser: Browser, server: Server) -> Iterator[Browsing]:
    with browsing(browser, server) as made:
        yield made


def open_page(context: Browsing, path: str) -> Page:
    made, _ = context
    page = made.new_page()
    page.goto(path)
    page.wait_for_selector("body[data-loaded]")
    return page


def rows(page: Page, table: str) -> dict[str, list[str]]:
    """A table's body: each row's name (its data-name or data-voice, else its first cell) -> its cells."""
    keyed = page.eval_on_selector_all(
        f"#{table} tbody tr",
        """rows => rows.map(row => {
            const cells = [...row.cells].map(cell => cell.textContent.trim());
            return [row.dataset.name || row.dataset.voice || cells[0], cells];
        })""",
    )
    return dict(keyed)


def shown_duration(seconds: float) -> str:
    """As the console shows a duration."""
    if seconds < 90:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


# -- the console --------------------------------------------------------------------


def test_the_pages_and_their_files_are_served_from_the_package_and_open(server: Server) -> None:
    titles = {"/": "wyoming-wis console", "/rtc": "wyoming-wis: press to talk"}
    titles["/realtime"] = "wyoming-wis: realtime transcription"
    for path, title in titles.items():
        page = httpx.get(server.http_url + path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), path
        assert f"<title>{title}</title>" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        for url in re.findall(r'(?:src|href)="([^"]+)"', page.text):
            assert not re.match(r"^([a-z]+:)?//", url), f"{url} in {path} is not served by this server"
        for asset in re.findall(r'"(static/[^"]+)"', page.text):
            answer = httpx.get(f"{server.http_url}/{asset}")
            assert answer.status_code == 200 and len(answer.content) > 200, asset
    for name in ("console.js", "realtime-worklet.js"):  # a module (and a worklet's) must have a JS type
        script = httpx.get(server.http_url + "/static/" + name)
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript"), name
    for name in ("nope.js", "..%2Fpages.py", "index.html"):
        missing = httpx.get(server.http_url + "/static/" + name)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found", name


def test_the_console_shows_models_voices_status_and_metrics(context: Browsing, server: Server, tmp_path: Path) -> None:
    with (CORPUS / "LJ001-0002.flac").open("rb") as file:  # some audio transcribed, for the numbers to show
        httpx.post(server.http_url + "/v1/audio/transcriptions", files={"file": file}, timeout=60).raise_for_status()
    page = open_page(context, "/")
    asr = rows(page, "asr-models")
    assert set(asr) == {"base", "tiny.en"} and all(row[1] == "loaded" for row in asr.values()), asr
    voices = rows(page, "voices")
    assert "en_US-joe-medium" in voices and voices["en_US-joe-medium"][1] == "piper", voices
    assert "en_US" in voices["en_US-joe-medium"][2]
    # the Hugging Face Hub's voices are listed too, and not offered to speak with: downloads are off
    assert voices["de_DE-thorsten-medium"][1] == "piper (not installed: downloads are off)", voices
    installed = [name for name, row in voices.items() if row[1] == "piper"]
    assert page.locator("#health-state").inner_text() == "Serving."
    numbers = "items => items.map(item => [item.dataset.metric, item.lastChild.textContent])"
    shown = dict(page.eval_on_selector_all("[data-metric]", numbers))
    # The page read the Prometheus text as Prometheus's own parser does (nothing was transcribed or spoken since).
    samples = [
        sample
        for family in text_string_to_metric_families(httpx.get(server.http_url + "/metrics").text)
        for sample in family.samples
    ]
    transcribed = sum(s.value for s in samples if s.name == "wis_asr_audio_seconds_total")
    cache = {s.labels["result"]: s.value for s in samples if s.name == "wis_tts_cache_phrases_total"}
    looked = int(cache["hit"] + cache["miss"])
    assert transcribed > 0 and shown["asr-seconds"] == shown_duration(transcribed), (shown, transcribed)
    percent = math.floor(100 * cache["hit"] / looked + 0.5) if looked else 0
    assert shown["cache-hits"] == (f"{int(cache['hit'])} of {looked} ({percent} %)" if looked else "0"), shown
    assert int(shown["requests"]) > 0 and int(shown["errors"]) < int(shown["requests"])
    assert re.fullmatch(r"[1-9]\d* MB", shown["memory"]), shown
    assert page.eval_on_selector_all("#speak-voice option", "options => options.map(o => o.value)") == installed
    links = page.eval_on_selector_all("a", "links => links.map(link => link.href)")
    assert {f"{server.http_url}/{path}" for path in ("api/docs", "rtc", "realtime")} <= set(links)
    page.screenshot(path=tmp_path / "console.png", full_page=True)


def test_the_api_docs_work_under_their_content_security_policy(context: Browsing) -> None:
    """Swagger UI (/api/docs) shows the operations and "Try it out" gets an answer. Chromium logs anything the
    policy refuses (an inline script, a style, an image) as a console error, which the context's check fails on."""
    made, _ = context
    page = made.new_page()
    page.goto("/api/docs")
    page.click('.opblock-summary-path[data-path="/health"]')
    page.click("button.try-out__btn")
    page.click("button.execute")
    status = page.wait_for_selector(".live-responses-table .response .response-col_status")
    assert status.inner_text().strip() == "200"


def test_the_console_speaks_typed_text_in_a_chosen_voice(context: Browsing, tmp_path: Path) -> None:
    page = open_page(context, "/")
    page.fill("#speak-text", "The kitchen lights are on.")
    page.select_option("#speak-voice", "en_US-joe-medium")
    assert page.input_value("#speak-format") == "mp3"
    page.click("#speak-button")
    page.wait_for_selector("#speak-audio[data-duration]")
    state = page.locator("#speak-state")
    assert state.get_attribute("data-kind") == "ok", state.inner_text()
    assert "KB of mp3" in state.inner_text()
    # The element decoded it and plays it: a second or two of speech, and its clock runs.
    played = page.wait_for_function(
        """() => {
            const audio = document.getElementById("speak-audio");
            return audio.currentTime > 0.2 && !audio.error && {duration: audio.duration, state: audio.readyState};
        }"""
    ).json_value()
    assert 1.0 < played["duration"] < 6.0 and played["state"] >= 2, played
    page.screenshot(path=tmp_path / "speak.png", full_page=True)


def test_the_console_transcribes_an_uploaded_file(context: Browsing, tmp_path: Path) -> None:
    page = open_page(context, "/")
    page.select_option("#transcribe-model", "base")
    page.set_input_files("#transcribe-file", UPLOADED)
    page.click("#transcribe-button")
    page.wait_for_selector("#transcript:not([hidden])", timeout=60_000)
    text = page.locator("#transcript-text").inner_text()
    assert wer([UPLOADED_TEXT], [text]) < 0.15, text
    segments = rows(page, "segments")
    assert segments and wer([UPLOADED_TEXT], [" ".join(row[2] for row in segments.values())]) < 0.15, segments
    assert "language en" in page.locator("#transcript-meta").inner_text()
    page.screenshot(path=tmp_path / "transcribe.png", full_page=True)


def test_the_console_shows_why_a_voice_cannot_be_cloned(context: Browsing, tmp_path: Path) -> None:
    page = open_page(context, "/")
    page.fill("#clone-name", "my-voice")
    page.set_input_files("#clone-file", UPLOADED)
    page.click("#clone-button")
    state = page.locator('#clone-state[data-kind="error"]')
    state.wait_for()
    text = state.inner_text()
    assert text.startswith("Could not clone the voice: Voice cloning needs XTTS") and "--xtts" in text, text
    assert "HTTP 400" in text, text
    assert "my-voice" not in rows(page, "voices")
    page.screenshot(path=tmp_path / "clone.png", full_page=True)


@pytest.fixture(scope="module")
def keyed(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that wants an API key (tiny.en only, to start quickly)."""
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en"]
    running = start_server(args, tmp_path_factory.mktemp("keyed"), env={"WIS_API_KEY": KEY})
    yield running
    assert_stops_cleanly(running)


def test_the_console_asks_for_the_key_and_sends_it(browser: Browser, keyed: Server, tmp_path: Path) -> None:
    made = browser.new_context(base_url=keyed.http_url)
    made.set_default_timeout(TIMEOUT_MS)
    watched = Watched(keyed.http_url)
    sent: dict[str, str | None] = {}

    def record(request: Request) -> None:
        watched.urls.append(request.url)
        sent[urlsplit(request.url).path] = request.headers.get("authorization")

    made.on("request", record)
    try:
        page = made.new_page()
        watched.watch(page)
        page.goto("/")  # the page itself needs no key
        page.wait_for_selector("body[data-loaded]")
        assert page.locator("#key").get_attribute("open") is not None  # the 401 opened the key form
        assert "This server needs an API key" in page.locator("#key-state").inner_text()
        assert page.locator("#health-state").inner_text() == "Serving."  # /health is open
        assert rows(page, "voices") == {}
        page.fill("#key-input", KEY)
        page.click("#key-form button[type=submit]")
        page.wait_for_selector('#voices tbody tr[data-voice="en_US-joe-medium"]')
        assert sent["/v1/audio/voices"] == f"Bearer {KEY}" and sent["/metrics"] == f"Bearer {KEY}"
        page.reload()  # kept in the browser
        page.wait_for_selector('#voices tbody tr[data-voice="en_US-joe-medium"]')
        page.screenshot(path=tmp_path / "keyed.png", full_page=True)
    finally:
        made.close()
    watched.check()


# -- press to talk ------------------------------------------------------------------


def test_the_talk_page_offers_the_microphone_and_a_data_channel(context: Browsing, tmp_path: Path) -> None:
    """The signalling half, whether or not the backend is in this tree: a complete (non-trickle) offer, the key."""
    made, _ = context
    page = made.new_page()
    page.goto("/rtc")
    page.wait_for_selector("body[data-loaded]")
    page.evaluate("key => localStorage.setItem('wyoming-wis.api-key', key)", KEY)  # the shared server ignores it
    page.reload()
    page.wait_for_selector("body[data-loaded]")
    assert page.eval_on_selector_all("#model option", "options => options.map(o => o.value)") == ["base", "tiny.en"]
    assert "en" in page.eval_on_selector_all("#language option", "options => options.map(o => o.value)")
    with page.expect_request(lambda request: request.url.endswith("/api/rtc/asr")) as asked:
        page.click("#talk")
    request = asked.value
    assert request.method == "POST" and request.headers["authorization"] == f"Bearer {KEY}"
    offer = json.loads(request.post_data or "{}")
    assert offer["type"] == "offer"
    sdp = offer["sdp"]
    assert re.search(r"^m=audio \d+ UDP/TLS/RTP/SAVPF ", sdp, re.M) and "opus/48000" in sdp
    assert re.search(r"^m=application \d+ UDP/DTLS/SCTP webrtc-datachannel\r?$", sdp, re.M)
    assert "a=candidate:" in sdp  # gathered before sending: the server gets no trickled candidates
    page.wait_for_selector('#connection[data-state="connected"]')
    page.screenshot(path=tmp_path / "offer.png", full_page=True)


def test_press_to_talk_shows_partial_then_final_text(context: Browsing, tmp_path: Path) -> None:
    """Two utterances on one connection: a click to start and one to stop, then Space held for the second."""
    page = open_page(context, "/rtc")
    page.select_option("#model", "base")
    page.select_option("#language", "en")
    pressed = time.monotonic()  # the fake microphone starts playing the file just after: getUserMedia
    page.click("#talk")  # a click toggles: talking until the next one
    page.wait_for_selector('body[data-rtc="listening"]')
    assert time.monotonic() - pressed < LEAD_SECONDS, "connected too late: the start of the speech was lost"
    sleep_until(pressed + SPOKEN_AT[1] + 1.0)
    page.screenshot(path=tmp_path / "talking.png", full_page=True)
    page.click("#talk")
    final = page.locator("#utterances li[data-final]")
    final.wait_for()
    text = final.get_attribute("data-final") or ""
    assert wer([SPOKEN_TEXT], [text]) < 0.15, text
    assert int(final.get_attribute("data-partials") or 0) >= 1  # partial text was shown before the final
    shown_partial = normalise(final.get_attribute("data-partial") or "").split()
    heard = set(normalise(SPOKEN_TEXT).split())
    assert shown_partial and sum(word in heard for word in shown_partial) * 2 >= len(shown_partial), shown_partial
    assert 0 < int(final.get_attribute("data-latency") or 0) < 10_000
    timing = final.locator(".timing").inner_text()
    assert re.search(r"latency \d+ ms · \d+\.\d s of audio", timing), timing
    assert page.get_attribute("body", "data-rtc") == "idle"
    assert "partial: " in page.locator("#log").inner_text()
    # Between utterances the microphone is off the connection (replaceTrack(null)), and the connection stays.
    page.wait_for_function("() => document.getElementById('log').textContent.includes('Microphone detached')")
    assert page.get_attribute("#connection", "data-state") == "connected"
    page.screenshot(path=tmp_path / "rtc.png", full_page=True)

    # The second sentence, held down with Space: the microphone is attached again, on the same connection;
    # and its text is spoken back (over POST /v1/audio/speech).
    page.check("#speak-back")
    page.locator("#talk").focus()
    sleep_until(pressed + SECOND_AT[0] - 1.0)
    page.keyboard.down("Space")
    page.wait_for_selector('body[data-rtc="listening"]')
    sleep_until(pressed + SECOND_AT[1] + 1.0)
    page.keyboard.up("Space")
    second = page.locator("#utterances li:first-child[data-final]")
    second.wait_for()
    assert page.locator("#utterances li").count() == 2
    assert wer([SECOND_TEXT], [second.get_attribute("data-final") or ""]) < 0.5, second.get_attribute("data-final")
    assert page.get_attribute("#connection", "data-state") == "connected"
    assert page.locator("#log").inner_text().count("Connected") == 1  # one connection for both
    page.wait_for_function(
        "() => { const audio = document.getElementById('back-audio'); return audio.currentTime > 0.2 && !audio.error; }"
    )


def test_hands_free_shows_each_sentence_when_the_speaker_pauses(context: Browsing, tmp_path: Path) -> None:
    """One click, no button per turn: each sentence's text comes when the speaker pauses; a click on Stop ends it."""
    page = open_page(context, "/rtc")
    page.select_option("#model", "base")
    page.select_option("#language", "en")
    page.check("#hands-free")
    assert page.locator("#talk").inner_text() == "Start hands-free"
    pressed = time.monotonic()
    page.click("#talk")
    page.wait_for_selector('body[data-rtc="listening"]')
    assert time.monotonic() - pressed < LEAD_SECONDS, "connected too late: the start of the speech was lost"
    assert page.is_disabled("#hands-free")
    second = "li => /modern/i.test(li.dataset.final)"  # the second sentence's text, with no click since the first
    page.wait_for_function(f"() => [...document.querySelectorAll('#utterances li[data-final]')].some({second})")
    assert time.monotonic() - pressed < SECOND_AT[1] + 10, "the text came long after the speaker paused"
    assert page.get_attribute("body", "data-rtc") == "listening"  # and the next turn is listened to already
    finals = page.locator("#utterances li[data-final]")
    shown = [finals.nth(index) for index in reversed(range(finals.count()))]  # the list is newest first
    heard = " ".join(final.get_attribute("data-final") or "" for final in shown)
    assert len(shown) >= 2 and wer([f"{SPOKEN_TEXT} {SECOND_TEXT}"], [heard]) < 0.15, heard
    for final in shown:
        assert final.get_attribute("data-ended-by") in ("command", "complete", "silence"), final.inner_text()
        assert 0 < int(final.get_attribute("data-latency") or 0) < 10_000
        assert "from the last word" in final.locator(".timing").inner_text()
    page.screenshot(path=tmp_path / "hands-free.png", full_page=True)
    page.click("#talk")
    page.wait_for_selector('body[data-rtc="idle"]')
    assert page.locator("#utterances li").count() == len(shown)  # the turn stopped with nothing said is not listed
    assert page.is_enabled("#hands-free") and page.locator("#talk").inner_text() == "Start hands-free"
    assert "turn ended: " in page.locator("#log").inner_text()


def test_the_talk_page_shows_each_wake_word_as_it_is_heard(
    playwright: Playwright, server: Server, tmp_path: Path
) -> None:
    """A microphone that says "Okay Nabu" every few seconds: the page lists the wake words, listens for the one
    chosen over the same WebRTC connection as talking, and shows each detection as it comes."""
    speech = httpx.post(server.http_url + "/v1/audio/speech", json={"input": "Okay Nabu.", "response_format": "wav"})
    phrase = load_audio(speech.raise_for_status().content, rate=48000)
    microphone = tmp_path / "okay-nabu.wav"
    microphone.write_bytes(
        wav_bytes(Pcm(silence(2.0, 48000).audio + phrase.audio + silence(2.0, 48000).audio, 48000, 2, 1))
    )
    launched = chromium(playwright, microphone)
    try:
        with browsing(launched, server) as context:
            page = open_page(context, "/rtc")
            offered = page.eval_on_selector_all("#wake-word option", "options => options.map(o => o.value)")
            assert {"okay_nabu", "okay_nabu_oww", "hey_jarvis", "hey_rhasspy_oww"} <= set(offered), offered
            assert page.input_value("#wake-word") == "okay_nabu"
            page.click("#wake")
            heard = page.locator('#detections li[data-name="okay_nabu"]')
            heard.first.wait_for()
            assert heard.first.locator(".text").inner_text() == "Okay Nabu (microWakeWord)"
            assert re.fullmatch(r"at \d+\.\d\d s", heard.first.locator(".timing").inner_text())
            assert page.get_attribute("#wake", "aria-pressed") == "true"
            page.screenshot(path=tmp_path / "wake.png", full_page=True)
            page.click("#wake")
            assert page.get_attribute("#wake", "aria-pressed") == "false"
            page.wait_for_function("() => document.getElementById('log').textContent.includes('Microphone detached')")
    finally:
        launched.close()


# -- realtime transcription -----------------------------------------------------------

REALTIME_ITEM = "#utterances li[data-item]"


def realtime_events(page: Page, path: str = "/v1/realtime") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Lists that fill with the events the page's next WebSocket to `path` sends and receives (JSON, decoded)."""
    sent: list[dict[str, Any]] = []
    received: list[dict[str, Any]] = []

    def opened(socket: WebSocket) -> None:
        if urlsplit(socket.url).path != path:
            return
        socket.on("framesent", lambda payload: sent.append(json.loads(payload)))
        socket.on("framereceived", lambda payload: received.append(json.loads(payload)))

    page.on("websocket", opened)
    return sent, received


def test_the_realtime_page_shows_each_turn_as_it_is_spoken(context: Browsing, tmp_path: Path) -> None:
    """Hands-free over OpenAI's Realtime API: one click opens the WebSocket, the server ends each turn when the
    speaker pauses, its deltas show greyed and its completed transcript replaces them; Stop closes the socket."""
    page = open_page(context, "/realtime")
    assert page.eval_on_selector_all("#model option", "options => options.map(o => o.value)") == ["base", "tiny.en"]
    page.select_option("#model", "base")
    page.select_option("#language", "en")
    assert page.input_value("#turn-detection") == "server_vad"
    sent, received = realtime_events(page)
    pressed = time.monotonic()
    with page.expect_websocket() as opened:
        page.click("#listen")
    socket = opened.value
    url = urlsplit(socket.url)
    assert (url.scheme, url.path, url.query) == ("ws", "/v1/realtime", "intent=transcription")
    page.wait_for_selector('body[data-realtime="listening"]')
    assert time.monotonic() - pressed < LEAD_SECONDS, "listening too late: the start of the speech was lost"
    assert page.is_disabled("#model") and page.get_attribute("#connection", "data-state") == "connected"
    second = "li => /modern/i.test(li.dataset.final)"  # the second sentence's text, with no click since the first
    page.wait_for_function(f"() => [...document.querySelectorAll('{REALTIME_ITEM}[data-final]')].some({second})")
    assert time.monotonic() - pressed < SECOND_AT[1] + 10, "the text came long after the speaker paused"
    assert page.get_attribute("body", "data-realtime") == "listening"  # and the next turn is listened to already
    finals = page.locator(f"{REALTIME_ITEM}[data-final]")
    shown = [finals.nth(index) for index in reversed(range(finals.count()))]  # the list is newest first
    heard = " ".join(final.get_attribute("data-final") or "" for final in shown)
    assert len(shown) >= 2 and wer([f"{SPOKEN_TEXT} {SECOND_TEXT}"], [heard]) < 0.15, heard
    for final in shown:
        assert final.get_attribute("class") == ""  # no longer greyed
        assert final.locator(".text").inner_text() == final.get_attribute("data-final")
        assert 0 < int(final.get_attribute("data-latency") or 0) < 10_000
        assert "from the end of the turn" in final.locator(".timing").inner_text()
    # The first sentence's words showed while it was spoken, and they were its words.
    first = shown[0]
    assert int(first.get_attribute("data-deltas") or 0) >= 1
    partial = normalise(first.get_attribute("data-partial") or "").split()
    spoken = set(normalise(SPOKEN_TEXT).split())
    assert partial and sum(word in spoken for word in partial) * 2 >= len(partial), partial
    page.screenshot(path=tmp_path / "realtime.png", full_page=True)

    # What went over the socket: a transcription session as the page's choices say, then 20 ms appends.
    update = sent[0]
    assert update["type"] == "session.update", update
    assert update["session"] == {
        "type": "transcription",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "transcription": {"model": "base", "language": "en"},
                "turn_detection": {"type": "server_vad"},
            }
        },
    }
    appends = [event for event in sent if event["type"] == "input_audio_buffer.append"]
    assert len(appends) > 50 and all(len(base64.b64decode(event["audio"])) == 960 for event in appends)  # 24 kHz PCM16
    kinds = [event["type"] for event in received]
    assert kinds[:2] == ["session.created", "session.updated"] and "error" not in kinds, kinds
    completed = [event for event in received if event["type"].endswith("transcription.completed")]
    lines = {final.get_attribute("data-item"): final.get_attribute("data-final") for final in shown}
    assert lines == {
        event["item_id"]: event["transcript"].strip() for event in completed if event["transcript"].strip()
    }

    page.click("#listen")
    page.wait_for_selector('body[data-realtime="idle"]')
    if not socket.is_closed():
        socket.wait_for_event("close")
    assert page.get_attribute("#connection", "data-state") == "closed"
    assert page.locator(f"{REALTIME_ITEM}.live").count() == 0
    assert page.is_enabled("#model") and page.locator("#listen").inner_text() == "Start"
    assert "input_audio_buffer.speech_stopped" in page.locator("#log").inner_text()


def test_the_realtime_page_sends_the_typed_key_as_a_subprotocol(browser: Browser, keyed: Server) -> None:
    """With --api-key, a WebSocket without the key is refused (and the page asks for it); with the key typed in the
    header, the page's socket passes (the key as `openai-insecure-api-key.KEY`) and the session is what was chosen."""
    with browsing(browser, keyed) as (made, watched):
        page = open_page((made, watched), "/realtime")
        assert page.locator("#key").get_attribute("open") is not None  # the models' 401 opened the key form
        page.click("#listen")
        refused = page.locator('#listen-state[data-kind="error"]')
        refused.wait_for()
        assert "This server needs an API key" in refused.inner_text() and "HTTP 401" in refused.inner_text()
        page.wait_for_selector('body[data-realtime="idle"]')
        # Chromium logs the refused handshake: expected here, and only here.
        handshakes = [text for text in watched.console_errors if text.startswith("WebSocket connection to")]
        assert len(handshakes) == 1 and "Authentication failed" in handshakes[0], watched.console_errors
        watched.console_errors.remove(handshakes[0])

        page.fill("#key-input", KEY)
        page.click("#key-form button[type=submit]")
        page.wait_for_function("() => document.querySelectorAll('#model option').length > 0")
        page.select_option("#turn-detection", "semantic_vad:high")
        sent, received = realtime_events(page)
        page.click("#listen")
        page.wait_for_selector('body[data-realtime="listening"]')
        assert [event["type"] for event in received[:2]] == ["session.created", "session.updated"]
        turn_detection = sent[0]["session"]["audio"]["input"]["turn_detection"]
        assert turn_detection == {"type": "semantic_vad", "eagerness": "high"}
        assert received[1]["session"]["audio"]["input"]["turn_detection"]["eagerness"] == "high"
        assert page.locator("#listen-state").is_hidden()
        page.click("#listen")
        page.wait_for_selector('body[data-realtime="idle"]')


def test_stopping_the_realtime_page_mid_sentence_keeps_what_was_said(context: Browsing) -> None:
    """Stop while a turn is spoken: the page commits it, shows its text when it comes, and only then closes."""
    page = open_page(context, "/realtime")
    page.select_option("#model", "base")
    page.select_option("#language", "en")
    sent, _ = realtime_events(page)
    pressed = time.monotonic()
    page.click("#listen")
    page.locator(REALTIME_ITEM).wait_for()  # speech_started
    sleep_until(pressed + SPOKEN_AT[0] + 3.0)  # about half the sentence said
    page.click("#listen")
    final = page.locator(f"{REALTIME_ITEM}[data-final]")
    final.wait_for()
    page.wait_for_selector('body[data-realtime="idle"]')
    assert sent[-1] == {"type": "input_audio_buffer.commit"}  # the microphone's last audio before it
    said = normalise(final.get_attribute("data-final") or "").split()
    spoken = normalise(SPOKEN_TEXT).split()
    assert 2 <= len(said) < len(spoken) and said[:2] == spoken[:2], said
    assert page.locator(REALTIME_ITEM).count() == 1 and "Disconnected" in page.locator("#log").inner_text()
