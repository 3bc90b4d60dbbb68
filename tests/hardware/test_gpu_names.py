"""GPU names as people and drivers write them, the catalog's rows, --gpu-memory, one-line errors."""

from __future__ import annotations

import json

import pytest

from trainmem.cli import main
from trainmem.errors import ConfigError
from trainmem.hardware import get_gpu, list_gpus
from trainmem.hardware.catalog import normalize_gpu_name
from trainmem.setup import TrainingSetup, make_setup
from trainmem.units import GB, GiB, MiB

# The aliases of issue 7 ("Names people use") and what they must name.
ISSUE_ALIASES = {
    "a100-80gb": "A100-SXM-80G", "RTX 3090": "RTX-3090-24G", "A10G": "A10G-24G", "H20": "H20-96G",
    "910B": "Ascend-910B-64G", "H100-NVL": "H100-NVL-94G", "A100-PCIe-80G": "A100-PCIe-80G",
    "NVIDIA H100 80GB HBM3": "H100-SXM-80G", "A100-40GB": "A100-SXM-40G",
}
# What nvidia-smi and torch.cuda.get_device_name() print (and ROCm / torch_npu for AMD / Huawei).
DRIVER_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100-SXM-80G", "NVIDIA H100 PCIe": "H100-PCIe-80G", "NVIDIA H100 NVL": "H100-NVL-94G",
    "NVIDIA A100-SXM4-80GB": "A100-SXM-80G", "NVIDIA A100-SXM4-40GB": "A100-SXM-40G",
    "NVIDIA A100 80GB PCIe": "A100-PCIe-80G", "NVIDIA A100-PCIE-40GB": "A100-PCIe-40G",
    "NVIDIA GeForce RTX 3090": "RTX-3090-24G", "NVIDIA GeForce RTX 3090 Ti": "RTX-3090Ti-24G",
    "NVIDIA GeForce RTX 4090": "RTX-4090-24G", "Tesla V100-SXM2-32GB": "V100-SXM2-32G",
    "Tesla V100-SXM2-16GB": "V100-SXM2-16G", "NVIDIA A10G": "A10G-24G", "NVIDIA A10": "A10-24G",
    "NVIDIA L4": "L4-24G", "NVIDIA L40S": "L40S-48G", "Tesla T4": "T4-16G", "NVIDIA H200": "H200-SXM-141G",
    "NVIDIA H20": "H20-96G", "NVIDIA H800": "H800-SXM-80G", "NVIDIA A800-SXM4-80GB": "A800-SXM-80G",
    "NVIDIA B200": "B200-180G", "NVIDIA RTX A6000": "A6000-48G", "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada-48G",
    "AMD Instinct MI300X": "MI300X-192G", "AMD Instinct MI250X": "MI250X-GCD-64G", "Ascend910B2C": "Ascend-910B-64G",
}
# Case, punctuation, vendor words, sizes and form factors written every which way.
SPELLINGS = {
    "A100 80GB": "A100-SXM-80G", "a100_sxm_80g": "A100-SXM-80G", "A100-SXM4-80G": "A100-SXM-80G",
    "a100 sxm 80 GB": "A100-SXM-80G", "A100-PCIe-80GB": "A100-PCIe-80G", "a100-pcie-40gib": "A100-PCIe-40G",
    "h100": "H100-SXM-80G", "H100 SXM5": "H100-SXM-80G", "h100_pcie": "H100-PCIe-80G", "H100 NVL 94GB": "H100-NVL-94G",
    "rtx4090": "RTX-4090-24G", "GeForce RTX 4090": "RTX-4090-24G", "3090": "RTX-3090-24G", "RTX 3090 Ti": "RTX-3090Ti-24G",
    "v100-16g": "V100-SXM2-16G", "V100 32GB": "V100-SXM2-32G", "t4": "T4-16G", "l40s": "L40S-48G", "L4": "L4-24G",
    "a800": "A800-SXM-80G", "H800": "H800-SXM-80G", "h200": "H200-SXM-141G", "b200": "B200-180G",
    "mi300x": "MI300X-192G", "MI250X": "MI250X-GCD-64G", "Ascend 910B": "Ascend-910B-64G", "Huawei Ascend 910B": "Ascend-910B-64G",
    "A6000": "A6000-48G", "RTX A6000": "A6000-48G",
}
# Bare family names resolve to the default stated in gpus.json.
DEFAULTS = {"A100": "A100-SXM-80G", "H100": "H100-SXM-80G", "V100": "V100-SXM2-32G", "H800": "H800-SXM-80G",
            "A800": "A800-SXM-80G"}


@pytest.mark.parametrize("name, canonical", sorted({**ISSUE_ALIASES, **DRIVER_NAMES, **SPELLINGS, **DEFAULTS}.items()))
def test_every_name_resolves(name: str, canonical: str) -> None:
    assert get_gpu(name).name == canonical
    assert make_setup(gpu=name).gpu == canonical  # setup.gpu is always the catalog's name


def test_every_row_answers_to_its_own_name_and_aliases() -> None:
    for g in list_gpus():
        assert get_gpu(g.name) is g and get_gpu(g.name.lower()) is g
        assert all(get_gpu(a) is g for a in g.aliases)


def test_normalization() -> None:
    assert normalize_gpu_name("NVIDIA A100-SXM4-80GB") == normalize_gpu_name("a100 sxm 80 gb") == "a100sxm80g"
    assert normalize_gpu_name("NVIDIA H100 80GB HBM3") == "h10080g"
    assert normalize_gpu_name("A10G") == "a10g"  # a model name ending in g is not a size


def test_rows_are_sourced_and_sane() -> None:
    names = [g.name for g in list_gpus()]
    assert len(names) == len(set(names))
    for g in list_gpus():
        assert g.source.startswith("https://"), g.name
        assert g.note, g.name
        assert g.memory_from in ("torch", "nvidia-smi") or g.memory_from.startswith("sibling: "), g.name
        if g.memory_from.startswith("sibling: "):
            assert get_gpu(g.memory_from.removeprefix("sibling: ")).memory_bytes == g.memory_bytes
        # the device total is a little under the size on the box (GB = 10^9 there, binary stacks inside)
        size_gb = int(g.name.rsplit("-", 1)[1].removesuffix("G"))
        assert 0.90 * size_gb * GiB < g.memory_bytes <= size_gb * GiB, g.name
        assert g.bf16_tflops is None or 10 < g.bf16_tflops < 5000
        assert g.fp8_tflops is None or g.bf16_tflops is not None and g.fp8_tflops >= g.bf16_tflops
        assert g.hbm_gbps is None or 100 < g.hbm_gbps < 10000


def test_published_figures() -> None:
    """Spot checks against the datasheets cited in gpus.json (dense, no sparsity)."""
    h100 = get_gpu("H100-SXM-80G")
    assert (h100.bf16_tflops, h100.fp8_tflops, h100.hbm_gbps) == (989, 1979, 3350)
    assert get_gpu("A100").bf16_tflops == 312 and get_gpu("A100").hbm_gbps == 2039
    assert get_gpu("A100-PCIe-80G").hbm_gbps == 1935
    assert get_gpu("H20").bf16_tflops == 148 and get_gpu("H20").memory_bytes == 97285 * MiB
    assert get_gpu("H100-NVL").bf16_tflops == 1671 / 2
    assert get_gpu("910B").memory_bytes == 62432 * MiB and get_gpu("910B").bf16
    assert get_gpu("A10G").bf16_tflops is None  # not published: no figure invented
    for no_bf16 in ("V100", "V100-16G", "T4"):
        assert not get_gpu(no_bf16).bf16


@pytest.mark.parametrize("name, near", [
    ("H1OO", ["H100-SXM-80G", "H100-PCIe-80G", "H100-NVL-94G"]),
    ("A100-48G", ["A100-SXM-80G"]),
    ("RTX 5090", ["RTX-4090-24G"]),
])
def test_unknown_name_suggests_the_nearest_rows(name: str, near: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        get_gpu(name)
    msg = str(err.value)
    assert msg.startswith(f"gpu: unknown GPU {name!r}; did you mean ") and "\n" not in msg
    assert all(n in msg.split("did you mean ")[1] for n in near)
    assert msg.endswith("(trainmem gpus lists them; --gpu-memory SIZE for others)")


def test_example_message_of_the_issue() -> None:
    with pytest.raises(ConfigError, match=r"^gpu: unknown GPU 'H1OO'; did you mean H100-SXM-80G, H100-PCIe-80G"):
        get_gpu("H1OO")


@pytest.mark.parametrize("name", ["nonexistent", "", "x" * 10_000, "NVIDIA", "910B4"])
def test_unknown_names_are_one_line(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_gpu(name)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 300 and "trainmem gpus" in msg


def test_setup_validates_the_gpu_however_it_is_built() -> None:
    with pytest.raises(ConfigError, match="unknown GPU 'nonexistent'"):
        make_setup(gpu="nonexistent")
    assert TrainingSetup(gpu="nvidia a100-sxm4-80gb").gpu == "A100-SXM-80G"
    with pytest.raises(ValueError, match="unknown GPU"):
        TrainingSetup(gpu="nonexistent")


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("alias, canonical", sorted(ISSUE_ALIASES.items()))
def test_cli_accepts_the_issue_aliases(alias: str, canonical: str, capsys) -> None:
    rc, out, err = run(["estimate", "qwen2.5-0.5b", "--gpu", alias, "--precision", "amp-bf16", "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["setup"]["gpu"] == canonical and d["gpu_memory_bytes"] == get_gpu(canonical).memory_bytes


@pytest.mark.parametrize("args, needle", [
    (["estimate", "llama-2-7b", "--gpu", "H1OO"], "did you mean H100-SXM-80G, H100-PCIe-80G"),
    (["estimate", "llama-2-7b", "--gpu", "nonexistent"], "unknown GPU 'nonexistent'"),
    (["explain", "llama-2-7b", "--gpu", "nonexistent"], "unknown GPU 'nonexistent'"),
    (["trace", "qwen2.5-0.5b", "--gpu", "nonexistent"], "unknown GPU 'nonexistent'"),
    (["estimate", "llama-2-7b", "--gpu-memory", "96XB"], "gpu-memory: '96XB' is not a memory size"),
    (["estimate", "llama-2-7b", "--gpu-memory", "0GB"], "gpu-memory"),
    (["estimate", "llama-2-7b", "--gpu-memory", "-5GiB"], "gpu-memory"),
    (["estimate", "llama-2-7b", "--gpu-memory", "lots"], "gpu-memory"),
    (["estimate", "llama-2-7b", "--gpu", "T4", "--precision", "amp-bf16"], "no bfloat16"),
])
def test_bad_gpu_input_one_line_exit_2(args: list[str], needle: str, capsys) -> None:
    rc, out, err = run(args, capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert needle in err


@pytest.mark.parametrize("size, n_bytes", [("96GiB", 96 * GiB), ("94GB", 94 * GB), ("80G", 80 * GiB),
                                           ("24576MiB", 24 * GiB)])
def test_gpu_memory_overrides_the_catalog(size: str, n_bytes: int, capsys) -> None:
    rc, out, err = run(["estimate", "llama-3.1-8b", "--gpu", "A100", "--gpu-memory", size, "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["gpu_memory_bytes"] == n_bytes and d["setup"]["gpu_memory"] == n_bytes
    assert d["headroom_bytes"] == n_bytes - d["device_total_bytes"]
    assert d["fits"] is (d["device_total_bytes"] <= n_bytes)


def test_gpus_command_lists_every_row(capsys) -> None:
    rc = main(["gpus"])
    out = capsys.readouterr().out
    assert rc in (0, None)
    for g in list_gpus():
        assert g.name[:10] in out
