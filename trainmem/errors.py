"""Errors raised by trainmem.

Hierarchy::

    TrainmemError                 base: the CLI catches this one only (exit code 2)
    ├── ConfigError               a setup or model config that is invalid (names field, value, arithmetic)
    ├── UnknownModelError         a model name that is neither a catalog entry, a path nor a size
    └── UnsupportedError          a valid combination that this tool (or engine) cannot model/trace
"""

from __future__ import annotations

__all__ = ["TrainmemError", "ConfigError", "UnknownModelError", "UnsupportedError"]


class TrainmemError(Exception):
    """Base of every error trainmem raises on bad input or unsupported requests."""


class ConfigError(TrainmemError, ValueError):
    """An invalid training setup or model configuration."""


class UnknownModelError(TrainmemError, LookupError):
    """A model reference that cannot be resolved."""


class UnsupportedError(TrainmemError):
    """A valid request that trainmem cannot handle (yet); the message says what to use instead."""
