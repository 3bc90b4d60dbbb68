"""Model states per rank: parameters, master weights, gradients, optimizer states.

Each function returns bytes for the most loaded rank. Sources:
- ZeRO paper (Rajbhandari et al. 2020, §3 and §5): (2 + 2 + K)·Ψ with K = 12 for mixed-precision Adam.
- torch.optim.AdamW/Adam keep ``exp_avg``/``exp_avg_sq`` in the parameter's dtype (torch/optim/adam.py).
- Megatron-LM ``megatron/training/theoretical_memory_usage.py``: 18 B/param, or 6 + 12/(dp·cp) with the
  distributed optimizer; fp32 main grads (``--accumulate-allreduce-grads-in-fp32``).
- DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py``: 16-bit grads, an fp32 gradient partition built in
  ``step()``, ``reduce_bucket_size``/``allgather_bucket_size`` = 5e8 elements by default.
- bitsandbytes AdamW8bit: two uint8 states + one fp32 absmax per 2048-element block for tensors with at
  least 4096 elements (``min_8bit_size``), 32-bit states below that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainmem.memory.layers.family import layer_family
from trainmem.model.lora_targets import lora_param_count_model
from trainmem.model.spec import ModelSpec
from trainmem.setup import PAGED_OPTIMIZERS, TrainingSetup
from trainmem.units import round_up_bytes

__all__ = ["RankParams", "rank_params", "layers_alike", "layers_of_stage", "account_split", "param_bytes_per_elem", "optimizer_state_bytes",
           "optimizer_step_temp_bytes", "paged_optimizer_state_bytes", "PAGED_MIN_NUMEL", "qlora_base_bytes", "nf4_packed_bytes", "nf4_quant_state_bytes", "lora_param_count", "stage_layers", "stage_ranges",
           "adafactor_state_bytes"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RankParams:
    """Parameter counts this rank's model replica holds (after tp/pp/ep, before ZeRO/FSDP sharding)."""

    total: int
    trainable: int
    matmul: int
    """Weights of matmuls (cast to 16 bits under autocast)."""
    embedding: int
    lm_head: int
    layers: tuple[int, ...]
    """Per-layer parameter counts of the layers on this rank (this stage)."""
    layer_matmul: tuple[int, ...]
    frozen_quantized: int = 0
    """QLoRA: base matmul weights stored in NF4."""
    stage: int = 0
    n_layers_stage: int = 0


def lora_param_count(spec: ModelSpec, setup: TrainingSetup, layers: range | None = None,
                     outside_layers: bool = True) -> int:
    """LoRA adapter parameters, rank·(in + out) per adapted linear (PEFT lora_A/lora_B, bias="none"), over
    ``layers`` (default: all) plus, with ``outside_layers``, adapted linears outside the decoder layers
    (BERT/RoBERTa's MLM transform); equal to PEFT's ``get_nb_trainable_parameters()``
    (tests/model/test_lora_targets.py)."""
    return lora_param_count_model(spec, setup.lora_targets, setup.lora_rank, layers, outside_layers)


def stage_layers(n_layers: int, pp: int, stage: int) -> range:
    """Megatron/torchtitan split layers evenly; the remainder goes to the first stages."""
    base, rem = divmod(n_layers, pp)
    start = stage * base + min(stage, rem)
    return range(start, start + base + (1 if stage < rem else 0))


def stage_ranges(layers_per_stage: Sequence[int]) -> list[range]:
    """The layers of each pipeline stage of an explicit split (the planner's uneven stages), in order."""
    out, start = [], 0
    for n in layers_per_stage:
        out.append(range(start, start + n))
        start += n
    return out


def account_split(num_layers: int, pp: int, vpp: int = 1) -> tuple[int, ...] | None:
    """Decoder layers per pipeline rank under ``--account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split`` (Megatron-LM core_v0.19.0 ``transformer_block.py``
    ``get_num_layers_to_build``: the embedding and the loss each count as one layer, ``num_layers + 2`` is split
    evenly over the pp·vpp model chunks, and the first and the last rank build one decoder layer fewer), or None
    when ``num_layers + 2`` does not divide. Megatron-Bridge's Llama-3.1-405B recipe sets both
    (recipes/llama/llama3.py ``llama31_405b_pretrain_config``): 126 layers on pp 8 → 15, 16 × 6, 15."""
    units = num_layers + 2
    if pp < 2 or units % (pp * vpp):
        return None
    per_rank = units // pp
    return (per_rank - 1, *([per_rank] * (pp - 2)), per_rank - 1)


def layers_alike(spec: ModelSpec) -> bool:
    """Every decoder layer alike (parameters and kind): any block of ``n`` layers is the same stage."""
    layers = spec.params.layers
    return all(lp == layers[0] for lp in layers) and len(spec.moe_layer_indices) in (0, spec.num_layers)


def layers_of_stage(spec: ModelSpec, setup: TrainingSetup, stage: int) -> range:
    """The decoder layers of pipeline ``stage``: the setup's explicit split (``stage_layers``), else the even one."""
    if setup.stage_layers:
        return stage_ranges(setup.stage_layers)[stage]
    return stage_layers(spec.num_layers, setup.pp, stage)


def rank_params(spec: ModelSpec, setup: TrainingSetup, stage: int = 0) -> RankParams:
    """Parameters held by one rank of pipeline ``stage``: matmul weights and embeddings ÷ tp
    (column/row parallel, vocab parallel), routed experts ÷ ep, norms replicated."""
    pc = spec.params
    tp, ep = setup.tp, setup.ep
    layers = [pc.layers[i] for i in layers_of_stage(spec, setup, stage)]
    per_layer: list[int] = []
    per_layer_mm: list[int] = []
    for lp in layers:
        experts = lp.experts // ep
        dense = lp.attention + lp.mlp + lp.shared_experts + lp.router
        n = dense // tp + experts // tp + lp.norms
        mm_experts = min(lp.matmul, lp.experts)
        mm = (lp.matmul - mm_experts) // tp + (mm_experts // ep) // tp
        per_layer.append(n)
        per_layer_mm.append(mm)
    first = stage == 0
    last = stage == setup.pp - 1
    emb = (pc.embedding + pc.position_embedding) // tp if first else 0
    head = 0
    if last:
        head = pc.lm_head // tp + pc.final_norm + pc.other
        if spec.tie_word_embeddings and setup.pp > 1:
            head += pc.embedding // tp  # untied copy on the last stage (Megatron keeps both)
    vision = pc.vision if first else 0  # a VLM's tower + projector (they run before layer 0: memory/vision.py)
    total = emb + head + sum(per_layer) + vision
    lora = lora_param_count(spec, setup, layers_of_stage(spec, setup, stage), last) if setup.is_lora else 0
    mm = sum(per_layer_mm)
    head_mm = (pc.lm_head // tp) if last and pc.lm_head else 0
    if last and spec.tie_word_embeddings:
        head_mm = pc.embedding // tp
    if setup.is_lora:
        trainable = lora
    else:
        from trainmem.memory.vision import vision_frozen_params
        trainable = total - (vision_frozen_params(spec, setup) if first else 0)
    return RankParams(total=total + lora, trainable=trainable, matmul=mm + head_mm, embedding=emb,
                      lm_head=head, layers=tuple(per_layer), layer_matmul=tuple(per_layer_mm),
                      frozen_quantized=mm if setup.qlora or setup.load_in_8bit else 0, stage=stage, n_layers_stage=len(layers))


def param_bytes_per_elem(setup: TrainingSetup) -> int:
    """Bytes of a stored (model) parameter: fp32 for fp32 and autocast recipes, else 16-bit."""
    return 4 if setup.precision in ("fp32", "amp-bf16", "amp-fp16") else 2


def nf4_packed_bytes(n_quantized: int) -> int:
    """The packed NF4 codes: two 4-bit weights per byte (bitsandbytes ``Params4bit`` data, torchao
    ``NF4Tensor.quantized_data``)."""
    return n_quantized // 2


def nf4_quant_state_bytes(n_quantized: int) -> int:
    """NF4's double-quantised scales (Dettmers et al. 2023, QLoRA §3; bitsandbytes ``QuantState`` absmax with
    ``compress_statistics``, torchao ``NF4Tensor.quantized_scalers`` + ``quantization_factor``): an 8-bit
    absmax per block of 64 weights and an fp32 second-level constant per 256 blocks."""
    return n_quantized // 64 + 4 * (n_quantized // (64 * 256))


def qlora_base_bytes(n_quantized: int) -> int:
    """NF4 with block size 64 and double quantisation: 0.5 B per weight + its scales (≈ 0.516 B per weight)."""
    return nf4_packed_bytes(n_quantized) + nf4_quant_state_bytes(n_quantized)


def optimizer_state_bytes(setup: TrainingSetup, n_trainable: int, state_elem_bytes: int,
                          spec: ModelSpec | None = None) -> int:
    """Optimizer state for ``n_trainable`` parameters held in ``state_elem_bytes`` per element.

    adamw/adam: 2 states; sgd-momentum/lion: 1; sgd: 0; adamw-8bit: 2 B/param + absmax;
    adafactor (torch.optim.Adafactor): factored row/column second moments for matrices, a full
    second moment for vectors (≈ (rows + cols)·4 B per matrix)."""
    o = setup.optimizer
    step_bytes = 0
    if o in ("adamw", "adam", "paged-adamw"):
        return 2 * state_elem_bytes * n_trainable + step_bytes
    if o in ("sgd-momentum", "lion"):
        return state_elem_bytes * n_trainable
    if o == "sgd":
        return 0
    if o in ("adamw-8bit", "paged-adamw-8bit"):
        return 2 * n_trainable + 2 * 4 * (n_trainable // 2048)
    if o in ("adafactor", "hf-adafactor"):  # (hf-adafactor: the torch engine replaces it, memory/hf_adafactor.py)
        if spec is None:
            return 0
        return adafactor_state_bytes(spec, state_elem_bytes)
    raise AssertionError(o)


#: bitsandbytes ``Optimizer8bit.get_state_buffer``: a paged optimizer puts a state buffer in managed memory
#: only for a parameter of at least 1e5 elements ("> 1 MB"); smaller ones get ``torch.zeros_like``.
PAGED_MIN_NUMEL = 100_000


def paged_optimizer_state_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of optimizer state a bitsandbytes paged optimizer keeps in CUDA managed memory
    (``F.get_paged`` → ``cget_managed_ptr``, cudaMallocManaged: outside torch's caching allocator, so not in
    ``max_memory_allocated``/``reserved``; nvidia-smi shows it while resident, and the driver pages it out to
    host RAM under memory pressure instead of failing). Per parameter tensor of ≥ ``PAGED_MIN_NUMEL`` elements
    (bitsandbytes/optim/optimizer.py ``get_state_buffer``, main @ 06029dd): ``state1`` and ``state2`` — fp32
    for ``paged-adamw`` (8 B per element), uint8 for ``paged-adamw-8bit`` (2 B; its blockwise absmax stays
    in torch memory). Tensors: every adapted linear's ``lora_A`` (r × in) and ``lora_B`` (out × r) under LoRA;
    else the embeddings, the LM head and every linear weight of the layers (stacked routed experts whole);
    norms, biases and routers stay below the threshold on real models and are left in torch memory."""
    from trainmem.model.lora_targets import (layer_linears, targeted_head_linear, targeted_layer_linears,
                                             targeted_model_linears)

    if setup.optimizer not in PAGED_OPTIMIZERS:
        return 0
    per_elem = 8 if setup.optimizer == "paged-adamw" else 2
    big = lambda n: n if n >= PAGED_MIN_NUMEL else 0  # noqa: E731
    r = setup.lora_rank
    n = 0
    if setup.is_lora:
        for idx in range(spec.num_layers):
            n += sum(big(r * lin.fin) + big(lin.fout * r) for lin in targeted_layer_linears(spec, setup.lora_targets, idx))
        n += sum(big(r * lin.fin) + big(lin.fout * r) for lin in targeted_model_linears(spec, setup.lora_targets))
        head = targeted_head_linear(spec, setup.lora_targets)  # (LoRA on lm_head)
        n += big(r * head.fin) + big(head.fout * r) if head else 0
        return per_elem * n
    pc = spec.params
    for idx, lp in enumerate(pc.layers):
        n += sum(big(lin.fin * lin.fout) for lin in layer_linears(spec, idx)) + big(lp.experts)
    n += big(pc.embedding) + big(pc.position_embedding) + big(pc.lm_head)
    return per_elem * n


def adafactor_state_bytes(spec: ModelSpec, elem_bytes: int) -> int:
    """torch.optim.Adafactor state (torch/optim/_adafactor.py ``_init_group``), one tensor per factor, each
    rounded to the allocator's 512 B: a matrix (or stacked experts ``(..., r, c)``) keeps row
    (``shape[:-1]``) and column (``shape[:-2] + shape[-1:]``) second moments; a vector keeps a full one.
    Shapes follow the HF modules (q/k/v/o, gate/up/down or fc/proj, embeddings); a layer's remaining
    parameters (norms, biases) are counted as vectors of width h."""
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    pc = spec.params

    def mat(r: int, c: int, stack: int = 1) -> int:
        return round_up_bytes(elem_bytes * stack * r) + round_up_bytes(elem_bytes * stack * c)

    total = mat(spec.vocab_size, h) + (mat(spec.vocab_size, h) if pc.lm_head else 0)
    fam = layer_family(spec)  # (fused q/k/v and gate/up linears: layers/family.py)
    for lp in pc.layers:
        if fam.fused_qkv_linear:  # one (q+k+v) projection
            mats = [(a * d + kv * d + kv * dv, h), (h, a * dv)]
        else:
            mats = [(a * d, h), (kv * d, h), (kv * dv, h), (h, a * dv)]
        if lp.experts:
            E, mi = spec.num_experts, spec.moe_intermediate_size
            total += mat(2 * mi, h, E) + mat(h, mi, E) + mat(E, h)  # gate_up, down, router
        if lp.shared_experts:
            si = spec.shared_expert_intermediate_size
            mats += [(si, h), (si, h), (h, si)]
        if lp.mlp:
            i_ = spec.intermediate_size
            if fam.fused_gate_up:  # one gate_up projection (Phi-3)
                mats += [(2 * i_, h), (h, i_)]
            else:
                mats += [(i_, h), (i_, h), (h, i_)] if spec.mlp_gated else [(i_, h), (h, i_)]
        mat_numel = sum(r * c for r, c in mats)
        total += sum(mat(r, c) for r, c in mats)
        vec = max(lp.total - lp.experts - lp.router - mat_numel, 0)
        n_vec, rem = divmod(vec, h)
        total += n_vec * round_up_bytes(elem_bytes * h) + (round_up_bytes(elem_bytes * rem) if rem else 0)
    if pc.final_norm:
        total += round_up_bytes(elem_bytes * pc.final_norm)
    return total


def optimizer_step_temp_bytes(setup: TrainingSetup, n_trainable_local: int, state_elem_bytes: int,
                              grad_elem_bytes: int) -> int:
    """Peak temporaries of one foreach ``optimizer.step()`` over this rank's tensors.

    torch/optim/adam.py ``_multi_tensor_adam``: ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``
    allocates one state-sized copy for the whole (device, dtype) group; Adam with coupled weight decay
    first makes ``grads = _foreach_add(grads, params, alpha=wd)`` (a grad-sized copy). SGD with weight
    decay makes the same grad-sized copy (sgd.py ``_multi_tensor_sgd``). Adafactor builds a full-size
    variance estimate per parameter. bitsandbytes 8-bit updates in place per tensor.

    ``fused`` (``torch._fused_adamw_`` / ``_fused_adam_`` / ``_fused_sgd_``, aten/src/ATen/native/cuda/
    FusedAdamWKernel.cu): one multi-tensor kernel updates parameters and states in place, no list-wide
    temporary (its per-tensor ``step`` counters live on the device, 512 B each, not counted)."""
    o = setup.optimizer
    if setup.optimizer_impl == "fused":
        return 0
    if o == "adamw":
        return state_elem_bytes * n_trainable_local
    if o == "adam":
        return state_elem_bytes * n_trainable_local + grad_elem_bytes * n_trainable_local
    if o in ("sgd", "sgd-momentum"):
        return grad_elem_bytes * n_trainable_local
    if o == "lion":
        return 2 * grad_elem_bytes * n_trainable_local
    if o == "adafactor":
        # _multi_tensor_adafactor: one grad-sized update/variance-estimate temporary for the group
        return state_elem_bytes * n_trainable_local
    return 0
