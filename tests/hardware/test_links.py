"""links.json: every row sourced and sane, the cited figures, names and -sharedN, the GPU rows' defaults."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from hypothesis import given, settings, strategies as st

from trainmem.errors import ConfigError
from trainmem.hardware import get_link, list_gpus, list_links
from trainmem.hardware.links import MAX_SHARED_BY

NETWORK = {"ib", "roce", "ethernet"}
INSIDE = {"nvlink", "pcie", "xgmi", "hccs"}


def _raw_rows() -> list[dict]:
    return json.loads(resources.files("trainmem.hardware").joinpath("links.json").read_text())["links"]


def test_every_row_is_sourced_and_sane() -> None:
    names = [link.name for link in list_links()]
    assert len(names) == len(set(names)) == len(_raw_rows())
    for link in list_links():
        assert link.source.startswith("https://"), link.name
        assert len(link.note) > 40, link.name  # says where each figure comes from
        assert link.kind in INSIDE | NETWORK, link.name
        assert 0.5 < link.gbps <= 1000 and 0.3 <= link.efficiency <= 1, link.name
        assert 1e-6 <= link.latency_s <= 1e-4, link.name
        assert set(link.assumed) <= {"gbps", "efficiency", "latency_us"}, link.name
        assert link.shared_by == 1
        if link.assumed:
            assert "assum" in link.note, link.name  # the basis of an assumption is stated


def test_raw_rows_have_only_known_fields() -> None:
    known = {"name", "kind", "aliases", "gbps", "efficiency", "latency_us", "source", "note", "assumed"}
    for row in _raw_rows():
        assert set(row) <= known, row["name"]
        assert {"name", "kind", "gbps", "efficiency", "latency_us", "source", "note"} <= set(row), row["name"]


@pytest.mark.parametrize("name, gbps, achieved", [
    # (row, peak GB/s each way, achieved GB/s = gbps * efficiency) against the cited figures
    ("NVLink4-NVSwitch", 450, 370),   # H100: 900 GB/s both ways; NCCL maintainer: ~370 GB/s (nccl-tests#212)
    ("NVLink3-NVSwitch", 300, 230),   # A100: 600 GB/s both ways; ~230 GB/s (nccl-tests#149)
    ("NVLink4-H800", 200, 160),       # H800: 400 GB/s both ways; DeepSeek-V3: 160 GB/s measured one way
    ("NVLink5-NVSwitch", 900, 721.8),  # B200: 1.8 TB/s both ways; NCCL model 18 x 40.1 (nccl#1807)
    ("xGMI-MI300X", 448, 336),        # 7 links x 64 GB/s; ~48 GB/s usable per link (AMD ROCm blog)
    ("IB-NDR400", 50, 48),            # 400 Gb/s; ~48 GB/s per CX7 NIC (nccl-tests#319)
    ("IB-HDR200", 25, 24),            # 200 Gb/s; 24 GB/s per 200G NIC (nccl-tests#119)
    ("IB-EDR100", 12.5, 12),          # 12 GB/s per 100G NIC (nccl-tests#119)
    ("PCIe3-x16", 16, 12),            # NCCL topo.cc: Gen3 x16 = 16 x 60 / 80
    ("PCIe4-x16", 32, 24),            # 16 x 120 / 80
    ("PCIe5-x16", 64, 48),            # 16 x 240 / 80
    ("Ethernet-100G", 12.5, 7.5),     # ring busbw 60 Gb/s on a 100 Gb/s network (nccl-tests#22)
])
def test_cited_figures(name: str, gbps: float, achieved: float) -> None:
    link = get_link(name)
    assert link.gbps == gbps
    assert link.effective_gbps == pytest.approx(achieved, rel=0.005)


def test_latencies_are_nccls_ring_simple_model() -> None:
    """NCCL 2.30.7 src/graph/tuning.cc hwLatencies[...][RING][SIMPLE]: NVLink 3.4, PCI 5.7, NET 14.0 us."""
    for link in list_links():
        expected = {"pcie": 5.7e-6}.get(link.kind, 14.0e-6 if link.kind in NETWORK else 3.4e-6)
        assert link.latency_s == pytest.approx(expected), link.name


@pytest.mark.parametrize("alias, name", [
    ("nvlink4", "NVLink4-NVSwitch"), ("NVLINK4_NVSWITCH", "NVLink4-NVSwitch"), ("ndr400", "IB-NDR400"),
    ("IB-HDR", "IB-HDR200"), ("pcie gen4", "PCIe4-x16"), ("PCIe5", "PCIe5-x16"), ("100GbE", "Ethernet-100G"),
    ("roce200", "RoCE-200G"), ("xgmi", "xGMI-MI300X"), ("hccs", "HCCS-910B"), ("nvlink-bridge", "NVLink4-Bridge"),
])
def test_names_and_aliases(alias: str, name: str) -> None:
    assert get_link(alias).name == name
    assert get_link(alias) is get_link(name)


def test_every_alias_names_its_row() -> None:
    for row in _raw_rows():
        for alias in row.get("aliases", ()):
            assert get_link(alias).name == row["name"]


@pytest.mark.parametrize("spec, base, n", [
    ("Ethernet-100G-shared8", "Ethernet-100G", 8), ("IB-EDR100-shared2", "IB-EDR100", 2),
    ("ndr400 shared 4", "IB-NDR400", 4), ("ROCE-200G_SHARED16", "RoCE-200G", 16),
])
def test_shared_nic(spec: str, base: str, n: int) -> None:
    link, row = get_link(spec), get_link(base)
    assert link.name == f"{row.name}-shared{n}" and link.shared_by == n
    assert link.gbps == row.gbps / n
    assert (link.efficiency, link.latency_s, link.kind, link.source) == (row.efficiency, row.latency_s, row.kind,
                                                                          row.source)
    assert get_link(f"{base}-shared1") is row


def test_ethernet_shared_by_a_node_of_8() -> None:
    """One 100 GbE NIC for 8 GPUs: 12.5 GB/s / 8 = 1.5625 GB/s per GPU, 60 % of it achieved."""
    link = get_link("Ethernet-100G-shared8")
    assert link.gbps == 1.5625 and link.effective_gbps == pytest.approx(0.9375)


@pytest.mark.parametrize("name, start", [
    ("IB-HDX", "link: unknown link 'IB-HDX'; did you mean IB-HDR200"),
    ("nvlink9", "link: unknown link 'nvlink9'; did you mean NVLink"),
    ("zzzz", "link: unknown link 'zzzz' (known: NVLink2-HCM, "),
    ("Ethernet-100G-shared0", "link: 'Ethernet-100G-shared0': -sharedN takes N from 1 to 1,024"),
    (f"Ethernet-100G-shared{MAX_SHARED_BY + 1}", "link: 'Ethernet-100G-shared1025': -sharedN takes N"),
    ("Ethernet-100G-shared99999999999", "link: 'Ethernet-100G-shared99999999999': -sharedN"),
    ("foo-shared2", "link: unknown link 'foo-shared2'"),
    ("", "link: unknown link ''"),
    ("x" * 5000, "link: unknown link 'xxxxx"),
])
def test_unknown_links_are_one_line(name: str, start: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_link(name)
    msg = str(err.value)
    assert msg.startswith(start) and "\n" not in msg and len(msg) < 600, msg


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_name_resolves_or_is_a_config_error(name: str) -> None:
    try:
        link = get_link(name)
    except ConfigError as e:
        assert "\n" not in str(e)
    else:
        assert link.gbps > 0


# --------------------------------------------------------------------------- the GPU rows' defaults

def test_every_gpu_row_has_node_size_and_links_that_resolve() -> None:
    for g in list_gpus():
        assert g.gpus_per_node in (4, 8), g.name
        assert len(g.links_note) > 30, g.name
        intra, inter, host = get_link(g.intra_link), get_link(g.inter_link), get_link(g.host_link)
        assert intra.kind in INSIDE and inter.kind in NETWORK and host.kind == "pcie", g.name
        assert inter.shared_by in (1, 2, g.gpus_per_node), g.name
        assert intra.gbps > inter.gbps, g.name  # inside a node is faster than one GPU's share of the NICs


def test_gpu_defaults_of_the_well_known_systems() -> None:
    def row(name: str) -> tuple:
        g = next(g for g in list_gpus() if g.name == name)
        return g.gpus_per_node, g.intra_link, g.inter_link, g.host_link

    assert row("H100-SXM-80G") == (8, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")       # DGX H100
    assert row("A100-SXM-80G") == (8, "NVLink3-NVSwitch", "IB-HDR200", "PCIe4-x16")       # DGX A100
    assert row("B200-180G") == (8, "NVLink5-NVSwitch", "IB-NDR400", "PCIe5-x16")          # DGX B200
    assert row("V100-SXM2-32G") == (8, "NVLink2-HCM", "IB-EDR100-shared2", "PCIe3-x16")   # DGX-1: 4 EDR / 8 GPUs
    assert row("H800-SXM-80G")[1] == "NVLink4-H800" and row("A800-SXM-80G")[1] == "NVLink3-A800"
    assert row("RTX-4090-24G") == (4, "PCIe4-x16-noP2P", "Ethernet-25G-shared4", "PCIe4-x16")
    assert row("T4-16G")[1:] == ("PCIe3-x16", "Ethernet-100G-shared8", "PCIe3-x16")
