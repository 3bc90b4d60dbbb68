"""The training setup: one validated, typed object that every estimate, trace and plan takes.

Defaults (the published table; ``trainmem estimate --help`` shows the same):

=================  ==============  ==========================================================
field              default         meaning
=================  ==============  ==========================================================
engine             torch           plain PyTorch/transformers loop (DDP when dp > 1)
precision          amp-bf16        (torch/fsdp2); mixed-bf16 for deepspeed/megatron; fp8 (megatron:
                                   Transformer Engine, fsdp2: torchao float8) = the bf16 recipe + fp8 matmuls
optimizer          adamw           torch.optim.AdamW, foreach, weight decay 0.01; paged-adamw / paged-adamw-8bit:
                                   bitsandbytes PagedAdamW(8bit), states in CUDA managed memory (torch engine);
                                   adafactor = torch.optim.Adafactor; hf-adafactor = transformers' Adafactor (HF
                                   Trainer optim="adafactor"; torch engine; trainmem/memory/hf_adafactor.py)
optimizer_impl     foreach         foreach (torch.optim's CUDA default) | fused (HF Trainer's adamw_torch_fused
                                   with torch >= 2.8, torchtitan's default): torch/fsdp2 adam(w)/sgd only
seq_len            2048            tokens per sequence
micro_batch        1               sequences per micro-batch per data-parallel rank
grad_accum         1               micro-batches per optimizer step
recompute          none            none | selective | full
recompute_layers   all (full)      with full: checkpoint only the first N decoder layers of each pipeline stage
                                   (Megatron-LM --recompute-method block --recompute-num-layers N); the rest keep all
attn               sdpa            sdpa | flash | eager
backward_prefetch  pre             step time only, fsdp2 zero 3: pre (FSDP2; FSDP1 BACKWARD_PRE, Accelerate's default) |
                                   post (FSDP1 BACKWARD_POST, Composer's default: backward all-gathers exposed)
fsdp_version       2               fsdp2 engine: 2 (fully_shard) | 1 (FullyShardedDataParallel: flat parameters; Accelerate's
                                   default, HF Trainer fsdp=, Lightning FSDPStrategy, fsdp_qlora; memory/engines/fsdp1.py)
attn_kernel        engine default  step time only: the fused attention kernel, fa2 (torch SDPA, flash-attn 2) |
                                   fa3 (FlashAttention-3 / cuDNN, Hopper+) | triton (flash-attn's Triton port)
loop               trainer         trainer: the model output is dropped before backward (HF Trainer, TRL,
                                   torchtitan, Megatron); script: ``outputs`` is kept through backward
script_keeps_graph False          with loop script: the loop's variable (litgpt ``logits = model(...)``) keeps the previous
                                   micro-batch's graph (its logits, custom Functions' ctx tensors) through the next forward
accelerate_autocast False         with precision bf16 (torch engine): the forward runs under accelerate's native AMP over the
                                   16-bit weights (HF Trainer ``bf16=True``: ``torch.autocast(bfloat16)`` and
                                   ``convert_outputs_to_fp32``): fp32-list ops (the loss) compute in fp32, the logits
                                   come back as an fp32 copy
loss               hf              hf (upcast cross-entropy) | chunked (torchtune/litgpt) | fused-linear (Liger) |
                                   fused-ce (flash-attn's cross-entropy kernel on the 16-bit logits, llm-foundry) |
                                   cce (Apple's Cut Cross-Entropy: no logits materialised; axolotl's plugin) |
                                   unsloth (unsloth's fast_cross_entropy_loss: 16-bit logits, gradient in place)
kernels            none            unsloth: unsloth's patched Llama/Mistral under LoRA (fast RMSNorm/RoPE, LoRA_MLP/QKV/W;
                                   memory/unsloth.py)
loss_chunks        8 (chunked)     chunks of the chunked / fused-linear loss
gpus               1               world size
dp                 gpus/(tp·pp·cp) data-parallel degree
tp, pp, cp, ep     1               tensor / pipeline / context / expert parallel degree
vpp                1               virtual pipeline chunks per stage (interleaved 1F1B)
stage_layers       even split      decoder layers per pipeline stage, first to last (Megatron's first/last-stage
                                   counts or account-for-embedding/loss split, torchtitan's split points)
sp                 engine default  sequence parallelism: megatron off unless --sp; fsdp2 with tp > 1 on
                                   (torchtitan's SequenceParallel) unless --no-sp
async_tp           False           step time only, fsdp2 with tp > 1: torchtitan's async TP (micro-pipelined TP collectives)
loss_parallel      engine default  vocab-sharded logits with tp > 1: megatron always, fsdp2 unless
                                   --no-loss-parallel (torchtitan's loss_parallel)
zero               engine default  torch 0, fsdp2 3, deepspeed 0, megatron 0
grad_reduce_16bit  False           megatron: the main-grad buffer in the parameters' 16-bit dtype
                                   (Megatron-Core grad_reduce_in_fp32=False), not fp32
fp8_params         False           megatron fp8: layer weights stored in fp8 (--fp8-param-gather)
fp8_backend        engine default  fp8 linears: megatron te (Transformer Engine); fsdp2 torchao (Float8Linear,
                                   torchtitan) | te (te.Linear: Accelerate's TE backend, llm-foundry fc_type te)
fp8_allgather      False           fsdp2 torchao fp8: FSDP2 all-gathers the linears' weights in fp8
                                   (torchtitan [float8] enable_fsdp_float8_all_gather)
megatron_deepspeed False           megatron with pp > 1: DeepSpeed's PipelineEngine runs the step (Megatron-DeepSpeed:
                                   blocking pipeline sends, BF16_Optimizer, gradient all-reduce after the flush)
offload            none            none | optimizer | optimizer+params
optimizer_in_backward False        torch, one GPU: each parameter stepped and its gradient freed in its backward (torchtune)
compile            False           torch/fsdp2: decoder layers torch.compile'd one by one (torchtitan, torchtune): saved
                                   tensors as inductor's min-cut partitioner keeps them (trainmem/memory/compile.py)
no_compile_loss    False           with compile: the loss stays eager (torchtitan Dec 2024 compiled the blocks only)
lora_rank          0               0 = full fine-tuning
qlora              False           NF4 base weights (needs lora_rank > 0)
load_in_8bit       False           LoRA over LLM.int8 base weights (bitsandbytes 0.41: memory/int8.py)
qlora_impl         bnb (qlora)     bnb (bitsandbytes Params4bit: quant state replicated under FSDP) | torchao (NF4Tensor)
                                   | bnb-legacy (bitsandbytes < 0.43.2: MatMul4Bit keeps its 16-bit input)
adapter_dtype      fp32 (LoRA)     fp32 (PEFT's autocast_adapter_dtype=True) | bf16 (a bf16 base's dtype: torchtune,
                                   PEFT autocast_adapter_dtype=False): adapters, their grads and optimizer states
kbit_prep          none            with LoRA: which frozen 16-bit weights the framework casts to fp32: peft (PEFT's
                                   prepare_model_for_kbit_training: all not quantized) | norms-fp32 (the norms only)
offload_activations False          saved tensors to pinned host memory (torchtune/TRL OffloadActivations; axolotl)
image_tokens       0               vision-language models: visual tokens per sample, part of seq_len (trainmem/model/vlm.py)
train_vision       False           VLMs: train the vision tower and projector (default frozen: LLaMA-Factory, ms-swift)
train_projector    False           VLMs: train the projector only (LLaMA-Factory freeze_multi_modal_projector: false)
sample_lengths     none            the run's sample lengths (MEAN:STD[:MIN:MAX] tokens or a file): reserved over a
                                   run of padded variable-length micro-batches (trainmem/memory/run_reserve.py)
run_steps          200 (a file: all) with sample_lengths: micro-batches replayed
gpu                H100-SXM-80G    a name from the hardware catalog
gpu_memory         catalog's       bytes of memory of the GPU (overrides the catalog)
stack              none            a framework's shipped defaults for the fields not given (trainmem.frameworks)
=================  ==============  ==========================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainmem.errors import ConfigError, UnsupportedError

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec

__all__ = ["TrainingSetup", "make_setup", "validate_for_model", "Engine", "Precision", "Optimizer",
           "OptimizerImpl", "PAGED_OPTIMIZERS", "engine_precision", "Recompute", "Attn", "Offload", "Loop", "Loss", "RECIPES", "FP8_BASE", "DEFAULT_LORA_TARGETS"]

def engine_precision(engine: str, family: str) -> str:
    """The engine's recipe of a precision family: ``bf16`` → amp-bf16 (torch/fsdp2: autocast or FSDP2's
    MixedPrecisionPolicy over fp32 parameters) or mixed-bf16 (deepspeed/megatron: bf16 parameters, fp32
    master weights); ``fp16`` likewise; ``fp32`` and ``fp8`` as they are."""
    if family in ("bf16", "fp16"):
        return f"amp-{family}" if engine in ("torch", "fsdp2") else f"mixed-{family}"
    return family


Engine = Literal["torch", "fsdp2", "deepspeed", "megatron"]
Precision = Literal["fp32", "bf16", "fp16", "amp-bf16", "amp-fp16", "mixed-bf16", "mixed-fp16", "fp8"]
Optimizer = Literal["adamw", "adam", "sgd", "sgd-momentum", "adamw-8bit", "adafactor", "lion", "paged-adamw",
                    "paged-adamw-8bit", "hf-adafactor"]
#: bitsandbytes' paged optimizers (``PagedAdamW``, ``PagedAdamW8bit``; HF ``optim="paged_adamw_32bit"`` /
#: ``"paged_adamw_8bit"``): their large state buffers live in CUDA managed memory, outside torch's allocator.
PAGED_OPTIMIZERS = ("paged-adamw", "paged-adamw-8bit")
OptimizerImpl = Literal["foreach", "fused"]
#: torch.optim optimizers with a fused kernel (torch/optim/adamw.py, adam.py, sgd.py ``_fused_*``).
FUSED_OPTIMIZERS = ("adamw", "adam", "sgd", "sgd-momentum")
Recompute = Literal["none", "selective", "full"]
Attn = Literal["sdpa", "flash", "eager"]
Offload = Literal["none", "optimizer", "optimizer+params"]
Loop = Literal["trainer", "script"]
Loss = Literal["hf", "chunked", "fused-linear", "fused-ce", "cce", "unsloth"]

#: Precision recipes each engine really has.
RECIPES: dict[str, tuple[str, ...]] = {
    "torch": ("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16"),
    "fsdp2": ("fp32", "bf16", "amp-bf16", "amp-fp16", "fp8"),
    "deepspeed": ("fp32", "mixed-bf16", "mixed-fp16"),
    "megatron": ("fp32", "mixed-bf16", "mixed-fp16", "fp8"),
}
#: The 16-bit recipe an fp8 run keeps its parameters, gradients and optimizer in: fp8 changes the
#: matmuls only (Transformer Engine under Megatron, torchao Float8Linear under torchtitan).
FP8_BASE = {"megatron": "mixed-bf16", "fsdp2": "amp-bf16"}
_RECIPE_HINT = {"torch": "amp-bf16 or bf16", "fsdp2": "amp-bf16 or bf16",
                "deepspeed": "mixed-bf16 or mixed-fp16", "megatron": "mixed-bf16 or mixed-fp16"}
_ZERO = {"torch": (0,), "fsdp2": (2, 3), "deepspeed": (0, 1, 2, 3), "megatron": (0, 1)}
_ZERO_DEFAULT = {"torch": 0, "fsdp2": 3, "deepspeed": 0, "megatron": 0}
#: PEFT's usual LLaMA targets; "all-linear" means every nn.Linear of the decoder layers.
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


class TrainingSetup(BaseModel):
    """A validated training setup. Build it with :func:`make_setup` to get one-line errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Engine = "torch"
    precision: Precision | None = None
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "foreach"
    seq_len: int = Field(2048, ge=1)
    micro_batch: int = Field(1, ge=1)
    grad_accum: int = Field(1, ge=1)
    recompute: Recompute = "none"
    recompute_layers: int | None = Field(None, ge=0)
    """With ``recompute`` full: only the first N decoder layers of each pipeline stage are checkpointed, the
    others keep every saved tensor as without recompute — Megatron-Core's ``recompute_method="block"``
    (``--recompute-method block --recompute-num-layers N``; megatron/core/transformer/transformer_block.py
    ``_checkpointed_forward``, core_v0.19.0), or a custom loop wrapping the first N layers. ``None``: every
    layer (``--recompute-method uniform --recompute-num-layers 1``, HF gradient checkpointing)."""
    attn: Attn = "sdpa"
    loop: Loop = "trainer"
    script_keeps_graph: bool = False
    accelerate_autocast: bool = False
    """With ``precision`` bf16 on the torch engine: accelerate's ``Accelerator.prepare_model`` with mixed_precision
    bf16 (HF Trainer ``bf16=True``) over 16-bit weights: ``model.forward = convert_outputs_to_fp32(autocast(forward))``
    (accelerate v0.25.0 src/accelerate/accelerator.py ``prepare_model``; utils/operations.py ``convert_to_fp32``)."""
    """With ``loop`` script: the loop rebinds its output variable only when the next forward returns (litgpt
    finetune/lora.py ``fit``: ``logits = model(input_ids, lm_head_chunk_size=128)``), so the previous micro-batch's
    autograd graph lives through the next forward. Backward released what its nodes saved with
    ``save_for_backward``; what stays is the old output (the logits) and what custom autograd Functions keep as
    plain ``ctx`` attributes — bitsandbytes < 0.43.2 ``MatMul4Bit``'s ``ctx.tensors = (A, B)`` under
    ``qlora_impl`` bnb-legacy (trainmem/memory/bnb_legacy.py ``previous_graph_bytes``)."""
    loss: Loss = "hf"
    loss_chunks: int | None = Field(None, ge=1, le=65536)
    gpus: int = Field(1, ge=1)
    dp: int | None = Field(None, ge=1)
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    cp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    vpp: int = Field(1, ge=1)
    stage_layers: tuple[int, ...] | None = None
    """Decoder layers on each pipeline stage, first to last (``pp`` counts summing to the model's layers):
    Megatron-LM's ``--decoder-first/last-pipeline-num-layers`` (the middle stages even) or
    ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`` (the embedding and the
    loss each counted as a layer), torchtitan's ``pipeline_parallel_split_points``. Default: the even split with
    the remainder on the first stages."""
    sp: bool | None = None
    no_sp: bool = False
    async_tp: bool = False
    """Step time only, fsdp2 with tp > 1 and sequence parallelism: torchtitan's async TP
    (``parallelism.enable_async_tensor_parallel``; torchtitan/distributed/tensor_parallel.py ``maybe_enable_async_tp``
    turns on inductor's ``_micro_pipeline_tp``, which fuses SequenceParallel's all-gather into the next matmul and
    the matmul into its reduce-scatter, pipelined in tp chunks over symmetric memory). It needs torch.compile of the
    model in torchtitan; memory is estimated eager, as for plain TP."""
    loss_parallel: bool | None = None
    no_loss_parallel: bool = False
    zero: int | None = Field(None, ge=0, le=3)
    grad_reduce_16bit: bool = False
    """megatron: gradients accumulate and reduce in the parameters' 16-bit dtype (Megatron-Core
    ``DistributedDataParallelConfig.grad_reduce_in_fp32=False``; Megatron-LM ``--grad-reduce-in-bf16``, or
    ``--fp16`` without ``--accumulate-allreduce-grads-in-fp32``); default: an fp32 main-grad buffer."""
    fp8_params: bool = False
    """megatron fp8: the transformer layers' linear weights are stored as fp8 tensors (Megatron-LM
    ``--fp8-param-gather``, Megatron-Bridge ``fp8_param_gather``); needs the distributed optimizer."""
    backward_prefetch: Literal["pre", "post"] = "pre"
    """Step time only, fsdp2 with zero 3: when a unit's backward all-gather is issued. ``pre``: before the current
    unit's gradient computation, overlapping it (FSDP2's implicit prefetch; FSDP1 ``BACKWARD_PRE``, Accelerate's and
    HF Trainer's default); ``post``: after it (FSDP1 ``BACKWARD_POST``, Composer's default), so each backward
    all-gather is exposed. Memory is estimated as for ``pre`` (which holds the next unit too: an upper bound)."""
    fsdp_version: Literal[1, 2] = 2
    """fsdp2 engine: which FSDP. 2: ``fully_shard`` (torchtitan, torchtune, Accelerate ``fsdp_version: 2``); 1:
    ``torch.distributed.fsdp.FullyShardedDataParallel`` — one padded ``FlatParameter`` per wrapped unit kept in the
    model's load dtype, ``use_orig_params=False``, ``limit_all_gathers=True`` (Accelerate's default ``fsdp_version: 1``,
    HF Trainer ``fsdp=``, Lightning ``FSDPStrategy``, fsdp_qlora, PEFT's FSDP examples; trainmem/memory/engines/fsdp1.py).
    ``zero`` 3 = FULL_SHARD, 2 = SHARD_GRAD_OP; ``backward_prefetch`` pre/post = BACKWARD_PRE/BACKWARD_POST."""
    attn_kernel: Literal["fa2", "fa3", "triton"] | None = None
    """Step time only: the fused attention kernel the run uses (default: Transformer Engine's cuDNN/FA3 kernels
    under Megatron on Hopper and Blackwell, FlashAttention-2 — torch SDPA's flash backend, HF
    ``flash_attention_2`` — elsewhere). ``fa3``: FlashAttention-3 (HF ``flash_attention_3``, Hopper and later);
    ``triton``: flash-attn's Triton FlashAttention (llm-foundry ``attn_impl: triton``). Memory is the same as
    for any flash kernel."""
    fp8_backend: Literal["torchao", "te"] | None = None
    """fp8 runs: whose linears cast to fp8. megatron: Transformer Engine (always); fsdp2: torchao's
    ``Float8Linear`` (torchtitan ``[float8]``, the default) or Transformer Engine's ``te.Linear`` swapped in for
    ``nn.Linear`` (Accelerate's TE fp8 backend, llm-foundry ``fc_type: te``), which saves fp8 inputs and an fp8
    copy of each weight for backward."""
    fp8_allgather: bool = False
    """fsdp2 with torchao fp8: FSDP2 all-gathers each ``Float8Linear`` weight in fp8, 1 B per element with its scale
    (torchtitan ``[float8] enable_fsdp_float8_all_gather``; torchao ``float8/fsdp_utils.py``
    ``WeightWithDynamicFloat8CastTensor``: trainmem/memory/fp8_compile.py ``fsdp_float8_gathered_bytes``)."""
    megatron_deepspeed: bool = False
    """megatron with pp > 1: Megatron-LM's model code trained by DeepSpeed's ``PipelineEngine`` (Megatron-DeepSpeed,
    as BLOOM and MT-NLG ran): the step-time model applies trainmem.perf.deepspeed_pipe (blocking pipeline
    sends, BF16_Optimizer's per-micro-batch fp32 accumulation, gradient all-reduce after the flush); memory is
    the megatron engine's (``zero`` 1 = BF16_Optimizer's sharded fp32 state)."""
    offload: Offload = "none"
    optimizer_in_backward: bool = False
    """torch engine on one GPU: the optimizer steps each parameter as soon as its gradient is accumulated and frees
    that gradient (torchtune ``optimizer_in_bwd: True``: training/memory.py ``register_optim_in_bwd_hooks``, one
    optimizer per parameter stepped and ``zero_grad``-ed in a ``register_post_accumulate_grad_hook``): no
    gradient outlives its parameter's backward, and each step's temporaries are one tensor's. torchtune refuses
    gradient accumulation with it."""
    compile: bool = False
    """Each decoder layer runs under ``torch.compile`` (torchtitan ``compile.enable``: ``apply_compile`` per
    TransformerBlock, after ``apply_ac``; torchtune ``compile: True``; HF Trainer ``torch_compile``): a layer saves
    what AOTAutograd's min-cut partitioner keeps (torch/_functorch/partitioners.py, torch 2.13), not what its eager
    ops save (trainmem/memory/compile.py)."""
    no_compile_loss: bool = False
    """With ``compile``: the loss is not compiled, only the decoder layers. torchtitan between 2024-12-18
    (e8977b0 "turning off compile on loss function": train.py ``# if job_config.training.compile: loss_fn =
    torch.compile(loss_fn)``, "compiling loss function causes CUDA errors"; so at 9dec370, the run of its
    2024-12 benchmark tables) and its ``compile.components`` (model, loss) of 2025; default: the loss compiled too
    (torchtitan today, torchtune ``compile: True``, HF Trainer's whole-model compile)."""
    lora_rank: int = Field(0, ge=0)
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """With LoRA: the adapters' dropout probability (PEFT ``LoraConfig.lora_dropout``, 0.0 by default; axolotl's
    examples 0.05, fsdp_qlora and PEFT's FSDP example 0.1). Above 0 each adapter runs ``nn.Dropout`` on its input
    (PEFT 0.21 ``tuners/lora/layer.py`` ``update_layer``: ``nn.Dropout(p)``, else ``nn.Identity``), which keeps its
    bool mask and hands lora_A a new tensor to save (memory/activations.py ``lora_dropout_terms``)."""
    qlora: bool = False
    load_in_8bit: bool = False
    """With LoRA: LLM.int8 base weights (HF ``load_in_8bit=True``, axolotl ``load_in_8bit: true``) as bitsandbytes 0.41
    runs them: 1 B per decoder-layer linear weight, and each int8 linear keeps its 16-bit input and an int8 copy of
    it for backward (trainmem/memory/int8.py)."""
    qlora_impl: Literal["bnb", "bnb-legacy", "torchao"] | None = None
    """With ``qlora``: whose NF4 weights. ``bnb`` (default; HF/PEFT, TRL, axolotl, LLaMA-Factory, fsdp_qlora):
    bitsandbytes ``Params4bit`` — under FSDP only the packed 4-bit data is a parameter (``bnb_4bit_quant_storage``),
    sharded and all-gathered, while the ``quant_state`` (absmax, nested absmax) is plain tensor state that every
    rank keeps whole; ``torchao`` (torchtune): ``NF4Tensor``, whose ``fsdp_pre_all_gather`` shards and gathers the
    packed data with its scalers (torchao/dtypes/nf4tensor.py); ``bnb-legacy``: bitsandbytes before 0.43.2, whose
    ``MatMul4Bit`` also keeps each 4-bit linear's 16-bit input for backward (trainmem/memory/bnb_legacy.py)."""
    adapter_dtype: Literal["fp32", "bf16"] | None = None
    """With LoRA: the adapters' dtype (their gradients and AdamW states follow it: torch.optim keeps states in the
    parameter's dtype). ``fp32`` (default): PEFT ``get_peft_model(..., autocast_adapter_dtype=True)`` upcasts
    adapters to fp32 (peft/tuners/tuners_utils.py ``_cast_adapter_dtype``, 0.21.2); ``bf16``: a bf16 base's
    dtype — torchtune's ``LoRALinear`` in the model dtype (no fp32 copy), PEFT with
    ``autocast_adapter_dtype=False``. (fp16 adapters cannot train under loss scaling: torch's GradScaler raises
    "Attempting to unscale FP16 gradients".)"""
    kbit_prep: Literal["none", "peft", "norms-fp32"] | None = None
    """With LoRA: the frozen 16-bit weights a framework casts to fp32 before training (trainmem/memory/kbit_prep.py).
    ``none`` (default; TRL >= 0.22, LLaMA-Factory, ms-swift, axolotl once it casts them back, litgpt, torchtune);
    ``peft``: PEFT's ``prepare_model_for_kbit_training`` (peft/utils/other.py: every fp16/bf16 parameter that is not a
    ``Params4bit`` becomes fp32: embeddings, norms, LM head; the whole base when it is not quantized), as a script
    that calls it runs; ``norms-fp32``: the norms only (TRL <= 0.21 after ``peft_module_casting_to_bf16`` with bf16,
    LLaMA-Factory ``upcast_layernorm: true``). The weights' fp32 copies are counted; the fp32 activations that follow
    from them are not (listed in the assumptions)."""
    kernels: Literal["unsloth"] | None = None
    """``unsloth``: the decoder layers run unsloth's own kernels (unslothai/unsloth @ ef70177a24): fast RMSNorm and
    RoPE, and LoRA_MLP / LoRA_QKV / LoRA_W where a whole group carries LoRA (trainmem/memory/unsloth.py). LoRA on a
    Llama or Mistral model, no lora_dropout, --engine torch."""
    offload_activations: bool = False
    """Saved activations go to pinned host memory in the forward and come back in the backward: torchtune's
    ``OffloadActivations`` (training/_activation_offloading.py, ``use_streams``, ``min_offload_size`` 1024 B,
    ``max_fwd_stash_size`` 5; the LM head kept by a ``NoOpManager``), which TRL copies
    (trl/models/activation_offloading.py) and axolotl's ``activation_offloading: true`` uses
    (memory/act_offload.py)."""
    flex_attention: bool = False
    """``--attn flex``: FlexAttention (torchtitan ``attn_type = "flex"``, HF ``attn_implementation="flex_attention"``),
    compiled: it saves what the fused SDPA kernels save, plus a causal block mask per batch (``attn`` is then
    ``sdpa``; trainmem/memory/flex_attention.py)."""
    target_len: int | None = Field(None, ge=1)
    """Encoder–decoder models (T5, BART ...): target (decoder) tokens per sequence; ``seq_len`` is then the source
    (encoder) length. None: the target is ``seq_len`` tokens too (trainmem/model/derive_seq2seq.py)."""
    image_tokens: int = Field(0, ge=0)
    """Vision-language models: the visual tokens one sample feeds the language model, counted in ``seq_len`` (the
    processor expands each image placeholder in ``input_ids``). Qwen2.5-VL / Qwen2-VL: (H/14)·(W/14)/4 per image
    (14-px patches, the merger joins 2×2); LLaVA-1.5: 576 per image (trainmem/model/vlm.py)."""
    train_vision: bool = False
    """VLMs: the vision tower and the projector are trained. Default frozen (``requires_grad=False``), as
    LLaMA-Factory's ``freeze_vision_tower`` and ``freeze_multi_modal_projector`` (default True, hparams/
    finetuning_args.py @ 00577a8) and ms-swift's ``freeze_vit`` / ``freeze_aligner`` (default True)."""
    freeze_vision: bool = False
    """``--freeze-vision``: the default, stated (the vision tower and projector frozen)."""
    train_projector: bool = False
    """VLMs: the projector (LLaVA's multi_modal_projector, Qwen's visual.merger) trained, the tower frozen
    (LLaMA-Factory ``freeze_multi_modal_projector: false``)."""
    device_map: Literal["auto"] | None = None
    """``auto``: HF ``from_pretrained(device_map="auto")`` — one process, the layers split over ``gpus`` GPUs by
    accelerate's balanced map, one GPU busy at a time; HF Trainer adds no DDP (trainmem/memory/device_map.py)."""
    sample_lengths: str | None = None
    """The run's sample lengths in tokens, for reserved memory over a run (``peak_reserved_over_run_bytes``;
    trainmem/memory/run_reserve.py): ``MEAN:STD`` or ``MEAN:STD:MIN:MAX`` (a log-normal of that mean and standard
    deviation, truncated to [MIN, MAX], fixed seed) or a file of lengths one per line (in the loader's order).
    Samples over ``seq_len`` are dropped, each micro-batch padded to its longest (no packing)."""
    run_steps: int | None = Field(None, ge=1)
    """With ``sample_lengths``: the micro-batches the run replays (default 200 for a distribution; a file: all)."""
    gpu: str = "H100-SXM-80G"
    gpu_memory: int | None = Field(None, ge=1)
    stack: str | None = None
    """The framework whose shipped defaults filled the fields not given (``--stack``; :mod:`trainmem.frameworks`,
    applied by :func:`trainmem.api.build_spec`); a label here: the values are in the other fields."""
    notes: tuple[str, ...] = Field((), exclude=True)
    """How defaults were chosen for the model (filled by :func:`trainmem.api.build`); listed in the assumptions."""

    @field_validator("gpu")
    @classmethod
    def _canonical_gpu(cls, name: str) -> str:
        """Any alias the GPU catalog knows (``a100-80gb``, ``NVIDIA H100 80GB HBM3``) → its canonical name."""
        from trainmem.hardware import get_gpu
        return get_gpu(name).name

    @field_validator("stack")
    @classmethod
    def _known_stack(cls, name: str | None) -> str | None:
        if name is None:
            return None
        from trainmem.frameworks import check_stack_name
        return check_stack_name(name)

    @model_validator(mode="before")
    @classmethod
    def _flex_attn(cls, data: object) -> object:
        """``attn="flex"`` is the fused SDPA kernels' saved tensors plus a block mask: ``attn`` sdpa, ``flex_attention``."""
        if isinstance(data, dict) and data.get("attn") == "flex":
            data = {**data, "attn": "sdpa", "flex_attention": True}
        return data

    @model_validator(mode="after")
    def _check(self) -> "TrainingSetup":
        e = self.engine
        # Engine-dependent defaults are filled in here so that every consumer sees final values.
        if self.precision is None:
            object.__setattr__(self, "precision", "amp-bf16" if e in ("torch", "fsdp2") else "mixed-bf16")
        if self.zero is None:
            # torchtitan sets reshard_after_forward=False under pipeline parallelism (ZeRO-2 style)
            # (torchtitan/models/llama3/infra/parallelize.py apply_fsdp: ``not pp_enabled``)
            object.__setattr__(self, "zero", 2 if (e == "fsdp2" and self.pp > 1) else _ZERO_DEFAULT[e])
        self._resolve_parallel_defaults()
        if self.freeze_vision and (self.train_vision or self.train_projector):
            raise ValueError("--freeze-vision contradicts --train-vision / --train-projector")
        if self.image_tokens > self.seq_len:
            raise ValueError(f"--image-tokens {self.image_tokens} is above --seq-len {self.seq_len}: the image tokens "
                             "are part of the language model's sequence")
        if self.loss_chunks is None and self.loss == "chunked":
            object.__setattr__(self, "loss_chunks", 8)
        if self.loss == "cce" and self.tp > 1:
            raise ValueError("--loss cce with tp > 1 is not modelled (Cut Cross-Entropy's vocab-parallel options)")
        if self.kernels == "unsloth" and not (self.is_lora and self.lora_dropout == 0 and e == "torch"):
            raise ValueError("--kernels unsloth is unsloth's patched model under LoRA (get_peft_model: lora_dropout 0) on "
                             "one process: it needs --lora-rank, no --lora-dropout and --engine torch")
        if self.loss == "unsloth" and (self.tp > 1 or self.cp > 1 or self.engine == "megatron"):
            raise ValueError("--loss unsloth (unsloth's cross-entropy kernel) with tp, cp or megatron is not modelled")
        if self.loss_chunks is not None and self.loss in ("hf", "fused-ce", "cce", "unsloth"):
            raise ValueError("--loss-chunks needs --loss chunked or fused-linear")
        if self.device_map is not None:
            self._check_device_map()
        if self.flex_attention and (e == "megatron" or self.cp > 1):
            raise ValueError("--attn flex with megatron or --cp > 1 is not modelled (FlexAttention's context "
                             "parallelism all-gathers k/v: not the SDPA ring modelled for --cp)")
        if self.dp is None:
            denom = self.tp * self.pp * self.cp
            if self.gpus % denom:
                raise ValueError(f"gpus({self.gpus}) is not divisible by tp({self.tp}) * pp({self.pp}) * cp({self.cp}) = {denom}")
            object.__setattr__(self, "dp", self.gpus // denom)
        p = self.precision
        if p == "fp8" and e not in FP8_BASE:
            raise ValueError(f"fp8 is modelled for megatron (Transformer Engine) and fsdp2 (torchao float8), not the {e} engine")
        if p == "fp8" and self.lora_rank:
            raise ValueError("fp8 with LoRA is not modelled; use a 16-bit recipe")
        if self.fp8_backend is not None and p != "fp8":
            raise ValueError("--fp8-backend needs --precision fp8")
        if p == "fp8" and e == "megatron" and self.fp8_backend == "torchao":
            raise ValueError("--fp8-backend torchao: Megatron's fp8 runs Transformer Engine; use --fp8-backend te")
        if p == "fp8" and self.fp8_backend is None:
            object.__setattr__(self, "fp8_backend", "te" if e == "megatron" else "torchao")
        if self.fp8_allgather and (e != "fsdp2" or p != "fp8" or self.fp8_backend != "torchao"):
            raise ValueError("--fp8-allgather needs --engine fsdp2 with --precision fp8 (torchao Float8Linear)")
        if p not in RECIPES[e]:
            raise ValueError(f"{p} is not a recipe of the {e} engine; use {_RECIPE_HINT[e]}")
        if self.dp * self.tp * self.pp * self.cp != (1 if self.device_map else self.gpus):
            raise ValueError(f"dp({self.dp}) * tp({self.tp}) * pp({self.pp}) * cp({self.cp}) != gpus({self.gpus})")
        if self.zero not in _ZERO[e]:
            raise ValueError(f"zero({self.zero}) is not available on the {e} engine; choose one of {list(_ZERO[e])}")
        if e == "torch" and (self.tp, self.pp, self.cp, self.ep) != (1, 1, 1, 1):
            raise ValueError("the torch engine is data parallel only (DDP); tp/pp/cp/ep need --engine megatron or fsdp2")
        if e == "deepspeed" and (self.tp, self.pp, self.cp) != (1, 1, 1):
            raise ValueError("tp/pp/cp are not modelled for the deepspeed engine; use --engine megatron for 3D parallelism")
        if self.sp and e not in ("megatron", "fsdp2"):
            raise ValueError("--sp (sequence parallelism) is a megatron or fsdp2 (with --tp) option")
        if self.sp and self.tp == 1:
            raise ValueError("--sp needs tp > 1 (sequence parallelism splits the tp group's activations)")
        if self.async_tp and not (e == "fsdp2" and self.tp > 1 and self.sp):
            raise ValueError("--async-tp is torchtitan's async tensor parallelism: it needs --engine fsdp2 with --tp > 1 "
                             "and sequence parallelism (not --no-sp)")
        if self.vpp > 1 and self.pp == 1:
            raise ValueError(f"vpp({self.vpp}) needs pp > 1")
        if self.stage_layers is not None:
            if len(self.stage_layers) != self.pp:
                raise ValueError(f"--stage-layers gives {len(self.stage_layers)} stages for pp({self.pp})")
            if min(self.stage_layers) < 1:
                raise ValueError(f"--stage-layers {','.join(map(str, self.stage_layers))}: every stage needs a layer")
        if self.ep > 1 and (self.dp * self.cp * self.tp) % self.ep:
            raise ValueError(f"ep({self.ep}) does not divide dp({self.dp}) * cp({self.cp}) * tp({self.tp})")
        if self.cp > 1 and self.seq_len % (2 * self.cp):
            raise ValueError(f"seq_len({self.seq_len}) is not divisible by 2 * cp({self.cp}) (load-balanced context parallelism)")
        if self.sp and self.seq_len % self.tp:
            raise ValueError(f"seq_len({self.seq_len}) is not divisible by tp({self.tp}) with --sp")
        if e == "fsdp2" and self.cp > 1 and self.attn == "eager":
            raise ValueError("--cp with --attn eager: torch's context parallelism shards F.scaled_dot_product_attention "
                             "(torch.distributed.tensor.experimental.context_parallel); use --attn sdpa or flash")
        if self.recompute_layers is not None:
            self._check_recompute_layers()
        if self.attn == "flash" and p == "fp32":
            raise ValueError("flash attention needs 16-bit compute; fp32 cannot use --attn flash")
        if self.backward_prefetch == "post" and not (e == "fsdp2" and self.zero == 3):
            raise ValueError("--backward-prefetch post is FSDP's BACKWARD_POST: it needs --engine fsdp2 with zero 3 "
                             "(a backward all-gather to delay)")
        if self.fsdp_version == 1:
            self._check_fsdp1()
        if self.attn_kernel is not None and (self.attn == "eager" or p == "fp32"):
            raise ValueError(f"--attn-kernel {self.attn_kernel} is a fused 16-bit attention kernel; "
                             f"not with --attn eager or fp32")
        self._check_offload_and_megatron()
        self._check_loss_optimizer_and_lora()
        self._check_adapters_and_offload()
        return self

    def _check_device_map(self) -> None:
        """``device_map="auto"``: one process (dp 1) over ``gpus`` GPUs, the plain torch loop only."""
        if self.engine != "torch" or (self.tp, self.pp, self.cp, self.ep) != (1, 1, 1, 1) or self.dp not in (None, 1):
            raise ValueError("--device-map auto is HF's naive model parallelism in one process: it needs --engine "
                             "torch without dp/tp/pp/cp/ep (--gpus N is the GPUs the layers are split over)")
        if self.gpus < 2:
            raise ValueError("--device-map auto needs --gpus >= 2 (the GPUs the layers are split over)")
        if self.offload_activations or self.optimizer_in_backward or self.qlora_impl == "torchao":
            raise ValueError("--device-map auto with --offload-activations, --optimizer-in-backward or --qlora-impl "
                             "torchao is not modelled")
        object.__setattr__(self, "dp", 1)

    def _check_offload_and_megatron(self) -> None:
        """Offload per engine, and the megatron-only recipe flags."""
        e, p = self.engine, self.precision
        if self.offload != "none":
            if e == "torch":
                raise ValueError("offload needs an engine that does it: deepspeed (zero >= 1), fsdp2 or megatron")
            if e == "deepspeed" and self.zero == 0:
                raise ValueError("deepspeed offload needs zero >= 1 (ZeRO-Offload)")
            if e == "deepspeed" and self.offload == "optimizer+params" and self.zero != 3:
                raise ValueError(f"deepspeed offload of parameters needs zero 3, got zero({self.zero})")
            if e == "fsdp2" and self.offload != "optimizer+params":
                raise ValueError("fsdp2's CPUOffloadPolicy offloads parameters, gradients and optimizer together; use --offload optimizer+params")
            if e == "megatron" and (self.offload != "optimizer" or self.zero != 1):
                raise ValueError("megatron offloads the optimizer only (--optimizer-cpu-offload), with the distributed optimizer (--zero 1)")
            if self.optimizer in ("adamw-8bit", *PAGED_OPTIMIZERS):
                raise ValueError(f"{self.optimizer} (bitsandbytes) cannot be offloaded")
        if self.grad_reduce_16bit and (e != "megatron" or p == "fp32"):
            raise ValueError("--grad-reduce-16bit is a megatron option for 16-bit and fp8 recipes "
                             "(Megatron-Core grad_reduce_in_fp32=False)")
        if self.fp8_params and (e != "megatron" or p != "fp8"):
            raise ValueError("--fp8-params needs --engine megatron with --precision fp8 (--fp8-param-gather)")
        if self.fp8_params and self.zero != 1:
            raise ValueError("--fp8-params needs the distributed optimizer (--zero 1): Megatron-LM asserts it "
                             "for --fp8-param-gather")
        if self.megatron_deepspeed and (e != "megatron" or self.pp == 1):
            raise ValueError("--megatron-deepspeed is DeepSpeed's PipelineEngine under Megatron's model: it needs "
                             "--engine megatron and --pp > 1")

    def _check_loss_optimizer_and_lora(self) -> None:
        """The loss and loop per engine, the optimizer's implementation and placement, and (Q)LoRA."""
        e, p = self.engine, self.precision
        if self.loss != "hf" and e == "megatron":
            raise ValueError(f"--loss {self.loss}: Megatron runs its own fused vocab-parallel cross-entropy; use --loss hf")
        if self.loss != "hf" and self.loss_parallel:
            raise ValueError(f"--loss {self.loss} with tensor parallelism: the logits are vocab-parallel "
                             "(loss parallel); use --loss hf, or --no-loss-parallel")
        if self.accelerate_autocast and (p != "bf16" or e != "torch"):
            raise ValueError("--accelerate-autocast models 16-bit weights under accelerate's autocast: "
                             "needs --precision bf16 and --engine torch")
        if self.script_keeps_graph and (self.loop != "script" or self.pp > 1):
            raise ValueError("--script-keeps-graph needs --loop script and no pipeline parallelism")
        if self.loop == "script" and e == "megatron":
            raise ValueError("--loop script: Megatron's schedule returns the loss, never the logits; use --loop trainer")
        if self.optimizer_impl == "fused" and e in ("deepspeed", "megatron"):
            raise ValueError(f"--optimizer-impl is a torch.optim choice (torch, fsdp2); {e} runs its own fused optimizer")
        if self.optimizer_impl == "fused" and self.optimizer not in FUSED_OPTIMIZERS:
            raise ValueError(f"--optimizer-impl fused: torch.optim has fused kernels for {', '.join(FUSED_OPTIMIZERS)}, "
                             f"not {self.optimizer}")
        if self.optimizer_in_backward:
            if e != "torch" or self.gpus != 1:
                raise ValueError("--optimizer-in-backward is modelled for --engine torch on one GPU (torchtune's "
                                 "single-device recipes)")
            if self.grad_accum != 1:
                raise ValueError(f"--optimizer-in-backward steps in the backward: it cannot accumulate gradients "
                                 f"(grad_accum({self.grad_accum}) must be 1, as torchtune requires)")
            if self.loss == "fused-linear":
                raise ValueError("--optimizer-in-backward with --loss fused-linear is not modelled (Liger computes the "
                                 "head's weight gradient in the forward)")
        if self.optimizer == "hf-adafactor" and e != "torch":
            raise ValueError(f"--optimizer hf-adafactor (transformers' Adafactor) is modelled for --engine torch, not {e}")
        if self.optimizer in PAGED_OPTIMIZERS and e != "torch":
            raise ValueError(f"--optimizer {self.optimizer}: bitsandbytes' paged optimizers are modelled for --engine "
                             f"torch (single GPU or DDP), not {e}")
        if self.qlora_impl is not None and not self.qlora:
            raise ValueError(f"--qlora-impl {self.qlora_impl} needs --qlora")
        if self.qlora and self.qlora_impl is None:
            object.__setattr__(self, "qlora_impl", "bnb")
        if self.qlora and self.lora_rank == 0:
            raise ValueError("--qlora needs --lora-rank > 0")
        if self.load_in_8bit and (self.lora_rank == 0 or self.qlora or e != "torch"):
            raise ValueError("--load-in-8bit (LLM.int8 base weights) needs --lora-rank > 0, no --qlora, and --engine torch")
        if self.lora_rank and e == "megatron":
            raise ValueError("LoRA is not modelled for the megatron engine; use torch, fsdp2 or deepspeed")
        if self.qlora and p == "fp32":
            raise ValueError("--qlora computes in 16 bits; use amp-bf16 or bf16")
        if not self.lora_targets:
            raise ValueError("lora_targets is empty")

    def _check_fsdp1(self) -> None:
        """FSDP1 is modelled as plain data-parallel sharding of one model replica per rank."""
        if self.engine != "fsdp2":
            raise ValueError("--fsdp-version 1 selects FSDP1 under --engine fsdp2")
        if self.tp > 1 or self.pp > 1 or self.cp > 1 or self.ep > 1:
            raise ValueError("--fsdp-version 1 is modelled without tp/pp/cp/ep (FSDP1 over data parallel ranks only)")
        if self.precision == "fp8":
            raise ValueError("--fsdp-version 1 with fp8 is not modelled (fp8 is torchao float8 under FSDP2)")

    def _check_adapters_and_offload(self) -> None:
        """``adapter_dtype`` needs LoRA and a base of that dtype (default fp32 with LoRA); activation offloading
        is modelled for one rank's plain loop and FSDP2 (pp 1)."""
        p = self.precision
        if self.run_steps is not None and self.sample_lengths is None:
            raise ValueError("--run-steps needs --sample-lengths (the run's sample lengths)")
        if self.sample_lengths is not None:
            from trainmem.memory.sample_lengths import parse_sample_lengths
            parse_sample_lengths(self.sample_lengths)
            if self.pp > 1 and not self.device_map:
                raise ValueError("--sample-lengths with pipeline parallelism (pp > 1) is not modelled: the run replay "
                                 "walks one rank's micro-batches one after another")
        if self.lora_dropout and not self.lora_rank:
            raise ValueError(f"--lora-dropout {self.lora_dropout:g} needs LoRA (--lora-rank > 0)")
        if self.kbit_prep not in (None, "none"):
            if not self.lora_rank:
                raise ValueError(f"--kbit-prep {self.kbit_prep} needs LoRA (--lora-rank > 0)")
            if self.engine != "torch":
                raise ValueError(f"--kbit-prep {self.kbit_prep} is modelled with --engine torch (TRL and axolotl skip "
                                 "prepare_model_for_kbit_training for sharded QLoRA: FSDP, ZeRO-3)")
            if p == "fp32":
                raise ValueError(f"--kbit-prep {self.kbit_prep} casts 16-bit weights to fp32: with --precision fp32 "
                                 "there are none")
        if self.adapter_dtype is not None and not self.lora_rank:
            raise ValueError(f"--adapter-dtype {self.adapter_dtype} needs LoRA (--lora-rank > 0)")
        if self.lora_rank and self.adapter_dtype is None:
            object.__setattr__(self, "adapter_dtype", "fp32")
        if self.adapter_dtype == "bf16" and self.engine == "deepspeed":
            raise ValueError("--adapter-dtype: deepspeed casts the whole model (adapters included) to 16 bits and keeps "
                             "fp32 masters itself; the adapter dtype is a torch/fsdp2 choice")
        if self.adapter_dtype == "bf16" and p not in ("bf16", "amp-bf16"):
            raise ValueError(f"--adapter-dtype bf16 keeps the adapters in the base's dtype: it needs a bf16 base "
                             f"(--precision bf16 or amp-bf16), not {p}")
        if self.offload_activations:
            if self.engine not in ("torch", "fsdp2") or self.pp > 1:
                raise ValueError("--offload-activations (torchtune/TRL OffloadActivations) is modelled for --engine "
                                 "torch or fsdp2 without pipeline parallelism")

    def _check_recompute_layers(self) -> None:
        if self.recompute != "full":
            raise ValueError(f"--recompute-layers {self.recompute_layers} checkpoints the first N layers of each stage: "
                             f"it needs --recompute full (got {self.recompute})")
        if self.vpp > 1:
            raise ValueError("--recompute-layers with vpp > 1 is not modelled (Megatron counts it per virtual chunk)")
        if self.lora_rank:
            raise ValueError("--recompute-layers with LoRA is not modelled; use --recompute full or none")
        if self.engine == "fsdp2" and self.cp > 1:
            raise ValueError("--recompute-layers with torch context parallelism is not modelled; "
                             "use --recompute full or none")

    def recomputes(self, j: int) -> str:
        """The recompute of the decoder layer at position ``j`` of its pipeline stage: the setup's own,
        except ``none`` for layers past ``recompute_layers`` (block method)."""
        if self.recompute_layers is not None and j >= self.recompute_layers:
            return "none"
        return self.recompute

    def _resolve_parallel_defaults(self) -> None:
        """Sequence and loss parallelism as each engine runs them with tp > 1: torchtitan's TP plan always
        applies SequenceParallel to the norms and loss_parallel to the output projection
        (torchtitan/models/llama3/infra/parallelize.py ``apply_tp``); Megatron's sequence parallelism is
        opt-in (``--sequence-parallel``) and its cross-entropy is always vocab-parallel
        (megatron/core/tensor_parallel/cross_entropy.py)."""
        e = self.engine
        if self.no_sp and (e != "fsdp2" or self.sp):
            raise ValueError("--no-sp turns off fsdp2's SequenceParallel; "
                             + ("it contradicts --sp" if self.sp else "other engines have sp off unless --sp"))
        if self.no_loss_parallel and e != "fsdp2":
            raise ValueError("--no-loss-parallel is an fsdp2 option (megatron's cross-entropy is always vocab-parallel)")
        if self.sp is None:
            object.__setattr__(self, "sp", e == "fsdp2" and self.tp > 1 and not self.no_sp)
        if self.loss_parallel is None:
            lp = self.tp > 1 and (e == "megatron" or (e == "fsdp2" and not self.no_loss_parallel))
            object.__setattr__(self, "loss_parallel", lp)

    # -- derived quantities -------------------------------------------------------------------
    @property
    def tokens_per_micro_batch(self) -> int:
        return self.micro_batch * self.seq_len

    def for_target(self) -> "TrainingSetup":
        """This setup as the decoder of an encoder–decoder model sees it: ``seq_len`` = ``target_len`` (its layers,
        LM head and loss run on the target tokens); itself when no target length is given."""
        if self.target_len is None or self.target_len == self.seq_len:
            return self
        return self.model_copy(update={"seq_len": self.target_len, "target_len": None})

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over the whole job."""
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def fsdp_applied(self) -> bool:
        """fsdp2 shards with ``fully_shard``, except tensor parallelism alone (dp = cp = 1): torchtitan
        applies FSDP only when ``dp_shard > 1 or cp > 1`` (torchtitan v0.2.2
        torchtitan/distributed/parallel_dims.py ``fsdp_enabled``); TP-only ranks hold plain DTensor shards."""
        return self.engine == "fsdp2" and (self.tp == 1 or self.dp > 1 or self.cp > 1)

    @property
    def fsdp_shard_degree(self) -> int:
        """Ranks a fully_shard parameter is split over: torchtitan shards FSDP over the combined
        data-parallel × context-parallel mesh (``dp_shard_cp``)."""
        return self.dp * self.cp

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first.get("loc", ()))
    msg = first.get("msg", str(err))
    msg = msg.removeprefix("Value error, ")
    if loc:
        value = first.get("input")
        return f"{loc.replace('_', '-')}: {msg} (got {value!r})"
    return msg


def make_setup(**fields: object) -> TrainingSetup:
    """Build a :class:`TrainingSetup`, turning pydantic's report into one :class:`ConfigError` line.

    ``None`` values are dropped so that CLI flags left unset fall back to the defaults.
    """
    clean = {k: v for k, v in fields.items() if v is not None}
    if isinstance(clean.get("gpu"), str):  # here too, so that an unknown name is get_gpu's own line
        from trainmem.hardware import get_gpu
        clean["gpu"] = get_gpu(str(clean["gpu"])).name
    if isinstance(clean.get("gpu_memory"), str):
        from trainmem.units import parse_size_bytes
        try:
            clean["gpu_memory"] = parse_size_bytes(str(clean["gpu_memory"]))
        except ValueError as err:
            raise ConfigError(f"gpu-memory: {err}") from None
    if isinstance(clean.get("stage_layers"), str):
        try:
            clean["stage_layers"] = tuple(int(x) for x in str(clean["stage_layers"]).replace(" ", "").split(","))
        except ValueError:
            raise ConfigError(f"--stage-layers {clean['stage_layers']!r}: comma-separated layer counts, "
                              "e.g. 15,16,16,15") from None
    if isinstance(clean.get("lora_targets"), str):
        clean["lora_targets"] = tuple(t.strip() for t in str(clean["lora_targets"]).split(",") if t.strip())
    try:
        return TrainingSetup(**clean)
    except ValidationError as err:
        raise ConfigError(_one_line(err)) from None


def validate_for_model(setup: TrainingSetup, spec: "ModelSpec") -> None:
    """Checks that need the model: divisibility of heads, layers and experts."""
    if setup.no_compile_loss and not setup.compile:
        raise ConfigError("--no-compile-loss needs --compile (it keeps the loss eager under a compiled model)")
    if setup.compile:  # (trainmem/memory/compile.py: the families and setups whose compiled layer is measured)
        from trainmem.memory.compile import compile_refusal
        why = compile_refusal(spec, setup)
        if why:
            raise ConfigError(why)
    a, kv = spec.num_attention_heads, spec.num_kv_heads
    if setup.target_len is not None and not getattr(spec.derived, "decoder_layers", 0):
        raise UnsupportedError(f"--target-len is for encoder–decoder models (T5, BART ...); {spec.name} is not one: "
                               "give its tokens per sequence as --seq-len")
    if spec.derived is not None:  # a family described from transformers itself (trainmem/model/derive.py)
        why = spec.derived.unsupported(setup)
        if why:
            raise UnsupportedError(why)
    if a % setup.tp:
        raise ConfigError(f"tp({setup.tp}) does not divide num_attention_heads({a})")
    if setup.tp > 1 and kv % setup.tp and setup.tp % kv:
        raise ConfigError(f"tp({setup.tp}) and num_key_value_heads({kv}): neither divides the other")
    if setup.pp > spec.num_layers:
        raise ConfigError(f"pp({setup.pp}) > num_layers({spec.num_layers})")
    if setup.stage_layers is not None and sum(setup.stage_layers) != spec.num_layers:
        raise ConfigError(f"--stage-layers {','.join(map(str, setup.stage_layers))} sums to {sum(setup.stage_layers)}, "
                          f"not num_layers({spec.num_layers})")
    if setup.recompute_layers is not None and spec.model_type == "gpt_oss":
        raise ConfigError("--recompute-layers is not modelled for gpt_oss; use --recompute full or none")
    if setup.vpp > 1 and setup.stage_layers is None and spec.num_layers % (setup.pp * setup.vpp):
        raise ConfigError(f"num_layers({spec.num_layers}) is not divisible by pp({setup.pp}) * vpp({setup.vpp}); "
                          "give the split with --stage-layers")
    if setup.ep > 1:
        if not spec.is_moe:
            raise ConfigError(f"ep({setup.ep}) needs a mixture-of-experts model; {spec.name} is dense")
        if spec.num_experts % setup.ep:
            raise ConfigError(f"ep({setup.ep}) does not divide num_experts({spec.num_experts})")
    if spec.model_type == "gemma2" and setup.attn == "sdpa":
        raise ConfigError("attn: gemma2 has no sdpa implementation in transformers (logit softcapping); use --attn eager or flash")
    if spec.model_type == "gpt_oss" and setup.attn == "sdpa":
        # GptOssPreTrainedModel: _supports_sdpa = False; flash through kernels with sinks (vllm-flash-attn3)
        raise ConfigError("attn: gpt_oss has no sdpa implementation in transformers (attention sinks); use --attn eager or flash")
    if spec.model_type == "qwen" and setup.attn == "eager":
        # modeling_qwen.py (Qwen/Qwen-7B hub): with torch >= 2 (SUPPORT_TORCH2) and no flash-attn it calls
        # F.scaled_dot_product_attention with its mask; its own _attn runs only on torch 1.x
        raise ConfigError("attn: Qwen1 (QWenLMHeadModel) on torch 2 runs flash-attn or sdpa, not eager; use --attn flash or sdpa")
    if spec.model_type == "qwen" and (setup.engine == "megatron" or setup.tp > 1):
        raise ConfigError("Qwen1 (remote-code QWenLMHeadModel) is modelled without tensor parallelism and not under the "
                          "megatron engine")
    if spec.model_type == "gpt_oss" and setup.engine == "megatron":
        raise ConfigError("gpt_oss under the megatron engine is not modelled (Megatron-Core's attention sinks and clamped "
                          "SwiGLU experts); use --engine fsdp2, deepspeed or torch")
    if spec.is_encoder and setup.engine == "megatron":
        raise ConfigError("encoder models (bert/roberta) are not modelled for the megatron engine")
    if setup.seq_len > spec.max_position_embeddings and spec.position == "learned":
        raise ConfigError(f"seq_len({setup.seq_len}) > max_position_embeddings({spec.max_position_embeddings}) of a model with learned positions")
    if setup.kernels == "unsloth" and (spec.model_type not in ("llama", "mistral") or spec.derived is not None):
        raise ConfigError(f"--kernels unsloth: unsloth (ef70177a24) patches Llama and Mistral models; not {spec.model_type}")
    if setup.is_lora:  # PEFT's module names for this family, all-linear, rank <= min(in, out)
        from trainmem.model.lora_targets import check_lora_targets, check_targets_for_setup
        check_lora_targets(spec, setup.lora_targets, setup.lora_rank)
        check_targets_for_setup(spec, setup)
