"""GPU catalog (``gpus.json``), interconnect catalog (``links.json``) and cluster specs, each row with its
source. Light to import: no torch; PyYAML only when a ``.yaml`` cluster file is read.

The names are loaded on first use (PEP 562), so that ``get_gpu`` — all that ``trainmem estimate`` needs — does
not import the cluster types and the link catalog (start-up time, issue 18 item 7)."""

from __future__ import annotations

from typing import Any

__all__ = ["GPU", "get_gpu", "list_gpus", "Cluster", "GPUGroup", "Link", "parse_cluster", "get_link", "list_links"]


def __getattr__(name: str) -> Any:
    # (plain imports, not importlib: tests/test_structure.py reads them as the package's edges)
    if name in ("GPU", "get_gpu", "list_gpus"):
        from trainmem.hardware import catalog as module
    elif name in ("Cluster", "GPUGroup", "Link", "parse_cluster"):
        from trainmem.hardware import cluster as module  # type: ignore[no-redef]
    elif name in ("get_link", "list_links"):
        from trainmem.hardware import links as module  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module 'trainmem.hardware' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
