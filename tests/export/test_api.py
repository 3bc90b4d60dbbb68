"""The fixed API the planner's --export calls: ExportTarget, export_files, can_export, and their messages
(one line each, with a Chinese entry)."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError, UnsupportedError
from trainmem.export import ENGINES, PINNED, ExportTarget, can_export, export_files
from trainmem.report.i18n import tr
from trainmem.setup import make_setup

T8 = ExportTarget("meta-llama/Llama-3.1-8B", 1, 8)


def test_engine_table_and_pins() -> None:
    assert set(ENGINES) == set(PINNED) == {"deepspeed", "megatron", "torchtitan", "accelerate"}
    assert "0.19.5" in PINNED["deepspeed"] and "core_v0.19.0" in PINNED["megatron"]
    assert "0.2.2" in PINNED["torchtitan"] and "1.15.0" in PINNED["accelerate"]


@pytest.mark.parametrize("engine, estimate", [(e, m) for e, ms in ENGINES.items() for m in ms])
def test_each_exporter_runs_its_engines(engine: str, estimate: str) -> None:
    fields = {"precision": "bf16"} if (engine, estimate) == ("accelerate", "fsdp2") else {}
    spec, s = build("llama-3.1-8b", engine=estimate, gpus=8, **fields)
    assert can_export(s, engine, spec) is None
    files = export_files(spec, s, T8, engine)
    assert files and all(text.endswith("\n") for text in files.values())


def test_export_files_refuses_in_one_line() -> None:
    spec, s = build("llama-3.1-8b", engine="fsdp2", gpus=8, lora_rank=8)
    with pytest.raises(UnsupportedError, match="^cannot export to torchtitan: LoRA") as err:
        export_files(spec, s, T8, "torchtitan")
    assert "\n" not in str(err.value) and tr(str(err.value), "zh").startswith("无法导出到 torchtitan：")
    with pytest.raises(ConfigError, match=r"nodes\(2\) \* gpus_per_node\(8\) != gpus\(8\)"):
        export_files(spec, s, ExportTarget("x", 2, 8), "torchtitan")
    with pytest.raises(ConfigError, match="unknown engine 'nemo'"):
        export_files(spec, s, T8, "nemo")
    with pytest.raises(ConfigError, match="at least 1"):
        export_files(spec, s, ExportTarget("x", 0, 8), "deepspeed")


def _reasons() -> list[str]:
    out = []
    for engine, estimate, fields in [
        ("deepspeed", "fsdp2", {}), ("deepspeed", "deepspeed", {"recompute": "selective"}),
        ("deepspeed", "deepspeed", {"optimizer": "adafactor"}), ("megatron", "megatron", {"optimizer": "adafactor"}),
        ("megatron", "megatron", {"pp": 2, "vpp": 2, "grad_accum": 3}), ("torchtitan", "fsdp2", {"lora_rank": 4}),
        ("torchtitan", "fsdp2", {"precision": "amp-fp16"}), ("torchtitan", "fsdp2", {"precision": "bf16"}),
        ("torchtitan", "fsdp2", {"tp": 2, "no_sp": True}), ("torchtitan", "fsdp2", {"attn": "eager"}),
        ("torchtitan", "fsdp2", {"loop": "script"}), ("torchtitan", "fsdp2", {"optimizer": "sgd"}),
        ("accelerate", "megatron", {}), ("accelerate", "fsdp2", {"pp": 2}), ("accelerate", "torch",
                                                                            {"recompute": "selective"}),
        ("accelerate", "fsdp2", {"precision": "amp-bf16"}),
    ]:
        s = make_setup(engine=estimate, gpus=8, **fields)
        why = can_export(s, engine)
        assert why is not None, (engine, estimate, fields)
        out.append(why)
    for model, engine in [("deepseek-v2-lite", "megatron"), ("gemma-2-2b", "megatron"), ("qwen2.5-7b", "torchtitan"),
                          ("llama-3.2-1b", "torchtitan"), ("mistral-7b", "torchtitan")]:
        spec, s = build(model, engine="megatron" if engine == "megatron" else "fsdp2", gpus=8, attn="flash")
        why = can_export(s, engine, spec)
        assert why is not None, model
        out.append(why)
    return out


def test_every_reason_is_one_line_with_a_chinese_entry() -> None:
    reasons = _reasons()
    assert len(set(reasons)) == len(reasons)
    for why in reasons:
        assert "\n" not in why and tr(why, "zh") != why, why
