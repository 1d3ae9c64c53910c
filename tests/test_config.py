"""Settings from flags and WIS_* environment variables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import load_script

from wyoming_wis.config import OPTIONS, Settings, build_parser

pytestmark = pytest.mark.fast

flags_table = load_script("flags_table")
OPTION = {option.dest: option for option in OPTIONS}


def test_defaults_match_the_design() -> None:
    settings = Settings.from_args([], environ={})
    core, http = settings.core, settings.http
    assert settings.wyoming.uri == ["tcp://0.0.0.0:10500"]
    assert core.asr.asr_model == ["base"]
    assert core.tts.voice == ["en_US-joe-medium"]
    assert core.data_dir == [Path("data")]
    assert settings.wyoming.zeroconf is None and core.allow_download is False
    assert core.max_audio_seconds == 600
    assert (http.http_port, http.no_http, http.max_upload_mb) == (19000, False, 25)


def test_flags_repeat_and_override_the_environment() -> None:
    environ = {"WIS_ASR_MODEL": "small, tiny.en", "WIS_BEAM_SIZE": "2", "WIS_DEBUG": "yes", "WIS_URI": "unix:///tmp/s"}
    from_env = Settings.from_args([], environ=environ)
    assert from_env.core.asr.asr_model == ["small", "tiny.en"]
    assert from_env.core.asr.beam_size == 2 and from_env.debug is True and from_env.wyoming.uri == ["unix:///tmp/s"]

    flags = Settings.from_args(
        ["--asr-model", "base", "--asr-model", "tiny.en", "--beam-size", "1", "--uri", "stdio://"], environ=environ
    )
    assert flags.core.asr.asr_model == ["base", "tiny.en"]  # flags replace the environment's list, not extend it
    assert flags.core.asr.beam_size == 1 and flags.wyoming.uri == ["stdio://"]


@pytest.mark.parametrize("flag", ["zeroconf", "xtts"])
@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {}, None),
        (["--FLAG"], {}, ""),
        (["--FLAG", "kitchen"], {}, "kitchen"),
        ([], {"WIS_FLAG": "1"}, ""),
        ([], {"WIS_FLAG": "false"}, None),
        ([], {"WIS_FLAG": "attic"}, "attic"),
    ],
)
def test_flags_with_an_optional_value(flag, argv, environ, expected) -> None:
    argv = [arg.replace("FLAG", flag) for arg in argv]
    environ = {name.replace("FLAG", flag.upper()): value for name, value in environ.items()}
    assert OPTION[flag].of(Settings.from_args(argv, environ=environ)) == expected


def test_xtts_is_off_unless_asked_for_and_defaults_to_the_release() -> None:
    assert Settings.from_args([], environ={}).core.tts.xtts_model is None
    assert Settings.from_args(["--xtts"], environ={}).core.tts.xtts_model == "xtts-v2"
    assert Settings.from_args([], environ={"WIS_XTTS": "coqui/XTTS-v2"}).core.tts.xtts_model == "coqui/XTTS-v2"


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        (["--beam-size", "0"], {}),
        (["--max-audio-seconds", "-1"], {}),
        ([], {"WIS_BEAM_SIZE": "many"}),
        ([], {"WIS_DEBUG": "maybe"}),
        (["--device", "gpu"], {}),
        ([], {"WIS_DEVICE": "cpu:1"}),
        ([], {"WIS_ASR_MODEL": " , "}),
    ],
)
def test_bad_values_are_refused_with_a_message(argv, environ, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_args(argv, environ=environ)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_help_documents_every_flag_and_its_variable() -> None:
    text = build_parser().format_help()
    required = [
        "--uri",
        "--data-dir",
        "--asr-model",
        "--voice",
        "--language",
        "--device",
        "--compute-type",
        "--beam-size",
        "--cpu-threads",
        "--zeroconf",
        "--zeroconf-host",
        "--allow-download",
        "--max-audio-seconds",
        "--max-text-chars",
        "--debug",
    ]
    for flag in required:
        assert flag in text
    for option in OPTIONS:
        assert option.env in text.replace("\n", " ").replace("  ", " ")


def test_readme_documents_every_flag() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for option in OPTIONS:
        assert f"`{option.flag}" in readme and f"`{option.env}`" in readme, option.flag


def test_readme_flags_table_is_generated_from_the_flags() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert flags_table.updated(readme, flags_table.render()) == readme, (
        "README.md's configuration table is out of date: run scripts/flags_table.py"
    )


def test_flags_table_rows(tmp_path: Path) -> None:
    table = flags_table.render()
    assert len(re.findall(r"^\| `--", table, re.MULTILINE)) == len(OPTIONS)  # a row per flag, in tables by group
    assert "| `--uri URI` | `WIS_URI` | tcp://0.0.0.0:10500 |" in table
    assert "| `--xtts [MODEL]` | `WIS_XTTS` | off |" in table and "| `--debug` | `WIS_DEBUG` | off |" in table
    assert "| `--data-dir DIR` | `WIS_DATA_DIR` | ./data |" in table
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{flags_table.BEGIN}\nold\n{flags_table.END}\n\nafter\n")
    flags_table.main([str(readme)])
    assert readme.read_text() == f"# x\n\n{flags_table.BEGIN}\n{table}{flags_table.END}\n\nafter\n"
    with pytest.raises(SystemExit) as exit_info:
        flags_table.main([str(readme), "--check"])
    assert exit_info.value.code == 0


def test_http_security_settings_from_flags_and_the_environment() -> None:
    environ = {"WIS_API_KEY": "k3y", "WIS_CORS_ORIGIN": "https://a.example, http://b.example:8080/"}
    settings = Settings.from_args(["--api-user", "willow", "--api-password", "pw", "--ssl-cert", "c.pem"], environ).http
    assert (settings.api_key, settings.api_user, settings.api_password) == ("k3y", "willow", "pw")
    assert settings.cors_origin == ["https://a.example", "http://b.example:8080"]
    assert settings.ssl_cert == Path("c.pem") and settings.ssl_key is None
    assert Settings.from_args(["--cors-origin", "*"], environ={}).http.cors_origin == ["*"]
    off = Settings.from_args([], environ={}).http
    assert (off.api_key, off.api_user, off.cors_origin, off.ssl_cert) == (None, None, [], None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--api-user", "willow"], "--api-user and --api-password go together"),
        (["--api-password", "pw"], "--api-user and --api-password go together"),
        (["--ssl-key", "k.pem"], "--ssl-key needs --ssl-cert"),
        (["--cors-origin", "app.example.com"], "expected * or an origin"),
        (["--cors-origin", "https://app.example.com/path"], "expected * or an origin"),
    ],
)
def test_incomplete_http_security_settings_are_refused(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        Settings.from_args(argv, environ={})
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_each_setting_is_declared_once_and_its_field_default_is_the_default() -> None:
    assert len({option.dest for option in OPTIONS}) == len(OPTIONS)  # a field's name is its flag: one field each
    assert Settings() == Settings.from_args([], environ={})
    assert Settings().core.asr.hotwords is not Settings().core.asr.hotwords  # a list default is not shared


def test_the_core_gets_no_frontends_settings() -> None:
    """What Core.load is given holds the models' groups and limits, never an API key or a TURN password."""
    core = {option.dest for option in OPTIONS if option.path[0] == "core"}
    assert {"asr_model", "voice", "data_dir", "max_text_chars"} <= core
    assert core.isdisjoint({"api_key", "api_password", "rtc_turn_password", "uri", "http_port", "rtc_ports"})


def test_help_lists_the_flags_by_group() -> None:
    text = build_parser().format_help()
    sections = list(dict.fromkeys(option.section for option in OPTIONS))
    assert len(sections) == 9
    where = [text.index(f"\n{section}:\n") for section in sections]
    assert where == sorted(where)
    beam, debug = text.index("\n  --beam-size N"), text.index("\n  --debug")
    assert where[0] < beam < where[1] and where[-1] < debug
