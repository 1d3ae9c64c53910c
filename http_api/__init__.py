"""HTTP frontend: the OpenAI audio API and operations endpoints, on the core's resident models."""

from .app import loaded, make_app, start

__all__ = ["loaded", "make_app", "start"]
