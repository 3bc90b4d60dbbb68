"""``--from FILE``: each framework's own example config (tests/frameworks/configs, copied from the frameworks'
repositories at the pinned releases, source in each file's header / configs/README.md) gives the same ``setup``
as the equivalent flags, written here by hand from the file and the framework's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmem.api import build
from trainmem.frameworks.readers import merge_fields, read_config

CONFIGS = Path(__file__).parent / "configs"

#: file → (MODEL the file names, the equivalent flags). Each comment says where a value comes from.
CASES: dict[str, tuple[str, dict]] = {
    # axolotl v0.18.0 examples/llama-3/lora-1b.yml: bf16 auto → bf16 weights; adamw_8bit; flash_attention
    "axolotl_llama3_lora-1b.yml": ("llama-3.2-1b", dict(
        stack="axolotl", seq_len=2048, micro_batch=2, grad_accum=2, precision="bf16", optimizer="adamw-8bit",
        attn="flash", recompute="full", lora_rank=16, lora_dropout=0.05,
        lora_targets="gate_proj,down_proj,up_proj,q_proj,v_proj,k_proj,o_proj")),
    "axolotl_llama3_qlora-1b.yml": ("llama-3.2-1b", dict(
        stack="axolotl", seq_len=2048, micro_batch=2, grad_accum=4, precision="bf16", optimizer="adamw-8bit",
        attn="flash", recompute="full", lora_rank=32, qlora=True, lora_dropout=0.05,
        lora_targets="gate_proj,down_proj,up_proj,q_proj,v_proj,k_proj,o_proj")),
    # fsdp [full_shard, auto_wrap] + fsdp_offload_params; liger_fused_linear_cross_entropy; adamw_torch_fused
    "axolotl_fft-8b-liger-fsdp.yaml": ("llama-3.1-8b", dict(
        stack="axolotl", seq_len=4096, micro_batch=2, grad_accum=4, precision="bf16", optimizer="adamw",
        optimizer_impl="fused", attn="flash", recompute="full", loss="fused-linear", engine="fsdp2", zero=3,
        offload="optimizer+params")),
    # LLaMA-Factory v0.9.5: gradient checkpointing on by default; lora_target all; the base loaded in bf16
    "llamafactory_qwen3_lora_sft.yaml": ("qwen3-4b", dict(
        stack="llama-factory", lora_rank=8, lora_targets="all-linear", seq_len=2048, micro_batch=1, grad_accum=8,
        recompute="full", optimizer="adamw", optimizer_impl="fused", precision="bf16")),
    "llamafactory_qwen3_lora_sft_otfq.yaml": ("qwen3-4b", dict(
        stack="llama-factory", lora_rank=8, lora_targets="all-linear", qlora=True, seq_len=2048, micro_batch=1,
        grad_accum=8, recompute="full", optimizer="adamw", optimizer_impl="fused", precision="bf16")),
    # deepspeed: examples/deepspeed/ds_z3_config.json (relative path): "auto" filled from the HF arguments
    "llamafactory_qwen3_full_sft.yaml": ("qwen3-4b", dict(
        stack="llama-factory", engine="deepspeed", zero=3, precision="mixed-bf16", seq_len=2048, micro_batch=1,
        grad_accum=2, recompute="full", optimizer="adamw")),
    "llamafactory_qwen3_lora_sft_ds3.yaml": ("qwen3-4b", dict(
        stack="llama-factory", engine="deepspeed", zero=3, precision="mixed-bf16", seq_len=2048, micro_batch=1,
        grad_accum=2, recompute="full", optimizer="adamw", lora_rank=8, lora_targets="all-linear")),
    # torchtune v0.6.1: output_proj → o_proj, apply_lora_to_mlp → gate/up/down; dtype bf16; CEWithChunkedOutputLoss
    "torchtune_llama3_2_1B_lora_single_device.yaml": ("llama-3.2-1b", dict(lora_dropout=0.0, 
        stack="torchtune", engine="torch", lora_rank=64, lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        micro_batch=4, grad_accum=8, precision="bf16", recompute="none", optimizer="adamw", optimizer_impl="fused",
        loss="chunked")),
    "torchtune_llama3_1_8B_lora.yaml": ("llama-3.1-8b", dict(lora_dropout=0.0,   # lora_finetune_distributed: FSDP2, --nproc_per_node 2
        stack="torchtune", engine="fsdp2", zero=3, gpus=2, lora_rank=8,
        lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", micro_batch=2, grad_accum=8,
        precision="bf16", recompute="none", optimizer="adamw", optimizer_impl="fused", loss="chunked")),
    "torchtune_llama3_1_8B_qlora_single_device.yaml": ("llama-3.1-8b", dict(lora_dropout=0.0, 
        stack="torchtune", engine="torch", lora_rank=8, qlora=True, qlora_impl="torchao",
        lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", micro_batch=2, grad_accum=8,
        precision="bf16", recompute="full", optimizer="adamw", optimizer_impl="fused", loss="chunked")),
    "torchtune_llama3_2_1B_full_single_device.yaml": ("llama-3.2-1b", dict(
        stack="torchtune", engine="torch", micro_batch=4, grad_accum=1, precision="bf16", recompute="none",
        optimizer="paged-adamw-8bit", loss="chunked", optimizer_in_backward=True)),
    # litgpt v0.5.13: accumulation = global_batch_size / devices / micro_batch_size; bf16-true
    "litgpt_llama-3.1-8b_lora.yaml": ("llama-3.1-8b", dict(
        stack="litgpt", micro_batch=1, grad_accum=8, seq_len=512, precision="bf16", lora_rank=32,
        lora_targets="q_proj,v_proj", recompute="none", optimizer="adamw", lora_dropout=0.05)),
    "litgpt_llama-3-8b_qlora.yaml": ("llama-3-8b", dict(
        stack="litgpt", micro_batch=2, grad_accum=4, seq_len=512, precision="bf16", qlora=True, lora_rank=32,
        lora_targets="q_proj,v_proj", recompute="none", optimizer="adamw", lora_dropout=0.05)),
    "litgpt_llama-3-8b_full.yaml": ("llama-3-8b", dict(  # devices 4: FSDP with a checkpoint on every Block
        stack="litgpt", gpus=4, engine="fsdp2", zero=3, recompute="full", micro_batch=4, grad_accum=4, seq_len=512,
        precision="bf16", optimizer="adamw")),
    # alignment-handbook (TRL SFT): torch_dtype bfloat16 + bf16 → bf16 weights; max_seq_length
    "trl_zephyr-7b-beta_sft_config_full.yaml": ("mistral-7b", dict(
        stack="hf-trainer", micro_batch=16, grad_accum=1, seq_len=2048, recompute="full", attn="flash",
        precision="bf16", optimizer="adamw", optimizer_impl="fused")),
    "trl_zephyr-7b-beta_sft_config_qlora.yaml": ("mistral-7b", dict(
        stack="hf-trainer", micro_batch=4, grad_accum=2, seq_len=2048, recompute="full", attn="flash",
        precision="bf16", optimizer="adamw", optimizer_impl="fused", lora_rank=16, qlora=True, lora_dropout=0.05,
        lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")),
    # torchtitan 0.2.2 presets: mixed_precision_param bfloat16 (amp-bf16), implementation fused
    "torchtitan_llama3_8b.toml": ("llama-3.1-8b", dict(
        stack="torchtitan", engine="fsdp2", micro_batch=1, seq_len=8192, precision="amp-bf16", recompute="selective",
        optimizer="adamw", optimizer_impl="fused")),
    "torchtitan_llama3_70b.toml": ("llama-3.1-70b", dict(
        stack="torchtitan", engine="fsdp2", tp=8, gpus=8, micro_batch=8, seq_len=8192, precision="amp-bf16",
        recompute="full", optimizer="adamw", optimizer_impl="fused")),
    # Megatron-LM core_v0.19.0 examples/llama/train_llama3_8b_h100_fp8.sh: 8 GPUs, gbs 128 / (mbs 1 × dp 8);
    # --sequence-parallel dropped at tp 1 (Megatron does the same)
    "megatron_train_llama3_8b_h100_fp8.sh": ("llama-3-8b", dict(
        stack="megatron", engine="megatron", gpus=8, micro_batch=1, grad_accum=16, seq_len=8192, zero=1,
        precision="fp8", fp8_params=True, grad_reduce_16bit=True, optimizer="adamw")),
    # NeMo megatron_llama_config.yaml: the Llama-2-7B shape, trainer.precision, global 8 / micro 4 on 1 GPU
    "nemo_megatron_llama_config.yaml": ("llama-2-7b", dict(
        stack="megatron", engine="megatron", gpus=1, micro_batch=4, grad_accum=2, seq_len=4096, precision="fp32",
        optimizer="adamw")),
}
#: Configs that name no model: MODEL comes from the command line.
NO_MODEL: dict[str, tuple[str, dict]] = {
    "accelerate_fsdp.yaml": ("llama-3.1-8b", dict(stack="accelerate", gpus=2, engine="fsdp2", zero=3, precision="bf16")),
    "accelerate_multi_gpu.yaml": ("llama-3.1-8b", dict(stack="accelerate", gpus=2, engine="torch", precision="amp-bf16")),
    # deepspeed_config_file ../deepspeed_config_templates/zero_stage1_config.json, relative to the YAML
    "accelerate_deepspeed.yaml": ("llama-3.1-8b", dict(
        stack="accelerate", gpus=2, engine="deepspeed", zero=1, precision="mixed-fp16", grad_accum=1,
        optimizer="adamw")),
    "deepspeed_configs_zero2.json": ("llama-3.1-8b", dict(stack="deepspeed", engine="deepspeed", zero=2,
                                                         offload="optimizer")),
    "examples/deepspeed/ds_z3_config.json": ("llama-3.1-8b", dict(stack="deepspeed", engine="deepspeed", zero=3)),
}


def _setup(model: str, fields: dict) -> dict:
    return build(model, **fields)[1].model_dump()


@pytest.mark.parametrize("name", sorted(CASES))
def test_file_gives_the_setup_of_its_flags(name: str) -> None:
    model, flags = CASES[name]
    got = read_config(str(CONFIGS / name))
    assert got.model == model
    fields = merge_fields(got, {})
    assert _setup(model, fields) == _setup(model, flags)
    # and each field the file states is one of the hand-written flags (no value read that the test does not name)
    assert {k for k in got.fields} <= set(flags) | {"dp", "tp", "cp", "sp", "lora_targets", "optimizer_impl"}, got.fields


@pytest.mark.parametrize("name", sorted(NO_MODEL))
def test_config_without_model(name: str) -> None:
    model, flags = NO_MODEL[name]
    got = read_config(str(CONFIGS / name))
    assert got.model is None
    assert _setup(model, merge_fields(got, {})) == _setup(model, flags)


def test_flags_win_over_the_file_and_the_file_over_the_stack() -> None:
    got = read_config(str(CONFIGS / "axolotl_llama3_lora-1b.yml"))
    fields = merge_fields(got, {"micro_batch": 8, "recompute": None, "lora_rank": 4})
    s = build("llama-3.2-1b", **fields)[1]
    assert (s.micro_batch, s.lora_rank, s.recompute, s.grad_accum) == (8, 4, "full", 2)
    # the stack (axolotl) fills what neither gives: its loop; the file's optimizer beats the stack's fused default
    assert s.stack == "axolotl" and s.optimizer == "adamw-8bit" and s.optimizer_impl == "foreach"


def test_assumptions_list_file_defaults_and_ignored_keys() -> None:
    import yaml

    path = CONFIGS / "llamafactory_qwen3_lora_sft.yaml"
    notes = read_config(str(path)).notes()
    name = path.name
    assert notes[0] == f"model qwen3-4b, the catalog's shape for Qwen/Qwen3-4B-Instruct-2507: from {name} " \
                       "(model_name_or_path)"
    assert f"lora_rank 8: from {name} (lora_rank)" in notes and f"seq_len 2048: from {name} (cutoff_len)" in notes
    assert f"recompute full: the llama-factory default for what {name} leaves out (LLaMA-Factory 0.9.5 " \
           "disable_gradient_checkpointing=False)" in notes
    assert notes[-1].startswith(f"ignored keys of {name} (no effect on the memory trainmem models): ")
    ignored = set(notes[-1].split(": ", 1)[1].split(", "))
    # every key of the file is either read (named in a line) or listed as ignored
    keys = {k for k, v in yaml.safe_load(path.read_text()).items() if v is not None}
    read = {ln.rsplit("(", 1)[1].rstrip(")") for ln in notes[:-1]}
    assert keys - read - ignored <= {"bf16", "stage", "finetuning_type", "lora_target"}, keys - read - ignored
    assert {"learning_rate", "dataset", "template", "output_dir", "report_to", "trust_remote_code"} <= ignored


def test_estimate_json_setup_shows_the_file(capsys) -> None:
    import json

    from trainmem.cli import main
    assert main(["estimate", "--from", str(CONFIGS / "torchtune_llama3_2_1B_lora_single_device.yaml"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["lora_rank"] == 64 and out["setup"]["micro_batch"] == 4 and out["setup"]["stack"] == "torchtune"
    assert "lora_rank 64: from torchtune_llama3_2_1B_lora_single_device.yaml (model.lora_rank)" in out["assumptions"]
    # a flag given wins
    assert main(["estimate", "--from", str(CONFIGS / "torchtune_llama3_2_1B_lora_single_device.yaml"),
                 "--micro-batch", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["setup"]["micro_batch"] == 1


@pytest.mark.parametrize("command", ["explain", "compare", "report"])
def test_from_on_other_commands(command: str, capsys, tmp_path) -> None:
    from trainmem.cli import main
    args = [command, "--from", str(CONFIGS / "axolotl_llama3_lora-1b.yml")]
    if command == "report":
        pytest.importorskip("plotly")
        args += ["-o", str(tmp_path / "r.html")]
    assert main(args) == 0, capsys.readouterr().err


def test_plan_from_file(capsys) -> None:
    """plan --from: the model, sequence length and global batch of the file (Megatron's script: 8 GPUs,
    global batch 128), the recipe kept, the layout searched (said so); flags given win."""
    import json

    from trainmem.cli import main
    path = str(CONFIGS / "megatron_train_llama3_8b_h100_fp8.sh")
    assert main(["plan", "--from", path, "--cluster", "8xH100-SXM-80G", "--top", "1", "--json"]) == 0, \
        capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["from"]["file"] == path and out["plans"]
    assert "global batch 128: the file's micro-batch × accumulation × dp 8" in out["from"]["assumptions"]
    p = out["plans"][0]
    assert p["micro_batch"] * p["grad_accum"] * p["dp"] == 128
    assert main(["plan", "--from", path, "--cluster", "8xH100-SXM-80G", "--global-batch", "16", "--top", "1",
                 "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["plans"][0]
    assert p["micro_batch"] * p["grad_accum"] * p["dp"] == 16
    assert main(["plan", "--cluster", "8xH100-SXM-80G", "--global-batch", "16"]) == 2
    assert "missing the MODEL argument" in capsys.readouterr().err


def test_doctor_config_reads_framework_configs(capsys) -> None:
    """doctor --config takes the formats its launch reader lacks through the --from reader: an axolotl config
    gives the expected peak of its flags."""
    import json

    from trainmem.cli import main
    flags = ["--seq-len", "2048", "--micro-batch", "2", "--grad-accum", "2", "--precision", "bf16", "--optimizer",
             "adamw-8bit", "--attn", "flash", "--recompute", "full", "--lora-rank", "16", "--lora-targets",
             "gate_proj,down_proj,up_proj,q_proj,v_proj,k_proj,o_proj"]
    assert main(["doctor", "llama-3.2-1b", *flags, "--json"]) == 0
    by_flags = json.loads(capsys.readouterr().out)["findings"][0]["expected_bytes"]
    assert main(["doctor", "llama-3.2-1b", "--config", str(CONFIGS / "axolotl_llama3_lora-1b.yml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"][0]["expected_bytes"] == by_flags


def test_axolotl_deepspeed_auto_values(tmp_path) -> None:
    """axolotl passes ``deepspeed:`` to the HF Trainer: axolotl's own zero2.json ("auto" batch sizes and bf16) takes
    micro_batch_size, gradient_accumulation_steps and bf16 from the axolotl file (the path beside it)."""
    import shutil
    (tmp_path / "deepspeed_configs").mkdir()
    shutil.copy(CONFIGS / "deepspeed_configs_zero2.json", tmp_path / "deepspeed_configs" / "zero2.json")
    path = tmp_path / "ax.yml"
    path.write_text("base_model: meta-llama/Llama-3.2-1B\nsequence_len: 1024\nmicro_batch_size: 3\n"
                    "gradient_accumulation_steps: 5\nbf16: auto\ndeepspeed: deepspeed_configs/zero2.json\n")
    got = read_config(str(path))
    s = build("llama-3.2-1b", **merge_fields(got, {}))[1]
    assert (s.engine, s.zero, s.offload, s.micro_batch, s.grad_accum, s.precision) == \
        ("deepspeed", 2, "optimizer", 3, 5, "mixed-bf16")
    assert "micro_batch 3: from ax.yml (train_micro_batch_size_per_gpu [zero2.json])" in got.notes()


def test_megatron_argument_file(tmp_path) -> None:
    """A plain Megatron-LM argument file (one flag per line, comments) with Llama-2-7B's shape."""
    path = tmp_path / "args.txt"
    path.write_text("# Llama-2-7B, 4 x 8 GPUs\n--num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008\n"
                    "--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096\n"
                    "--tensor-model-parallel-size 2\n--pipeline-model-parallel-size 2\n"
                    "--num-layers-per-virtual-pipeline-stage 4\n--micro-batch-size 1 --global-batch-size 64\n"
                    "--recompute-granularity selective\n"
                    "--bf16 --use-distributed-optimizer --sequence-parallel\n--nproc_per_node 8 --nnodes 4\n")
    got = read_config(str(path))
    assert got.model == "llama-2-7b"
    s = build(got.model, **merge_fields(got, {}))[1]
    assert (s.gpus, s.tp, s.pp, s.vpp, s.dp, s.micro_batch, s.grad_accum) == (32, 2, 2, 4, 8, 1, 8)
    assert (s.recompute, s.precision, s.zero, s.sp) == ("selective", "mixed-bf16", 1, True)
    path.write_text(path.read_text().replace("--recompute-granularity selective", "--recompute-granularity full "
                                             "--recompute-method block --recompute-num-layers 2")
                    .replace("--num-layers-per-virtual-pipeline-stage 4\n", ""))
    s = build("llama-2-7b", **merge_fields(read_config(str(path)), {}))[1]
    assert (s.vpp, s.recompute, s.recompute_layers) == (1, "full", 2)


def test_python_api_from_file(capsys) -> None:
    """trainmem.estimate(None, from_file=FILE) is ``trainmem estimate --from FILE --json``; keywords win."""
    import json

    import trainmem
    from trainmem.cli import main
    path = str(CONFIGS / "litgpt_llama-3.1-8b_lora.yaml")
    assert main(["estimate", "--from", path, "--json"]) == 0
    assert trainmem.estimate(None, from_file=path).to_dict() == json.loads(capsys.readouterr().out)
    assert trainmem.estimate(None, from_file=path, micro_batch=2).to_dict()["setup"]["micro_batch"] == 2
    assert trainmem.compare("llama-3.1-8b", from_file=path).to_dict()["baseline"]


def test_torchtune_lora_modules_count_as_torchtune_builds_them(tmp_path) -> None:
    """torchtune's lora_llama3_1_8b(lora_attn_modules=[q_proj, v_proj, output_proj], apply_lora_to_mlp=True,
    lora_rank=8) adapts q, v, output_proj and w1/w2/w3 of each of the 32 layers (hidden 4096, kv 1024, MLP 14336):
    r·(in + out) per adapted linear, by hand; apply_lora_to_output adds r·(4096 + 128256)."""
    import trainmem
    r, h, kv, f = 8, 4096, 1024, 14336
    per_layer = r * ((h + h) + (h + kv) + (h + h) + 3 * (h + f))
    path = CONFIGS / "torchtune_llama3_1_8B_lora.yaml"
    assert trainmem.estimate(None, from_file=str(path)).to_dict()["n_trainable_params"] == 32 * per_layer
    out = tmp_path / "out.yaml"
    out.write_text(path.read_text().replace("apply_lora_to_output: False", "apply_lora_to_output: True"))
    got = trainmem.estimate(None, from_file=str(out)).to_dict()["n_trainable_params"]
    assert got == 32 * per_layer + r * (h + 128256)


@pytest.mark.parametrize("config, loss, eager", [
    ("torchtune_llama3_2_1B_full_single_device.yaml", "torch.nn.CrossEntropyLoss", True),
    ("torchtune_llama3_1_8B_lora.yaml", "torch.nn.CrossEntropyLoss", True),            # lora_finetune_distributed
    ("torchtune_llama3_2_1B_lora_single_device.yaml", "torch.nn.CrossEntropyLoss", False),
    ("torchtune_llama3_2_1B_full_single_device.yaml", "torchtune.modules.loss.CEWithChunkedOutputLoss", False),
])
def test_torchtune_compile_leaves_a_plain_loss_eager_where_the_recipe_drops_compile_loss(tmp_path, config, loss,
                                                                                        eager) -> None:
    """torchtune 0.6.1 ``training.compile_loss`` returns ``torch.compile(loss)`` for a loss other than the chunked
    one (which it patches in place); full_finetune_single_device.py, full_finetune_distributed.py and
    lora_finetune_distributed.py drop that return, lora_finetune_single_device.py assigns it: compile with
    torch.nn.CrossEntropyLoss reads as --no-compile-loss in the first three only."""
    import re
    text = (CONFIGS / config).read_text()
    text = re.sub(r"(?m)^compile: \w+", "compile: True", text)
    text = re.sub(r"(?m)^(loss:\n  _component_: )\S+", lambda m: m[1] + loss, text)
    assert "compile: True" in text and loss in text
    path = tmp_path / config
    path.write_text(text)
    fields = read_config(str(path)).fields
    assert fields["compile"] is True
    assert fields.get("no_compile_loss", False) is eager
