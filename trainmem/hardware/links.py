"""The interconnect catalog, read from ``links.json`` (each row cites its source; fields: its ``_about``).

A row is one interconnect level as one GPU sees it: NVLink/NVSwitch, xGMI, HCCS and PCIe inside a node,
InfiniBand, RoCE and Ethernet between nodes (one NIC's line rate), PCIe to the host. Names match case-
and punctuation-insensitively and by alias (``nvlink4``, ``ndr400``, ``pcie-gen4``, ``100gbe``). A NIC
that several GPUs share is written ``<row>-sharedN`` (``Ethernet-100G-shared8``: one 100 GbE NIC for 8
GPUs): ``gbps`` is divided by N, efficiency and latency are the row's. Unknown names are a one-line
:class:`~trainmem.errors.ConfigError` with the nearest rows.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import replace
from functools import lru_cache

from trainmem.errors import ConfigError
from trainmem.hardware.cluster_types import Link

__all__ = ["get_link", "list_links", "normalize_link_name", "shared_link", "MAX_SHARED_BY"]

MAX_SHARED_BY = 1024
"""At most this many GPUs share one NIC (``-sharedN``)."""

_KINDS = frozenset({"nvlink", "pcie", "ib", "roce", "ethernet", "xgmi", "hccs"})
_SHARED = re.compile(r"(.*?)[-_ ]*shared[-_ ]*(\d+)", re.IGNORECASE)
_MAX_NAME_CHARS = 200


def normalize_link_name(name: str) -> str:
    """The lookup key of a link name: ``'NVLink4-NVSwitch'`` → ``'nvlink4nvswitch'`` (lower case, only
    letters and digits)."""
    return re.sub(r"[^a-z0-9]+", "", name.lower())


def _row(raw: dict) -> Link:
    if raw["kind"] not in _KINDS:
        raise RuntimeError(f"links.json: {raw['name']}: unknown kind {raw['kind']!r}")
    return Link(name=raw["name"], kind=raw["kind"], gbps=float(raw["gbps"]), efficiency=float(raw["efficiency"]),
                latency_s=raw["latency_us"] * 1e-6, source=raw["source"], note=raw.get("note", ""),
                assumed=tuple(raw.get("assumed", ())))


@lru_cache(maxsize=1)
def _rows() -> tuple[tuple[Link, tuple[str, ...]], ...]:
    with open(os.path.join(os.path.dirname(__file__), "links.json"), encoding="utf-8") as f:  # (not importlib.resources: start-up)
        raw = json.load(f)
    return tuple((_row(r), tuple(r.get("aliases", ()))) for r in raw["links"])


def list_links() -> tuple[Link, ...]:
    """Every row of ``links.json``, in file order (the ``-sharedN`` forms are derived, not listed)."""
    return tuple(link for link, _ in _rows())


@lru_cache(maxsize=1)
def _index() -> dict[str, Link]:
    index: dict[str, Link] = {}
    for link, aliases in _rows():
        for alias in (link.name, *aliases):
            key = normalize_link_name(alias)
            if index.get(key, link) is not link:
                raise RuntimeError(f"links.json: {alias!r} names both {index[key].name} and {link.name}")
            index[key] = link
    return index


def _near(key: str) -> list[str]:
    index = _index()
    names: list[str] = []
    for k in difflib.get_close_matches(key, list(index), n=8, cutoff=0.5) if key else []:
        if index[k].name not in names:
            names.append(index[k].name)
    return names[:4]


def _unknown(shown: str, key: str) -> ConfigError:
    near = _near(key)
    if near:
        return ConfigError(f"link: unknown link {shown!r}; did you mean {', '.join(near)}?")
    return ConfigError(f"link: unknown link {shown!r} (known: {', '.join(link.name for link in list_links())})")


def shared_link(base: Link, n: int) -> Link:
    """``base`` as one of ``n`` GPUs sharing its NIC sees it: ``gbps / n``, named ``<base>-shared<n>``."""
    if n == 1:
        return base
    return replace(base, name=f"{base.name}-shared{n}", gbps=base.gbps / n, shared_by=base.shared_by * n,
                   note=f"one NIC shared by {n} GPUs, each gets 1/{n} of its bandwidth; " + base.note)


def get_link(name: str) -> Link:
    """Look a link up by name or alias (see the module docstring); ``<name>-sharedN`` divides its
    bandwidth among N GPUs. Unknown names raise a one-line ``ConfigError`` with the nearest rows."""
    shown = name if len(name) <= 60 else name[:60] + "…"
    if len(name) > _MAX_NAME_CHARS:
        raise _unknown(shown, "")
    link = _index().get(normalize_link_name(name))
    if link is not None:
        return link
    m = _SHARED.fullmatch(name.strip())
    if m is None:
        raise _unknown(shown, normalize_link_name(name))
    base = _index().get(normalize_link_name(m.group(1)))
    if base is None:
        raise _unknown(shown, normalize_link_name(m.group(1)))
    n = int(m.group(2)) if len(m.group(2)) <= 5 else 0
    if not 1 <= n <= MAX_SHARED_BY:
        raise ConfigError(f"link: {shown!r}: -sharedN takes N from 1 to {MAX_SHARED_BY:,} GPUs per NIC")
    return shared_link(base, n)
