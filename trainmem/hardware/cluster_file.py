"""Cluster files (``.toml`` with the standard library's ``tomllib``, ``.yaml``/``.yml`` with PyYAML,
imported only when such a file is read). The schema is documented in :mod:`trainmem.hardware.cluster`."""

from __future__ import annotations

import math
from pathlib import Path

from trainmem.errors import ConfigError
from trainmem.hardware.cluster_types import Cluster, Link
from trainmem.hardware.cluster_spec import (
    FILE_SUFFIXES, LEVELS, MAX_FILE_BYTES, MAX_GROUPS, MAX_NODE_GPUS, MAX_TOTAL_GPUS, GroupSpec, build_cluster,
    check_total, fmt_gbps, host_memory_size, lookup_gpu, lookup_link, shown,
)

__all__ = ["parse_file", "TOP_KEYS", "GROUP_KEYS", "LINK_KEYS", "LINK_KINDS"]

TOP_KEYS = ("groups", "cross")
GROUP_KEYS = ("gpu", "count", "nodes", "gpus_per_node", "intra", "inter", "host", "host_memory")
LINK_KEYS = ("link", "name", "kind", "gbps", "latency_us", "efficiency")
LINK_KINDS = ("nvlink", "pcie", "ib", "roce", "ethernet", "xgmi", "hccs", "custom")
MAX_GBPS = 100_000
MAX_LATENCY_US = 1_000_000


def parse_file(text: str) -> Cluster:
    """The cluster described by the file at ``text`` (a ``.toml``, ``.yaml`` or ``.yml`` path)."""
    path = Path(text).expanduser()
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise ConfigError(f"cluster: {shown(text)} is neither COUNTxGPU nor a .toml or .yaml file")
    return from_mapping(load(path, suffix), path.name, spec=str(path))


def load(path: Path, suffix: str) -> object:
    if not path.exists():
        raise ConfigError(f"cluster: file {path} not found")
    if not path.is_file():
        raise ConfigError(f"cluster: {path} is not a file")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"cluster: {path} has {size:,} bytes; at most {MAX_FILE_BYTES:,}")
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cluster: cannot read {path}: {one_line(e)}") from None
    return load_toml(raw, path) if suffix == ".toml" else load_yaml(raw, path)


def load_toml(raw: str, path: Path) -> object:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError("cluster: reading .toml files needs Python 3.11 or the tomli package "
                              "(pip install tomli)") from None
    try:
        return tomllib.loads(raw)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"cluster: {path} is not valid TOML: {one_line(e)}") from None


def load_yaml(raw: str, path: Path) -> object:
    try:
        import yaml
    except ModuleNotFoundError:
        raise ConfigError("cluster: reading .yaml files needs PyYAML (pip install pyyaml)") from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"cluster: {path} is not valid YAML: {one_line(e)}") from None


def one_line(e: BaseException) -> str:
    """The exception's text on one line (at most 200 characters, no backticks: zh quotes it in them)."""
    text = " ".join(str(e).replace("`", "'").split())
    return text if len(text) <= 200 else text[:199] + "…"


# --------------------------------------------------------------------------- the schema

def from_mapping(data: object, where: str, *, spec: str) -> Cluster:
    """``{"groups": [...], "cross": ...}`` → :class:`Cluster`; ``where`` names the file in messages."""
    if not isinstance(data, dict):
        raise ConfigError(f"cluster: {where}: the file must hold a table with groups (and optionally cross)")
    check_keys(data, TOP_KEYS, where)
    groups = data.get("groups")
    if not isinstance(groups, list) or not groups:
        raise ConfigError(f"cluster: {where}: no groups; write [[groups]] tables (TOML) or a groups: list "
                          f"(YAML), each with gpu and count")
    if len(groups) > MAX_GROUPS:
        raise ConfigError(f"cluster: {len(groups):,} groups; at most {MAX_GROUPS}")
    notes: list[str] = []
    specs = [group_from_table(item, f"groups[{i}]", notes) for i, item in enumerate(groups, 1)]
    cross = link_from_value(data["cross"], "cross", notes) if "cross" in data else None
    return build_cluster(specs, spec=spec, cross=cross, notes=notes)


def group_from_table(item: object, where: str, notes: list[str]) -> GroupSpec:
    if not isinstance(item, dict):
        raise ConfigError(f"cluster: {where} must be a table (gpu, count, ...), not {shown(item)}")
    check_keys(item, GROUP_KEYS, where)
    if "gpu" not in item:
        raise ConfigError(f"cluster: {where}: gpu is missing")
    gpu = lookup_gpu(text_field(item, "gpu", where), where)
    if ("count" in item) == ("nodes" in item):
        raise ConfigError(f"cluster: {where}: give either count (GPUs) or nodes (nodes of gpus_per_node GPUs)")
    per = int_field(item, "gpus_per_node", where, MAX_NODE_GPUS) if "gpus_per_node" in item else None
    if "count" in item:
        count = int_field(item, "count", where, MAX_TOTAL_GPUS)
    else:
        count = int_field(item, "nodes", where, MAX_TOTAL_GPUS) * (per or gpu.gpus_per_node)
        check_total(count, where)
    links = {level: link_from_value(item[level], f"{where}.{level}", notes) for level in LEVELS if level in item}
    host_ram = host_memory_size(item["host_memory"], where) if "host_memory" in item else None
    return GroupSpec(where=where, gpu=gpu, count=count, gpus_per_node=per, links=links, host_memory_bytes=host_ram)


def link_from_value(value: object, where: str, notes: list[str]) -> Link:
    """A ``links.json`` name, or a table: ``link`` (a row to start from) and/or explicit ``gbps``,
    ``latency_us``, ``efficiency``, ``kind``, ``name``."""
    if isinstance(value, str):
        return lookup_link(value, where)
    if not isinstance(value, dict):
        raise ConfigError(f"cluster: {where} must be a link name or a table (link, gbps, latency_us, efficiency, "
                          f"kind, name), not {shown(value)}")
    check_keys(value, LINK_KEYS, where)
    base = lookup_link(text_field(value, "link", where), where) if "link" in value else None
    if base is None and not ("gbps" in value and "latency_us" in value):
        raise ConfigError(f"cluster: {where}: give link (a links.json row) or both gbps and latency_us")
    given = [k for k in ("gbps", "latency_us", "efficiency", "kind", "name") if k in value]
    if base is not None and not given:
        return base
    gbps = num_field(value, "gbps", where, MAX_GBPS, zero=False) if "gbps" in value else base.gbps
    latency_s = (num_field(value, "latency_us", where, MAX_LATENCY_US, zero=True) * 1e-6 if "latency_us" in value
                 else base.latency_s)
    efficiency = (num_field(value, "efficiency", where, 1, zero=False) if "efficiency" in value
                  else base.efficiency if base is not None else 1.0)
    kind = kind_field(value, where) if "kind" in value else base.kind if base is not None else "custom"
    default_name = f"{base.name} (edited)" if base is not None else f"custom {fmt_gbps(gbps)} GB/s"
    name = text_field(value, "name", where) if "name" in value else default_name
    if base is None and "efficiency" not in value:
        notes.append(f"{name}: efficiency 1: its gbps is taken as the achieved rate (none given)")
    return Link(name=name, kind=kind, gbps=float(gbps), efficiency=float(efficiency), latency_s=latency_s,
                source=f"cluster file, {where}" + (f" (from {base.name}: {base.source})" if base else ""),
                note=f"given in the cluster file: {', '.join(given)}" + (f"; {base.note}" if base else ""),
                shared_by=base.shared_by if base is not None else 1,
                assumed=tuple(a for a in base.assumed if a not in given) if base is not None else ())


# --------------------------------------------------------------------------- field checks

def check_keys(table: dict, known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigError(f"cluster: {where}: unknown key {shown(key)} (known: {', '.join(known)})")


def text_field(table: dict, key: str, where: str) -> str:
    value = table[key]
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise ConfigError(f"cluster: {where}.{key} must be a non-empty text, not {shown(value)}")
    return value.strip()


def int_field(table: dict, key: str, where: str, most: int) -> int:
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigError(f"cluster: {where}.{key} must be a whole number from 1 to {most:,}, not {shown(value)}")
    return value


def num_field(table: dict, key: str, where: str, most: int, *, zero: bool) -> float:
    value = table[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (0 <= value if zero else 0 < value) and value <= most:
        return float(value)
    if zero:
        raise ConfigError(f"cluster: {where}.{key} must be a number from 0 to {most:,}, not {shown(value)}")
    raise ConfigError(f"cluster: {where}.{key} must be a number above 0 and at most {most:,}, not {shown(value)}")


def kind_field(table: dict, where: str) -> str:
    value = table["kind"]
    if value not in LINK_KINDS:
        raise ConfigError(f"cluster: {where}.kind must be one of {', '.join(LINK_KINDS)}, not {shown(value)}")
    return value
