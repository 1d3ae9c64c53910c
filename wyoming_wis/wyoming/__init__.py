"""The Wyoming frontend: Home Assistant's speech protocol over TCP, Unix sockets or stdio."""

from .handler import WyomingHandler
from .info import build_info

__all__ = ["WyomingHandler", "build_info"]
