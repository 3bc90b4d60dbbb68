"""Alpha-beta collectives by hand."""

from __future__ import annotations

import pytest

from trainmem.perf.collectives import (allgather_seconds, allreduce_seconds, alltoall_seconds, p2p_seconds,
                                       reduce_scatter_seconds, span)
from tests.perf._fixtures import IB, NVLINK

B_NV = 450e9 * 0.8
B_IB = 50e9 * 0.8


def test_span_follows_the_rank_order():
    assert span(8, 1, 8) == (8, 8, 1)          # TP 8 inside a node
    assert span(4, 2, 8) == (4, 4, 1)          # CP 4 at stride tp 2: one node
    assert span(16, 8, 8) == (16, 1, 16)       # DP at stride 8: one rank per node
    assert span(16, 2, 8) == (16, 4, 4)        # DP at stride 2: 4 per node, 4 nodes
    assert span(1, 4, 8) == (1, 1, 1)


def test_ring_allreduce_inside_a_node():
    s = 1e9
    expected = 2 * 7 / 8 * s / B_NV + min(2 * 7, 2 * 3) * NVLINK.latency_s
    assert allreduce_seconds(s, (8, 8, 1), NVLINK, IB) == pytest.approx(expected)


def test_allgather_and_reduce_scatter_inside_a_node():
    s = 2e9
    expected = 7 / 8 * s / B_NV + 7 * NVLINK.latency_s
    assert allgather_seconds(s, (8, 8, 1), NVLINK, IB) == pytest.approx(expected)
    assert reduce_scatter_seconds(s, (8, 8, 1), NVLINK, IB) == pytest.approx(expected)


def test_hierarchical_allreduce_across_nodes():
    """64 ranks, 8 per node: the intra step 2·7/8·S/B_nv and the inter step over 8 nodes with S/8 per NIC,
    2·7/8·(S/8)/B_ib, pipelined (the slower counts); latencies add."""
    s = 4e9
    intra = 2 * 7 / 8 * s / B_NV
    inter = 2 * 7 / 8 * (s / 8) / B_IB
    lat = 2 * 7 * NVLINK.latency_s + min(14, 6) * IB.latency_s
    assert allreduce_seconds(s, (64, 8, 8), NVLINK, IB) == pytest.approx(max(intra, inter) + lat)


def test_one_rank_per_node_is_a_plain_inter_node_ring():
    s = 1e9
    expected = 2 * 15 / 16 * s / B_IB + min(30, 8) * IB.latency_s
    assert allreduce_seconds(s, (16, 1, 16), NVLINK, IB) == pytest.approx(expected)


def test_alltoall_splits_intra_and_inter_traffic():
    s = 8e8
    # 16 ranks, 8 per node: 7/16 of the data to node peers, 8/16 across nodes
    expected = max(s * 7 / 16 / B_NV, s * 8 / 16 / B_IB) + NVLINK.latency_s + IB.latency_s
    assert alltoall_seconds(s, (16, 8, 2), NVLINK, IB) == pytest.approx(expected)
    assert alltoall_seconds(s, (8, 8, 1), NVLINK, IB) == pytest.approx(s * 7 / 8 / B_NV + NVLINK.latency_s)


def test_p2p_and_single_rank():
    assert p2p_seconds(1e6, IB) == pytest.approx(1e6 / B_IB + IB.latency_s)
    assert allreduce_seconds(1e9, (1, 1, 1), NVLINK, IB) == 0.0
    assert allgather_seconds(1e9, (1, 1, 1), NVLINK, IB) == 0.0
