"""Megatron-LM exporter: ``megatron_args.sh``, a ``torchrun … pretrain_gpt.py`` line for Megatron-LM tag
``core_v0.19.0`` (commit 5be9626709af2722333bf54797c954c09edeada3, https://github.com/NVIDIA/Megatron-LM).

Every flag is one of that tag's ``megatron/training/arguments.py`` parser (the vendored list
tests/export/megatron_args_core_v0.19.0.txt says which take a value and their choices). The run matches the
estimate (trainmem/memory/engines/megatron.py): ``--use-distributed-optimizer`` for zero 1; the fp32 main-grad
buffer (automatic with ``--bf16``; ``--accumulate-allreduce-grads-in-fp32`` with ``--fp16``, which would
otherwise accumulate in fp16), or 16-bit main grads with ``--grad-reduce-in-bf16`` (plain ``--fp16``) for
``grad_reduce_16bit``; ``--recompute-granularity selective`` (core attention, the default
``--recompute-modules``) or ``full`` with ``--recompute-method uniform --recompute-num-layers 1`` (every layer's
input kept), or ``--recompute-method block --recompute-num-layers N`` for ``recompute_layers`` (the first N layers
of each stage); the interleaved schedule as ``--num-layers-per-virtual-pipeline-stage`` (the tag has no
``--virtual-pipeline-model-parallel-size`` flag); expert tensor parallelism = tp (experts ÷ ep ÷ tp, as the
estimate shards them); ``--padded-vocab-size`` = the model's vocabulary (Megatron would otherwise pad it to a
multiple of 128·tp); dropout at the model's own rates (Megatron's default is 0.1); fp8 as
``--bf16 --fp8-format hybrid --fp8-recipe delayed`` (Transformer Engine, the default recipe), fp8 weights
(``fp8_params``) as ``--fp8-param-gather``; optimizer offload as
``--optimizer-cpu-offload --use-precision-aware-optimizer`` (validate_args requires both).

What Megatron cannot run as estimated: 8-bit AdamW and Adafactor (its optimizers are adam, sgd, lion, muon…),
an interleaved schedule whose micro-batch count is not a multiple of pp
(megatron/core/pipeline_parallel/schedules.py: micro-batch groups of pp), expert parallelism that does not
divide dp·cp (with etp = tp), and model families outside Llama/Mistral/Qwen2/Qwen3/Mixtral/Qwen-MoE/GPT-2
shapes (MLA, sliding windows, softcapping, parallel residuals).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainmem.export.common import ExportTarget, bash_array, layer_split, summary_lines, torchrun_prefix
from trainmem.memory.states import account_split, stage_layers
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["PINNED", "reason", "model_reason", "megatron_args", "megatron_split", "files"]

PINNED = "Megatron-LM core_v0.19.0 (NVIDIA/Megatron-LM tag core_v0.19.0, pretrain_gpt.py)"
_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "gpt2")
_OPTIMIZERS = {"adamw": ["--optimizer", "adam"], "adam": ["--optimizer", "adam"], "lion": ["--optimizer", "lion"],
               "sgd": ["--optimizer", "sgd", "--sgd-momentum", 0.0],
               "sgd-momentum": ["--optimizer", "sgd", "--sgd-momentum", 0.9]}
_ATTN = {"sdpa": "auto", "flash": "flash", "eager": "unfused"}


def reason(setup: TrainingSetup) -> str | None:
    """Why Megatron-LM cannot run this setup as estimated, or None."""
    s = setup
    if s.engine != "megatron":
        return f"the megatron exporter runs setups estimated for the megatron engine, not {s.engine}"
    if s.optimizer not in _OPTIMIZERS:
        return f"Megatron-LM has no {s.optimizer} optimizer (--optimizer adam, sgd or lion)"
    if s.vpp > 1 and s.grad_accum % s.pp:
        return (f"Megatron's interleaved schedule runs micro-batches in groups of pp; grad_accum({s.grad_accum}) "
                f"is not a multiple of pp({s.pp})")
    if s.ep > 1 and (s.dp * s.cp) % s.ep:
        return (f"Megatron with expert tensor parallelism = tp (as estimated) needs ep({s.ep}) to divide "
                f"dp({s.dp}) * cp({s.cp})")
    return None


def _bias(spec: ModelSpec) -> str | None:
    """none | qkv | all (every linear), from the exact attention and MLP parameter counts; None otherwise."""
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    lp = spec.params.layers[0]
    qk_norm = 2 * d if spec.model_type in ("qwen3", "qwen3_moe") else 0
    extra = lp.attention - (h * a * d + h * kv * d + h * kv * dv + a * dv * h) - qk_norm
    qkv = a * d + kv * d + kv * dv
    if extra == 0:
        return "none"
    if extra == qkv:
        return "qkv"
    if extra == qkv + h and not spec.mlp_gated:
        return "all"
    return None


def model_reason(spec: ModelSpec, setup: TrainingSetup, split: tuple[int, ...] = ()) -> str | None:
    """Why this model's shape has no Megatron-LM (GPTModel) flags here, or None; ``split``: the planner's
    layers per stage (``ExportTarget.layers_per_stage``; default the setup's ``stage_layers``)."""
    if spec.model_type not in _FAMILIES or spec.kv_lora_rank is not None or spec.head != "lm":
        return (f"the Megatron-LM exporter knows Llama, Mistral, Qwen2/3, Mixtral, Qwen-MoE and GPT-2 shapes, "
                f"not {spec.model_type}")
    if spec.sliding_window or spec.parallel_residual or spec.attn_logit_softcapping or spec.final_logit_softcapping:
        return f"{spec.model_type}: sliding-window attention, parallel residuals or softcapping have no export here"
    if _bias(spec) is None:
        return f"{spec.model_type}: its linear biases match none of Megatron's bias flags"
    if spec.mlp_gated and spec.hidden_act != "silu":
        return f"{spec.model_type}: Megatron's gated MLP is SwiGLU (silu), not {spec.hidden_act}"
    split = layer_split(setup, split)
    if split and _uneven(spec, setup, split) is None:
        return (f"layers per stage {list(split)}: Megatron-LM runs --decoder-first/last-pipeline-num-layers with the "
                f"stages between the first and the last even (each a multiple of vpp({setup.vpp})), or the "
                f"account-for-embedding/loss split, {spec.num_layers} layers in all over pp({setup.pp})")
    if _uneven(spec, setup, split) is None:
        return (f"num_layers({spec.num_layers}) over pp({setup.pp}): the estimate gives the remainder to the first "
                "stages, which Megatron's first/last-stage layer counts cannot express")
    if spec.vocab_size % setup.tp:
        return (f"vocab_size({spec.vocab_size}) is not divisible by tp({setup.tp}): Megatron would pad the "
                "vocabulary, unlike the estimate")
    return None


def megatron_split(layers_per_stage: Sequence[int]) -> tuple[int, int] | None:
    """(first, last) for ``--decoder-first/last-pipeline-num-layers`` when Megatron-LM can run this split
    (every stage but the first and the last holds the same count), else None."""
    middle = set(layers_per_stage[1:-1])
    if len(layers_per_stage) < 2 or len(middle) > 1:
        return None
    return layers_per_stage[0], layers_per_stage[-1]


def _uneven(spec: ModelSpec, setup: TrainingSetup, split: tuple[int, ...] = ()) -> list[list[object]] | None:
    """Megatron's flags for the estimate's layer split (trainmem/memory/states.py ``layers_of_stage``: the
    setup's ``stage_layers`` or even with the remainder on the first stages): [] when even, the account-for-
    embedding/loss flags when the split is theirs, the first/last-stage layer counts when the middle stages stay
    even (Megatron-LM core_v0.19.0 ``transformer_block.py`` ``get_num_layers_to_build`` splits what is left evenly
    over the middle stages; under vpp every stage's count is split over its vpp chunks), None when Megatron cannot
    express it. ``split``: the layers per stage, resolved by the caller (the planner's, else the setup's)."""
    pp, vpp = setup.pp, setup.vpp
    if not split:
        split = tuple(len(stage_layers(spec.num_layers, pp, j)) for j in range(pp))
    if len(split) != pp or sum(split) != spec.num_layers:
        return None
    if len(set(split)) == 1:
        return [] if split[0] % vpp == 0 else None
    if tuple(split) == account_split(spec.num_layers, pp, vpp):
        return [["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]]
    ends = megatron_split(split)
    if ends is None or any(n % vpp for n in (ends[0], ends[1], split[1] if pp > 2 else 0)):
        return None
    return [["--decoder-first-pipeline-num-layers", ends[0], "--decoder-last-pipeline-num-layers", ends[1]]]


def _shape_args(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> list[list[object]]:
    h, a, kv, hc = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.hf_config
    args: list[list[object]] = [["--num-layers", spec.num_layers], ["--hidden-size", h],
                                ["--ffn-hidden-size", spec.intermediate_size], ["--num-attention-heads", a]]
    if spec.head_dim * a != h:
        args.append(["--kv-channels", spec.head_dim])
    if kv != a:
        args.append(["--group-query-attention", "--num-query-groups", kv])
    if spec.mlp_gated:
        args.append(["--swiglu"])
    elif spec.hidden_act in ("gelu_new", "gelu_pytorch_tanh"):
        args.append(["--openai-gelu"])
    eps = hc.get("rms_norm_eps") or hc.get("layer_norm_epsilon") or hc.get("layer_norm_eps") or 1e-5
    args.append(["--normalization", "RMSNorm" if spec.norm == "rmsnorm" else "LayerNorm", "--norm-epsilon", eps])
    if spec.position == "rope":
        args.append(["--position-embedding-type", "rope", "--rotary-base", int(hc.get("rope_theta") or 10000)])
        scaling = hc.get("rope_scaling") or {}
        if scaling.get("rope_type") == "llama3":
            args.append(["--use-rope-scaling", "--rope-scaling-factor", float(scaling.get("factor", 8.0))])
    else:
        args.append(["--position-embedding-type", "learned_absolute"])
    if not spec.tie_word_embeddings:
        args.append(["--untie-embeddings-and-output-weights"])
    bias = _bias(spec)
    if bias != "all":
        args.append(["--disable-bias-linear"] + (["--add-qkv-bias"] if bias == "qkv" else []))
    if spec.model_type in ("qwen3", "qwen3_moe"):
        args.append(["--qk-layernorm"])
    args += [["--attention-dropout", spec.attention_dropout, "--hidden-dropout", spec.hidden_dropout],
             ["--max-position-embeddings", max(setup.seq_len, spec.max_position_embeddings)],
             ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", target.model_ref],
             ["--padded-vocab-size", spec.vocab_size]]
    return args + _moe_args(spec)


def _moe_args(spec: ModelSpec) -> list[list[object]]:
    if not spec.is_moe:
        return []
    args: list[list[object]] = [["--num-experts", spec.num_experts, "--moe-router-topk", spec.num_experts_per_tok],
                                ["--moe-ffn-hidden-size", spec.moe_intermediate_size]]
    moe = set(spec.moe_layer_indices)
    if len(moe) != spec.num_layers:
        pattern = "[" + ",".join("1" if i in moe else "0" for i in range(spec.num_layers)) + "]"
        args.append(["--moe-layer-freq", pattern])
    if spec.num_shared_experts:
        args.append(["--moe-shared-expert-intermediate-size",
                     spec.num_shared_experts * spec.shared_expert_intermediate_size])
        if spec.model_type == "qwen2_moe":
            args.append(["--moe-shared-expert-gate"])
    return args


def _parallel_args(spec: ModelSpec, setup: TrainingSetup, split: tuple[int, ...] = ()) -> list[list[object]]:
    s = setup
    args: list[list[object]] = [["--tensor-model-parallel-size", s.tp], ["--pipeline-model-parallel-size", s.pp],
                                ["--context-parallel-size", s.cp]]
    uneven = _uneven(spec, s, layer_split(s, split)) or []
    if s.vpp > 1:
        # an uneven split needs the chunk count (core_v0.19.0 arguments.py: "please use
        # --num-virtual-stages-per-pipeline-rank ... when enable uneven pipeline parallelism"; with the
        # account-for flags the per-chunk count would be (num_layers + 2) / (pp·vpp), not num_layers / (pp·vpp))
        args.append(["--num-virtual-stages-per-pipeline-rank", s.vpp] if uneven else
                    ["--num-layers-per-virtual-pipeline-stage", spec.num_layers // (s.pp * s.vpp)])
    args += uneven
    if s.ep > 1:
        args.append(["--expert-model-parallel-size", s.ep, "--expert-tensor-parallel-size", s.tp])
    if s.sp:
        # TP communication overlapped with the GEMMs (Transformer Engine userbuffers), as the published
        # Megatron-Core recipes run it and as trainmem.perf assumes (perf/step.py tp_comm_overlapped);
        # Megatron accepts it only with sequence parallelism.
        args.append(["--sequence-parallel", "--tp-comm-overlap"])
    if s.zero == 1:
        args.append(["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"])
    else:
        args.append(["--overlap-grad-reduce"])
    return args


def _training_args(setup: TrainingSetup) -> list[list[object]]:
    s = setup
    args: list[list[object]] = [["--micro-batch-size", s.micro_batch, "--global-batch-size", s.global_batch],
                                ["--seq-length", s.seq_len]]
    # 16-bit main grads (grad_reduce_16bit): --grad-reduce-in-bf16 with bf16/fp8 (arguments.py then leaves
    # accumulate_allreduce_grads_in_fp32 off), and --fp16 without --accumulate-allreduce-grads-in-fp32.
    bf16_grads = ["--grad-reduce-in-bf16"] if s.grad_reduce_16bit else []
    if s.precision == "mixed-bf16":
        args.append(["--bf16", *bf16_grads])
    elif s.precision == "mixed-fp16":
        args.append(["--fp16"] if s.grad_reduce_16bit else ["--fp16", "--accumulate-allreduce-grads-in-fp32"])
    elif s.precision == "fp8":
        args.append(["--bf16", *bf16_grads, "--fp8-format", "hybrid", "--fp8-recipe", "delayed",
                     *(["--fp8-param-gather"] if s.fp8_params else [])])
    if s.recompute == "selective":
        args.append(["--recompute-granularity", "selective"])
    elif s.recompute == "full" and s.recompute_layers is not None:  # the first N layers of each stage
        args.append(["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
                     s.recompute_layers])
    elif s.recompute == "full":
        args.append(["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1])
    args.append(["--attention-backend", _ATTN[s.attn]])
    args.append([*_OPTIMIZERS[s.optimizer], "--weight-decay", 0.01, "--clip-grad", 1.0])
    if s.offload == "optimizer":
        args.append(["--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--optimizer-offload-fraction", 1.0])
    args += [["--lr", "${LR:-3e-4}", "--min-lr", "${MIN_LR:-3e-5}", "--lr-decay-style", "cosine"],
             ["--train-iters", "${TRAIN_ITERS:-1000}", "--log-interval", 10]]
    return args


def megatron_args(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> list[list[object]]:
    """The pretrain_gpt.py arguments, grouped one flag (or a few related ones) per line."""
    return _parallel_args(spec, setup, target.layers_per_stage) + _training_args(setup) + _shape_args(spec, setup, target)


def files(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> dict[str, str]:
    head = ["#!/usr/bin/env bash", *[f"# {x}" for x in summary_lines(spec, setup, target, PINNED)],
            "# MEGATRON_LM: a checkout of that tag. DATA_ARGS: --mock-data runs synthetic batches; replace it with",
            "# --data-path PREFIX (a Megatron indexed dataset) for real data."]
    text = "\n".join([*head, "set -euo pipefail", 'MEGATRON_LM="${MEGATRON_LM:?set MEGATRON_LM to a Megatron-LM checkout}"',
                      ""]) + "\n"
    text += bash_array("MODEL_ARGS", megatron_args(spec, setup, target))
    text += bash_array("DATA_ARGS", [["--mock-data"], ["--split", "99,1,0"]]) + "\n"
    text += f'{torchrun_prefix(target)} "$MEGATRON_LM/pretrain_gpt.py" "${{MODEL_ARGS[@]}}" "${{DATA_ARGS[@]}}" "$@"\n'
    return {"megatron_args.sh": text}
