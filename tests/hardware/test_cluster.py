"""parse_cluster: hand-checked text specs, stated defaults, files (TOML, YAML), bad input, round trips, zh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests.report.test_zh import ascii_punctuation_in_chinese, english_runs
from trainmem.errors import ConfigError
from trainmem.hardware import Cluster, get_gpu, get_link, list_gpus, parse_cluster
from trainmem.report.i18n import tr

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"


def _shape(c: Cluster) -> list[tuple]:
    return [(g.gpu.name, g.count, g.gpus_per_node, g.nodes, g.intra.name, g.inter.name, g.host.name)
            for g in c.groups]


#: Words of trainmem's own English messages that a translation must not keep (the detector above lets
#: runs of fewer than 3 words through).
_ENGLISH = ("must be", "unknown", "is given", "catalog", "between", "inside", "the last", "assumed", "listed",
            "give ", "not valid", "per node", "write ", "shared by", " not a", "is not")


def _assert_chinese(text: str) -> None:
    """``text`` has a zh entry (unless it has no English words: a mixed pool's label) and it reads as Chinese."""
    zh = tr(text, "zh")
    assert zh != text or not english_runs(text), text
    assert not english_runs(zh) and not ascii_punctuation_in_chinese(zh), (text, zh)
    left = [w for w in _ENGLISH if w in zh.replace("`", "\0").split("\0")[0]]  # the parser's own text aside
    assert not left, (text, zh, left)


# --------------------------------------------------------------------------- text specs, hand-checked

@pytest.mark.parametrize("spec, shape", [
    ("64xH100-SXM-80G", [("H100-SXM-80G", 64, 8, 8, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")]),
    ("64×H100", [("H100-SXM-80G", 64, 8, 8, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")]),
    (" 64 X h100 ", [("H100-SXM-80G", 64, 8, 8, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")]),
    ("4x8xH100", [("H100-SXM-80G", 32, 8, 4, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")]),
    ("2*4*a100-80gb", [("A100-SXM-80G", 8, 4, 2, "NVLink3-NVSwitch", "IB-HDR200", "PCIe4-x16")]),
    ("8xA100-SXM-80G,4xRTX-3090-24G", [
        ("A100-SXM-80G", 8, 8, 1, "NVLink3-NVSwitch", "IB-HDR200", "PCIe4-x16"),
        ("RTX-3090-24G", 4, 4, 1, "PCIe4-x16-noP2P", "Ethernet-25G-shared4", "PCIe4-x16")]),
    ("8xA100 + 4x3090", [
        ("A100-SXM-80G", 8, 8, 1, "NVLink3-NVSwitch", "IB-HDR200", "PCIe4-x16"),
        ("RTX-3090-24G", 4, 4, 1, "PCIe4-x16-noP2P", "Ethernet-25G-shared4", "PCIe4-x16")]),
    ("16xA100-SXM-80G[node=8,inter=IB-HDR200]", [
        ("A100-SXM-80G", 16, 8, 2, "NVLink3-NVSwitch", "IB-HDR200", "PCIe4-x16")]),
    ("6xRTX-4090[node=2, intra=PCIe4-x16, inter=Ethernet-10G-shared2, host=pcie4]", [
        ("RTX-4090-24G", 6, 2, 3, "PCIe4-x16", "Ethernet-10G-shared2", "PCIe4-x16")]),
    ("8xMI300X", [("MI300X-192G", 8, 8, 1, "xGMI-MI300X", "IB-NDR400", "PCIe5-x16")]),
    ("16x910B", [("Ascend-910B-64G", 16, 8, 2, "HCCS-910B", "RoCE-200G", "PCIe4-x16")]),
    ("2x4090", [("RTX-4090-24G", 2, 4, 1, "PCIe4-x16-noP2P", "Ethernet-25G-shared4", "PCIe4-x16")]),
    ("10xV100", [("V100-SXM2-32G", 10, 8, 2, "NVLink2-HCM", "IB-EDR100-shared2", "PCIe3-x16")]),
    ("1000x1000xH100", [("H100-SXM-80G", 1_000_000, 1000, 1000, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")]),
])
def test_text_specs(spec: str, shape: list[tuple]) -> None:
    c = parse_cluster(spec)
    assert _shape(c) == shape
    assert c.total_gpus == sum(s[1] for s in shape) and c.is_mixed == (len(shape) > 1)
    assert c.spec == spec.strip()


def test_the_dgx_h100_cluster_states_its_defaults() -> None:
    c = parse_cluster("64xH100-SXM-80G")
    assert c.label == "64× H100-SXM-80G (8 nodes × 8)"
    assert c.notes == ("H100-SXM-80G: 8 GPUs per node, NVLink4-NVSwitch inside a node, IB-NDR400 between nodes, "
                       "PCIe5-x16 to the host (catalog defaults)",)
    g = c.groups[0]
    assert g.intra.effective_gbps == pytest.approx(370, rel=0.005) and g.inter.effective_gbps == 48
    assert c.cross_link is None and c.between_groups is g.inter


def test_only_the_defaults_are_stated() -> None:
    c = parse_cluster("4x8xA100[inter=IB-NDR400,host=PCIe4-x16]")
    assert c.notes == ("A100-SXM-80G: NVLink3-NVSwitch inside a node (catalog default)",)
    c = parse_cluster("8xA100[node=8,intra=NVLink3-NVSwitch,inter=IB-HDR200,host=PCIe4-x16]")
    assert c.notes == ()


def test_mixed_pool() -> None:
    c = parse_cluster("8xA100-SXM-80G,4xRTX-3090-24G")
    assert c.label == "8× A100-SXM-80G + 4× RTX-3090-24G"
    assert c.between_groups.name == "Ethernet-25G-shared4"  # the slower inter link of the two groups
    assert c.between_groups.gbps == 25 / 8 / 4
    assert c.notes == (
        "A100-SXM-80G: 8 GPUs per node, NVLink3-NVSwitch inside a node, IB-HDR200 between nodes, PCIe4-x16 to the "
        "host (catalog defaults)",
        "RTX-3090-24G: 4 GPUs per node, PCIe4-x16-noP2P inside a node, Ethernet-25G-shared4 between nodes, "
        "PCIe4-x16 to the host (catalog defaults)",
        "between the GPU types: Ethernet-25G-shared4, the slowest of the groups' inter-node links (no cross link "
        "given)",
        "PCIe4-x16-noP2P: efficiency assumed, not measured (see its links.json note)",
        "Ethernet-25G-shared4: one NIC shared by 4 GPUs, 0.781 GB/s each way per GPU",
        "Ethernet-25G-shared4: efficiency, latency_us assumed, not measured (see its links.json note)",
    )


def test_partial_last_node() -> None:
    c = parse_cluster("6xRTX-4090")
    g = c.groups[0]
    assert (g.nodes, g.gpus_per_node, g.last_node_gpus) == (2, 4, 2)
    assert "RTX-4090-24G: 6 GPUs in nodes of 4: the last node holds 2" in c.notes
    assert c.label == "6× RTX-4090-24G (2 nodes of 4, the last with 2)"
    assert parse_cluster("4xH100").label == "4× H100-SXM-80G (1 node)"
    assert not any("last node" in n for n in parse_cluster("16xH100").notes)


# --------------------------------------------------------------------------- round trip (property)

_SEPARATORS = ["x", "X", "×", "*", " x "]


@st.composite
def _specs(draw) -> tuple[str, list[tuple[str, int, int]]]:
    gpus = draw(st.lists(st.sampled_from(list_gpus()), min_size=1, max_size=4, unique_by=lambda g: g.name))
    pieces, want = [], []
    for g in gpus:
        sep = draw(st.sampled_from(_SEPARATORS))
        name = draw(st.sampled_from([g.name, *g.aliases]))
        form = draw(st.sampled_from(["count", "nodes", "node="]))
        if form == "nodes":
            nodes, per = draw(st.integers(1, 300)), draw(st.integers(1, 16))
            pieces.append(f"{nodes}{sep}{per}{sep}{name}")
            want.append((g.name, nodes * per, per))
        elif form == "node=":
            count, per = draw(st.integers(1, 5000)), draw(st.integers(1, 1024))
            pieces.append(f"{count}{sep}{name}[node={per}]")
            want.append((g.name, count, per))
        else:
            count = draw(st.integers(1, 5000))
            pieces.append(f"{count}{sep}{name}")
            want.append((g.name, count, g.gpus_per_node))
    return draw(st.sampled_from([",", ", ", " + "])).join(pieces), want


@settings(max_examples=200, deadline=None)
@given(_specs())
def test_counts_round_trip(case: tuple[str, list[tuple[str, int, int]]]) -> None:
    spec, want = case
    c = parse_cluster(spec)
    assert [(g.gpu.name, g.count, g.gpus_per_node) for g in c.groups] == want
    assert c.total_gpus == sum(w[1] for w in want)
    for g in c.groups:
        assert g.nodes == -(-g.count // g.gpus_per_node) and 1 <= g.last_node_gpus <= g.gpus_per_node
        assert (g.intra, g.inter, g.host) == (get_link(g.gpu.intra_link), get_link(g.gpu.inter_link),
                                              get_link(g.gpu.host_link))
    # the label carries the counts back
    again = parse_cluster(" + ".join(f"{g.count}x{g.gpu.name}[node={g.gpus_per_node}]" for g in c.groups))
    assert _shape(again) == _shape(c)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_text_parses_or_is_a_one_line_config_error(text: str) -> None:
    try:
        c = parse_cluster(text)
    except ConfigError as e:
        assert "\n" not in str(e)
    else:
        assert 1 <= c.total_gpus <= 1_000_000


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("spec, start", [
    ("", "cluster: empty spec"),
    ("H100", "cluster: 'H100' is not COUNTxGPU"),
    ("0xH100", "cluster: '0xH100': the GPU count must be a whole number from 1 to 1,000,000, not '0'"),
    ("-8xH100", "cluster: '-8xH100' is not COUNTxGPU"),
    ("1.5xH100", "cluster: '1.5xH100' is not COUNTxGPU"),
    ("1e3xH100", "cluster: '1e3xH100' is not COUNTxGPU"),
    ("1000001xH100", "cluster: '1000001xH100': the GPU count must be a whole number from 1 to 1,000,000, not "),
    ("99999999999999xH100", "cluster: '99999999999999xH100': the GPU count"),
    ("1001x1000xH100", "cluster: '1001x1000xH100': 1,001,000 GPUs; at most 1,000,000"),
    ("600000xH100,600000xA100", "cluster: 1,200,000 GPUs in all; at most 1,000,000"),
    ("4x0xH100", "cluster: '4x0xH100': GPUs per node must be a whole number from 1 to 1,024, not '0'"),
    ("8xH1OO", "cluster: '8xH1OO': unknown GPU 'H1OO'; did you mean H100-SXM-80G, H100-PCIe-80G"),
    ("8xFooBar", "cluster: '8xFooBar': unknown GPU 'FooBar' (trainmem gpus lists them)"),
    ("8xA100,8xA100-80G", "cluster: A100-SXM-80G is listed twice ('8xA100' and '8xA100-80G')"),
    ("8xA100,,4x3090", "cluster: an empty group in"),
    ("8xA100[node=0]", "cluster: '8xA100[node=0]': node must be a whole number from 1 to 1,024, not '0'"),
    ("8xA100[node=2000]", "cluster: '8xA100[node=2000]': node must be a whole number from 1 to 1,024, not '2000'"),
    ("8xA100[node=4 4]", "cluster: '8xA100[node=4 4]': node must be a whole number from 1 to 1,024, not '4 4'"),
    ("8xA100[nod=4]", "cluster: '8xA100[nod=4]': unknown setting 'nod' in [...]; use node, intra, inter, host, "
     "host_memory"),
    ("8xA100[node]", "cluster: '8xA100[node]': write the settings in [...] as key=value, not 'node'"),
    ("4x8xA100[node=4]", "cluster: '4x8xA100[node=4]': node is given twice"),
    ("8xA100[inter=IB-HDR200,inter=IB-NDR400]", "cluster: '8xA100[inter=IB-HDR200,inter=IB-NDR400]': inter is"),
    ("8xA100[inter=IB-HDX]", "cluster: '8xA100[inter=IB-HDX]': link: unknown link 'IB-HDX'; did you mean IB-HDR200"),
    ("8xA100[inter=Ethernet-100G-shared0]", "cluster: '8xA100[inter=Ethernet-100G-shared0]': link: "),
    ("8xA100[", "cluster: unbalanced brackets in '8xA100['"),
    ("8xA100]]", "cluster: unbalanced brackets"),
    ("8xA100[[node=2]]", "cluster: unbalanced brackets"),
    ("1xH100," * 65 + "1xA100", "cluster: 66 groups; at most 64"),
    ("8xH100" * 400, "cluster: the spec has 2,400 characters; at most 2,000"),
    ("pool.json", "cluster: 'pool.json' is neither COUNTxGPU nor a .toml or .yaml file"),
    ("no/such/pool.toml", "cluster: file no/such/pool.toml not found"),
    ("missing.yaml", "cluster: file missing.yaml not found"),
])
def test_bad_specs_are_one_line_errors_naming_the_piece(spec: str, start: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_cluster(spec)
    msg = str(err.value)
    assert msg.startswith(start), msg
    assert "\n" not in msg and len(msg) < 700
    _assert_chinese(msg)


def test_a_directory_is_not_a_cluster_file(tmp_path: Path) -> None:
    (tmp_path / "d.toml").mkdir()
    with pytest.raises(ConfigError, match=r"^cluster: .*d\.toml is not a file$"):
        parse_cluster(str(tmp_path / "d.toml"))


# --------------------------------------------------------------------------- files

def test_example_dgx_h100_file() -> None:
    c = parse_cluster(str(EXAMPLES / "dgx-h100-64.toml"))
    assert _shape(c) == [("H100-SXM-80G", 64, 8, 8, "NVLink4-NVSwitch", "IB-NDR400", "PCIe5-x16")]
    assert c.notes == () and c.label == "64× H100-SXM-80G (8 nodes × 8)"  # every value written out
    assert _shape(c) == _shape(parse_cluster("64xH100-SXM-80G"))
    g = c.groups[0]  # the host RAM written out too: the catalog default's figure, from the file
    assert (g.host_memory_bytes, g.host_memory_from) == (2048 * 2**30, "cluster file groups[1]")
    assert g.host_memory_bytes == parse_cluster("64xH100-SXM-80G").groups[0].host_memory_bytes


def test_example_mixed_file() -> None:
    c = parse_cluster(str(EXAMPLES / "mixed-a100-3090.yaml"))
    assert _shape(c) == _shape(parse_cluster("8xA100-SXM-80G,4xRTX-3090-24G"))
    assert c.cross_link == get_link("Ethernet-25G-shared4") and c.between_groups is c.cross_link
    assert c.notes[0].startswith("A100-SXM-80G: 8 GPUs per node, NVLink3-NVSwitch inside a node")
    assert not any("RTX-3090-24G:" in n for n in c.notes)  # its settings are all written out
    assert not any("no cross link" in n for n in c.notes)
    assert [g.host_memory_from for g in c.groups] == ["catalog default for A100-SXM-80G", "cluster file groups[2]"]


_TOML = """
[[groups]]
gpu = "A100-SXM-80G"
count = 12

[[groups]]
gpu = "rtx 3090"
nodes = 2
gpus_per_node = 2
intra = "NVLink4-Bridge"
inter = { gbps = 1.25, latency_us = 30, efficiency = 0.6, kind = "ethernet", name = "lab 10 GbE" }
host = { link = "PCIe4-x16", efficiency = 0.8 }

[cross]
gbps = 3.125
latency_us = 25
"""

_YAML = """
groups:
  - gpu: A100-SXM-80G
    count: 12
  - gpu: rtx 3090
    nodes: 2
    gpus_per_node: 2
    intra: NVLink4-Bridge
    inter: {gbps: 1.25, latency_us: 30, efficiency: 0.6, kind: ethernet, name: lab 10 GbE}
    host: {link: PCIe4-x16, efficiency: 0.8}
cross:
  gbps: 3.125
  latency_us: 25
"""


@pytest.mark.parametrize("suffix, text", [(".toml", _TOML), (".yaml", _YAML), (".yml", _YAML)])
def test_files_with_explicit_numbers(tmp_path: Path, suffix: str, text: str) -> None:
    path = tmp_path / f"pool{suffix}"
    path.write_text(text)
    c = parse_cluster(str(path))
    a100, rtx = c.groups
    assert (a100.count, a100.gpus_per_node, a100.nodes, a100.last_node_gpus) == (12, 8, 2, 4)
    assert (rtx.gpu.name, rtx.count, rtx.gpus_per_node, rtx.intra.name) == ("RTX-3090-24G", 4, 2, "NVLink4-Bridge")
    assert (rtx.inter.name, rtx.inter.kind, rtx.inter.gbps, rtx.inter.efficiency, rtx.inter.latency_s) == (
        "lab 10 GbE", "ethernet", 1.25, 0.6, pytest.approx(30e-6))
    pcie = get_link("PCIe4-x16")
    assert (rtx.host.gbps, rtx.host.efficiency, rtx.host.latency_s) == (pcie.gbps, 0.8, pcie.latency_s)
    assert rtx.host.name == "PCIe4-x16 (edited)" and rtx.host.kind == "pcie"
    assert (c.cross_link.name, c.cross_link.kind, c.cross_link.efficiency) == ("custom 3.12 GB/s", "custom", 1.0)
    assert "custom 3.12 GB/s: efficiency 1: its gbps is taken as the achieved rate (none given)" in c.notes
    assert "A100-SXM-80G: 12 GPUs in nodes of 8: the last node holds 4" in c.notes
    assert c.spec == str(path)
    for note in c.notes:
        _assert_chinese(note)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name, text, start", [
    ("a.toml", 'grups = 1\n', "cluster: a.toml: unknown key 'grups' (known: groups, cross)"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\nnode = 4\n',
     "cluster: groups[1]: unknown key 'node' (known: gpu, count, nodes, gpus_per_node, intra, inter, host, host_memory)"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { gbs = 3, latency_us = 4 }\n',
     "cluster: groups[1].inter: unknown key 'gbs' (known: link, name, kind, gbps, latency_us, efficiency)"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 0\n',
     "cluster: groups[1].count must be a whole number from 1 to 1,000,000, not 0"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = true\n', "cluster: groups[1].count must be a whole number"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8.5\n', "cluster: groups[1].count must be a whole number"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = "8"\n', "cluster: groups[1].count must be a whole number"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\nnodes = 1\n', "cluster: groups[1]: give either count"),
    ("a.toml", '[[groups]]\ngpu = "A100"\n', "cluster: groups[1]: give either count (GPUs) or nodes"),
    ("a.toml", '[[groups]]\ncount = 8\n', "cluster: groups[1]: gpu is missing"),
    ("a.toml", '[[groups]]\ngpu = 8\ncount = 8\n', "cluster: groups[1].gpu must be a non-empty text, not 8"),
    ("a.toml", '[[groups]]\ngpu = "H1OO"\ncount = 8\n', "cluster: groups[1]: unknown GPU 'H1OO'; did you mean H100"),
    ("a.toml", '[[groups]]\ngpu = "A100"\nnodes = 200000\ngpus_per_node = 8\n',
     "cluster: groups[1]: 1,600,000 GPUs; at most 1,000,000"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = "IB-HDX"\n',
     "cluster: groups[1].inter: link: unknown link 'IB-HDX'; did you mean IB-HDR200"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { gbps = 3 }\n',
     "cluster: groups[1].inter: give link (a links.json row) or both gbps and latency_us"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { link = "IB-HDR200", efficiency = 1.5 }\n',
     "cluster: groups[1].inter.efficiency must be a number above 0 and at most 1, not 1.5"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { gbps = -1, latency_us = 3 }\n',
     "cluster: groups[1].inter.gbps must be a number above 0 and at most 100,000, not -1"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { gbps = nan, latency_us = 3 }\n',
     "cluster: groups[1].inter.gbps must be a number above 0"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { gbps = 3, latency_us = -3 }\n',
     "cluster: groups[1].inter.latency_us must be a number from 0 to 1,000,000, not -3"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = { gbps = 3, latency_us = 3, kind = "wifi" }\n',
     "cluster: groups[1].inter.kind must be one of nvlink, pcie, ib, roce, ethernet, xgmi, hccs, custom, not 'wifi'"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\ninter = 25\n',
     "cluster: groups[1].inter must be a link name or a table"),
    ("a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\n[[groups]]\ngpu = "A100-80G"\ncount = 8\n',
     "cluster: A100-SXM-80G is listed twice (groups[1] and groups[2])"),
    ("a.toml", 'groups = []\n', "cluster: a.toml: no groups"),
    ("a.toml", 'groups = [5]\n', "cluster: groups[1] must be a table (gpu, count, ...), not 5"),
    ("a.toml", 'cross = "IB-NDR400"\n', "cluster: a.toml: no groups"),
    ("a.toml", '[[groups]\ngpu = "A100"\n', "cluster: "),  # not TOML
    ("a.yaml", "groups:\n  - gpu: A100\n    count: [8\n", "cluster: "),  # not YAML
    ("a.yaml", "- 8xA100\n", "cluster: a.yaml: the file must hold a table with groups"),
    ("a.yaml", "", "cluster: a.yaml: the file must hold a table with groups"),
    ("a.yml", "groups:\n  - gpu: A100\n    count: 8\n    intra: {link: NVLink3-NVSwitch, latency_us: 2e9}\n",
     "cluster: groups[1].intra.latency_us must be a number from 0 to 1,000,000"),
])
def test_bad_files(tmp_path: Path, name: str, text: str, start: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_cluster(_write(tmp_path, name, text))
    msg = str(err.value)
    assert msg.startswith(start), msg
    assert "\n" not in msg and len(msg) < 700
    _assert_chinese(msg)


def test_invalid_toml_and_yaml_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^cluster: .*a\.toml is not valid TOML: "):
        parse_cluster(_write(tmp_path, "a.toml", "[[groups]\n"))
    with pytest.raises(ConfigError, match=r"^cluster: .*a\.yaml is not valid YAML: .*line 3"):
        parse_cluster(_write(tmp_path, "a.yaml", "groups:\n  - gpu: A100\n    count: [8\n"))


def test_unreadable_and_oversized_files(tmp_path: Path) -> None:
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe\x00groups")
    with pytest.raises(ConfigError, match=r"^cluster: cannot read .*bin\.toml: "):
        parse_cluster(str(path))
    big = tmp_path / "big.yaml"
    big.write_text("#" * 1_000_001)
    with pytest.raises(ConfigError, match=r"^cluster: .*big\.yaml has 1,000,001 bytes; at most 1,000,000$"):
        parse_cluster(str(big))


def test_yaml_without_pyyaml_is_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml → ModuleNotFoundError
    with pytest.raises(ConfigError, match=r"^cluster: reading \.yaml files needs PyYAML \(pip install pyyaml\)$"):
        parse_cluster(_write(tmp_path, "a.yaml", "groups: []\n"))
    assert parse_cluster(_write(tmp_path, "a.toml", '[[groups]]\ngpu = "A100"\ncount = 8\n')).total_gpus == 8


# --------------------------------------------------------------------------- light import, zh

def test_import_is_light() -> None:
    code = ("import sys, trainmem.hardware as h; h.parse_cluster('8xA100,4x3090'); "
            "bad = [m for m in ('torch', 'yaml', 'transformers') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("spec", ["64xH100-SXM-80G", "4x8xH100[inter=IB-NDR400]", "8xA100-SXM-80G,4xRTX-3090-24G",
                                  "6xRTX-4090", "16x910B", "8xMI250X", "10xV100", "3xT4[node=2]"])
def test_notes_and_labels_read_as_chinese(spec: str) -> None:
    c = parse_cluster(spec)
    for text in (*c.notes, c.label):
        _assert_chinese(text)


def test_catalog_gpu_names_in_specs_match_get_gpu() -> None:
    for g in list_gpus():
        assert parse_cluster(f"3x{g.name}").groups[0].gpu is get_gpu(g.name)
