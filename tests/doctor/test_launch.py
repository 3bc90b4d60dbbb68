"""Launch configs → setup fields: trainmem's own exports read back (DeepSpeed, Accelerate, torchtitan) and HF
TrainingArguments JSON."""

from __future__ import annotations

import pytest

from tests.doctor.conftest import CORPUS, cases
from trainmem.api import build
from trainmem.doctor.launch import parse_launch_config
from trainmem.errors import ConfigError
from trainmem.export import ExportTarget, export_files

EXPORTS = [
    ("deepspeed", "ds_config.json", dict(engine="deepspeed", zero=2, offload="optimizer", gpus=8, micro_batch=2,
                                          grad_accum=4, precision="mixed-bf16")),
    ("deepspeed", "ds_config.json", dict(engine="deepspeed", zero=3, offload="optimizer+params", gpus=8, micro_batch=1,
                                          precision="mixed-fp16")),
    ("accelerate", "accelerate_config.yaml", dict(engine="fsdp2", zero=3, gpus=8, micro_batch=2, precision="bf16",
                                                  recompute="full")),
    ("accelerate", "accelerate_config.yaml", dict(engine="deepspeed", zero=2, gpus=4, micro_batch=2, grad_accum=2,
                                                  precision="mixed-bf16")),
    ("torchtitan", "torchtitan.toml", dict(engine="fsdp2", gpus=8, tp=2, micro_batch=2, recompute="selective")),
    ("torchtitan", "torchtitan.toml", dict(engine="fsdp2", gpus=8, pp=2, micro_batch=1, grad_accum=4)),
]


@pytest.mark.parametrize("target,name,flags", EXPORTS, ids=lambda x: str(x))
def test_exports_read_back(tmp_path, target: str, name: str, flags: dict) -> None:
    spec, setup = build("llama-3.1-8b", **flags)
    files = export_files(spec, setup, ExportTarget(model_ref="meta-llama/Llama-3.1-8B", nodes=1,
                                                   gpus_per_node=setup.gpus), target)
    for fname, text in files.items():
        (tmp_path / fname).write_text(text)
    got = parse_launch_config(str(tmp_path / name))
    for k, v in got.items():
        assert getattr(setup, k) == v, (k, v, getattr(setup, k))
    assert {"engine", "zero"} <= set(got) or target == "deepspeed" and "zero" in got


@pytest.mark.parametrize("case", cases("configs"), ids=lambda c: c["file"])
def test_training_arguments(case: dict) -> None:
    assert dict(parse_launch_config(str(CORPUS / "configs" / case["file"]))) == case["fields"]


@pytest.mark.parametrize("text,match", [("{not json", "not valid JSON"), ("[1, 2]", "not valid TOML"),
                                        ("a: [1, 2", "not valid YAML"), ('{"foo": 1}', "neither"),
                                        ("just text", "neither"), ("[model]\nname = 'llama3'\n", "neither")])
def test_bad_configs(tmp_path, text: str, match: str) -> None:
    p = tmp_path / "cfg"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        parse_launch_config(str(p))


def test_a_from_reader_error_is_said_of_config(tmp_path) -> None:
    """A config the --from reader takes (axolotl YAML) with a bad value: the error names --config, in zh too."""
    from trainmem.report.i18n import tr
    p = tmp_path / "axolotl.yaml"
    p.write_text("base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: abc\nsequence_len: 2048\nadapter: lora\n")
    with pytest.raises(ConfigError) as e:
        parse_launch_config(str(p))
    msg = str(e.value)
    assert msg.startswith(f"--config {p}: ") and "micro_batch_size" in msg and "--from" not in msg
    zh = tr(msg, "zh")
    assert zh.startswith(f"--config {p}：") and "正整数" in zh
