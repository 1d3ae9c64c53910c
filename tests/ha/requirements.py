"""Print the pip requirements of the installed Home Assistant and of the core integrations the HA tests set up.

The homeassistant package does not depend on its integrations' requirements (wyoming, hassil, mutagen, ...): Home
Assistant installs them when it first sets an integration up, which the test harness turns off. tests/ha/env.sh
installs what this prints, so each HA version gets the versions its own manifests pin. It prints Home Assistant's own
requirements too: env.sh installs a version newer than the test plugin's over it without them (pip --no-deps), so
this reads everything without importing homeassistant (whose __init__ imports them).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

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
    """Home Assistant's own requirements, then those of `domains` and of everything they depend on, in manifest order,
    each once."""
    spec = importlib.util.find_spec("homeassistant")
    assert spec is not None and spec.submodule_search_locations, "Home Assistant is not installed"
    root = Path(spec.submodule_search_locations[0]) / "components"
    seen: set[str] = set()
    found: list[str] = importlib.metadata.requires("homeassistant") or []
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
