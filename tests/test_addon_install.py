"""The add-on installed as the Supervisor builds it: from the folder `./run.sh addon` makes of this checkout, by
the steps of addon/Dockerfile, on Python 3.13 (the base image is Debian trixie, whose python3 is 3.13).

What differs from the image, and why it does not matter here: trixie's python3 package is Python 3.13 built
from trixie's own source package (tests/python313.sh, as the Home Assistant suites use), the first RUN's other
Debian packages are this machine's, the image's absolute paths are folders under tmp, and pip reads the
dependencies from a wheelhouse (PIP_NO_INDEX, PIP_FIND_LINKS) instead of PyPI, as a test may not download.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import CORPUS, ROOT, instructions, load_audio, offline_pip, start_server, transcribe, wer
from wyoming.info import Describe

from wyoming_wis.catalog import TURN_IN_WHEEL, TURN_WHEEL

ADDON = ROOT / "addon"
CONTEXT = "/tmp/wyoming-wis"  # where the Dockerfile copies the add-on folder
PREFIX = "/opt/wyoming-wis"  # the venv it installs into


def dockerfile() -> list[tuple[str, str]]:
    """The add-on Dockerfile's instructions, as (INSTRUCTION, arguments)."""
    steps = [line.split(maxsplit=1) for line in instructions(ADDON / "Dockerfile").splitlines() if line.strip()]
    return [(step[0], step[1] if len(step) > 1 else "") for step in steps]


def build_args() -> dict[str, str]:
    """The build arguments the Supervisor passes: build.yaml's `args`."""
    return {key: str(value) for key, value in yaml.safe_load((ADDON / "build.yaml").read_text())["args"].items()}


def python313_env(tmp: Path) -> dict[str, str]:
    """An environment whose python3 is Python 3.13 and whose pip installs from its wheelhouse only."""
    python, wheelhouse = os.environ.get("WIS_PYTHON313"), os.environ.get("WIS_WHEELHOUSE_313")
    assert python and wheelhouse, "run this through ./run.sh test, which builds Python 3.13 and its wheelhouse"
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to(python)
    return offline_pip(Path(wheelhouse)) | {"PATH": f"{bin_dir}:/usr/bin:/bin"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv the add-on's install step made; the steps run as the Dockerfile gives them, paths moved to tmp."""
    tmp = tmp_path_factory.mktemp("addon")
    env = python313_env(tmp)
    folder = tmp / "addons" / "wyoming_wis"
    subprocess.run([ROOT / "run.sh", "addon", folder], cwd=ROOT, env=env, check=True, timeout=300)
    context, prefix = tmp / "context", tmp / "opt"
    steps = dockerfile()
    assert ("COPY", f". {CONTEXT}/") in steps  # the whole folder: dist/ with it
    shutil.copytree(folder, context)
    (install,) = [arguments for instruction, arguments in steps if instruction == "RUN" and "install.sh" in arguments]
    command = install.replace(CONTEXT, str(context)).replace(PREFIX, str(prefix))
    subprocess.run(["bash", "-o", "pipefail", "-c", command], env=env | build_args(), check=True, timeout=900)
    return prefix


def test_the_addon_installs_this_checkouts_wheel_on_python_3_13(installed: Path) -> None:
    python = installed / "bin" / "python"
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
    assert version.stdout.strip() == "(3, 13)"
    # pipecat-ai is there for the turn model's file alone, without its dependencies (ARCHITECTURE.md): pip check
    # may find its requirements unmet (missing, or a protobuf too new for it), and nothing else amiss
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    pipecat = TURN_WHEEL.replace("==", " ") + " "
    assert [line for line in check.stdout.splitlines() if not line.startswith(pipecat)] == [], check.stdout
    turn = "import tempfile, wyoming_wis.catalog as c; print(c.Catalog([tempfile.mkdtemp()]).turn_model('auto'))"
    found = subprocess.run([python, "-c", turn], capture_output=True, text=True, check=True, cwd=installed)
    assert "pipecat-ai" in found.stdout and f"/site-packages/{TURN_IN_WHEEL}" in found.stdout, found.stdout
    found = subprocess.run(
        [python, "-c", "from importlib.metadata import distribution as d; w = d('wyoming-wis');"
         "print(w.version); print(w.read_text('direct_url.json'))"],
        capture_output=True, text=True, check=True, cwd=installed,
    )  # fmt: skip
    version, direct_url = found.stdout.split("\n", 1)
    assert version == build_args()["WIS_VERSION"]
    # installed from the wheel in the add-on folder, not from an index
    assert json.loads(direct_url)["url"].endswith(f"/dist/wyoming_wis-{version}-py3-none-any.whl")


async def test_the_installed_addon_serves_and_is_healthy(installed: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": "", "PATH": f"{installed / 'bin'}:/usr/bin:/bin"}
    program = str(installed / "bin" / "wyoming-wis")
    server = start_server(["--data-dir", str(tmp_path / "config")], tmp_path, env=env, executable=program, launcher=())
    try:
        async with server.client() as client:
            await client.write_event(Describe().event())
            info = await client.read_event()
        asr, tts = info.data["asr"][0], info.data["tts"][0]
        assert "base" in [model["name"] for model in asr["models"]]
        assert "en_US-joe-medium" in [voice["name"] for voice in tts["voices"]]
        clip = sorted(CORPUS.glob("*.flac"))[0]
        async with server.client() as client:
            heard = (await transcribe(client, load_audio(clip))).data["text"]
        assert wer([clip.with_suffix(".txt").read_text()], [heard]) < 0.2
        # the image's HEALTHCHECK, with the image's PATH: `python3` is the venv's
        health = subprocess.run(
            ["python3", "-m", "wyoming_wis.healthcheck"],
            env=env | {"WIS_URI": f"tcp://127.0.0.1:{server.port}"}, cwd=tmp_path, timeout=30,
        )  # fmt: skip
        assert health.returncode == 0
    finally:
        assert server.stop() == 0


def test_a_folder_without_this_checkouts_wheel_says_how_to_install(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    install = [ADDON / "install.sh", dist, build_args()["WIS_VERSION"], tmp_path / "venv"]
    missing = subprocess.run(install, capture_output=True, text=True)
    assert missing.returncode == 1 and "./run.sh addon" in missing.stderr
    wheel = dist / f"wyoming_wis-{build_args()['WIS_VERSION']}-py3-none-any.whl"
    wheel.write_bytes(b"not the wheel the checksum names")
    (dist / "SHA256SUMS").write_text(f"{'0' * 64}  {wheel.name}\n")
    tampered = subprocess.run(install, capture_output=True, text=True)
    assert tampered.returncode != 0 and "FAILED" in tampered.stdout + tampered.stderr
    assert not (tmp_path / "venv").exists()
