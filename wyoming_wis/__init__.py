"""wyoming-wis: one process serving Whisper and Piper to every kind of client."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wyoming-wis")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

PROJECT_URL = "https://github.com/wyoming-wis/wyoming-wis"
