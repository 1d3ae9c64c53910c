"""Imports run one way: the composition root mounts the frontends, a frontend never imports another (but rtc uses
http_api's error envelope and application state), and nothing below the frontends imports one. Below them too each
import runs down: frontends -> core -> engines -> utilities (ARCHITECTURE.md).

Read from the source (ast), so an import inside a function or under TYPE_CHECKING counts too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.fast

FRONTENDS = ("http_api", "rtc", "wyoming_wis.wyoming", "openai_audio")
COMPOSITION_ROOT = ("wis_server",)  # its own package, above the rest: builds the core and mounts every frontend
# (importer, imported) between frontends: OpenAI's audio API (its names, errors, the Realtime session) is served over
# HTTP and over WebRTC; WebRTC's signalling is mounted on the HTTP API's application
ALLOWED = {("rtc", "http_api"), ("http_api", "openai_audio"), ("rtc", "openai_audio")}
# From the top; a module may import its own layer and those below. The rest of wyoming_wis is utilities, the bottom.
ENGINES = ("wyoming_wis.asr", "wyoming_wis.tts")
LAYERS = (COMPOSITION_ROOT, FRONTENDS, ("wyoming_wis.core", "wyoming_wis.turns"), ENGINES)
OURS = ("wis_server", "wyoming_wis", "openai_audio", "http_api", "rtc")  # the packages
VOCABULARY = ("wyoming_wis.requests", "wyoming_wis.served")  # plain data every layer shares: it imports none of ours


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Every name the file imports, absolute (`from . import x` in http_api is http_api.x)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            target = ".".join(part for part in (base, node.module) if part)
            yield from (f"{target}.{alias.name}" for alias in node.names)


def _frontend(name: str) -> str | None:
    return next((f for f in FRONTENDS if name == f or name.startswith(f + ".")), None)


def _within(name: str, places: tuple[str, ...]) -> bool:
    return any(name == place or name.startswith(place + ".") for place in places)


def _layer(name: str) -> int | None:
    """0 for the top layer, len(LAYERS) for utilities; None for what is not ours or is shared vocabulary."""
    if not _within(name, OURS) or _within(name, VOCABULARY):
        return None
    return next((depth for depth, places in enumerate(LAYERS) if _within(name, places)), len(LAYERS))


def _upward() -> list[str]:
    found = []
    for path in sorted(p for top in OURS for p in (ROOT / top).rglob("*.py")):
        module = _module(path)
        for name in _imports(path):
            if _within(module, VOCABULARY) and _within(name, OURS):
                found.append(f"{module} imports {name}")
            mine, theirs = _layer(module), _layer(name)
            if mine is not None and theirs is not None and theirs < mine:
                found.append(f"{module} imports {name}")
            elif _within(module, FRONTENDS) and _within(name, ENGINES):  # through the core, never around it
                found.append(f"{module} imports {name}")
    return found


def _wrong_way() -> list[str]:
    found = []
    for path in sorted(p for top in OURS for p in (ROOT / top).rglob("*.py")):
        module = _module(path)
        if _within(module, COMPOSITION_ROOT):
            continue
        mine = _frontend(module)
        for name in _imports(path):
            theirs = _frontend(name)
            if theirs is not None and theirs != mine and (mine, theirs) not in ALLOWED:
                found.append(f"{module} imports {name}")
    return found


def test_only_the_composition_root_imports_a_frontend_and_frontends_not_each_other() -> None:
    assert _wrong_way() == []


def test_every_import_runs_down_the_layers() -> None:
    """No engine imports the core, no utility an engine, no frontend an engine (it asks the core); the shared
    requests and view import nothing of ours."""
    assert _upward() == []


def test_the_layer_check_sees_an_import_that_runs_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = {
        "wyoming_wis/asr/bad.py": "from ..core import Core\n",
        "wyoming_wis/audio.py": "from .tts.stream import Piece\n",
        "wyoming_wis/served.py": "from .errors import WisError\n",
        "wyoming_wis/core.py": "from .asr import engine\nfrom .served import Served\n",
        "http_api/bad.py": "from wyoming_wis.asr.session import AsrSession\nfrom wyoming_wis.core import Core\n",
    }
    for name, source in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert sorted(_upward()) == [
        "http_api.bad imports wyoming_wis.asr.session.AsrSession",
        "wyoming_wis.asr.bad imports wyoming_wis.core.Core",
        "wyoming_wis.audio imports wyoming_wis.tts.stream.Piece",
        "wyoming_wis.served imports wyoming_wis.errors.WisError",
    ]


def test_the_check_sees_relative_and_absolute_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a core module importing http_api, and http_api importing rtc, are both caught."""
    for folder, source in (("wyoming_wis", "from http_api import errors\n"), ("http_api", "from rtc import ice\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
        (tmp_path / folder / "bad.py").write_text(source)
    (tmp_path / "http_api" / "worse.py").write_text("from ..rtc.signalling import PEERS\nfrom . import errors\n")
    (tmp_path / "rtc").mkdir()
    (tmp_path / "rtc" / "fine.py").write_text("from http_api.errors import ApiError\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert _wrong_way() == [
        "http_api.bad imports rtc.ice",
        "http_api.worse imports rtc.signalling.PEERS",
        "wyoming_wis.bad imports http_api.errors",
    ]


def test_architecture_names_every_module() -> None:
    """ARCHITECTURE.md's map stays true: each module of ours is named there, and each path it names exists."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    modules = [
        path.relative_to(ROOT) for top in OURS for path in (ROOT / top).rglob("*.py") if path.name != "__init__.py"
    ]
    unnamed = [str(path) for path in modules if path.name not in text]
    assert unnamed == [], f"ARCHITECTURE.md does not name {unnamed}"
    places = "|".join((*OURS, "tests", "bench", "scripts"))
    named = {match for match in re.findall(rf"`((?:{places})/[\w/.]*)`", text)}
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == [], f"ARCHITECTURE.md names {missing}, which do not exist"


def _attributes(path: Path, cls: str) -> set[str]:
    """The attributes a class's methods set on `self`."""
    tree = ast.parse(path.read_text(), str(path))
    found = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls)
    return {
        target.attr
        for node in ast.walk(found)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for whole in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for target in ast.walk(whole)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }


def test_the_asr_session_keeps_audio_vad_and_decoding_only() -> None:
    """The end of the turn is the detector's (turns/detector.py): the session holds none of its state, and stays
    small enough to read (issue 50: at most 20 attributes)."""
    attributes = _attributes(ROOT / "wyoming_wis" / "asr" / "session.py", "AsrSession")
    assert len(attributes) <= 20, sorted(attributes)
    judging = {name for name in attributes if re.search(r"judg|patience|doubt|complete|command|limits", name)}
    assert judging == set(), judging
