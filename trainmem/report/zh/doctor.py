"""Chinese for the messages of ``trainmem/doctor`` and the ``doctor`` command (format: see
:mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
}

PATTERNS: list[tuple[str, str]] = [
]
