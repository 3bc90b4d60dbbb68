"""``--from FILE`` for ms-swift (trainmem/frameworks/readers/ms_swift.py).

ms-swift's own ``swift sft`` configs (tests/frameworks/configs/ms_swift_*: examples/yaml/deepspeed/sft.yaml and
sft.json, examples/train/multi-node/ray/sft.yaml, copied verbatim from v4.5.2) give the setup of the flags written
here by hand from the file and ms-swift 4.5.2's defaults; the QLoRA and full fine-tune cases are ms-swift's own
examples/train/qlora/bnb/train.sh and examples/train/full/train.sh written as the file ``swift sft FILE.yaml``
reads (swift/cli/main.py ``parse_yaml_args``: each key is ``--key value``). ms-swift itself is not installed here
(its package pulls modelscope, datasets, trl and pins its own transformers): the mapping is checked against its
source, cited in the module, and the DeepSpeed JSONs it ships were compared with swift/config/*.json at v4.5.2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.frameworks.test_readers import CONFIGS
from tests.report.test_zh import ascii_punctuation_in_chinese, english_runs
from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.frameworks.readers import merge_fields, read_config
from trainmem.report.i18n import tr

#: ms-swift 4.5.2 examples/yaml/deepspeed/sft.{yaml,json}: LoRA r 8 all-linear, lora_dropout 0.05 (default), zero2 =
#: swift/config/zero2.json ("auto" ← micro-batch 1, accumulation 8, bf16 from torch_dtype bfloat16), checkpointing on.
_DS_SFT = dict(stack="ms-swift", lora_rank=8, lora_dropout=0.05, lora_targets="all-linear", seq_len=2048,
               micro_batch=1, grad_accum=8, recompute="full", optimizer="adamw", engine="deepspeed", zero=2,
               precision="mixed-bf16")
CASES: dict[str, tuple[str, dict]] = {
    "ms_swift_sft.yaml": ("qwen2.5-7b", _DS_SFT),
    "ms_swift_sft.json": ("qwen2.5-7b", _DS_SFT),
    # max_length unset there: given as --seq-len 4096; zero3 (swift/config/zero3.json), flash_attn → flash
    "ms_swift_ray_sft.yaml": ("qwen2.5-7b", dict(
        stack="ms-swift", lora_rank=8, lora_dropout=0.05, lora_targets="q_proj,k_proj,v_proj,o_proj", seq_len=4096,
        micro_batch=1, grad_accum=8, recompute="full", optimizer="adamw", engine="deepspeed", zero=3,
        precision="mixed-bf16", attn="flash")),
}
_HEAD = "model: Qwen/Qwen2.5-7B-Instruct\ndataset: swift/self-cognition#500\nmax_length: 2048\n"
#: examples/train/qlora/bnb/train.sh and examples/train/full/train.sh as files (the flags that matter)
QLORA = _HEAD + ("tuner_type: lora\ntorch_dtype: bfloat16\nbnb_4bit_compute_dtype: bfloat16\nbnb_4bit_quant_type: nf4\n"
                 "bnb_4bit_use_double_quant: true\nquant_method: bnb\nquant_bits: 4\nper_device_train_batch_size: 1\n"
                 "lora_rank: 8\nlora_alpha: 32\ntarget_modules: all-linear\ngradient_accumulation_steps: 16\n")
FULL = _HEAD + "tuner_type: full\ntorch_dtype: bfloat16\nper_device_train_batch_size: 1\ngradient_accumulation_steps: 16\n"


def _setup(model: str, fields: dict) -> dict:
    return build(model, **fields)[1].model_dump()


def _write(tmp_path: Path, text: str, name: str = "swift.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_gives_the_setup_of_its_flags(name: str) -> None:
    model, flags = CASES[name]
    got = read_config(str(CONFIGS / name))
    assert got.format == "ms-swift" and got.model == model
    cli = {"seq_len": 4096} if "seq_len" in got.blocked else {}
    assert _setup(model, merge_fields(got, cli)) == _setup(model, flags)
    assert {"dataset", "learning_rate", "model_author", "num_train_epochs"} <= set(got.ignored)
    assert any(n.startswith("deepspeed zero") and "swift/config/zero" in n for n in got.notes())


def test_max_length_unset_is_refused_without_seq_len() -> None:
    """max_length None: ms-swift caps at the model's max_model_len (base_args.py), not trainmem's 2048."""
    got = read_config(str(CONFIGS / "ms_swift_ray_sft.yaml"))
    with pytest.raises(ConfigError, match="max_length not set.*give --seq-len to choose"):
        merge_fields(got, {})


@pytest.mark.parametrize("text, want", [
    (QLORA, dict(stack="ms-swift", lora_rank=8, lora_dropout=0.05, lora_targets="all-linear", qlora=True,
                 seq_len=2048, micro_batch=1, grad_accum=16, recompute="full", precision="bf16")),
    (FULL, dict(stack="ms-swift", lora_rank=0, seq_len=2048, micro_batch=1, grad_accum=16, recompute="full",
                precision="bf16")),
    # defaults only: LoRA r 8, micro-batch 1, accumulation ceil(16 / 1 / 1), the checkpoint's bf16 (stated)
    (_HEAD, dict(stack="ms-swift", lora_rank=8, lora_dropout=0.05, lora_targets="all-linear", seq_len=2048,
                 micro_batch=1, grad_accum=16, recompute="full", precision="bf16")),
    # ENV NPROC_PER_NODE 4, micro-batch 2: accumulation ceil(16 / 2 / 4) = 2; float32 weights → fp16 autocast
    (_HEAD + "ENV:\n  NPROC_PER_NODE: 4\nper_device_train_batch_size: 2\ntorch_dtype: float32\n",
     dict(stack="ms-swift", gpus=4, lora_rank=8, lora_dropout=0.05, lora_targets="all-linear", seq_len=2048,
          micro_batch=2, grad_accum=2, recompute="full", precision="amp-fp16")),
    (_HEAD + "torch_dtype: float32\nfp16: false\nbf16: true\ngradient_checkpointing: false\nlora_dtype: bfloat16\n"
             "attn_impl: sdpa\nuse_liger_kernel: true\noptim: adamw_torch\n",
     dict(stack="ms-swift", lora_rank=8, lora_dropout=0.05, lora_targets="all-linear", seq_len=2048, micro_batch=1,
          grad_accum=16, recompute="none", precision="amp-bf16", adapter_dtype="bf16", attn="sdpa",
          loss="fused-linear", optimizer="adamw", optimizer_impl="foreach")),
    # ms-swift 3.x's train_type; quant 8-bit; fsdp2 preset (full_shard, activation_checkpointing)
    (_HEAD + "train_type: lora\nquant_method: bnb\nquant_bits: 8\n",
     dict(stack="ms-swift", lora_rank=8, lora_dropout=0.05, lora_targets="all-linear", seq_len=2048, micro_batch=1,
          grad_accum=16, recompute="full", precision="bf16", load_in_8bit=True)),
    (FULL + "fsdp: fsdp2\nENV:\n  NPROC_PER_NODE: 2\n",
     dict(stack="ms-swift", gpus=2, lora_rank=0, seq_len=2048, micro_batch=1, grad_accum=16, recompute="full",
          precision="bf16", engine="fsdp2", zero=3)),
    (FULL + "deepspeed: zero3_offload\n",
     dict(stack="ms-swift", lora_rank=0, seq_len=2048, micro_batch=1, grad_accum=16, recompute="full",
          precision="mixed-bf16", engine="deepspeed", zero=3, offload="optimizer+params", optimizer="adamw")),
], ids=["qlora-bnb-example", "full-example", "defaults", "env-world", "autocast-keys", "3x-8bit", "fsdp2",
        "zero3-offload"])
def test_keys_give_the_setup_of_their_flags(text: str, want: dict, tmp_path: Path) -> None:
    got = read_config(_write(tmp_path, text))
    assert got.format == "ms-swift"
    assert _setup("qwen2.5-7b", merge_fields(got, {})) == _setup("qwen2.5-7b", want)


def test_json_and_defaults_are_stated(tmp_path: Path) -> None:
    got = read_config(_write(tmp_path, json.dumps({"model": "Qwen/Qwen2.5-7B-Instruct", "max_length": 1024}),
                             "swift.json"))
    notes = got.notes()
    assert "precision bf16: the ms-swift default for what swift.json leaves out (ms-swift 4.5.2 model_args.py: " \
           "torch_dtype=None, the checkpoint's bfloat16, bf16 autocast)" in notes
    assert any(n.startswith("grad_accum 16: the ms-swift default") and "ceil(16 / 1 / world size 1)" in n
               for n in notes)


@pytest.mark.parametrize("body, why", [
    ("tuner_type: adalora\n", "tuner_type adalora: trainmem models lora and full"),
    ("tuner_type: full\nquant_method: bnb\nquant_bits: 4\n", "a quantized base trains only with adapters"),
    ("quant_method: hqq\nquant_bits: 4\n", "quant_method hqq"),
    ("sequence_parallel_size: 2\n", "sequence_parallel_size 2"),
    ("target_modules: [all-linear, all-embedding]\n", "all-embedding"),
    ("use_dora: true\n", "use_dora"),
    ("torch_dtype: float16\ntuner_type: full\n", "GradScaler refuses fp16"),
    ("torch_dtype: float32\nbf16: true\n", "bf16 and fp16 are both on"),
    ("freeze_vit: false\n", "freeze_vit / freeze_aligner false under LoRA"),
    ("freeze_llm: true\n", "freeze_llm true"),
    ("optimizer: muon\n", "optimizer plugins"),
    ("attn_impl: flash_attention_4\n", "attn_impl flash_attention_4"),
    ("target_regex: 'model.layers.(\\d+'\n", "target_regex .* is not a regular expression"),
])
def test_refused_in_one_line(body: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=why) as e:
        read_config(_write(tmp_path, _HEAD + body))
    assert "\n" not in str(e.value) and str(e.value).startswith("--from ")
    assert not _left(str(e.value)), str(e.value)


def test_vision_keys_of_a_full_fine_tune(tmp_path: Path) -> None:
    """tuner_args.py: freeze_vit / freeze_aligner default True (trainmem's default: frozen)."""
    assert read_config(_write(tmp_path, FULL + "freeze_vit: false\nfreeze_aligner: false\n")).fields["train_vision"]
    assert read_config(_write(tmp_path, FULL + "freeze_aligner: false\n")).fields["train_projector"]
    with pytest.raises(ConfigError, match="freeze_vit false with freeze_aligner true"):
        read_config(_write(tmp_path, FULL + "freeze_vit: false\n"))


def test_estimate_from_equals_flags(capsys) -> None:
    from trainmem.cli import main
    assert main(["estimate", "--from", str(CONFIGS / "ms_swift_sft.yaml"), "--json"]) == 0, capsys.readouterr().err
    got = json.loads(capsys.readouterr().out)
    assert main(["estimate", "qwen2.5-7b", "--stack", "ms-swift", "--lora-rank", "8", "--lora-dropout", "0.05",
                 "--lora-targets", "all-linear", "--seq-len", "2048", "--micro-batch", "1", "--grad-accum", "8",
                 "--engine", "deepspeed", "--zero", "2", "--precision", "mixed-bf16", "--json"]) == 0
    flags = json.loads(capsys.readouterr().out)
    assert got["peak_allocated_bytes"] == flags["peak_allocated_bytes"] and got["setup"] == flags["setup"]


def _left(text: str) -> list[str]:
    zh = tr(text, "zh")
    return english_runs(zh) + ascii_punctuation_in_chinese(zh)


@pytest.mark.parametrize("text", [QLORA, FULL + "fsdp: fsdp2\nENV:\n  NPROC_PER_NODE: 2\n",
                                  _HEAD + "quant_bits: 4\npacking: true\n", _HEAD + "padding_free: true\n"],
                         ids=["qlora", "fsdp2", "quant-bits-alone", "padding-free"])
def test_assumption_lines_are_chinese(text: str, tmp_path: Path) -> None:
    left = {line: _left(line) for line in read_config(_write(tmp_path, text)).notes()}
    assert not {k: v for k, v in left.items() if v}, "\n".join(k for k, v in left.items() if v)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_assumption_lines_are_chinese(name: str) -> None:
    left = {line: _left(line) for line in read_config(str(CONFIGS / name)).notes()}
    assert not {k: v for k, v in left.items() if v}, "\n".join(k for k, v in left.items() if v)


def test_plan_from_file_takes_seq_len_given_on_the_command_line(capsys) -> None:
    """plan --from merges the command line's --seq-len over the file as estimate does: ms-swift's ray sft.yaml
    leaves max_length unset (refused without --seq-len); with it the plan runs at 4096 tokens per sequence (it
    was refused even with --seq-len: plan_inputs merged the file without the command line)."""
    from trainmem.cli import main
    path = str(CONFIGS / "ms_swift_ray_sft.yaml")
    args = ["plan", "--from", path, "--cluster", "8xH100-SXM-80G", "--global-batch", "16", "--top", "1", "--json"]
    assert main(args) == 2
    assert "max_length not set" in capsys.readouterr().err
    assert main(args + ["--seq-len", "4096"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    p = out["plans"][0]
    assert p["tokens_per_step"] == 16 * 4096 and p["micro_batch"] * p["grad_accum"] * p["dp"] == 16


def test_stack_is_the_readers_release_and_defaults(tmp_path: Path) -> None:
    """``--stack ms-swift`` and a swift sft file that sets only the model and max_length give one setup: both are
    ms-swift v4.5.2's defaults (the stack lacked tuner_args.py lora_dropout=0.05 and named v4.4.3 by 3602360a5,
    which is main after v4.5.2). The reader's accumulation ceil(16 / 1 / 1) is not a stack default (given here)."""
    from trainmem.frameworks import get_stack
    from trainmem.frameworks.readers.ms_swift import _WHO
    got = read_config(_write(tmp_path, "model: Qwen/Qwen2.5-7B-Instruct\nmax_length: 2048\n"))
    stack = _setup("qwen2.5-7b", dict(stack="ms-swift", seq_len=2048, grad_accum=16))
    assert _setup("qwen2.5-7b", merge_fields(got, {})) == stack and stack["lora_dropout"] == 0.05
    assert get_stack("ms-swift").release == "ms-swift v" + _WHO.split()[1] == "ms-swift v4.5.2"
