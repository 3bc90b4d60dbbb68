"""Parsing of the cluster forms of :func:`trainmem.hardware.cluster.parse_cluster` (text and files).

The grammar and the file schema are documented in :mod:`trainmem.hardware.cluster`; this module
holds the parser. Limits: 1 to 1,000,000 GPUs in all, 1 to 1,024 GPUs per node, at most 64 groups,
a text form of at most 2,000 characters, a file of at most 1 MB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainmem.errors import ConfigError
from trainmem.hardware.catalog import GPU, get_gpu, gpu_suggestions
from trainmem.hardware.cluster_types import Cluster, GPUGroup, Link
from trainmem.hardware.links import get_link

__all__ = ["parse", "is_file_spec", "MAX_TOTAL_GPUS", "MAX_NODE_GPUS", "MAX_GROUPS"]

MAX_TOTAL_GPUS = 1_000_000
MAX_NODE_GPUS = 1024
MAX_GROUPS = 64
MAX_SPEC_CHARS = 2000
MAX_FILE_BYTES = 1_000_000
FILE_SUFFIXES = (".toml", ".yaml", ".yml")
LEVELS = ("intra", "inter", "host")

_GROUP = re.compile(r"(\d+)\s*[x×*]\s*(?:(\d+)\s*[x×*]\s*)?([^\[\]]+?)\s*(?:\[([^\[\]]*)\])?", re.IGNORECASE)
_PATH = re.compile(r"[/\\]|\.[A-Za-z][A-Za-z0-9]{0,4}$")  # a separator, or a suffix ('pool.json')
_SETTING_KEYS = {"node": "node", "gpus_per_node": "node", "intra": "intra", "inter": "inter", "host": "host",
                 "host_memory": "host_memory"}


@dataclass
class GroupSpec:
    """One group as written, before the catalog defaults are filled in."""

    where: str
    """What messages call it: the quoted text piece (``'8xA100'``) or the file entry (``groups[2]``)."""
    gpu: GPU
    count: int
    gpus_per_node: int | None = None
    links: dict[str, Link] = field(default_factory=dict)
    host_memory_bytes: int | None = None
    """Host RAM per node as written (``[host_memory=1TiB]``, a file's ``host_memory``); None: the catalog's."""


# --------------------------------------------------------------------------- entry point

def is_file_spec(spec: object) -> bool:
    """True for the path of a cluster file: a text spec starts with its first count; a path ends in a file
    suffix or holds a separator."""
    text = spec.strip() if isinstance(spec, str) else ""
    return bool(text) and (text.lower().endswith(FILE_SUFFIXES) or (not text[0].isdigit() and bool(_PATH.search(text))))


def parse(spec: str) -> Cluster:
    """A text spec → :class:`Cluster` (see ``parse_cluster``, which sends a file's path to ``cluster_file``)."""
    text = spec.strip() if isinstance(spec, str) else ""
    if not text:
        raise ConfigError("cluster: empty spec; write e.g. 64xH100-SXM-80G, 8xA100-SXM-80G,4xRTX-3090-24G "
                          "or the path of a .toml or .yaml file")
    if len(text) > MAX_SPEC_CHARS:
        raise ConfigError(f"cluster: the spec has {len(text):,} characters; at most {MAX_SPEC_CHARS:,}")
    specs = [parse_group(piece) for piece in split_groups(text)]
    return build_cluster(specs, spec=text)


# --------------------------------------------------------------------------- the text form

def split_groups(text: str) -> list[str]:
    """``'8xA100[node=4,inter=X],4x3090'`` → ``['8xA100[node=4,inter=X]', '4x3090']``: commas (or ``+``)
    outside brackets separate groups."""
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth < 0 or depth > 1:
            raise ConfigError(f"cluster: unbalanced brackets in {shown(text)}")
        if ch in ",+" and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"cluster: unbalanced brackets in {shown(text)}")
    pieces.append(text[start:])
    pieces = [p.strip() for p in pieces]
    if any(not p for p in pieces):
        raise ConfigError(f"cluster: an empty group in {shown(text)} (two commas in a row?)")
    if len(pieces) > MAX_GROUPS:
        raise ConfigError(f"cluster: {len(pieces):,} groups; at most {MAX_GROUPS}")
    return pieces


def parse_group(piece: str) -> GroupSpec:
    """``'64xH100'``, ``'4x8xH100'`` (4 nodes of 8) or ``'16xA100[node=8,inter=IB-HDR200]'``."""
    where = shown(piece)
    m = _GROUP.fullmatch(piece)
    if m is None:
        raise ConfigError(f"cluster: {where} is not COUNTxGPU (e.g. 64xH100-SXM-80G, or 4x8xH100 for "
                          f"4 nodes of 8 GPUs)")
    first, second, name, settings = m.groups()
    gpu = lookup_gpu(name.strip(), where)
    per_node = None
    if second is None:
        count = whole(first, where, "the GPU count", MAX_TOTAL_GPUS)
    else:
        nodes = whole(first, where, "the node count", MAX_TOTAL_GPUS)
        per_node = whole(second, where, "GPUs per node", MAX_NODE_GPUS)
        count = nodes * per_node
        check_total(count, where)
    spec = GroupSpec(where=where, gpu=gpu, count=count, gpus_per_node=per_node)
    if settings is not None:
        apply_settings(spec, settings, nodes_form=second is not None)
    return spec


def apply_settings(spec: GroupSpec, settings: str, *, nodes_form: bool) -> None:
    """``node=8,intra=…,inter=…,host=…`` of a ``[...]`` onto ``spec``."""
    where, seen = spec.where, set()
    for item in (s.strip() for s in settings.split(",")):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not value:
            raise ConfigError(f"cluster: {where}: write the settings in [...] as key=value, not {shown(item)}")
        canon = _SETTING_KEYS.get(key.lower())
        if canon is None:
            raise ConfigError(f"cluster: {where}: unknown setting {shown(key)} in [...]; use node, intra, inter, host, "
                              "host_memory")
        if canon in seen or (canon == "node" and nodes_form):
            raise ConfigError(f"cluster: {where}: {canon} is given twice")
        seen.add(canon)
        if canon == "node":
            spec.gpus_per_node = whole(value, where, "node", MAX_NODE_GPUS)
        elif canon == "host_memory":
            spec.host_memory_bytes = host_memory_size(value, where)
        else:
            spec.links[canon] = lookup_link(value, where)


def whole(text: str, where: str, what: str, most: int) -> int:
    """A decimal count from 1 to ``most`` (no sign, no fraction, no exponent)."""
    if not text.isdigit() or len(text) > 9 or not 1 <= int(text) <= most:
        raise ConfigError(f"cluster: {where}: {what} must be a whole number from 1 to {most:,}, not {shown(text)}")
    return int(text)


def host_memory_size(value: object, where: str) -> int:
    """A node's host RAM: a size (``1TiB``, ``512GiB``, ``2TB``) or a whole number of bytes."""
    from trainmem.units import parse_size_bytes
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        try:
            return parse_size_bytes(value)
        except ValueError as err:
            raise ConfigError(f"cluster: {where}: host_memory: {err}") from None
    raise ConfigError(f"cluster: {where}: host_memory must be a size such as 1TiB or 512GiB, not {shown(value)}")


def lookup_gpu(name: str, where: str) -> GPU:
    try:
        return get_gpu(name)
    except ConfigError:
        near = gpu_suggestions(name)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise ConfigError(f"cluster: {where}: unknown GPU {shown(name)}{hint} (trainmem gpus lists them)") from None


def lookup_link(name: str, where: str) -> Link:
    try:
        return get_link(name)
    except ConfigError as e:
        raise ConfigError(f"cluster: {where}: {e}") from None


def check_total(total: int, where: str = "") -> None:
    """At most 1,000,000 GPUs: in one group (``where``) or in all."""
    if total > MAX_TOTAL_GPUS and where:
        raise ConfigError(f"cluster: {where}: {total:,} GPUs; at most {MAX_TOTAL_GPUS:,}")
    if total > MAX_TOTAL_GPUS:
        raise ConfigError(f"cluster: {total:,} GPUs in all; at most {MAX_TOTAL_GPUS:,}")


def shown(value: object) -> str:
    """``repr(value)``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


# --------------------------------------------------------------------------- defaults and the Cluster

def build_cluster(specs: list[GroupSpec], *, spec: str, cross: Link | None = None,
                  notes: list[str] | None = None) -> Cluster:
    """The groups with every default filled in and stated; duplicate GPU types and totals checked."""
    notes = list(notes or [])
    seen: dict[str, str] = {}
    for s in specs:
        if s.gpu.name in seen:
            raise ConfigError(f"cluster: {s.gpu.name} is listed twice ({seen[s.gpu.name]} and {s.where}); "
                              f"give each GPU type once")
        seen[s.gpu.name] = s.where
    check_total(sum(s.count for s in specs))
    groups = tuple(fill_defaults(s, notes) for s in specs)
    cluster = Cluster(groups=groups, spec=spec, cross_link=cross, notes=())
    if cluster.is_mixed and cross is None:
        notes.append(f"between the GPU types: {cluster.between_groups.name}, the slowest of the groups' "
                     f"inter-node links (no cross link given)")
    links = [*(link for g in groups for link in (g.intra, g.inter, g.host)), *([cross] if cross else [])]
    notes += link_notes(links)
    return Cluster(groups=groups, spec=spec, cross_link=cross, notes=tuple(dict.fromkeys(notes)))


def fill_defaults(s: GroupSpec, notes: list[str]) -> GPUGroup:
    """``s`` with the catalog's node size and links where none was given, each default stated."""
    g, name = s.gpu, s.gpu.name
    per = s.gpus_per_node or g.gpus_per_node
    links = {level: s.links.get(level) or catalog_link(g, level) for level in LEVELS}
    node_default, defaulted = s.gpus_per_node is None, [lv for lv in LEVELS if lv not in s.links]
    if node_default and len(defaulted) == 3:
        notes.append(f"{name}: {per} GPUs per node, {links['intra'].name} inside a node, {links['inter'].name} "
                     f"between nodes, {links['host'].name} to the host (catalog defaults)")
    else:
        if node_default:
            notes.append(f"{name}: {per} GPUs per node (catalog default)")
        if "intra" in defaulted:
            notes.append(f"{name}: {links['intra'].name} inside a node (catalog default)")
        if "inter" in defaulted:
            notes.append(f"{name}: {links['inter'].name} between nodes (catalog default)")
        if "host" in defaulted:
            notes.append(f"{name}: {links['host'].name} to the host (catalog default)")
    host_ram, host_from = s.host_memory_bytes, ("cluster file " + s.where if s.where.startswith("groups[")
                                                else "cluster spec")
    if host_ram is None:
        host_ram, host_from = g.host_memory_bytes, f"catalog default for {name}" + (", assumed" if g.host_memory_assumed
                                                                                    else "")
    group = GPUGroup(gpu=g, count=s.count, gpus_per_node=per, intra=links["intra"], inter=links["inter"],
                     host=links["host"], host_memory_bytes=host_ram, host_memory_from=host_from if host_ram else "")
    if group.last_node_gpus != per:
        notes.append(f"{name}: {s.count:,} GPUs in nodes of {per}: the last node holds {group.last_node_gpus}")
    return group


def catalog_link(gpu: GPU, level: str) -> Link:
    name = {"intra": gpu.intra_link, "inter": gpu.inter_link, "host": gpu.host_link}[level]
    if not name:  # every row of gpus.json has all three (tests/hardware); kept for rows added later
        raise ConfigError(f"cluster: {gpu.name} has no catalog default for its {level} link; "
                          f"name one: [{level}=NAME]")
    return get_link(name)


def link_notes(links: list[Link]) -> list[str]:
    """One sentence per shared NIC and per link with assumed figures (each link once)."""
    notes: list[str] = []
    for link in dict.fromkeys(links):
        if link.shared_by > 1:
            notes.append(f"{link.name}: one NIC shared by {link.shared_by} GPUs, "
                         f"{fmt_gbps(link.gbps)} GB/s each way per GPU")
        if link.assumed:
            notes.append(f"{link.name}: {', '.join(link.assumed)} assumed, not measured (see its links.json note)")
    return notes


def fmt_gbps(gbps: float) -> str:
    """``12.5`` → ``'12.5'``, ``1.5625`` → ``'1.56'``."""
    return f"{gbps:.3g}" if gbps < 100 else f"{gbps:,.0f}"
