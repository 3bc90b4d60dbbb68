"""A GPU pool as the planner and the performance model see it: groups of one GPU type each, with
their node size and the links inside and between nodes.

INTERFACE (fixed; the planner and ``trainmem.perf`` build on it). Parsing and the link data are
filled in by the hardware work; see ``parse_cluster``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.hardware.catalog import GPU

__all__ = ["Link", "GPUGroup", "Cluster", "parse_cluster"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """One interconnect level as one GPU sees it."""

    name: str
    """Catalog name, e.g. ``NVLink4-NVSwitch``, ``PCIe4-x16``, ``IB-NDR400``."""
    kind: str
    """``nvlink`` | ``pcie`` | ``ib`` | ``roce`` | ``ethernet`` | ``xgmi`` | ``hccs``."""
    gbps: float
    """Peak bandwidth per GPU per direction, GB/s (10^9 bytes/s)."""
    efficiency: float
    """Achieved fraction of ``gbps`` in large collectives (NCCL bus bandwidth / peak), cited."""
    latency_s: float
    """Per-message latency (the alpha of the alpha-beta model), seconds."""
    source: str = ""
    note: str = ""

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


def parse_cluster(spec: str) -> Cluster:
    """``64xH100-SXM-80G``, ``8xA100-SXM-80G,4xRTX-3090-24G`` or a path to a ``.toml``/``.yaml`` file."""
    raise NotImplementedError
