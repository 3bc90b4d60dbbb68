"""``doctor --config FILE`` goes through the ``--from`` reader and the same validated setup: for a config of every
format ``--from`` reads (the framework's own example files, tests/frameworks/configs), the doctor's ``setup`` and
``assumptions`` are ``estimate --from``'s, and ``doctor --from`` is the same run; errors are the reader's, said of
``--config``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.doctor.conftest import CORPUS
from trainmem.cli import main
from trainmem.errors import ConfigError
from trainmem.frameworks.readers import FORMATS, read_config

CONFIGS = Path(__file__).resolve().parent.parent / "frameworks" / "configs"
#: One config per --from format (and TRL's SFTConfig, read as hf): (file, MODEL when the file names none).
PER_FORMAT = [
    ("torchtune_llama3_2_1B_lora_single_device.yaml", None),
    ("axolotl_llama3_lora-1b.yml", None),
    ("llamafactory_qwen3_lora_sft.yaml", None),
    ("litgpt_llama-3.1-8b_lora.yaml", None),
    ("accelerate_fsdp.yaml", "llama-3.1-8b"),
    ("nemo_megatron_llama_config.yaml", None),
    ("trl_zephyr-7b-beta_sft_config_qlora.yaml", None),
    ("deepspeed_configs_zero2.json", "llama-3.2-1b"),
    ("torchtitan_llama3_8b.toml", None),
    ("megatron_train_llama3_8b_h100_fp8.sh", None),
    ("ms_swift_sft.yaml", None),
]


def _json(capsys, *args: str) -> dict:
    rc = main([*args, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_every_format_is_covered() -> None:
    kinds = {read_config(str(CONFIGS / f)).format for f, _ in PER_FORMAT}
    assert kinds == set(FORMATS) - {"hf"} | {"trl"}


@pytest.mark.parametrize("name,model", PER_FORMAT, ids=lambda x: str(x))
def test_doctor_config_is_estimate_from(capsys, name: str, model: str | None) -> None:
    path = str(CONFIGS / name)
    m = [model] if model else []
    est = _json(capsys, "estimate", *m, "--from", path)
    doc = _json(capsys, "doctor", *m, "--config", path)
    assert doc["setup"] == est["setup"]
    assert doc["assumptions"] == est["assumptions"]
    assert any(f["expected_bytes"] is not None for f in doc["findings"])  # undetermined first when no --gpu
    assert _json(capsys, "doctor", *m, "--from", path) == doc


def test_flags_win_over_the_file(capsys) -> None:
    """A flag given on the command line wins over the file in the doctor as in estimate (axolotl: micro_batch_size 2)."""
    path = str(CONFIGS / "axolotl_llama3_lora-1b.yml")
    est = _json(capsys, "estimate", "--from", path, "--micro-batch", "5", "--gpu", "A100-SXM-40G")
    doc = _json(capsys, "doctor", "--config", path, "--micro-batch", "5", "--gpu", "A100-SXM-40G")
    assert doc["setup"] == est["setup"] and doc["setup"]["micro_batch"] == 5
    assert doc["setup"]["stack"] == "axolotl"  # the stack's shipped defaults, as estimate --from applies them


def test_training_arguments_with_a_deepspeed_file(capsys) -> None:
    """An HF TrainingArguments JSON pointing to a DeepSpeed JSON beside it ("auto" values from the HF args)."""
    path = str(CORPUS / "configs" / "training_args_ds.json")
    doc = _json(capsys, "doctor", "llama-2-7b", "--gpus", "8", "--config", path)
    s = doc["setup"]
    assert (s["engine"], s["zero"], s["offload"], s["micro_batch"], s["grad_accum"], s["precision"]) == \
        ("deepspeed", 3, "optimizer+params", 2, 4, "mixed-bf16")
    assert doc["setup"] == _json(capsys, "estimate", "llama-2-7b", "--gpus", "8", "--from", path)["setup"]


def test_config_without_model_and_the_evidence(capsys) -> None:
    """A DeepSpeed JSON names no model: without MODEL the doctor still reads it (as evidence) and builds no
    estimate; the model a pasted config names is taken only from the catalog when ``config_model`` is off."""
    from trainmem.doctor.run import DoctorInputs, run_doctor
    doc = _json(capsys, "doctor", "--config", str(CONFIGS / "deepspeed_configs_zero2.json"))
    assert "setup" not in doc and "config" in doc["findings"][0]["evidence"]
    res = run_doctor(DoctorInputs(config=str(CONFIGS / "axolotl_llama3_lora-1b.yml"), config_model=False))
    assert res.expected is not None and res.expected.spec.name == "llama-3.2-1b"


def test_config_and_from_together_are_refused(capsys) -> None:
    path = str(CONFIGS / "axolotl_llama3_lora-1b.yml")
    assert main(["doctor", "--config", path, "--from", path]) == 2
    assert "once, with --config or --from" in capsys.readouterr().err


@pytest.mark.parametrize("text,match", [("{not json", "not valid JSON"), ('{"foo": 1}', "not a config trainmem reads"),
                                        ("just text", "not a YAML mapping"), ("a: [1, 2", "not valid YAML")])
def test_bad_configs(tmp_path, text: str, match: str) -> None:
    from trainmem.doctor.launch import read_launch_config
    p = tmp_path / "cfg"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        read_launch_config(str(p), {}, None)
    assert str(e.value).startswith(f"--config {p}")


def test_a_from_reader_error_is_said_of_config(tmp_path) -> None:
    """A config the --from reader takes (axolotl YAML) with a bad value: the error names --config, in zh too."""
    from trainmem.doctor.launch import read_launch_config
    from trainmem.report.i18n import tr
    p = tmp_path / "axolotl.yaml"
    p.write_text("base_model: meta-llama/Llama-2-7b-hf\nmicro_batch_size: abc\nsequence_len: 2048\nadapter: lora\n")
    with pytest.raises(ConfigError) as e:
        read_launch_config(str(p), {}, None)
    msg = str(e.value)
    assert msg.startswith(f"--config {p}: ") and "micro_batch_size" in msg and "--from" not in msg
    zh = tr(msg, "zh")
    assert zh.startswith(f"--config {p}：") and "正整数" in zh


def test_a_value_the_file_cannot_express_is_refused_as_estimate_refuses_it(tmp_path, capsys) -> None:
    """torchtitan HSDP (data_parallel_replicate_degree 2): refused unless --dp is given, by the doctor as by estimate
    --from, said of --config (zh too)."""
    from trainmem.report.i18n import tr
    p = tmp_path / "hsdp.toml"
    p.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 2048\n'
                 '[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 4\n')
    assert main(["estimate", "--from", str(p)]) == 2
    est_err = capsys.readouterr().err
    assert main(["doctor", "--config", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "HSDP" in err and "give --dp/--gpus to choose" in err
    assert err.split(": ", 1)[1] == est_err.strip().split(": ", 1)[1].replace("--from", "--config", 1)
    zh = tr(err.split(": ", 1)[1], "zh")
    assert zh.startswith(f"--config {p}：") and "请给出 --dp/--gpus 来选择" in zh
    assert main(["doctor", "--config", str(p), "--dp", "8", "--gpus", "8", "--recompute", "full", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["setup"]["dp"] == 8
