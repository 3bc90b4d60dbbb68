"""``--from FILE`` on bad input: one line on stderr, exit code 2, never a traceback; a value trainmem cannot express
is refused (never dropped), unless the command line gives that field."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmem.cli import main
from trainmem.errors import ConfigError
from trainmem.frameworks.readers import merge_fields, read_config

CONFIGS = Path(__file__).parent / "configs"

#: (file name, content, words of the one-line error)
BAD: list[tuple[str, str, str]] = [
    ("empty.yaml", "  \n", "the file is empty"),
    ("list.yaml", "- a\n- b\n", "not a YAML mapping"),
    ("broken.json", '{"zero_optimization": ', "not valid JSON"),
    ("broken.toml", "[training\nlocal_batch_size = 1\n", "not valid TOML"),
    ("other.yaml", "foo: 1\nbar: [1, 2]\n", "not a config trainmem reads"),
    ("binary.yaml", "\x00\x01\x02", "a binary file"),
    ("ax8.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\nadapter: qlora\nlora_r: 8\n"
                 "lora_target_linear: true\nload_in_8bit: true\n", "load_in_8bit: an 8-bit base is modelled under adapter lora"),
    ("ax_ia3.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\nadapter: ia3\n", "adapter ia3"),
    ("ax_norank.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\nadapter: lora\n"
                       "lora_target_linear: true\n", "without lora_r"),
    ("ax_notargets.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\nadapter: lora\nlora_r: 8\n",
     "names no modules"),
    ("ax_opt.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\noptimizer: came_pytorch\n",
     "optimizer came_pytorch is not an optimizer trainmem models"),
    ("ax_mb.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: two\nsequence_len: 512\n",
     "micro_batch_size must be a positive integer"),
    ("ax_gc.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\ngradient_checkpointing: unsloth\n",
     "gradient_checkpointing unsloth"),
    ("lf_dpo.yaml", "model_name_or_path: Qwen/Qwen3-4B\nstage: dpo\nfinetuning_type: lora\n", "stage dpo"),
    ("lf_freeze.yaml", "model_name_or_path: Qwen/Qwen3-4B\nstage: sft\nfinetuning_type: freeze\n",
     "finetuning_type freeze"),
    ("lf_q8.yaml", "model_name_or_path: Qwen/Qwen3-4B\nstage: sft\nquantization_bit: 8\n", "quantization_bit 8"),
    ("lf_ds.yaml", "model_name_or_path: Qwen/Qwen3-4B\nstage: sft\ndeepspeed: nowhere/ds.json\n", "no such file"),
    ("tt.yaml", "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_attn_modules: [q, v]\n"
                "  lora_rank: 8\n", "torchtune's names are q_proj, k_proj, v_proj, output_proj"),
    ("tt_opt.yaml", "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\noptimizer:\n"
                    "  _component_: torch.optim.RMSprop\n", "optimizer._component_ torch.optim.RMSprop is not modelled"),
    ("tt_dtype.yaml", "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\ndtype: fp16\n",
     "dtype fp16: torchtune trains in bf16 or fp32"),
    ("lg_q.yaml", "checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3-8B\nprecision: bf16-mixed\nquantize: bnb.nf4\n"
                  "lora_r: 8\ntrain:\n  micro_batch_size: 1\n", "quantize with a -mixed precision"),
    ("lg_gb.yaml", "checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3-8B\ntrain:\n  micro_batch_size: 3\n"
                   "  global_batch_size: 8\n", "is not a multiple of train.micro_batch_size 3"),
    ("hf_optim.json", '{"output_dir": "x", "per_device_train_batch_size": 2, "optim": "galore_adamw"}',
     "optim galore_adamw is not an optimizer trainmem models"),
    ("hf_both.json", '{"output_dir": "x", "bf16": true, "fp16": true}', "bf16 and fp16 are both true"),
    ("hf_hybrid.json", '{"output_dir": "x", "fsdp": "hybrid_shard auto_wrap"}', "fsdp hybrid_shard"),
    ("ds_stage.json", '{"zero_optimization": {"stage": 5}}', "zero_optimization.stage must be 0, 1, 2 or 3"),
    ("ds_opt.json", '{"zero_optimization": {"stage": 2}, "optimizer": {"type": "OneBitAdam"}}',
     "optimizer.type OneBitAdam is not modelled"),
    ("ds_bf16acc.json", '{"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"}}', "BF16_Optimizer"),
    ("ds_param.json", '{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}',
     "offload_param without offload_optimizer"),
    ("acc.yaml", "distributed_type: XLA\nnum_processes: 8\n", "distributed_type XLA"),
    ("acc_ds.yaml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: nowhere.json\n",
     "no such file"),
    ("tt_conv.toml", '[model]\nname = "llama3"\nflavor = "8B"\nconverters = ["mx"]\n[training]\nlocal_batch_size = 1\n',
     "model.converters mx: trainmem models float8 only"),
    ("tt_impl.toml", '[training]\nlocal_batch_size = 1\n[optimizer]\nimplementation = "for-loop"\n',
     "optimizer.implementation for-loop"),
    ("meg.sh", "torchrun pretrain_gpt.py --micro-batch-size 1 --tensor-model-parallel-size x\n",
     "--tensor-model-parallel-size must be a positive integer"),
    ("nemo.yaml", "trainer:\n  devices: 1\n  precision: 64\nmodel:\n  micro_batch_size: 1\n"
                  "  tensor_model_parallel_size: 1\n", "trainer.precision 64"),
]


@pytest.mark.parametrize("name,content,words", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, name: str, content: str, words: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    assert main(["estimate", "--from", str(path), "llama-3.2-1b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err, err


def test_missing_file_and_folder(tmp_path, capsys) -> None:
    assert main(["estimate", "--from", str(tmp_path / "none.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["estimate", "--from", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_no_model_anywhere(capsys) -> None:
    assert main(["estimate", "--from", str(CONFIGS / "accelerate_fsdp.yaml")]) == 2
    assert "the file names no model; give MODEL" in capsys.readouterr().err
    assert main(["estimate"]) == 2
    assert "missing the MODEL argument" in capsys.readouterr().err


def test_unknown_builder_needs_model(tmp_path, capsys) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("model:\n  _component_: torchtune.models.gemma.gemma_2b\nbatch_size: 2\n")
    assert main(["estimate", "--from", str(path)]) == 2
    assert "model._component_ torchtune.models.gemma.gemma_2b matches no catalog model; give MODEL" in \
        capsys.readouterr().err
    assert main(["estimate", "--from", str(path), "llama-3.2-1b", "--json"]) == 0


def test_blocked_value_unless_the_flag_is_given(tmp_path) -> None:
    """torchtitan's default selective_ac_option "2" (every 2nd layer) cannot be expressed: refused, unless
    --recompute chooses."""
    path = tmp_path / "t.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 2\n')
    got = read_config(str(path))
    with pytest.raises(ConfigError, match="selective_ac_option 2 .* is not modelled; give --recompute to choose"):
        merge_fields(got, {})
    assert merge_fields(got, {"recompute": "full"})["recompute"] == "full"


def test_int_or_default_sets_reads_defaults_and_refuses() -> None:
    """Reading.int_or_default, the micro-batch / accumulation rule of the hf, llama-factory, ms-swift, axolotl and
    litgpt readers: the file's positive int (its key recorded), else the framework's default (its source), else
    nothing; anything else refused in one line."""
    from trainmem.frameworks.readers._base import Reading
    r = Reading("f.yaml", "hf", "hf-trainer", {"per_device_train_batch_size": "4", "bad": 0})
    assert r.int_or_default("micro_batch", "per_device_train_batch_size", 8, "src") == 4
    assert r.int_or_default("grad_accum", "gradient_accumulation_steps", 16, "their default") == 16
    assert r.int_or_default("seq_len", "max_length") is None
    out = r.finish()
    assert out.fields == {"stack": "hf-trainer", "micro_batch": 4, "grad_accum": 16}
    assert out.read == [("micro_batch 4", "per_device_train_batch_size")]
    assert out.defaults == [("grad_accum 16", "their default")]
    with pytest.raises(ConfigError, match=r"--from f\.yaml: bad must be a positive integer \(got 0\)"):
        r.int_or_default("micro_batch", "bad", 8, "src")
