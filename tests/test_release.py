"""The release: one version everywhere (scripts/version.py), and the workflows against the repository.

The workflows run only on GitHub, so what is checked here is what can be without it: actionlint (with the
venv's shellcheck on every `run:` script), the version script on copies of the real files, and that the names,
architectures and Dockerfiles the release workflow uses are the ones the add-on and the images have.
"""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, load_script
from test_docker import tool

import wyoming_wis

pytestmark = pytest.mark.fast

WORKFLOWS = ROOT / ".github" / "workflows"
OWNER = "${{ github.repository_owner }}"


version = load_script("version")


def workflow(name: str) -> dict:
    """A workflow as GitHub reads it (PyYAML reads the key `on` as True)."""
    loaded = yaml.safe_load((WORKFLOWS / name).read_text())
    loaded["on"] = loaded.pop(True)
    return loaded


def steps_using(job: dict, action: str) -> list[dict]:
    return [step for step in job["steps"] if step.get("uses", "").startswith(action + "@")]


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The files the version script reads and writes, copied into a root of their own."""
    for name in [*version.PLACES, version.CHANGELOG, version.ADDON_CHANGELOG]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


# -- one version -------------------------------------------------------------------------


def test_every_place_has_the_packages_version() -> None:
    assert version.problems() == []
    assert subprocess.run([sys.executable, ROOT / "scripts" / "version.py", "--check"]).returncode == 0


def test_the_script_reads_what_the_files_say() -> None:
    """Its patterns find the values a YAML reader and the installed package see."""
    assert wyoming_wis.__version__ == version.current()  # the installed metadata is pyproject's version
    assert load(ROOT / "addon" / "config.yaml")["version"] == version.read(ROOT, "addon/config.yaml")
    assert load(ROOT / "addon" / "build.yaml")["args"]["WIS_VERSION"] == version.read(ROOT, "addon/build.yaml")


def test_the_addon_changelog_is_the_released_part_of_the_changelog() -> None:
    addon = (ROOT / version.ADDON_CHANGELOG).read_text()
    assert addon == version.changelog(ROOT).render(unreleased=False)
    assert re.search(r"^## \[(\S+)\]", addon, re.M)[1] == version.current()  # the Supervisor shows this one first
    assert "[Unreleased]" not in addon


def test_a_place_that_disagrees_is_named(copy: Path) -> None:
    build = copy / "addon" / "build.yaml"
    build.write_text(build.read_text().replace(f"WIS_VERSION: {version.current()}", "WIS_VERSION: 9.9.9"))
    assert version.problems(copy) == [f"addon/build.yaml has 9.9.9, pyproject.toml {version.current()}"]


def test_cutting_releases_writes_every_place_and_dates_the_changelog(copy: Path) -> None:
    current, day = version.current(), datetime.date(2026, 3, 14)
    log = version.changelog(copy)
    log.section(version.UNRELEASED).body = ""  # the repository's own unreleased entries are not this test's
    (copy / "CHANGELOG.md").write_text(log.render())
    if log.section(current).date == version.UNRELEASED:  # before the first release
        assert version.problems(copy, tag=f"v{current}") == [
            f"CHANGELOG.md's section for {current} is not dated: run scripts/version.py {current}"
        ]
        version.set_version(current, copy, today=day)
    assert version.problems(copy, tag=f"v{current}") == []
    with pytest.raises(version.VersionError, match="nothing under"):
        version.set_version("9.0.0", copy)

    changelog = copy / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace("## [Unreleased]", "## [Unreleased]\n\n### Fixed\n\n- A bug."))
    version.set_version("9.0.0", copy, today=day)
    assert version.problems(copy, tag="v9.0.0") == []
    assert version.problems(copy, tag=f"v{current}") == [f"the tag v{current} is not v9.0.0"]
    assert load(copy / "addon" / "config.yaml")["version"] == "9.0.0"
    assert load(copy / "addon" / "build.yaml")["args"]["WIS_VERSION"] == "9.0.0"
    log = version.changelog(copy)
    assert [(s.name, s.date) for s in log.sections[:2]] == [(version.UNRELEASED, None), ("9.0.0", day.isoformat())]
    assert log.sections[0].body == "" and log.sections[1].body == "### Fixed\n\n- A bug."
    repository = "https://github.com/wyoming-wis/wyoming-wis"
    assert log.links["unreleased"] == f"{repository}/compare/v9.0.0...HEAD"
    assert log.links["9.0.0"] == f"{repository}/compare/v{current}...v9.0.0"
    assert (copy / "addon" / "CHANGELOG.md").read_text() == log.render(unreleased=False)
    with pytest.raises(version.VersionError, match="released on 2026-03-14"):
        version.set_version("9.0.0", copy)
    with pytest.raises(version.VersionError, match="not X.Y.Z"):
        version.set_version("v9.1", copy)


def test_naming_the_addon_images_once(copy: Path) -> None:
    image = "ghcr.io/wyoming-wis/{arch}-addon-wyoming-wis"
    config = copy / "addon" / "config.yaml"
    if "image" not in load(config):
        assert version.name_images(image, copy) is True
    assert load(config)["image"] == image and load(config)["version"] == version.current()
    assert version.name_images(image, copy) is False
    with pytest.raises(version.VersionError, match="already names"):
        version.name_images("ghcr.io/someone-else/{arch}-addon-wyoming-wis", copy)
    with pytest.raises(version.VersionError, match="lower case"):
        version.name_images("ghcr.io/wyoming-wis/amd64-addon-wyoming-wis", copy)


# -- the workflows -------------------------------------------------------------------------


def test_actionlint_is_clean() -> None:
    result = subprocess.run(
        [tool("actionlint"), "-shellcheck", tool("shellcheck"), "-pyflakes=", "-no-color", "-oneline"]
        + sorted(map(str, WORKFLOWS.glob("*.yml"))),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_actionlint_checks_the_scripts_with_shellcheck(tmp_path: Path) -> None:
    """The lint above is a real check: an unknown expression and an unquoted variable in `run:` are refused."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: ls $A ${{ matrix.x }}")
    result = subprocess.run(
        [tool("actionlint"), "-shellcheck", tool("shellcheck"), "-pyflakes=", "-no-color", "-oneline", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "SC2086" in result.stdout and "[expression]" in result.stdout, result.stdout


def test_ci_runs_the_suite_as_a_user_does_on_every_push() -> None:
    ci = workflow("ci.yml")
    assert ci["on"] == {"push": {"branches": ["**"]}, "pull_request": None, "workflow_call": None}
    (job,) = ci["jobs"].values()
    assert job["steps"][-1]["run"] == "bash .ci/run" and "./run.sh test" in (ROOT / ".ci" / "run").read_text()
    assert job["timeout-minutes"] == 90
    assert job["container"]["image"].startswith("debian:")  # run.sh's test tools and Python 3.13 come from Debian
    cached = {step["with"]["path"] for step in steps_using(job, "actions/cache")}
    assert cached == {"~/.cache/wyoming-wis", "~/.cache/pip"}


def test_a_version_tag_releases_after_the_check_and_the_tests() -> None:
    release = workflow("release.yml")
    assert release["on"] == {"push": {"tags": ["v*"]}}
    assert re.fullmatch(r"v[^*]*", f"v{version.current()}")  # the tag that --check --tag asks for matches it
    jobs = release["jobs"]
    assert "scripts/version.py --check --tag" in jobs["check"]["steps"][-1]["run"]
    assert jobs["test"]["uses"] == "./.github/workflows/ci.yml"
    assert set(jobs["build"]["needs"]) == {"check", "test"}
    for name in ("pypi", "image", "addon"):
        assert "build" in jobs[name]["needs"], name
    assert set(jobs["name-images"]["needs"]) >= {"pypi", "image", "addon"}
    assert jobs["pypi"]["permissions"] == {"id-token": "write"} and jobs["pypi"]["environment"]["name"] == "pypi"
    assert steps_using(jobs["pypi"], "pypa/gh-action-pypi-publish")


def test_the_images_are_built_from_dockerfiles_that_exist() -> None:
    jobs = workflow("release.yml")["jobs"]
    for name in ("image", "addon"):
        (build,) = steps_using(jobs[name], "docker/build-push-action")
        context, dockerfile = ROOT / build["with"]["context"], ROOT / build["with"]["file"]
        assert dockerfile.is_file() and dockerfile.resolve().is_relative_to(context.resolve()), name
    dockerfile = (ROOT / "Dockerfile").read_text()
    for variant in jobs["image"]["strategy"]["matrix"]["variant"]:  # --build-arg VARIANT picks a stage
        assert re.search(rf"^FROM \S+ AS base-{variant}$", dockerfile, re.M), variant
    # the Supervisor builds from the add-on folder alone, so the release's wheel is put there first (with its checksum)
    prepare = './run.sh addon addon "dist/wyoming_wis-$VERSION-py3-none-any.whl"'
    assert any(step.get("run", "").strip() == prepare for step in jobs["addon"]["steps"])


def test_the_addon_images_are_the_ones_config_yaml_names_for_each_arch() -> None:
    release = workflow("release.yml")
    config, build = load(ROOT / "addon" / "config.yaml"), load(ROOT / "addon" / "build.yaml")
    owner = re.match(r"https://github\.com/([^/]+)/", config["url"])[1]
    image = release["env"]["ADDON_IMAGE"].replace(OWNER, owner)
    assert image == f"ghcr.io/{owner}/{{arch}}-addon-{config['slug'].replace('_', '-')}"
    if "image" in config:  # written by the release workflow once the first release pushed the images
        assert config["image"] == image
    archs = {entry["arch"]: entry["platform"] for entry in release["jobs"]["addon"]["strategy"]["matrix"]["include"]}
    assert set(archs) == set(config["arch"]) == set(build["build_from"])
    docker_arch = {"amd64": "linux/amd64", "aarch64": "linux/arm64", "armv7": "linux/arm/v7"}
    assert all(docker_arch[arch] == platform for arch, platform in archs.items())
    assert release["env"]["IMAGE"] == f"ghcr.io/{OWNER}/wyoming-wis"
