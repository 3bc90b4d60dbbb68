"""Reading the doctor's input files: one clear line for a missing, empty, binary or oversized file.

Every reader takes the flag it serves (``--error``, ``--log`` ...) so that the error names it. ``-`` reads
standard input (``--error -``: a traceback piped from a log). Text is UTF-8, with BOM-marked UTF-16 and
UTF-8 accepted too (PowerShell's ``nvidia-smi > file`` writes UTF-16LE with a BOM).
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainmem.errors import ConfigError
from trainmem.units import MiB

__all__ = ["MAX_TEXT_BYTES", "MAX_BINARY_BYTES", "read_bytes", "read_text", "looks_binary"]

MAX_TEXT_BYTES = 256 * MiB
"""Largest text input (a per-step log of a long run is tens of MiB)."""
MAX_BINARY_BYTES = 4096 * MiB
"""Largest snapshot pickle (``_dump_snapshot`` files reach GiBs with long histories)."""


def _shown(path: str) -> str:
    return path if len(path) <= 200 else path[:200] + "…"


def read_bytes(path: str, flag: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of ``path`` (``-``: standard input); ConfigError naming ``flag`` when unreadable or empty."""
    if path == "-":
        data = sys.stdin.buffer.read(limit + 1)
    else:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"{flag} {_shown(path)}: no such file")
        if p.is_dir():
            raise ConfigError(f"{flag} {_shown(path)}: is a directory, not a file")
        try:
            if p.stat().st_size > limit:
                raise ConfigError(f"{flag} {_shown(path)}: larger than {limit // MiB} MiB")
            data = p.read_bytes()
        except OSError as e:
            raise ConfigError(f"{flag} {_shown(path)}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise ConfigError(f"{flag} {_shown(path)}: larger than {limit // MiB} MiB")
    if not data.strip():
        raise ConfigError(f"{flag} {_shown(path)}: the file is empty")
    return data


def looks_binary(data: bytes) -> bool:
    """NUL bytes in the first 64 KiB (and no UTF-16 BOM): not text."""
    head = data[:65536]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return False
    return b"\x00" in head


def _decode(data: bytes) -> str | None:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def read_text(path: str, flag: str, what: str) -> str:
    """The text of ``path``; ``what`` says what the flag expects (in the binary-file error)."""
    data = read_bytes(path, flag)
    if looks_binary(data):
        raise ConfigError(f"{flag} {_shown(path)}: binary data, not {what}")
    text = _decode(data)
    if text is None:
        raise ConfigError(f"{flag} {_shown(path)}: not UTF-8 text, not {what}")
    if not text.strip():
        raise ConfigError(f"{flag} {_shown(path)}: the file is empty")
    return text
