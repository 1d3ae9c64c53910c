"""Settings from flags and WIS_* environment variables."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import load_script

from wyoming_wis.config import OPTIONS, Settings, build_parser

pytestmark = pytest.mark.fast

flags_table = load_script("flags_table")


def test_defaults_match_the_design() -> None:
    settings = Settings.from_args([], environ={})
    assert settings.uri == ["tcp://0.0.0.0:10500"]
    assert settings.asr_model == ["base"]
    assert settings.voice == ["en_US-joe-medium"]
    assert settings.data_dir == [Path("data")]
    assert settings.zeroconf is None and settings.allow_download is False
    assert settings.max_audio_seconds == 600
    assert (settings.http_port, settings.no_http, settings.max_upload_mb) == (19000, False, 25)


def test_flags_repeat_and_override_the_environment() -> None:
    environ = {"WIS_ASR_MODEL": "small, tiny.en", "WIS_BEAM_SIZE": "2", "WIS_DEBUG": "yes", "WIS_URI": "unix:///tmp/s"}
    from_env = Settings.from_args([], environ=environ)
    assert from_env.asr_model == ["small", "tiny.en"]
    assert from_env.beam_size == 2 and from_env.debug is True and from_env.uri == ["unix:///tmp/s"]

    flags = Settings.from_args(
        ["--asr-model", "base", "--asr-model", "tiny.en", "--beam-size", "1", "--uri", "stdio://"], environ=environ
    )
    assert flags.asr_model == ["base", "tiny.en"]  # flags replace the environment's list, not extend it
    assert flags.beam_size == 1 and flags.uri == ["stdio://"]


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
    assert getattr(Settings.from_args(argv, environ=environ), flag) == expected


def test_xtts_is_off_unless_asked_for_and_defaults_to_the_release() -> None:
    assert Settings.from_args([], environ={}).xtts_model is None
    assert Settings.from_args(["--xtts"], environ={}).xtts_model == "xtts-v2"
    assert Settings.from_args([], environ={"WIS_XTTS": "coqui/XTTS-v2"}).xtts_model == "coqui/XTTS-v2"


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
    assert table.count("\n") == len(OPTIONS) + 2
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
    settings = Settings.from_args(["--api-user", "willow", "--api-password", "pw", "--ssl-cert", "c.pem"], environ)
    assert (settings.api_key, settings.api_user, settings.api_password) == ("k3y", "willow", "pw")
    assert settings.cors_origin == ["https://a.example", "http://b.example:8080"]
    assert settings.ssl_cert == Path("c.pem") and settings.ssl_key is None
    assert Settings.from_args(["--cors-origin", "*"], environ={}).cors_origin == ["*"]
    off = Settings.from_args([], environ={})
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
