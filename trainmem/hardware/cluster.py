"""A GPU pool as the planner and the performance model see it: groups of one GPU type each, with
their node size and the links inside and between nodes.

INTERFACE (fixed; the planner and ``trainmem.perf`` build on it). The link rows live in ``links.json``
(:mod:`trainmem.hardware.links`: ``get_link``, ``list_links``); :func:`parse_cluster` reads the forms
below (parser: :mod:`trainmem.hardware.cluster_spec` and :mod:`trainmem.hardware.cluster_file`).

Text form
---------
Groups separated by ``,`` (or ``+``); each group is ``COUNTxGPU`` or ``NODESxPERxGPU`` (``x``, ``X``,
``×`` or ``*``), with optional settings in brackets::

    64xH100-SXM-80G                       64 GPUs, the catalog's node size (8) and links
    64×H100                               the same (GPU names as get_gpu takes them)
    4x8xH100                              4 nodes × 8 GPUs
    8xA100-SXM-80G,4xRTX-3090-24G         a mixed pool: one group per GPU type
    16xA100-SXM-80G[node=8,inter=IB-HDR200]
    6xRTX-4090[node=2,intra=PCIe4-x16-noP2P,inter=Ethernet-10G-shared2,host=PCIe4-x16]

Settings: ``node`` (GPUs per node, 1-1,024), ``intra`` (inside a node), ``inter`` (between nodes, one
GPU's share of the node's NICs), ``host`` (GPU ↔ host); link values are ``links.json`` names, and
``<name>-sharedN`` divides a NIC among N GPUs. A text form has no cross-group link (use a file).

File form (``.toml`` or ``.yaml``/``.yml``)
-------------------------------------------
Top-level keys ``groups`` (a list, required) and ``cross`` (a link between groups of different types,
optional). Each group: ``gpu`` (required), either ``count`` (GPUs) or ``nodes`` (nodes of
``gpus_per_node`` GPUs), and optional ``gpus_per_node``, ``intra``, ``inter``, ``host``. A link is a
``links.json`` name or a table: ``link`` (a row to start from) and/or ``gbps`` (GB/s per GPU per
direction), ``latency_us``, ``efficiency`` (0-1; 1 if there is no ``link``: ``gbps`` is then the
achieved rate), ``kind``, ``name``; without ``link`` both ``gbps`` and ``latency_us`` are required.
Example (TOML; examples/clusters/ has a 64 × H100 DGX cluster and a mixed A100 + RTX 3090 pool)::

    [[groups]]
    gpu = "A100-SXM-80G"
    count = 8

    [[groups]]
    gpu = "RTX-3090-24G"
    nodes = 1
    gpus_per_node = 4
    inter = { gbps = 1.25, latency_us = 30, efficiency = 0.6, kind = "ethernet", name = "lab 10 GbE" }

    [cross]
    link = "Ethernet-25G-shared4"

The same in YAML: ``groups:`` a list of mappings with the same keys, ``cross:`` a name or a mapping.

Rules
-----
- Every default filled in (GPUs per node, each link) is a sentence in ``Cluster.notes``, as are shared
  NICs, links whose figures are assumptions, a partial last node and, in a mixed pool without
  ``cross``, the link taken between the groups (the slowest ``inter``).
- A count that does not fill its nodes is allowed: the last node is partial (stated).
- Each GPU type appears once (two groups of one type are refused: merge them or use a file with one
  group); 1 to 1,000,000 GPUs in all; at most 64 groups.
- Bad input is a one-line :class:`~trainmem.errors.ConfigError` naming the bad piece: unknown GPUs
  and links with the nearest names, counts that are not whole numbers from 1, unknown keys, a
  missing file, a file that is not valid TOML/YAML.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from trainmem.hardware.catalog import GPU

__all__ = ["Link", "GPUGroup", "Cluster", "parse_cluster"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """One interconnect level as one GPU sees it."""

    name: str
    """Catalog name, e.g. ``NVLink4-NVSwitch``, ``PCIe4-x16``, ``IB-NDR400``."""
    kind: str
    """``nvlink`` | ``pcie`` | ``ib`` | ``roce`` | ``ethernet`` | ``xgmi`` | ``hccs`` (``custom``: numbers
    given in a cluster file without a catalog row)."""
    gbps: float
    """Peak bandwidth per GPU per direction, GB/s (10^9 bytes/s)."""
    efficiency: float
    """Achieved fraction of ``gbps`` in large collectives (NCCL bus bandwidth / peak), cited."""
    latency_s: float
    """Per-message latency (the alpha of the alpha-beta model), seconds."""
    source: str = ""
    note: str = ""
    shared_by: int = 1
    """GPUs sharing the row's NIC (``IB-EDR100-shared2``): ``gbps`` is already one GPU's share."""
    assumed: tuple[str, ...] = ()
    """Fields (``gbps``, ``efficiency``, ``latency_us``) whose figure is a stated assumption, not a cited
    measurement (``note`` gives the basis)."""

    @property
    def effective_gbps(self) -> float:
        return self.gbps * self.efficiency


@dataclass(frozen=True, kw_only=True, slots=True)
class GPUGroup:
    """``count`` GPUs of one type in nodes of ``gpus_per_node`` (the last node may be partial)."""

    gpu: GPU
    count: int
    gpus_per_node: int
    intra: Link
    """Between GPUs of one node (NVLink/NVSwitch, PCIe, xGMI …)."""
    inter: Link
    """Between nodes, per GPU (its share of the node's NICs)."""
    host: Link
    """Host ↔ device (offload traffic): the GPU's PCIe link."""

    @property
    def nodes(self) -> int:
        return -(-self.count // self.gpus_per_node)

    @property
    def last_node_gpus(self) -> int:
        """GPUs in the last node (``gpus_per_node`` unless the count does not fill it)."""
        return self.count - (self.nodes - 1) * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    groups: tuple[GPUGroup, ...]
    spec: str = ""
    """The text or file it was parsed from."""
    cross_link: Link | None = None
    """Between groups of different types (mixed pools); None: the slower ``inter`` of the two."""
    notes: tuple[str, ...] = field(default=())
    """Defaults that were filled in (GPUs per node, links), stated in the plan's assumptions."""

    @property
    def total_gpus(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def is_mixed(self) -> bool:
        return len(self.groups) > 1

    @property
    def between_groups(self) -> Link:
        """The link between groups of different types: ``cross_link``, else the group ``inter`` link with
        the lowest effective bandwidth (the one a cross-group transfer cannot beat)."""
        if self.cross_link is not None:
            return self.cross_link
        return min((g.inter for g in self.groups), key=lambda link: link.effective_gbps)

    @property
    def label(self) -> str:
        """``64× H100-SXM-80G (8 nodes × 8)``; a mixed pool: ``8× A100-SXM-80G + 4× RTX-3090-24G``."""
        if self.is_mixed:
            return " + ".join(f"{g.count:,}× {g.gpu.name}" for g in self.groups)
        g = self.groups[0]
        if g.nodes == 1:
            return f"{g.count:,}× {g.gpu.name} (1 node)"
        if g.last_node_gpus != g.gpus_per_node:
            return (f"{g.count:,}× {g.gpu.name} ({g.nodes:,} nodes of {g.gpus_per_node}, "
                    f"the last with {g.last_node_gpus})")
        return f"{g.count:,}× {g.gpu.name} ({g.nodes:,} nodes × {g.gpus_per_node})"


def parse_cluster(spec: str | os.PathLike[str]) -> Cluster:
    """``64xH100-SXM-80G``, ``4x8xH100``, ``8xA100-SXM-80G,4xRTX-3090-24G``,
    ``16xA100-SXM-80G[node=8,inter=IB-HDR200]`` or a path to a ``.toml``/``.yaml`` file; every default
    filled in is stated in ``Cluster.notes``. Grammar and file schema: this module's docstring.
    Bad input raises a one-line :class:`~trainmem.errors.ConfigError` naming the bad piece."""
    from trainmem.hardware.cluster_spec import parse

    return parse(os.fspath(spec) if isinstance(spec, os.PathLike) else spec)
