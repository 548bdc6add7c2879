"""The Textual chat app (the one adapter that imports textual)."""

from .app import LocalspecApp

__all__ = ["LocalspecApp"]
