"""The pool's types: :class:`Link` (one interconnect level), :class:`GPUGroup` (GPUs of one type and their
links), :class:`Cluster` (the groups and the link between them). Read from a spec or a file by
:func:`trainmem.hardware.cluster.parse_cluster` (grammar and schema: that module's docstring); in a module of
their own so that the readers (``cluster_spec``, ``cluster_file``, ``links``) import them without importing
the entry point that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.hardware.catalog import GPU

__all__ = ["Link", "GPUGroup", "Cluster"]


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
    host_memory_bytes: int | None = None
    """Host RAM of one node: the spec's ``host_memory`` or the catalog's default for the GPU type
    (``GPU.host_memory_bytes``); None where neither gives one (offload plans are then not checked)."""
    host_memory_from: str = ""
    """Where ``host_memory_bytes`` comes from, as the planner's refusals and assumptions say it:
    ``cluster spec`` / ``cluster file groups[1]`` / ``catalog default for RTX-4090-24G, assumed``."""

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
