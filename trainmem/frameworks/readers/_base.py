"""What every config-file reader shares: reading the file, and :class:`Reading`, which records for each setup field
where its value came from (a key of the file, or the framework's default for what the file leaves out) and
which keys of the file were ignored, so that ``assumptions`` can list all three.

A value trainmem cannot express (an 8-bit base model, an adapter other than LoRA, a bad type) is refused with
one line naming the file and the key; nothing is dropped silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmem.errors import ConfigError
from trainmem.model.catalog import find_entry, match_catalog

__all__ = ["FileSetup", "Reading", "load_text", "parse_mapping", "MAX_CONFIG_BYTES", "positive_int", "shown"]

MAX_CONFIG_BYTES = 16 * 2**20
"""Largest config file read (real ones are a few KiB)."""


def shown(path: str) -> str:
    """A path as error lines show it (long ones cut)."""
    return path if len(path) <= 160 else path[:160] + "…"


@dataclass
class FileSetup:
    """The setup a config file states: ``fields`` for :func:`trainmem.api.build` (with ``stack``), the ``model``
    it names (None: none), and where each value came from."""

    path: str
    format: str
    stack: str
    model: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    read: list[tuple[str, str]] = field(default_factory=list)
    """(``field value``, the key it was read from) for each value read from the file."""
    defaults: list[tuple[str, str]] = field(default_factory=list)
    """(``field value``, its source) for each value the framework's defaults give where the file says nothing."""
    statements: list[str] = field(default_factory=list)
    """Other assumption lines: how a value of the file is modelled (packing, an approximated buffer size)."""
    ignored: list[str] = field(default_factory=list)
    """Keys of the file that set nothing trainmem models (sorted)."""
    model_error: str | None = None
    """Why the file's model names no catalog model (the command line's MODEL then has to)."""
    blocked: dict[str, str] = field(default_factory=dict)
    """Setup field → why the file's value for it cannot be expressed: refused unless the command line gives
    that field (see :func:`trainmem.frameworks.readers.merge_fields`)."""
    lora_regex: tuple[str, str] | None = None
    """(key, regex): LoRA targets given as one regular expression (PEFT full-matches it on the module names), matched
    on the run's model when the setup is merged (trainmem/frameworks/readers/peft_regex.py)."""

    def notes(self) -> list[str]:
        """The assumption lines, one per value: from the file (its key), from the framework's defaults (their
        source), how a value is modelled, and the keys ignored."""
        name = Path(self.path).name
        out = [f"{what}: from {name} ({key})" for what, key in self.read]
        out += [f"{what}: the {self.format} default for what {name} leaves out ({src})" for what, src in self.defaults]
        out += self.statements
        if self.ignored:
            out.append(f"ignored keys of {name} (no effect on the memory trainmem models): {', '.join(self.ignored)}")
        return out


def load_text(path: str) -> str:
    """The text of ``path``; one line when it is missing, a folder, too large, binary or empty."""
    p = Path(path)
    try:
        if not p.exists():
            raise ConfigError(f"--from {shown(path)}: no such file")
        if p.is_dir():
            raise ConfigError(f"--from {shown(path)}: is a directory, not a file")
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"--from {shown(path)}: larger than 16 MiB, not a training config")
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"--from {shown(path)}: cannot be read ({e.strerror or e})") from None
    if b"\x00" in data[:65536]:
        raise ConfigError(f"--from {shown(path)}: a binary file, not a training config")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"--from {shown(path)}: not UTF-8 text") from None
    if not text.strip():
        raise ConfigError(f"--from {shown(path)}: the file is empty")
    return text


def parse_mapping(text: str, path: str, syntax: str) -> dict:
    """``text`` parsed as ``syntax`` (json, yaml or toml) into a mapping; one line when it is not one."""
    try:
        if syntax == "json":
            obj = json.loads(text)
        elif syntax == "toml":
            import tomllib
            obj = tomllib.loads(text)
        else:
            try:
                import yaml
            except ImportError:
                raise ConfigError("--from: reading YAML needs PyYAML (pip install 'trainmem[yaml]')") from None
            obj = yaml.safe_load(text)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"--from {shown(path)}: not valid {syntax.upper()} (nested too deeply)") from None
    except Exception as e:  # json.JSONDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError
        first = str(e).splitlines()[0][:80] if str(e) else type(e).__name__
        raise ConfigError(f"--from {shown(path)}: not valid {syntax.upper()} ({first})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"--from {shown(path)}: not a {syntax.upper()} mapping of keys to values")
    return obj


def catalog_name(ref: str) -> str | None:
    """The catalog entry ``ref`` names (its name, hub id, alias or a loose form, with or without the hub
    organisation), or None; a path that exists is never renamed."""
    try:
        if Path(ref).expanduser().exists():
            return None
    except (OSError, ValueError):
        pass
    if find_entry(ref) is not None:
        return find_entry(ref).name  # type: ignore[union-attr]
    tail = ref.rstrip("/").rsplit("/", 1)[-1]
    for cand in (ref, tail, re.sub(r"-\d{4}$", "", tail)):  # Qwen3-4B-Instruct-2507: a dated re-release
        hit = match_catalog(cand)
        if hit is not None:
            return hit[0].name
    return None


def positive_int(value: object) -> int | None:
    """``value`` if it is an int >= 1 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _leaves(data: dict, prefix: str = "", depth: int = 2) -> list[str]:
    """Dotted key paths of ``data`` down to ``depth`` levels whose value is set (not None, '' or {})."""
    out = []
    for k, v in data.items():
        key = f"{prefix}{k}"
        if v is None or v == "" or v == {} or v == []:
            continue
        if isinstance(v, dict) and depth > 1:
            out.extend(_leaves(v, key + ".", depth - 1))
        else:
            out.append(key)
    return out


class Reading:
    """A reader's working state for one file: fields set, their sources, the keys used."""

    def __init__(self, path: str, fmt: str, stack: str, data: dict, depth: int = 1) -> None:
        self.path, self.fmt, self.data, self.depth = path, fmt, data, depth
        self.out = FileSetup(path=path, format=fmt, stack=stack)
        self.out.fields["stack"] = stack
        self._used: set[str] = set()

    # -- values ----------------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        """The value at the dotted ``key`` (None/absent: ``default``); marks the key used."""
        self._used.add(key)
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return default if node is None else node

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def int_(self, key: str) -> int | None:
        """A positive integer at ``key`` (None when absent; refused when it is something else)."""
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if positive_int(v) is None:
            raise self.refuse(f"{key} must be a positive integer (got {v!r})")
        return int(v)

    def bool_(self, key: str, default: bool | None = None) -> bool | None:
        """A boolean at ``key`` (YAML/JSON true/false; refused otherwise)."""
        v = self.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.refuse(f"{key} must be true or false (got {v!r})")
        return v

    def fraction(self, key: str) -> float | None:
        """A probability in [0, 1) at ``key`` (None when absent; refused when it is something else)."""
        v = self.get(key)
        if v is None:
            return None
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise self.refuse(f"{key} must be a probability in [0, 1) (got {v!r})")
        return float(v)

    def int_or_default(self, fld: str, key: str, default: int | None = None, source: str = "") -> int | None:
        """Setup field ``fld`` from the positive integer at ``key`` when the file sets it, else the framework's
        ``default`` (from ``source``; None: nothing set). Returns the value in force (the file's, else ``default``)."""
        n = self.int_(key)
        if n:
            self.set(fld, n, key)
            return n
        if default is not None:
            self.default(fld, default, source)
        return default

    def lora_dropout(self, key: str) -> None:
        """``lora_dropout`` from ``key`` when the file gives it (the framework's default otherwise: its stack's)."""
        p = self.fraction(key)
        if p is not None:
            self.set("lora_dropout", p, key)

    def use(self, *keys: str) -> None:
        """Mark keys as read although they set nothing (their value changes nothing trainmem models)."""
        self._used.update(keys)

    # -- results ---------------------------------------------------------------------------------
    def set(self, fld: str, value: Any, key: str) -> None:
        """Setup field ``fld`` = ``value``, read from the file's ``key``."""
        self.out.fields[fld] = value
        self.out.read.append((f"{fld} {_text(value)}", key))

    def default(self, fld: str, value: Any, source: str) -> None:
        """``fld`` = ``value`` from the framework's default (``source``), unless the file already set it."""
        if fld in self.out.fields:
            return
        self.out.fields[fld] = value
        self.out.defaults.append((f"{fld} {_text(value)}", source))

    def cannot(self, fld: str, why: str) -> None:
        """The file's value for ``fld`` cannot be expressed: refused unless the command line sets ``fld``."""
        self.out.blocked[fld] = why

    def model(self, ref: str, key: str) -> None:
        """The model the file names: a catalog entry when its name or hub id (any organisation: a mirror such as
        NousResearch/…) matches one, else the reference as written (a path or a hub id)."""
        name = catalog_name(ref)
        self.out.model = name or ref
        if name is None or name == ref:
            shown_ref = ref
        elif find_entry(ref) is not None:
            shown_ref = f"{name} = {ref}"
        else:
            shown_ref = f"{name}, the catalog's shape for {ref}"
        self.out.read.append((f"model {shown_ref}", key))

    def absorb(self, sub: FileSetup, skip: tuple[str, ...] = ()) -> None:
        """Take in what a file this one points to (a DeepSpeed JSON) states: its fields (but ``skip``), and its
        sources named after that file."""
        name = Path(sub.path).name
        self.out.fields.update({k: v for k, v in sub.fields.items() if k != "stack" and k not in skip})
        self.out.read += [(what, f"{key} [{name}]") for what, key in sub.read if what.split(" ")[0] not in skip]
        self.out.defaults += [(what, f"{src} [{name}]") for what, src in sub.defaults]
        self.out.statements += sub.statements
        self.out.ignored += [f"{name}:{k}" for k in sub.ignored]
        self.out.blocked.update(sub.blocked)

    def refuse(self, why: str) -> ConfigError:
        """The one-line error for a value trainmem cannot express (raise it)."""
        return ConfigError(f"--from {shown(self.path)}: {why}")

    def finish(self) -> FileSetup:
        used = self._used
        ignored = [k for k in _leaves(self.data, depth=self.depth + 1)
                   if not any(k == u or k.startswith(u + ".") or u.startswith(k + ".") for u in used)]
        self.out.ignored = sorted(ignored)
        return self.out


def _text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
