"""HTTP frontend: the OpenAI audio API and operations endpoints, on the core's resident models."""

from .app import make_app, start

__all__ = ["make_app", "start"]
