"""Chinese catalogue entries of the planning subpackages, one module per area (``hardware``, ``perf``,
``plan``, ``export``), merged into :mod:`trainmem.report.messages_zh` (their patterns are tried before
the generic ones there). Same format and style as ``messages_zh``."""

from __future__ import annotations

from importlib import import_module

AREAS = ("hardware", "perf", "plan", "export", "doctor", "web", "frameworks", "integrations", "model", "readers", "device_map",
         "vision", "unsloth", "readers_vlm", "readers_ms_swift", "run_reserve", "kbit")


def merged() -> tuple[dict[str, str], list[tuple[str, str]]]:
    exact: dict[str, str] = {}
    patterns: list[tuple[str, str]] = []
    for area in AREAS:
        mod = import_module(f"trainmem.report.zh.{area}")
        exact.update(mod.EXACT)
        patterns.extend(mod.PATTERNS)
    return exact, patterns
