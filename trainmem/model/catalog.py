"""The bundled model catalog: real ``config.json`` files from the Hugging Face hub.

Each ``configs/<name>.json`` holds ``{"name", "hf_id", "source", "aliases", "note", "config"}``:
``config`` is the hub's ``config.json`` for ``hf_id``, ``source`` its URL, ``note`` what was (and
was not) verified.

Names people type are matched in two steps. First exactly (any case): a name, hub id or alias.
Then loosely (:func:`normalize_model_name`): ``-``, ``_`` and spaces do not matter (``llama3.1-8b``
= ``Llama-3.1-8B``), a leading ``Meta-`` is dropped (``Meta-Llama-3.1-8B``), a hub organisation is
accepted when it is one the catalog knows (``meta-llama/``, ``Qwen/`` ...), and the tags
``instruct``/``chat``/``it``/``base``/``hf`` are dropped: a chat or instruct fine-tune keeps its base
model's layer shapes, so ``qwen2.5-7b-instruct`` is estimated with ``qwen2.5-7b``'s shapes, and the
spec says so in ``alias_note``. Dots are kept (``qwen2.5-7b`` is not ``qwen2-57b``), and no other
word is dropped, so a name with different shapes (``Mistral-7B-Instruct-v0.2``) is not matched.

``_DERIVED`` adds catalog entries whose config differs from a bundled one only in settings without
parameters: Llama-3 8B/70B are Llama-3.1's shapes with an 8192-token context and no rope scaling
(Meta's Llama 3 model card: 8k context; Llama 3.1: 128k with "llama3" rope scaling); Llama-3.3-70B
(released as an instruct model only) is Llama-3.1-70B's config with the instruct models' three end-of-turn
token ids (its hub config.json also spells out head_dim 128 = 8192/64).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainmem.errors import UnknownModelError
from trainmem.model.hf import spec_from_hf_config
from trainmem.model.spec import ModelSpec

__all__ = ["CatalogEntry", "list_models", "find_entry", "load_catalog_spec", "match_catalog",
           "normalize_model_name", "suggest_models"]

#: Tags of fine-tuned or re-packaged variants that keep the base model's shapes.
_VARIANT_TAGS = frozenset({"instruct", "chat", "it", "base", "hf"})
#: ``hf`` only marks the Hugging Face conversion of the same weights: no note needed.
_SILENT_TAGS = frozenset({"hf"})
_MAX_NAME_CHARS = 200

#: (name, base entry, hub id, aliases, config overrides, what differs)
_DERIVED: tuple[tuple[str, str, str, tuple[str, ...], dict[str, Any], str], ...] = (
    ("llama-3-8b", "llama-3.1-8b", "meta-llama/Meta-Llama-3-8B", ("llama3-8b",),
     {"max_position_embeddings": 8192, "rope_scaling": None},
     "Meta-Llama-3-8B has the layer shapes of llama-3.1-8b (same parameters); its context is 8192 tokens "
     "without rope scaling (3.1: 131072, llama3 rope scaling)"),
    ("llama-3-70b", "llama-3.1-70b", "meta-llama/Meta-Llama-3-70B", ("llama3-70b",),
     {"max_position_embeddings": 8192, "rope_scaling": None},
     "Meta-Llama-3-70B has the layer shapes of llama-3.1-70b (same parameters); its context is 8192 tokens "
     "without rope scaling (3.1: 131072, llama3 rope scaling)"),
    ("llama-3.3-70b", "llama-3.1-70b", "meta-llama/Llama-3.3-70B-Instruct", ("llama3.3-70b",),
     {"eos_token_id": [128001, 128008, 128009]},
     "Llama-3.3-70B-Instruct has the config of llama-3.1-70b (same shapes and parameters: 70,553,706,496; the same "
     "131072-token context and llama3 rope scaling); only its end-of-turn token ids differ"),
)


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
    derived_from: str = ""
    """For a ``_DERIVED`` entry: the bundled entry whose config it modifies; '' for a bundled file."""

    @property
    def keys(self) -> tuple[str, ...]:
        """Every lower-cased string this entry answers to."""
        return tuple(k.lower() for k in (self.name, self.hf_id, *self.aliases))


@lru_cache(maxsize=1)
def _entries() -> tuple[CatalogEntry, ...]:
    folder = os.path.join(os.path.dirname(__file__), "configs")  # (not importlib.resources: start-up time)
    entries = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            raw = json.load(f)
        entries.append(CatalogEntry(name=raw["name"], hf_id=raw["hf_id"], source=raw["source"],
                                    aliases=tuple(raw.get("aliases", ())), note=raw.get("note", ""),
                                    config=raw["config"]))
    by_name = {e.name: e for e in entries}
    for name, base, hf_id, aliases, overrides, note in _DERIVED:
        b = by_name[base]
        changed = ", ".join(f"{k} {v}" for k, v in overrides.items())
        entries.append(CatalogEntry(name=name, hf_id=hf_id, aliases=aliases, note=note,
                                    source=f"{b.source} with {changed}", config={**b.config, **overrides},
                                    derived_from=base))
    return tuple(sorted(entries, key=lambda e: e.name))


@lru_cache(maxsize=1)
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in _entries():
        for key in entry.keys:
            if key in index and index[key] is not entry:
                raise RuntimeError(f"catalog key {key!r} names both {index[key].name} and {entry.name}")
            index[key] = entry
    return index


@lru_cache(maxsize=1)
def _orgs() -> frozenset[str]:
    """Hub organisations of the catalog's ids and aliases (``meta-llama``, ``qwen``, ...)."""
    return frozenset(k.split("/")[0] for e in _entries() for k in e.keys if "/" in k)


def normalize_model_name(ref: str) -> tuple[str, frozenset[str]] | None:
    """``'meta-llama/Meta-Llama-3.1-8B-Instruct'`` → ``('llama3.18b', {'instruct'})``: the loose key
    and the variant tags dropped; None for a hub id of an organisation the catalog does not know."""
    s = ref.strip().lower()
    if "/" in s:
        org, _, s = s.partition("/")
        if org not in _orgs() or "/" in s:
            return None
    tokens = [t for t in re.split(r"[\s_\-]+", s) if t]
    if len(tokens) > 1 and tokens[0] == "meta":
        tokens = tokens[1:]
    tags = frozenset(t for t in tokens if t in _VARIANT_TAGS)
    return "".join(t for t in tokens if t not in _VARIANT_TAGS), tags


@lru_cache(maxsize=1)
def _loose_index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in _entries():
        for key in entry.keys:
            norm = normalize_model_name(key)
            if norm is None or not norm[0]:
                continue
            if index.get(norm[0], entry) is not entry:
                raise RuntimeError(f"catalog keys {key!r} and {index[norm[0]].name!r} normalize alike ({norm[0]!r})")
            index[norm[0]] = entry
    return index


def list_models() -> list[CatalogEntry]:
    """All catalog entries, sorted by name."""
    return list(_entries())


def find_entry(name_or_alias: str) -> CatalogEntry | None:
    """The entry whose name, hub id or alias equals ``name_or_alias`` (any case), or None."""
    return _index().get(name_or_alias.strip().lower())


def _own_tags(entry: CatalogEntry) -> frozenset[str]:
    """Variant tags the entry itself carries (phi-3-mini-4k's hub id is the -instruct model)."""
    out: frozenset[str] = frozenset()
    for key in (entry.name, entry.hf_id):
        norm = normalize_model_name(key)
        out |= norm[1] if norm else frozenset()
    return out


def match_catalog(ref: str) -> tuple[CatalogEntry, str] | None:
    """The entry ``ref`` names, exactly or loosely (module docstring), and the note to show when the
    match is not the entry itself ('' otherwise); None if nothing matches."""
    if len(ref) > _MAX_NAME_CHARS:
        return None
    entry = find_entry(ref)
    norm = normalize_model_name(ref)
    if entry is None and norm is not None:
        entry = _loose_index().get(norm[0])
    if entry is None:
        return None
    notes = []
    variant = (norm[1] if norm else frozenset()) - _own_tags(entry) - _SILENT_TAGS
    if variant:
        tags = "/".join(f"-{t}" for t in sorted(variant))
        notes.append(f"{ref.strip()}: same layer shapes as the catalog's {entry.name} ({entry.hf_id}); "
                     f"the {tags} variant of a model keeps its architecture (context length may differ)")
    return entry, "; ".join(notes)


@lru_cache(maxsize=None)
def _built(name: str) -> ModelSpec:
    entry = _index()[name.lower()]
    return spec_from_hf_config(entry.config, name=entry.name, source=entry.source)


@lru_cache(maxsize=None)
def _spec(name: str, alias_note: str = "") -> ModelSpec:
    """The entry's spec; with a note (the user's variant name, a derived entry) a copy carrying it."""
    entry = _index()[name.lower()]
    derived = f"{entry.name}: {entry.note}" if entry.derived_from else ""
    note = "; ".join(n for n in (alias_note, derived) if n)
    return dataclasses.replace(_built(name), alias_note=note) if note else _built(name)


def suggest_models(ref: str, n: int = 3) -> list[str]:
    """Catalog names nearest to ``ref`` (difflib on the loose keys), best first."""
    norm = normalize_model_name(ref[:_MAX_NAME_CHARS]) if len(ref) <= _MAX_NAME_CHARS else None
    if norm is None:  # an unknown organisation: compare the model part
        tail = ref.strip().lower().rsplit("/", 1)[-1][:_MAX_NAME_CHARS] if len(ref) <= _MAX_NAME_CHARS else ""
        norm = normalize_model_name(tail) if tail else None
    if not norm or not norm[0]:
        return []
    index = _loose_index()
    out: list[str] = []
    for key in difflib.get_close_matches(norm[0], list(index), n=3 * n, cutoff=0.6):
        if index[key].name not in out:
            out.append(index[key].name)
    return out[:n]


def load_catalog_spec(name_or_alias: str) -> ModelSpec:
    """The ``ModelSpec`` of a catalog model (cached), matched as :func:`match_catalog` does; an
    ``-instruct``/``-chat`` variant carries its ``alias_note``. ``UnknownModelError`` if there is none."""
    found = match_catalog(name_or_alias)
    if found is None:
        shown = name_or_alias if len(name_or_alias) <= 60 else name_or_alias[:60] + "…"
        near = suggest_models(name_or_alias)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise UnknownModelError(f"{shown!r} is not in the model catalog{hint} (trainmem models lists it)")
    entry, note = found
    return _spec(entry.name, note)
