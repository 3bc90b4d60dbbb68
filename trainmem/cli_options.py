"""The setup flags shared by ``estimate``, ``explain`` and ``trace`` (a contract: keep the names stable).

They are declared once, in :data:`SETUP_OPTIONS`; :func:`with_setup_options` adds them to a command's
signature (typer reads ``__signature__``), so every command takes the very same options and a new flag is
one line here. :func:`setup_fields` turns a command's arguments into :func:`trainmem.setup.make_setup`
fields (unset flags fall back to the defaults table).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer

__all__ = ["Model", "Json", "Lang", "SETUP_OPTIONS", "SETUP_FIELDS", "setup_fields", "with_setup_options",
           "apply_from_file"]

Model = Annotated[str, typer.Argument(help="catalog name (trainmem models), path to config.json, or a size like 7B")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object")]
Lang = Annotated[str, typer.Option("--lang", help="en|zh")]
_OPTIONAL_MODEL = Annotated[Optional[str], typer.Argument(
    help="catalog name (trainmem models), path to config.json, or a size like 7B [the --from file's model]",
    show_default=False)]
#: ``--from FILE`` on every command with the setup flags (trainmem.frameworks.readers).
_FROM_PARAMETER = inspect.Parameter(
    "from_file", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[str], typer.Option(
        "--from", show_default=False, help="read the setup (and MODEL) from a training config: axolotl, LLaMA-Factory, "
        "torchtune, litgpt YAML; HF TrainingArguments / TRL JSON or YAML; DeepSpeed JSON; Accelerate YAML; "
        "torchtitan TOML; Megatron-LM arguments or NeMo YAML (flags given win)")])

_I, _S, _B = Optional[int], Optional[str], bool

#: (field, type, flag, help): the TrainingSetup fields a command line sets.
SETUP_OPTIONS: tuple[tuple[str, Any, str, str], ...] = (
    ("seq_len", _I, "--seq-len", "tokens per sequence [2048, or the model's context if shorter]"),
    ("micro_batch", _I, "--micro-batch", "sequences per micro-batch per rank [1]"),
    ("grad_accum", _I, "--grad-accum", "micro-batches per optimizer step [1]"),
    ("precision", _S, "--precision", "fp32|bf16|fp16|amp-bf16|amp-fp16|mixed-bf16|mixed-fp16|fp8"),
    ("optimizer", _S, "--optimizer", "adamw|adam|sgd|sgd-momentum|adamw-8bit|adafactor|lion|paged-adamw|"
                                     "paged-adamw-8bit|hf-adafactor (transformers' Adafactor)"),
    ("optimizer_impl", _S, "--optimizer-impl", "foreach (torch.optim's default) | fused (HF Trainer's adamw_torch_fused, "
                                               "torchtitan) [foreach]"),
    ("recompute", _S, "--recompute", "none|selective|full"),
    ("recompute_layers", _I, "--recompute-layers", "with --recompute full: checkpoint only the first N layers of each "
                                                   "pipeline stage (Megatron --recompute-method block) [all]"),
    ("attn", _S, "--attn", "sdpa|flash|eager|flex (FlexAttention, compiled: sdpa's saved tensors + a block mask)"),
    ("backward_prefetch", _S, "--backward-prefetch", "fsdp2 zero 3, step time: pre (FSDP2, FSDP1 BACKWARD_PRE) | "
                                                     "post (FSDP1 BACKWARD_POST, Composer) [pre]"),
    ("fsdp_version", _I, "--fsdp-version", "fsdp2 engine: 2 (fully_shard) | 1 (FullyShardedDataParallel, flat "
                                           "parameters: Accelerate's default, HF Trainer, Lightning, fsdp_qlora) [2]"),
    ("attn_kernel", _S, "--attn-kernel", "step time: fa2 (SDPA / flash-attn 2) | fa3 (FlashAttention-3, Hopper+) | "
                                         "triton (flash-attn's Triton port, llm-foundry) [engine default]"),
    ("loop", _S, "--loop", "trainer (HF Trainer/TRL/torchtitan/Megatron: output dropped before backward) | "
                           "script (outputs kept through backward) [trainer]"),
    ("script_keeps_graph", _B, "--script-keeps-graph", "with --loop script: the previous micro-batch's graph (logits, "
                                                       "bitsandbytes<0.43.2 ctx tensors) lives through the next forward "
                                                       "(litgpt's fit loop)"),
    ("accelerate_autocast", _B, "--accelerate-autocast", "with --precision bf16: the forward runs under accelerate's "
                                                          "autocast (HF Trainer bf16=True over bf16 weights): fp32 "
                                                          "loss, fp32 copy of the logits"),
    ("loss", _S, "--loss", "hf (upcast cross-entropy) | chunked (torchtune/litgpt) | fused-linear (Liger) | "
                           "fused-ce (flash-attn cross-entropy on 16-bit logits; llm-foundry) | cce (Apple's Cut "
                           "Cross-Entropy, no logits; axolotl) | unsloth (unsloth's fast_cross_entropy_loss: 16-bit "
                           "logits, gradient in place) [hf]"),
    ("kernels", _S, "--kernels", "unsloth: unsloth's patched Llama/Mistral under LoRA (fast RMSNorm/RoPE, "
                                 "LoRA_MLP/QKV/W kernels) [none]"),
    ("loss_chunks", _I, "--loss-chunks", "chunks of the chunked loss [8, torchtune's default]"),
    ("engine", _S, "--engine", "torch|fsdp2|deepspeed|megatron"),
    ("gpus", _I, "--gpus", "world size [1]"),
    ("dp", _I, "--dp", "data-parallel degree [gpus/(tp·pp·cp)]"),
    ("tp", _I, "--tp", "tensor-parallel degree [1]"),
    ("pp", _I, "--pp", "pipeline-parallel degree [1]"),
    ("cp", _I, "--cp", "context-parallel degree [1]"),
    ("ep", _I, "--ep", "expert-parallel degree [1]"),
    ("vpp", _I, "--vpp", "virtual pipeline chunks per stage [1]"),
    ("stage_layers", _S, "--stage-layers", "decoder layers per pipeline stage, first to last, e.g. 15,16,16,15 "
                                           "[the even split, remainder to the first stages]"),
    ("device_map", _S, "--device-map", "auto: HF from_pretrained(device_map='auto'), --engine torch: the layers "
                                       "split over --gpus GPUs of one process, one busy at a time"),
    ("sp", _B, "--sp", "sequence parallelism (megatron; on by default for fsdp2 with --tp)"),
    ("no_sp", _B, "--no-sp", "fsdp2 with --tp: tensor parallelism without SequenceParallel"),
    ("async_tp", _B, "--async-tp", "fsdp2 with --tp, step time: torchtitan's async TP (TP collectives micro-pipelined "
                                   "with their matmuls; needs torch.compile)"),
    ("no_loss_parallel", _B, "--no-loss-parallel", "fsdp2 with --tp: full logits on every rank"),
    ("zero", _I, "--zero", "0-3 (deepspeed), 2|3 (fsdp2), 1 = distributed optimizer (megatron)"),
    ("grad_reduce_16bit", _B, "--grad-reduce-16bit", "megatron: 16-bit main-grad buffer, reduced in 16 bits "
                                                      "(grad_reduce_in_fp32=False, --grad-reduce-in-bf16) [fp32]"),
    ("fp8_params", _B, "--fp8-params", "megatron fp8: layer weights stored in fp8 (--fp8-param-gather; --zero 1)"),
    ("fp8_backend", _S, "--fp8-backend", "fp8 linears: torchao (Float8Linear, torchtitan; fsdp2 default) | te "
                                         "(Transformer Engine te.Linear: Accelerate TE backend, llm-foundry; megatron)"),
    ("fp8_allgather", _B, "--fp8-allgather", "fsdp2 torchao fp8: all-gather the linears' weights in fp8 "
                                              "(torchtitan enable_fsdp_float8_all_gather)"),
    ("megatron_deepspeed", _B, "--megatron-deepspeed", "megatron with --pp: DeepSpeed's PipelineEngine and "
                                                        "BF16_Optimizer run the step (Megatron-DeepSpeed)"),
    ("offload", _S, "--offload", "none|optimizer|optimizer+params"),
    ("optimizer_in_backward", _B, "--optimizer-in-backward", "torch, one GPU: step each parameter in its backward "
                                                             "and free its gradient (torchtune optimizer_in_bwd)"),
    ("compile", _B, "--compile", "torch/fsdp2: each decoder layer torch.compile'd (torchtitan, torchtune; inductor's "
                                 "min-cut partitioner saves fewer tensors)"),
    ("no_compile_loss", _B, "--no-compile-loss", "with --compile: the loss stays eager (torchtitan's 2024-12 "
                                                 "benchmarks compiled the blocks only)"),
    ("lora_rank", _I, "--lora-rank", "LoRA rank; 0 = full fine-tuning"),
    ("lora_targets", _S, "--lora-targets", "comma list of module names (PEFT's), or all-linear"),
    ("lora_dropout", _S, "--lora-dropout", "with LoRA: the adapters' dropout probability (PEFT lora_dropout) [0.0]"),
    ("qlora", _B, "--qlora", "NF4 base weights (needs --lora-rank)"),
    ("load_in_8bit", _B, "--load-in-8bit", "LLM.int8 base weights, bitsandbytes 0.41 (needs --lora-rank; not --qlora)"),
    ("qlora_impl", _S, "--qlora-impl", "with --qlora: bnb (bitsandbytes, HF/PEFT/axolotl) | torchao (NF4Tensor, "
                                       "torchtune) | bnb-legacy (bitsandbytes < 0.43.2: keeps each 4-bit linear's "
                                       "16-bit input) [bnb]"),
    ("adapter_dtype", _S, "--adapter-dtype", "with LoRA: fp32 (PEFT's default upcast) | bf16 (the base's dtype: "
                                             "torchtune, PEFT autocast_adapter_dtype=False) [fp32]"),
    ("kbit_prep", _S, "--kbit-prep", "with LoRA: frozen 16-bit weights cast to fp32: none | peft "
                                     "(prepare_model_for_kbit_training) | norms-fp32 (TRL <= 0.21, LLaMA-Factory "
                                     "upcast_layernorm) [none]"),
    ("offload_activations", _B, "--offload-activations", "saved activations to pinned host memory (torchtune/TRL "
                                                         "OffloadActivations, axolotl activation_offloading)"),
    ("target_len", _I, "--target-len", "encoder–decoder models (T5, BART): target tokens per sequence; --seq-len is "
                                       "the source [--seq-len]"),
    ("image_tokens", _I, "--image-tokens", "vision-language models: visual tokens per sample, counted in --seq-len "
                                           "(Qwen2.5-VL: (H/14)(W/14)/4 per image; LLaVA-1.5: 576) [0]"),
    ("train_vision", _B, "--train-vision", "VLMs: train the vision tower and projector [frozen]"),
    ("freeze_vision", _B, "--freeze-vision", "VLMs: vision tower and projector frozen (the default: LLaMA-Factory, "
                                             "ms-swift)"),
    ("train_projector", _B, "--train-projector", "VLMs: train the projector only, the tower frozen"),
    ("stack", _S, "--stack", "a framework's shipped defaults for the flags not given: hf-trainer|trl|torchtune|"
                             "litgpt|axolotl|llama-factory|unsloth|ms-swift|torchtitan|megatron|megatron-bridge|deepspeed|"
                             "llm-foundry|accelerate (docs/stacks.md)"),
    ("sample_lengths", _S, "--sample-lengths", "the run's sample lengths: MEAN:STD or MEAN:STD:MIN:MAX tokens (log-normal, "
                                               "fixed seed) or a file of lengths one per line; samples over --seq-len "
                                               "dropped, batches padded to their longest: adds peak_reserved_over_run"),
    ("run_steps", _I, "--run-steps", "with --sample-lengths: micro-batches the run replays [200; a file: all]"),
    ("gpu", _S, "--gpu", "GPU name [H100-SXM-80G] (trainmem gpus)"),
    ("gpu_memory", _S, "--gpu-memory", "memory of the GPU, e.g. 96GiB or 94GB (overrides the catalog's)"),
)

#: The command arguments that are TrainingSetup fields.
SETUP_FIELDS = tuple(o[0] for o in SETUP_OPTIONS)
_BOOL_FIELDS = tuple(o[0] for o in SETUP_OPTIONS if o[1] is bool)


@functools.lru_cache(maxsize=None)
def _setup_parameters() -> tuple[inspect.Parameter, ...]:
    """The setup flags as keyword parameters, built once and shared by every command (typer copies a parameter's
    ``OptionInfo`` before it changes it: typer/utils.py ``get_params_from_function``, typer 0.29); ~300 ``Annotated``
    types fewer at start."""
    out = []
    for name, typ, flag, help_ in SETUP_OPTIONS:
        default = False if typ is bool else None
        ann = Annotated[typ, typer.Option(flag, help=help_, show_default=False)]
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
    return tuple(out)


def with_setup_options(func: Callable[..., None], read_from: bool = True) -> Callable[..., None]:
    """Give a typer command every setup flag. ``func`` takes its own parameters plus ``**setup``; the
    setup flags arrive in ``setup`` (pass them through :func:`setup_fields`). ``read_from`` False: ``--from FILE``
    arrives unread as ``from_file`` (the doctor reads it as its ``--config``)."""
    sig = inspect.signature(func, eval_str=True)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    positional = [p for p in own if p.default is inspect.Parameter.empty]
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.default is not inspect.Parameter.empty]

    takes_model = any(p.name == "model" for p in positional)
    if takes_model:  # MODEL may come from --from FILE (the file's base_model, model_name_or_path, ...)
        positional = [p.replace(default=None, annotation=_OPTIONAL_MODEL) if p.name == "model" else p
                      for p in positional]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        path = kwargs.pop("from_file", None) if read_from else None
        if path is not None:
            kwargs = apply_from_file(path, kwargs, model_required=takes_model)
        elif takes_model and kwargs.get("model") is None and kwargs.get("from_file") is None:
            from trainmem.errors import ConfigError
            raise ConfigError("missing the MODEL argument (a catalog name, a config.json path or a size like 7B), "
                              "or give --from FILE")
        return func(*args, **kwargs)

    params = [*positional, *_setup_parameters(), _FROM_PARAMETER, *rest]
    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def apply_from_file(path: str, kwargs: dict[str, Any], model_required: bool = True) -> dict[str, Any]:
    """A command's arguments with ``--from FILE`` read in (trainmem.frameworks.readers): the setup flags given win
    over the file's values, MODEL over the model it names; the file's assumption lines travel as ``notes``."""
    from trainmem.frameworks.readers import file_setup

    merged, model, _ = file_setup(path, setup_fields(kwargs), kwargs.get("model"),
                                  model_required=model_required and "model" in kwargs)
    out = dict(kwargs)
    out.update({k: merged.get(k) for k in SETUP_FIELDS})
    if "model" in out:
        out["model"] = model
    out["notes"] = merged["notes"]
    return out


def setup_fields(args: dict) -> dict:
    """The setup fields of a command's arguments; unset boolean flags are left to the defaults. The assumption
    lines of a ``--from`` file (``notes``) pass through."""
    out = {k: args[k] for k in SETUP_FIELDS if k in args}
    if args.get("notes"):
        out["notes"] = tuple(args["notes"])
    for flag in _BOOL_FIELDS:
        if flag in out and not out[flag]:
            out[flag] = None
    return out
