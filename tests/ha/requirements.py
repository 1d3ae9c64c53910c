"""Print the pip requirements of the core integrations the HA tests set up, read from the installed Home Assistant.

The homeassistant package does not depend on its integrations' requirements (wyoming, hassil, mutagen, ...): Home
Assistant installs them when it first sets an integration up, which the test harness turns off. tests/ha/env.sh
installs what this prints, so each HA version gets the versions its own manifests pin.
"""

from __future__ import annotations

import json
from pathlib import Path

import homeassistant.components

# What tests/ha sets up, or imports (zeroconf: ZeroconfServiceInfo lives there in HA 2024.3)
INTEGRATIONS = [
    "assist_pipeline",
    "conversation",
    "ffmpeg",
    "homeassistant",
    "http",
    "intent",
    "light",
    "media_source",
    "stt",
    "tts",
    "wyoming",
    "zeroconf",
]


def requirements(domains: list[str]) -> list[str]:
    """The requirements of `domains` and of everything they depend on, in manifest order, each once."""
    root = Path(homeassistant.components.__path__[0])
    seen: set[str] = set()
    found: list[str] = []
    todo = list(domains)
    while todo:
        domain = todo.pop(0)
        manifest_path = root / domain / "manifest.json"
        if domain in seen or not manifest_path.exists():
            continue
        seen.add(domain)
        manifest = json.loads(manifest_path.read_text())
        found += [req for req in manifest.get("requirements", []) if req not in found]
        todo += manifest.get("dependencies", [])
    return found


if __name__ == "__main__":
    print("\n".join(requirements(INTEGRATIONS)))
