"""The CLI contract: flags, --json keys, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainmem.cli import main
from trainmem.hardware import get_gpu

JSON_KEYS = {"peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes", "static_bytes",
             "breakdown_at_peak_bytes", "host_memory_bytes", "fits", "headroom_bytes", "timeline",
             "n_params", "n_trainable_params", "assumptions"}
CATS = {"parameters", "master_weights", "gradients", "optimizer_states", "activations", "temporaries",
        "communication_buffers", "other"}


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_contract(capsys) -> None:
    rc, out, err = run(["estimate", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--json"], capsys)
    assert rc == 0 and err == ""
    d = json.loads(out)
    assert JSON_KEYS <= set(d)
    assert set(d["breakdown_at_peak_bytes"]) == CATS
    assert sum(d["breakdown_at_peak_bytes"].values()) == d["peak_allocated_bytes"]
    assert d["n_params"] == 8_030_261_248
    assert d["peak_allocated_bytes"] <= d["peak_reserved_bytes"] <= d["device_total_bytes"]
    assert d["headroom_bytes"] == get_gpu("H100-SXM-80G").memory_bytes - d["device_total_bytes"]
    assert all({"phase", "allocated_bytes", "by_category", "phase_max_bytes"} == set(p) for p in d["timeline"])
    assert all(sum(p["by_category"].values()) == p["allocated_bytes"] <= p["phase_max_bytes"] for p in d["timeline"])
    assert max(p["phase_max_bytes"] for p in d["timeline"]) + d["cuda_only_bytes"] == d["peak_allocated_bytes"]
    assert max(p["allocated_bytes"] for p in d["timeline"]) <= d["peak_allocated_bytes"]


def test_every_contract_flag_is_accepted(capsys) -> None:
    rc, out, err = run(["estimate", "mixtral-8x7b", "--seq-len", "4096", "--micro-batch", "1", "--grad-accum", "4",
                        "--precision", "mixed-bf16", "--optimizer", "adamw", "--recompute", "full", "--attn", "flash",
                        "--engine", "megatron", "--gpus", "64", "--dp", "4", "--tp", "2", "--pp", "4", "--cp", "2",
                        "--ep", "4", "--vpp", "2", "--sp", "--zero", "1", "--offload", "none", "--gpu", "H100-SXM-80G",
                        "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["setup"]["tp"] == 2 and d["setup"]["sp"] is True


def test_lora_flags(capsys) -> None:
    rc, out, _ = run(["estimate", "llama-3.1-8b", "--lora-rank", "16", "--lora-targets", "q_proj,v_proj",
                      "--qlora", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    # rank·(in+out) per target per layer: q (4096→4096), v (4096→1024); 32 layers
    assert d["n_trainable_params"] == 16 * ((4096 + 4096) + (4096 + 1024)) * 32


@pytest.mark.parametrize("args,needle", [
    (["estimate", "llama-2-7b", "--precision", "mixed-bf16"], "mixed-bf16 is not a recipe of the torch engine"),
    (["estimate", "llama-2-7b", "--engine", "megatron", "--dp", "3", "--tp", "2", "--gpus", "8"], "dp(3) * tp(2) * pp(1) * cp(1) != gpus(8)"),
    (["estimate", "llama-2-7b", "--engine", "megatron", "--tp", "3", "--gpus", "3"], "tp(3) does not divide num_attention_heads(32)"),
    (["estimate", "no-such-model"], "unknown model"),
    (["estimate", "llama-2-7b", "--gpu", "H999"], "unknown GPU"),
    (["estimate", "llama-2-7b", "--micro-batch", "0"], "micro-batch"),
    (["estimate", "llama-2-7b", "--micro-batch", "x"], "--micro-batch"),
    (["estimate", "llama-2-7b", "--no-such-flag"], "No such option"),
    (["estimate", "llama-2-7b", "--lang", "fr"], "lang"),
    (["estimate", "llama-2-7b", "--gpu", "V100-32G", "--precision", "amp-bf16"], "no bfloat16"),
    (["estimate", "/nonexistent/config.json"], ""),
])
def test_bad_input_one_line_exit_2(args: list[str], needle: str, capsys) -> None:
    rc, out, err = run(args, capsys)
    assert rc == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert needle in err
    assert "Traceback" not in err


def test_zh_report(capsys) -> None:
    rc, out, _ = run(["estimate", "qwen2.5-7b", "--lang", "zh"], capsys)
    assert rc == 0
    assert "峰值已分配" in out and "优化器状态" in out


def test_max_micro_batch_is_the_boundary(capsys) -> None:
    rc, out, _ = run(["estimate", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--max-micro-batch",
                      "--gpu", "A100-SXM-80G", "--json"], capsys)
    assert rc == 0
    d = json.loads(out)
    best = d["max_micro_batch"]
    assert best >= 1 and d["estimate"]["fits"]
    rc, out, _ = run(["estimate", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--micro-batch", str(best + 1),
                      "--gpu", "A100-SXM-80G", "--json"], capsys)
    assert json.loads(out)["fits"] is False


def test_explain_shows_every_accounting(capsys) -> None:
    rc, out, _ = run(["explain", "7B", "--engine", "deepspeed", "--zero", "2", "--gpus", "8"], capsys)
    assert rc == 0
    assert "50.75" in out and "26.25" in out and "29.75" in out  # seed, ZeRO paper, DeepSpeed estimator (GB)


def test_console_script_exit_code_and_stderr() -> None:
    p = subprocess.run([sys.executable, "-m", "trainmem.cli", "estimate", "llama-2-7b", "--precision", "nope"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1


def test_core_import_does_not_pull_torch() -> None:
    code = ("import sys, trainmem.cli, trainmem.memory, trainmem.model; "
            "from trainmem.memory import estimate; from trainmem.model.resolve import resolve_model; "
            "from trainmem.setup import make_setup; estimate(resolve_model('llama-3.1-8b'), make_setup()); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- CLI habits
def test_version_and_short_help(capsys) -> None:
    from importlib.metadata import version
    rc, out, err = run(["--version"], capsys)
    assert rc == 0 and out.strip() == f"trainmem {version('trainmem')}" and err == ""
    for args in (["-h"], ["estimate", "-h"], ["trace", "-h"], ["models", "-h"], ["plan", "-h"], ["compare", "-h"]):
        rc, out, err = run(args, capsys)
        assert rc == 0 and out.startswith("Usage:") and err == "", args


def test_bare_trainmem_prints_help_and_no_error(capsys) -> None:
    rc, out, err = run([], capsys)
    assert rc == 0 and "Usage:" in out and "estimate" in out and err == ""


@pytest.mark.parametrize("args", [["estimate", "--help"], ["trace", "--help"], ["--help"], ["plan", "--help"],
                                  ["estimate", "llama-3.1-8b"], ["explain", "llama-2-7b"], ["gpus"], ["models"]])
def test_80_columns_wrap_instead_of_cutting(args: list[str], capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = run(args, capsys)
    assert rc == 0
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    if args[-1] == "--help" and args[0] == "estimate":
        assert "fp32|bf16|fp16|amp-bf16|amp-fp16|mixed-bf16|mixed-fp16|fp8" in "".join(out.split())


def test_json_with_explain_carries_the_formulas(capsys) -> None:
    rc, out, _ = run(["estimate", "llama-2-7b", "--json", "--explain"], capsys)
    assert rc == 0
    d = json.loads(out)
    lines = d["explain"]["lines"]
    assert {ln["category"] for ln in lines} <= CATS and all(ln["formula"] and ln["source"] for ln in lines)
    assert sum(ln["bytes"] for ln in lines) == d["peak_allocated_bytes"]
    assert any("ZeRO" in a["name"] for a in d["explain"]["accountings"])
    rc, out, _ = run(["estimate", "llama-2-7b", "--json"], capsys)
    assert "explain" not in json.loads(out)
