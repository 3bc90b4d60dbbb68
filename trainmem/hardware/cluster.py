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
GPU's share of the node's NICs), ``host`` (GPU ↔ host), ``host_memory`` (host RAM of one node, ``1TiB``,
``512GiB``; default: the catalog's per GPU type, ``gpus.json`` ``host_memory_gib``, which the planner checks
offload plans against); link values are ``links.json`` names, and ``<name>-sharedN`` divides a NIC among N
GPUs. A text form has no cross-group link (use a file).

File form (``.toml`` or ``.yaml``/``.yml``)
-------------------------------------------
Top-level keys ``groups`` (a list, required) and ``cross`` (a link between groups of different types,
optional). Each group: ``gpu`` (required), either ``count`` (GPUs) or ``nodes`` (nodes of
``gpus_per_node`` GPUs), and optional ``gpus_per_node``, ``intra``, ``inter``, ``host``, ``host_memory`` (a size
text or whole bytes). A link is a
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
- Every default filled in (GPUs per node, each link) is a sentence in ``Cluster.notes`` (the host RAM's source
  is ``GPUGroup.host_memory_from``, stated by the planner where it checks a plan against it), as are shared
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

from trainmem.hardware.cluster_types import Cluster, GPUGroup, Link

__all__ = ["Link", "GPUGroup", "Cluster", "parse_cluster"]


def parse_cluster(spec: str | os.PathLike[str]) -> Cluster:
    """``64xH100-SXM-80G``, ``4x8xH100``, ``8xA100-SXM-80G,4xRTX-3090-24G``,
    ``16xA100-SXM-80G[node=8,inter=IB-HDR200]`` or a path to a ``.toml``/``.yaml`` file; every default
    filled in is stated in ``Cluster.notes``. Grammar and file schema: this module's docstring.
    Bad input raises a one-line :class:`~trainmem.errors.ConfigError` naming the bad piece."""
    from trainmem.hardware.cluster_spec import is_file_spec, parse

    text = os.fspath(spec) if isinstance(spec, os.PathLike) else spec
    if is_file_spec(text):
        from trainmem.hardware.cluster_file import parse_file  # (the TOML/YAML readers only when a file is read)
        return parse_file(text.strip())
    return parse(text)
