"""GPU catalog (``gpus.json``), interconnect catalog (``links.json``) and cluster specs, each row with its
source. Light to import: no torch; PyYAML only when a ``.yaml`` cluster file is read.

The names are loaded on first use (PEP 562), so that ``get_gpu`` — all that ``trainmem estimate`` needs — does
not import the cluster types and the link catalog (start-up time, issue 18 item 7)."""

from __future__ import annotations

from typing import Any

__all__ = ["GPU", "get_gpu", "list_gpus", "Cluster", "GPUGroup", "Link", "parse_cluster", "get_link", "list_links"]

_LAZY = {"GPU": "trainmem.hardware.catalog", "get_gpu": "trainmem.hardware.catalog",
         "list_gpus": "trainmem.hardware.catalog", "Cluster": "trainmem.hardware.cluster",
         "GPUGroup": "trainmem.hardware.cluster", "Link": "trainmem.hardware.cluster",
         "parse_cluster": "trainmem.hardware.cluster", "get_link": "trainmem.hardware.links",
         "list_links": "trainmem.hardware.links"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainmem.hardware' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
