"""The bundled model catalog: real ``config.json`` files from the Hugging Face hub.

Each ``configs/<name>.json`` holds ``{"name", "hf_id", "source", "aliases", "note", "config"}``:
``config`` is the hub's ``config.json`` for ``hf_id``, ``source`` its URL, ``note`` what was (and
was not) verified. Names, hub ids and aliases match case-insensitively.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from trainmem.errors import UnknownModelError
from trainmem.model.hf import spec_from_hf_config
from trainmem.model.spec import ModelSpec

__all__ = ["CatalogEntry", "list_models", "find_entry", "load_catalog_spec"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CatalogEntry:
    """One bundled model."""

    name: str
    """Catalog name, e.g. ``llama-3.1-8b``."""
    hf_id: str
    """Hub repository the config comes from, e.g. ``meta-llama/Llama-3.1-8B``."""
    source: str
    """URL of the config.json on the hub."""
    aliases: tuple[str, ...]
    note: str
    """What was verified, and how."""
    config: dict[str, Any]

    @property
    def keys(self) -> tuple[str, ...]:
        """Every lower-cased string this entry answers to."""
        return tuple(k.lower() for k in (self.name, self.hf_id, *self.aliases))


@lru_cache(maxsize=1)
def _entries() -> tuple[CatalogEntry, ...]:
    folder = resources.files("trainmem.model").joinpath("configs")
    entries = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if not item.name.endswith(".json"):
            continue
        raw = json.loads(item.read_text(encoding="utf-8"))
        entries.append(CatalogEntry(name=raw["name"], hf_id=raw["hf_id"], source=raw["source"],
                                    aliases=tuple(raw.get("aliases", ())), note=raw.get("note", ""),
                                    config=raw["config"]))
    return tuple(entries)


@lru_cache(maxsize=1)
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in _entries():
        for key in entry.keys:
            if key in index and index[key] is not entry:
                raise RuntimeError(f"catalog key {key!r} names both {index[key].name} and {entry.name}")
            index[key] = entry
    return index


def list_models() -> list[CatalogEntry]:
    """All catalog entries, sorted by name."""
    return list(_entries())


def find_entry(name_or_alias: str) -> CatalogEntry | None:
    """The entry whose name, hub id or alias equals ``name_or_alias`` (any case), or None."""
    return _index().get(name_or_alias.strip().lower())


@lru_cache(maxsize=None)
def _spec(key: str) -> ModelSpec:
    entry = _index()[key]
    return spec_from_hf_config(entry.config, name=entry.name, source=entry.source)


def load_catalog_spec(name_or_alias: str) -> ModelSpec:
    """The ``ModelSpec`` of a catalog model (cached); ``UnknownModelError`` if there is none."""
    entry = find_entry(name_or_alias)
    if entry is None:
        raise UnknownModelError(f"{name_or_alias!r} is not in the model catalog; known: "
                                + ", ".join(e.name for e in _entries()))
    return _spec(entry.name.lower())
