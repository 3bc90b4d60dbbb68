"""Hand-built links and GPU groups for the performance-model tests (independent of links.json)."""

from __future__ import annotations

from trainmem.hardware import get_gpu
from trainmem.hardware.cluster import GPUGroup, Link

NVLINK = Link(name="NVLink4-NVSwitch", kind="nvlink", gbps=450.0, efficiency=0.8, latency_s=5e-6)
NVLINK3 = Link(name="NVLink3-NVSwitch", kind="nvlink", gbps=300.0, efficiency=0.8, latency_s=5e-6)
IB = Link(name="IB-NDR400", kind="ib", gbps=50.0, efficiency=0.8, latency_s=10e-6)
PCIE = Link(name="PCIe5-x16", kind="pcie", gbps=64.0, efficiency=0.8, latency_s=5e-6)


def group(gpu: str = "H100-SXM-80G", count: int = 8, per_node: int = 8, intra: Link = NVLINK,
          inter: Link = IB, host: Link = PCIE) -> GPUGroup:
    return GPUGroup(gpu=get_gpu(gpu), count=count, gpus_per_node=per_node, intra=intra, inter=inter, host=host)


def scaled(link: Link, factor: float) -> Link:
    """The same link ``factor`` times faster."""
    return Link(name=link.name, kind=link.kind, gbps=link.gbps * factor, efficiency=link.efficiency,
                latency_s=link.latency_s / factor)
