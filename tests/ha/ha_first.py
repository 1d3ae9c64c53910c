"""Loaded before pytest-homeassistant-custom-component's plugin (pytest.ini: -p ha_first), for a Home Assistant newer
than the one the plugin was made for: tests/ha/env.sh installs 2026.11.0 over 0.13.375, made for 2026.10.4. Not in
conftest.py: pytest loads the plugin, which needs all this, before any conftest."""

import importlib.metadata

# HA 2026.11's package __init__ makes `import httpx` give httpx2, and raises if anything imported httpx before: the
# plugin imports respx (which imports httpx) before Home Assistant. An older HA's __init__ imports nothing.
import homeassistant  # noqa: F401
from packaging.requirements import Requirement

PLUGIN = [Requirement(line) for line in importlib.metadata.requires("pytest-homeassistant-custom-component") or []]
HOME_ASSISTANT = importlib.metadata.version("homeassistant")
if not any(req.name == "homeassistant" and req.specifier.contains(HOME_ASSISTANT) for req in PLUGIN):
    # The plugin's patches before any other Home Assistant module, as its plugins.py imports them
    from pytest_homeassistant_custom_component import patch_json, patch_recorder, patch_time  # noqa: F401

    # isort: split
    from homeassistant.components import logger
    from homeassistant.components.logger import helpers

    # The plugin imports it from the logger integration, whose __init__ no longer re-exports it in HA 2026.11
    if not hasattr(logger, "_clear_logger_overwrites"):
        logger._clear_logger_overwrites = helpers._clear_logger_overwrites
