"""torchtitan exporter: ``torchtitan.toml`` (a job config), ``launch.sh`` and, for a shape that is not one of
its flavors, ``trainmem_flavor.py``, for torchtitan 0.2.2 (PyPI ``torchtitan==0.2.2``, the release the memory
model cites; 0.3.0 dropped TOML job configs for Python config registries).

Keys are the dataclass fields of torchtitan 0.2.2 ``torchtitan/config/job_config.py`` (``[model]``, ``[training]``
local_batch_size/global_batch_size/seq_len/dtype/mixed_precision_param/enable_cpu_offload, ``[parallelism]``
data_parallel_shard_degree/fsdp_reshard_after_forward/tensor_parallel_degree/pipeline_parallel_*/
context_parallel_degree, ``[activation_checkpoint]`` mode/selective_ac_option, ``[compile]``,
``[quantize.linear.float8]``), read by ``torchtitan.config.manager.ConfigManager`` (``--job.config_file``).

How the estimate maps (trainmem/memory/engines/fsdp2.py, setup.py): FSDP over dp×cp as
``data_parallel_shard_degree = dp`` (no replicate dim); zero 3 / 2 as ``fsdp_reshard_after_forward =
"always"`` / ``"never"``; ``local_batch_size = micro_batch`` and gradient accumulation from ``global_batch_size``
(train.py: steps = global / (local × dp)); under pipeline parallelism the accumulation is the pipeline's
micro-batches: ``local_batch_size = micro_batch × grad_accum`` split by ``pipeline_parallel_microbatch_size =
micro_batch`` (distributed/pipeline_parallel.py), and the layer split is written out as
``module_fqns_per_model_part`` (the estimate's even split, remainder to the first stages; torchtitan's own
default weighs the embedding and output as layers); selective recompute = op-level SAC
(``selective_ac_option = "op"``); AdamW/Adam with ``implementation`` = the setup's ``optimizer_impl`` (foreach
unless ``--optimizer-impl fused``, torchtitan's own default; the estimate counts foreach temporaries); fp8 = torchao Float8Linear (``model.converters =
["quantize.linear.float8"]``, tensorwise); sequence and loss parallelism as torchtitan always applies them with
TP (``disable_loss_parallel`` for --no-loss-parallel); compile off (the estimate is eager).

What torchtitan 0.2.2 cannot run as estimated: LoRA/QLoRA (not a job-config feature), fp16 (its
mixed_precision_param is bfloat16 or float32), the pure-bf16 recipe under FSDP (it reduces gradients in float32,
``mixed_precision_reduce``), FSDP at dp × cp = 1 (``parallel_dims.fsdp_enabled`` is false there), TP without
sequence parallelism, eager attention, the chunked / fused-linear / fused-ce losses and the script loop (its trainer computes
a plain cross-entropy and drops the logits), optimizers other than Adam/AdamW, and models that its llama3 model
cannot build (biases, tied embeddings, MoE, sliding windows, dropout).
"""

from __future__ import annotations

from trainmem.export.common import ExportTarget, comment_block, layer_split, summary_lines, toml_text, torchrun_prefix
from trainmem.export.megatron import _bias
from trainmem.memory.states import stage_layers, stage_ranges
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["PINNED", "reason", "model_reason", "job_config", "llama3_args", "files", "BUILTIN_FLAVORS"]

PINNED = "torchtitan 0.2.2 (pip install torchtitan==0.2.2)"
_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}
#: torchtitan 0.2.2 torchtitan/models/llama3/__init__.py ``llama3_args`` (the non-debug flavors).
BUILTIN_FLAVORS: dict[str, dict[str, object]] = {
    "8B": {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "ffn": 14336, "vocab_size": 128256,
           "rope_theta": 500000.0},
    "70B": {"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "ffn": 28672, "vocab_size": 128256,
            "rope_theta": 500000.0},
    "405B": {"dim": 16384, "n_layers": 126, "n_heads": 128, "n_kv_heads": 8, "ffn": 53248, "vocab_size": 128256,
             "rope_theta": 500000.0},
}


def reason(setup: TrainingSetup) -> str | None:
    """Why torchtitan 0.2.2 cannot run this setup as estimated, or None."""
    s = setup
    if s.engine != "fsdp2":
        return f"the torchtitan exporter runs setups estimated for the fsdp2 engine, not {s.engine}"
    if s.is_lora:
        return "LoRA is not a torchtitan job config feature; use --export accelerate (PEFT) for LoRA"
    if s.precision == "amp-fp16":
        return "torchtitan's mixed_precision_param is bfloat16 or float32; it has no fp16 recipe"
    if s.precision == "bf16" and s.fsdp_applied:
        return "torchtitan reduces FSDP gradients in float32 (mixed_precision_reduce); the pure-bf16 recipe was " \
               "estimated with bf16 reductions"
    if s.fsdp_applied and s.dp * s.cp == 1:
        return "torchtitan applies no FSDP at dp * cp = 1 (parallel_dims.fsdp_enabled); the estimate sharded " \
               "with fully_shard"
    if s.tp > 1 and not s.sp:
        return "torchtitan always applies sequence parallelism with tensor parallelism; drop --no-sp"
    if s.attn == "eager":
        return "torchtitan's models run SDPA attention; eager attention has no setting"
    if s.async_tp:
        return ("torchtitan's async TP needs torch.compile of the model (maybe_enable_async_tp), whose memory the "
                "eager estimate does not model; export without --async-tp")
    if s.recompute_layers is not None:
        return ("torchtitan checkpoints every k-th layer of the model (selective_ac_option = \"k\", "
                "torchtitan/distributed/activation_checkpoint.py), not the first N of each stage; "
                "--recompute-layers is not expressible")
    if s.precision == "fp8" and s.fp8_backend == "te":
        return "torchtitan's float8 is torchao's Float8Linear; Transformer Engine linears (--fp8-backend te) have no setting"
    if s.loss != "hf" or s.loop != "trainer":
        return "torchtitan's trainer computes a plain cross-entropy and drops the logits; use --loss hf --loop trainer"
    if s.optimizer not in _OPTIMIZERS:
        return f"torchtitan 0.2.2 builds Adam and AdamW only, not {s.optimizer}"
    return None


def llama3_args(spec: ModelSpec) -> dict[str, object]:
    """torchtitan's llama3 ``TransformerModelArgs`` for this shape. The MLP width is set exactly through
    torchtitan's FeedForward rounding (models/llama3/model/model.py: ``int(2·4·dim/3)``, × ffn_dim_multiplier,
    rounded up to multiple_of): multiple_of = the width and a multiplier that lands in (0, width]."""
    base = int(2 * 4 * spec.hidden_size / 3)
    return {"dim": spec.hidden_size, "n_layers": spec.num_layers, "n_heads": spec.num_attention_heads,
            "n_kv_heads": spec.num_kv_heads, "vocab_size": spec.vocab_size, "multiple_of": spec.intermediate_size,
            "ffn_dim_multiplier": spec.intermediate_size / base,
            "norm_eps": float(spec.hf_config.get("rms_norm_eps") or 1e-5),
            "rope_theta": float(spec.hf_config.get("rope_theta") or 10000.0)}


def _builtin_flavor(spec: ModelSpec) -> str | None:
    a = llama3_args(spec)
    for name, f in BUILTIN_FLAVORS.items():
        if all(a[k] == f[k] for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "rope_theta")) \
                and spec.intermediate_size == f["ffn"] and a["norm_eps"] == 1e-5:
            return name
    return None


def model_reason(spec: ModelSpec, setup: TrainingSetup, split: tuple[int, ...] = ()) -> str | None:
    """Why torchtitan's llama3 model cannot build this shape, or None."""
    ok = (spec.model_type in ("llama", "mistral") and spec.head == "lm" and not spec.is_moe
          and spec.norm == "rmsnorm" and spec.position == "rope" and spec.mlp_gated and spec.hidden_act == "silu"
          and spec.head_dim * spec.num_attention_heads == spec.hidden_size and _bias(spec) == "none")
    if not ok:
        return (f"torchtitan's llama3 model builds bias-free Llama-style decoders; {spec.model_type} is not one "
                "(use --export accelerate)")
    if spec.tie_word_embeddings:
        return "torchtitan's llama3 model has an untied output layer; this model ties its embeddings"
    if spec.sliding_window or spec.attention_dropout or spec.hidden_dropout:
        return "torchtitan's llama3 model has no sliding window and no dropout"
    split = layer_split(setup, split)
    if split and (len(split) != setup.pp or sum(split) != spec.num_layers or setup.vpp != 1):
        return (f"layers per stage {list(split)}: module_fqns_per_model_part needs one count per stage of pp({setup.pp}), "
                f"{spec.num_layers} layers in all, without interleaving")
    return None


def _model_parts(spec: ModelSpec, setup: TrainingSetup, split: tuple[int, ...] = ()) -> list[list[str]]:
    """module_fqns_per_model_part: the estimate's layer split (``stage_layers``), one part per (virtual) stage;
    ``split``: the planner's layers per stage (uneven stages on mixed GPU types, no interleaving)."""
    parts_n = setup.pp * setup.vpp
    split = layer_split(setup, split)
    if split and setup.vpp == 1 and len(split) == parts_n and sum(split) == spec.num_layers:
        parts = [[f"layers.{i}" for i in r] for r in stage_ranges(split)]
    else:
        parts = [[f"layers.{i}" for i in stage_layers(spec.num_layers, parts_n, k)] for k in range(parts_n)]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def _parallelism(spec: ModelSpec, setup: TrainingSetup, split: tuple[int, ...] = ()) -> dict[str, object]:
    s = setup
    par: dict[str, object] = {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": s.dp,
        "fsdp_reshard_after_forward": "always" if s.zero == 3 else "never",
        "tensor_parallel_degree": s.tp, "disable_loss_parallel": s.tp > 1 and not s.loss_parallel,
        "enable_async_tensor_parallel": False, "pipeline_parallel_degree": s.pp, "context_parallel_degree": s.cp,
        "expert_parallel_degree": s.ep,
    }
    if s.pp > 1:
        par.update({"pipeline_parallel_schedule": "Interleaved1F1B" if s.vpp > 1 else "1F1B",
                    "pipeline_parallel_microbatch_size": s.micro_batch,
                    "module_fqns_per_model_part": _model_parts(spec, s, split)})
    return par


def job_config(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> dict[str, dict[str, object]]:
    """The TOML tables of the job config."""
    s = setup
    flavor = _builtin_flavor(spec)
    local = s.micro_batch * (s.grad_accum if s.pp > 1 else 1)
    tables: dict[str, dict[str, object]] = {
        "job": {"description": f"trainmem export: {target.model_ref}"},
        "model": {"name": "llama3", "flavor": flavor or "trainmem", "hf_assets_path": "./assets/hf/" +
                  target.model_ref.rstrip("/").split("/")[-1]},
        "optimizer": {"name": _OPTIMIZERS[s.optimizer], "lr": 3e-4, "eps": 1e-8, "weight_decay": 0.01,
                      "implementation": s.optimizer_impl},
        "training": {"local_batch_size": local, "global_batch_size": s.global_batch, "seq_len": s.seq_len,
                     "max_norm": 1.0, "steps": 1000, "enable_cpu_offload": s.offload == "optimizer+params",
                     "dtype": "bfloat16" if s.precision == "bf16" else "float32",
                     "mixed_precision_param": "float32" if s.precision == "fp32" else "bfloat16",
                     "mixed_precision_reduce": "float32"},
        "parallelism": _parallelism(spec, s, target.layers_per_stage),
        "activation_checkpoint": {"mode": s.recompute, "selective_ac_option": "op"},
        "compile": {"enable": False},
    }
    if s.precision == "fp8":
        tables["model"]["converters"] = ["quantize.linear.float8"]
        tables["quantize.linear.float8"] = {"recipe_name": "tensorwise", "filter_fqns": ["output"]}
        if s.fp8_allgather:  # (FSDP2 gathers the weights in fp8; the scales precomputed once per step)
            tables["quantize.linear.float8"].update(enable_fsdp_float8_all_gather=True,
                                                    precompute_float8_dynamic_scale_for_fsdp=True)
    if flavor is None:
        tables["experimental"] = {"custom_import": "trainmem_flavor"}
    return tables


def _flavor_module(spec: ModelSpec, target: ExportTarget) -> str:
    a = llama3_args(spec)
    scaling = spec.hf_config.get("rope_scaling") or {}
    if scaling.get("rope_type") == "llama3":
        rs = (f"RoPEScalingArgs(scaling_factor={float(scaling.get('factor', 8.0))!r}, "
              f"low_freq_factor={float(scaling.get('low_freq_factor', 1.0))!r}, "
              f"high_freq_factor={float(scaling.get('high_freq_factor', 4.0))!r}, "
              f"original_max_position_embeddings={int(scaling.get('original_max_position_embeddings', 8192))})")
    else:
        rs = "RoPEScalingArgs(scaling_factor=1.0)"  # scaling factor 1: the frequencies unchanged (no RoPE scaling)
    fields = ", ".join(f"{k}={v!r}" for k, v in a.items())
    return (f'"""{target.model_ref} as a torchtitan 0.2.2 llama3 flavor named "trainmem" (generated by trainmem;\n'
            'imported through [experimental] custom_import before the model is built)."""\n\n'
            "from torchtitan.models.llama3 import TransformerModelArgs, llama3_args\n"
            "from torchtitan.models.llama3.model.args import RoPEScalingArgs\n\n"
            f'llama3_args["trainmem"] = TransformerModelArgs({fields}, rope_scaling_args={rs})\n')


def files(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> dict[str, str]:
    header = comment_block(summary_lines(spec, setup, target, PINNED))
    tables = job_config(spec, setup, target)
    out = {"torchtitan.toml": toml_text(tables, header + "\n")}
    custom = "experimental" in tables
    if custom:
        out["trainmem_flavor.py"] = _flavor_module(spec, target)
    launch = ["#!/usr/bin/env bash", header.rstrip("\n"),
              f"# {tables['model']['hf_assets_path']}: the model's HF tokenizer files (torchtitan's",
              "# scripts/download_hf_assets.py --assets tokenizer); the dataset is [training] dataset (c4_test).",
              "set -euo pipefail", 'cd "$(dirname "$0")"']
    if custom:
        launch.append('export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # trainmem_flavor.py')
    launch.append(f'{torchrun_prefix(target)} -m torchtitan.train --job.config_file torchtitan.toml "$@"')
    out["launch.sh"] = "\n".join(launch) + "\n"
    return out
