"""Alpha-beta cost of NCCL collectives, per link level, and where each parallel group's ranks sit.

n ranks, S bytes (the full buffer: all-reduce input, all-gather output, reduce-scatter input), B the
achieved bandwidth of the link per GPU per direction (``Link.effective_gbps``, NCCL bus bandwidth) and
α its per-message latency (``Link.latency_s``):

- ring all-reduce: 2(n−1)/n · S/B + 2(n−1)·α; all-gather and reduce-scatter: (n−1)/n · S/B + (n−1)·α
  (Thakur et al. 2005; NCCL's bus-bandwidth definition in nccl-tests ``doc/PERFORMANCE.md``).
- Simplification of NCCL's algorithm choice: the latency term is the smaller of the ring's 2(n−1)·α and a
  tree's 2·⌈log2 n⌉·α (NCCL picks trees for latency-bound sizes across nodes); the bandwidth term is the
  ring's in both cases.
- A group that spans nodes with g of its ranks per node: the intra-node and inter-node hops run pipelined
  (NCCL runs one ring/channel per NIC, so each node's g GPUs send through their g NICs in parallel): the
  bandwidth term is the slower of the intra-node step (2(g−1)/g · S/B_intra) and the inter-node step over
  the N = n/g nodes with each GPU's NIC share carrying S/g (2(N−1)/N · (S/g)/B_inter); the latencies add.
- all-to-all (expert parallelism): each rank sends (n−1)/n of its S bytes, split between peers inside and
  outside the node; the sends to all peers are issued together (NCCL groups them), so the latency is one
  α per link level used.
- point-to-point (pipeline stages, context-parallel ring): S/B + α.

Rank placement follows Megatron's default order ``tp-cp-ep-dp-pp`` (megatron/core/parallel_state.py
``RankGenerator``; torchtitan's device mesh ``[pp, dp_replicate, dp_shard, cp, tp]`` is the same nesting):
TP ranks are consecutive, CP ranks stride tp, DP ranks stride tp·cp, PP ranks stride tp·cp·dp; experts
(expert-TP = TP) stride tp over ep.
"""

from __future__ import annotations

import math

from trainmem.hardware.cluster import Link

__all__ = ["span", "allreduce_seconds", "allgather_seconds", "reduce_scatter_seconds", "alltoall_seconds",
           "p2p_seconds", "link_bytes_per_s", "net_of", "allreduce_affine", "allgather_affine"]


def span(size: int, stride: int, gpus_per_node: int) -> tuple[int, int, int]:
    """(n, g, N): a group of ``size`` ranks ``stride`` apart: g ranks share a node, N = ⌈n/g⌉ nodes."""
    if size <= 1:
        return 1, 1, 1
    per_node = max(1, gpus_per_node // max(stride, 1)) if stride < gpus_per_node else 1
    g = min(size, per_node)
    return size, g, -(-size // g)


def link_bytes_per_s(link: Link) -> float:
    """Achieved bytes/s of a link (``effective_gbps`` is GB/s, 10^9)."""
    return link.effective_gbps * 1e9


def _tree_or_ring(steps_ring: int, n: int) -> int:
    return min(steps_ring, 2 * math.ceil(math.log2(n))) if n > 1 else 0


def net_of(intra: Link, inter: Link) -> tuple[float, float, float, float]:
    """(intra seconds/byte, intra α, inter seconds/byte, inter α) of a pair of link levels."""
    return (1.0 / link_bytes_per_s(intra), intra.latency_s, 1.0 / link_bytes_per_s(inter), inter.latency_s)


def allreduce_affine(sp: tuple[int, int, int], net: tuple[float, float, float, float]) -> tuple[float, float]:
    """(seconds per byte, latency seconds) of an all-reduce over ``sp`` = (n, g, N): ring inside a node,
    hierarchical and pipelined across nodes, tree latency where smaller (module docstring)."""
    n, g, nodes = sp
    if n <= 1:
        return 0.0, 0.0
    si, ai, se, ae = net
    if nodes == 1:
        return 2 * (n - 1) / n * si, _tree_or_ring(2 * (n - 1), n) * ai
    beta = max(2 * (g - 1) / g * si, 2 * (nodes - 1) / nodes / g * se)
    return beta, 2 * (g - 1) * ai + _tree_or_ring(2 * (nodes - 1), nodes) * ae


def allgather_affine(sp: tuple[int, int, int], net: tuple[float, float, float, float]) -> tuple[float, float]:
    """(seconds per byte of the gathered output, latency seconds) of an all-gather (= a reduce-scatter
    of the same input size)."""
    n, g, nodes = sp
    if n <= 1:
        return 0.0, 0.0
    si, ai, se, ae = net
    if nodes == 1:
        return (n - 1) / n * si, (n - 1) * ai
    return max((g - 1) / g * si, (nodes - 1) / nodes / g * se), (g - 1) * ai + (nodes - 1) * ae


def allreduce_seconds(nbytes: float, sp: tuple[int, int, int], intra: Link, inter: Link) -> float:
    """Ring (or tree-latency) all-reduce of ``nbytes`` over the group ``sp`` = (n, g, N), hierarchical
    across nodes (module docstring)."""
    if sp[0] <= 1:
        return 0.0
    beta, lat = allreduce_affine(sp, net_of(intra, inter))
    return beta * nbytes + lat


def allgather_seconds(nbytes: float, sp: tuple[int, int, int], intra: Link, inter: Link) -> float:
    """All-gather whose output is ``nbytes`` (each rank contributes nbytes/n), hierarchical across nodes."""
    if sp[0] <= 1:
        return 0.0
    beta, lat = allgather_affine(sp, net_of(intra, inter))
    return beta * nbytes + lat


def reduce_scatter_seconds(nbytes: float, sp: tuple[int, int, int], intra: Link, inter: Link) -> float:
    """Reduce-scatter of an ``nbytes`` input: the mirror image of the all-gather, same cost."""
    return allgather_seconds(nbytes, sp, intra, inter)


def alltoall_seconds(nbytes: float, sp: tuple[int, int, int], intra: Link, inter: Link) -> float:
    """All-to-all where each rank holds ``nbytes`` spread evenly over the n ranks of the group: (g−1)/n
    of it goes to node-local peers, (n−g)/n across nodes, both at once."""
    n, g, nodes = sp
    if n <= 1:
        return 0.0
    t_in = nbytes * (g - 1) / n / link_bytes_per_s(intra)
    t_out = nbytes * (n - g) / n / link_bytes_per_s(inter) if nodes > 1 else 0.0
    lat = (intra.latency_s if g > 1 else 0.0) + (inter.latency_s if nodes > 1 else 0.0)
    return max(t_in, t_out) + lat


def p2p_seconds(nbytes: float, link: Link) -> float:
    """One send/receive of ``nbytes`` over ``link``."""
    if nbytes <= 0:
        return 0.0
    return nbytes / link_bytes_per_s(link) + link.latency_s
