"""Simulate one steady-state optimizer step on the most loaded rank and report its peak.

The step is a timeline of allocations and frees (``Timeline``): every micro-batch's forward layer by
layer, the loss, the backward layer by layer (with the gradients each engine creates, accumulates or
reduces), the optimizer step with its temporaries, and ``zero_grad``. The peak is the largest total
along that timeline, not a sum of per-category maxima.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.errors import UnsupportedError
from trainmem.hardware import GPU, get_gpu
from trainmem.memory.activations import (LayerSaved, compute_bytes, embedding_saved, head_saved, is_amp,
                                         layer_saved, lora_forward_frame_bytes, lora_head_frame_bytes,
                                         lora_recompute_frame_bytes,
                                         model_wide_saved_bytes,
                                         residual_bytes, sdpa_math_fallback)
from trainmem.memory.loss import loss_buffers
from trainmem.memory.overhead import cuda_only_allocated_bytes, device_total_bytes, reserved_bytes
from trainmem.memory.states import (RankParams, stage_layers, optimizer_state_bytes, optimizer_step_temp_bytes,
                                    param_bytes_per_elem, qlora_base_bytes, rank_params, lora_param_count)
from trainmem.memory.timeline import CATEGORIES, Timeline
from trainmem.units import round_up_bytes as _r
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup, validate_for_model

__all__ = ["MemoryEstimate", "estimate"]

#: Simulate the middle of runs of identical layers as one block (tests switch it off to compare).
_BULK = True

#: DeepSpeed defaults (deepspeed/runtime/zero/config.py): elements.
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_PARAM_PERSISTENCE = 100_000
DS_MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance (zero/config.py:244, v0.19.5)


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    model: str
    gpu: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    device_total_bytes: int
    gpu_memory_bytes: int
    static_bytes: int
    breakdown_at_peak_bytes: dict[str, int]
    category_peak_bytes: dict[str, int]
    peak_phase: str
    host_memory_bytes: int
    fits: bool
    headroom_bytes: int
    timeline: list[tuple[str, int]]
    n_params: int
    n_trainable_params: int
    stage: int
    activation_bytes_per_layer: int
    cuda_only_bytes: int
    """Allocated on a GPU but invisible to a CPU trace (cuBLAS workspace)."""
    assumptions: list[str] = field(default_factory=list)
    setup: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "model": self.model, "gpu": self.gpu,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "device_total_bytes": self.device_total_bytes,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "static_bytes": self.static_bytes,
            "breakdown_at_peak_bytes": dict(self.breakdown_at_peak_bytes),
            "category_peak_bytes": dict(self.category_peak_bytes),
            "peak_phase": self.peak_phase,
            "host_memory_bytes": self.host_memory_bytes,
            "fits": self.fits, "headroom_bytes": self.headroom_bytes,
            "timeline": [{"phase": p, "allocated_bytes": b} for p, b in self.timeline],
            "n_params": self.n_params, "n_trainable_params": self.n_trainable_params,
            "pipeline_stage": self.stage,
            "activation_bytes_per_layer": self.activation_bytes_per_layer,
            "cuda_only_bytes": self.cuda_only_bytes,
            "assumptions": list(self.assumptions),
            "setup": dict(self.setup),
        }


@dataclass
class _States:
    params: int = 0
    master: int = 0
    grads_static: int = 0
    states: int = 0
    comm_static: int = 0
    host: int = 0
    grad_elem: int = 4          # bytes of a (local) gradient element
    step_grad_fp32: int = 0     # fp32 gradient copy built at step() (DeepSpeed/FP16_Optimizer)
    step_temp: int = 0
    unsharded_elem: int = 0     # fsdp2/zero-3: bytes of a gathered parameter element


def fsdp_shard_elems(n: int, experts: int, n_experts: int, dp: int) -> int:
    """Elements FSDP2 keeps on one rank for ``n`` parameters, ``experts`` of them routed experts stacked
    as ``(E, ·, ·)`` tensors. ``fully_shard`` chunks every tensor on dim 0 and pads each chunk to
    ``ceil(dim0 / dp)`` rows (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): dense weights
    (dim 0 ≥ hidden) shard evenly, but with more ranks than experts each rank still holds a whole
    expert (ceil(E / dp) of E)."""
    if not experts or not n_experts:
        return -(-n // dp)
    return -(-(n - experts) // dp) + -(-n_experts // dp) * (experts // n_experts)


def _model_states(spec: ModelSpec, s: TrainingSetup, rp: RankParams, notes: list[str]) -> _States:
    e, z, dp = s.engine, s.zero, s.dp
    pb = param_bytes_per_elem(s)
    st = _States()
    T = rp.trainable
    frozen = rp.total - T
    lora = s.is_lora
    if lora:
        # PEFT keeps adapters in fp32 (autocast_adapter_dtype=True); the frozen base is 16-bit
        # (or NF4 for the quantised matmul weights with --qlora).
        train_elem = 4
        if s.qlora:
            base = qlora_base_bytes(rp.frozen_quantized) + 2 * (frozen - rp.frozen_quantized)
            notes.append("QLoRA: NF4 base weights, block 64, double quantisation (≈0.516 B/weight); "
                         "embeddings, norms and LM head 16-bit")
        else:
            base = frozen * (4 if s.precision == "fp32" else 2)
        notes.append("LoRA: adapters fp32 (PEFT default), base frozen; only adapters have gradients and optimizer state")
        notes.append("LoRA (PEFT, lora_dropout 0, bias none): the frozen base is 16-bit (amp recipes: autocast over "
                     "it); frozen linears keep no input, frozen norms no normalised copy; each adapter keeps its "
                     "(cast) input and rank activation; gradient checkpointing with enable_input_require_grads, "
                     "else nothing is saved before layer 0's first adapter")
    else:
        train_elem = pb
        base = 0
    if e == "torch" or (e == "fsdp2" and not s.fsdp_applied):
        if e == "fsdp2":
            notes.append("fsdp2 with tensor parallelism only (dp = cp = 1): no fully_shard, as torchtitan runs it; "
                         "each rank holds its TP shard of parameters, gradients and optimizer states")
            if s.precision in ("amp-bf16", "amp-fp16"):  # activations.tp_only_fp32
                notes.append("fsdp2 with tensor parallelism only: torchtitan disables mixed precision without "
                             "FSDP (maybe_enable_amp), so the amp recipe computes in fp32")
        st.params = base + T * train_elem
        st.grad_elem = train_elem
        st.states = optimizer_state_bytes(s, T, train_elem, spec)
        st.step_temp = optimizer_step_temp_bytes(s, T, train_elem, train_elem)
        if dp > 1:
            # DDP Reducer allocates one flat bucket tensor per bucket (gradient_as_bucket_view=False):
            # together a second copy of every trainable gradient (torch/csrc/distributed/c10d/reducer.cpp).
            st.comm_static = T * train_elem
            notes.append("DDP: bucket buffers hold a second copy of the gradients (gradient_as_bucket_view=False, the default)")
        return st
    if e == "fsdp2":
        off = s.offload == "optimizer+params"
        st.unsharded_elem = 4 if s.precision == "fp32" else 2
        experts = 0 if s.is_lora else spec.params.expert_total // s.ep // s.tp
        dp = s.fsdp_shard_degree
        T_local = fsdp_shard_elems(T, experts, spec.num_experts // s.ep, dp)
        shard_param = base // dp + T_local * train_elem
        st.grad_elem = train_elem
        states = optimizer_state_bytes(s, T_local, train_elem, spec)
        if off:
            st.host = shard_param + T * train_elem // dp + states
            notes.append("FSDP2 CPUOffloadPolicy: sharded parameters, gradients and optimizer states live in pinned host memory; the step runs on the CPU")
            return st
        st.params = shard_param
        st.states = states
        st.step_temp = optimizer_step_temp_bytes(s, T_local, train_elem, train_elem)
        return st
    if e == "deepspeed":
        # MoE: expert parameters are partitioned over the expert-data-parallel group (dp / ep), dense ones
        # over dp (deepspeed/utils/groups.py _create_expert_and_data_parallel; stage_1_and_2.py
        # partitions each param group over its own ``dp_process_group``)
        T_sh = _zero_shard_elems(rp.trainable, _local_experts(spec, s, rp), dp if z >= 1 else 1, s.ep)
        if s.precision == "fp32":
            st.params, st.grad_elem = 4 * rp.total, 4
            st.states = optimizer_state_bytes(s, T_sh, 4, spec)
            return st
        # (LoRA: the frozen base as stored, NF4 with --qlora; the engine casts adapters to 16 bits)
        p16 = base + 2 * T if lora else 2 * rp.total
        st.params = _zero_shard_elems(p16, 2 * _local_experts(spec, s, rp), dp, s.ep) if z == 3 else p16
        st.master = 4 * T_sh
        st.states = optimizer_state_bytes(s, T_sh, 4, spec)
        st.grad_elem = 2
        # step(): stages 1/2 build the fp32 gradient partition next to a 16-bit flat copy of it
        # (stage_1_and_2.py:2324-2336, v0.19.5); ZeRO-0's FP16_Optimizer makes per-parameter fp32 copies
        # and a flat fp32 copy of every gradient (fp16/fused_optimizer.py:288-292)
        st.step_grad_fp32 = 8 * T_sh if z == 0 else (4 + 2) * T_sh if z in (1, 2) else 4 * T_sh
        st.unsharded_elem = 2
        if s.offload != "none":
            st.host = st.master + st.states + st.step_grad_fp32 + (st.params if s.offload == "optimizer+params" else 0)
            st.master = st.states = st.step_grad_fp32 = 0
            if s.offload == "optimizer+params":
                st.params = 0
            notes.append("DeepSpeed ZeRO-Offload: fp32 master weights, optimizer states and the fp32 gradient partition in pinned host memory; DeepSpeedCPUAdam steps on the CPU")
        notes.append(f"DeepSpeed 0.19 defaults: reduce_bucket_size=allgather_bucket_size={DS_REDUCE_BUCKET:.0e} elements "
                     "(the 16-bit reduce bucket is allocated at that size whatever the model and world size), "
                     "FusedAdam (no foreach temporaries), contiguous_gradients=true, overlap_comm=false (true for "
                     "stage 3)")
        return st
    if e == "megatron":
        # distributed optimizer: dense parameters shard over dp·cp, expert parameters over the
        # expert-data-parallel group, world / (etp·ep·pp) = dp·cp/ep with etp = tp
        # (megatron/core/parallel_state.py, expert data parallel group; distributed_data_parallel.py
        # builds expert buffers on it)
        T_sh = _zero_shard_elems(T, _local_experts(spec, s, rp), dp * s.cp if z == 1 else 1, s.ep)
        if s.precision == "fp32":
            st.params, st.grads_static, st.grad_elem = 4 * rp.total, 4 * T, 4
            st.states = optimizer_state_bytes(s, T_sh, 4, spec)
            return st
        st.params = 2 * rp.total
        st.grads_static = 4 * T  # fp32 main-grad buffer, full size, persistent
        st.grad_elem = 4
        st.master = 4 * T_sh
        st.states = optimizer_state_bytes(s, T_sh, 4, spec)
        if s.offload == "optimizer":
            st.host = st.master + st.states
            st.master = st.states = 0
            notes.append("Megatron --optimizer-cpu-offload: fp32 master weights and Adam states on the host")
        notes.append("Megatron: bf16 params, persistent fp32 main-grad buffer, FusedAdam; "
                     + ("distributed optimizer shards master+states over dp·cp" if z == 1 else "optimizer replicated"))
        return st
    raise UnsupportedError(f"engine {e} is not modelled")


def _local_experts(spec: ModelSpec, s: TrainingSetup, rp: RankParams) -> int:
    """Routed-expert parameters held by this rank (its pipeline stage, ÷ ep, ÷ tp); 0 for LoRA."""
    if s.is_lora or not spec.is_moe:
        return 0
    return sum(spec.params.layers[i].experts // s.ep // s.tp
               for i in stage_layers(spec.num_layers, s.pp, rp.stage))


def _zero_shard_elems(n: int, experts: int, shard: int, ep: int) -> int:
    """Elements of ``n`` local parameters (``experts`` of them routed experts) that one rank owns when
    dense parameters are partitioned over ``shard`` ranks and experts over the expert-data-parallel
    group of ``shard / ep`` ranks (no sharding when ``shard`` is 1)."""
    if shard <= 1:
        return n
    return (n - experts) // shard + experts // max(1, shard // ep)


def _simulate(spec: ModelSpec, s: TrainingSetup, stage: int, notes: list[str]) -> tuple[Timeline, RankParams, _States, int]:
    rp = rank_params(spec, s, stage)
    st = _model_states(spec, s, rp, notes)
    import os
    tl = Timeline(debug=bool(os.environ.get("TRAINMEM_ESTIMATE_DEBUG")))
    e = s.engine
    first, last = stage == 0, stage == s.pp - 1
    amp = is_amp(s)
    c, r = compute_bytes(s), residual_bytes(s)
    T_tok = s.micro_batch * s.seq_len // s.cp
    h = spec.hidden_size
    layer_ids = list(stage_layers(spec.num_layers, s.pp, stage))
    n_layers = len(layer_ids)
    # -- static state at the start of a steady step -------------------------------------------
    tl.alloc("params", "parameters", st.params)
    tl.alloc("master", "master_weights", st.master)
    tl.alloc("states", "optimizer_states", st.states)
    tl.alloc("grad_buffer", "gradients", st.grads_static)
    tl.alloc("ddp_buckets", "communication_buffers", st.comm_static)
    if e == "deepspeed" and s.zero == 3 and s.precision != "fp32":
        # stage 3 allocates its reduce bucket and the 16-bit gradient partition at init (stage3.py:702, 711)
        tl.alloc("ipg_buffer", "communication_buffers", 2 * DS_REDUCE_BUCKET)
        tl.alloc("grad_partition", "gradients", 2 * _zero_shard_elems(rp.trainable, _local_experts(spec, s, rp), s.dp, s.ep))
    tl.mark("step start")
    # Per-layer parameter sizes for gradient creation.
    layer_params = list(rp.layers)
    trainable_frac = (rp.trainable / rp.total) if rp.total else 0.0
    layer_train = [int(p * trainable_frac) for p in layer_params]
    head_train = rp.lm_head if last else 0
    if s.is_lora:  # adapters of each layer; BERT/RoBERTa's MLM-transform adapter with the head
        layer_train = [lora_param_count(spec, s, range(i, i + 1), False) for i in layer_ids]
        head_train = rp.trainable - sum(layer_train)
    emb_train = 0 if s.is_lora else (rp.embedding if first else 0)
    fsdp = s.fsdp_applied
    fdp = s.fsdp_shard_degree
    zero3 = (e == "deepspeed" and s.zero == 3)
    ds_keep_all = zero3 and 2 * rp.total < DS_MAX_REUSE_DISTANCE
    # AMP on the torch engine: matmuls save 16-bit copies of the fp32 weights (autocast's weight-cast
    # cache keeps every copy until the autocast region ends; the ones matmuls saved live until the
    # layer's backward). FSDP2 with param_dtype=bf16 gathers 16-bit weights directly: no copies.
    amp_copy = amp and not fsdp
    # (routed experts run in their weights' dtype, fp32 under autocast: no copies for them)
    copies = [2 * max(mm - (spec.params.layers[i].experts // s.ep) // s.tp, 0) if amp_copy and not s.is_lora else 0
              for i, mm in zip(layer_ids, rp.layer_matmul)]
    if s.qlora:
        # bitsandbytes dequantises each NF4 weight to 16 bits for the matmul and frees it after.
        notes.append("QLoRA: each NF4 weight is dequantised to a 16-bit temporary for its matmul")
    head_copy = 2 * (spec.params.lm_head or spec.params.embedding) // s.tp if (amp_copy and last and not spec.is_encoder
                                                                               and not s.is_lora) else 0
    # Pipeline: stage i of p keeps min(p - i, m) micro-batches in flight (1F1B); interleaving with
    # v chunks adds (p - 1)/(p·v) on the first stage (Megatron's memory report).
    m = s.grad_accum
    in_flight = min(s.pp - stage, m) if s.pp > 1 else 1
    vpp_factor = (s.pp - 1) / (s.pp * s.vpp) if (s.vpp > 1 and stage == 0) else 0.0
    loss = loss_buffers(spec, s)
    # Layers of one kind (dense / MoE) save the same: derive everything from one layer_saved per kind.
    # (LoRA without checkpointing: layer 0 saves less, nothing before its first adapter, activations.py)
    def kind_of(i: int) -> tuple[bool, bool]:
        return i in spec.moe_layer_indices, s.is_lora and i == 0

    kinds: dict[tuple[bool, bool], LayerSaved] = {}
    for i in layer_ids:
        if kind_of(i) not in kinds:
            kinds[kind_of(i)] = layer_saved(spec, s, i)
    layer_kind = [kinds[kind_of(i)] for i in layer_ids]
    saved = [ls.total_bytes for ls in layer_kind]
    act_per_layer = saved[0] if saved else 0
    wide = model_wide_saved_bytes(spec, s)
    ckpt_input = r * T_tok * h // (s.tp if s.sp else 1)
    recompute = s.recompute
    if recompute == "selective":
        saved_eff = [_selective(s, ls) for ls in layer_kind]
    elif recompute == "full":
        saved_eff = [ckpt_input for _ in layer_ids]
    else:
        saved_eff = saved
    i_eff = max(spec.intermediate_size, spec.num_experts_per_tok * spec.moe_intermediate_size) // s.tp
    # Backward runs the MLP first: once down_proj's backward is done, its saved input (the product,
    # width i) and its 16-bit weight copy are released while the MLP's other gradients are being made.
    parts = [_layer_parts(spec, s, ls) for ls in layer_kind]
    mlp_frac = [_mlp_param_fraction(spec, idx) for idx in layer_ids]
    layer_experts = [0 if s.is_lora else spec.params.layers[idx].experts // s.ep // s.tp for idx in layer_ids]
    copy_frac = [_mlp_copy_fraction(spec, idx) for idx in layer_ids]
    norm_part = next((t.bytes for t in layer_kind[-1].terms if t.name == "input_norm"), 0) if layer_ids else 0
    # Identical consecutive layers change memory by the same amount each, so within a run the peak is
    # at one of its ends: the two layers at each end of a run are simulated one by one and the middle
    # of the run as one block (same peak, a fraction of the work for 80-126-layer models).
    def kept_parts(j: int) -> tuple[int, int, int, int]:
        """What a layer keeps through the forward, split like ``parts``: everything without recompute;
        under selective recompute, the kept share of each part."""
        if recompute == "none" or not saved[j]:
            return parts[j]
        ratio = saved_eff[j] / saved[j]
        p_, m_, e_, a_ = (int(x * ratio) for x in parts[j])
        return p_, m_, e_, saved_eff[j] - p_ - m_ - e_

    def copy_pieces(j: int) -> tuple[int, int, int]:
        """A layer's autocast weight copies: MLP output projection, rest of the MLP, attention."""
        cm = int(copies[j] * copy_frac[j])
        down = cm // 3 if spec.mlp_gated else cm // 2
        return down, cm - down, copies[j] - cm

    def grad_pieces(j: int) -> tuple[int, int, int, int]:
        """A layer's parameter gradients in the order backward makes them: MLP output projection, rest
        of the MLP, attention output projection, the rest of attention and the norms."""
        n_mlp = int(layer_train[j] * mlp_frac[j])
        n_down = n_mlp // 3 if spec.mlp_gated else n_mlp // 2
        n_attn = layer_train[j] - n_mlp
        n_o = int(n_attn * o_frac)
        return n_down, n_mlp - n_down, n_o, n_attn - n_o

    bulk_of: dict[int, list[int]] = {}
    skip: set[int] = set()
    if _BULK:
        j = 0
        while j < n_layers:
            k = j
            while k + 1 < n_layers and layer_params[k + 1] == layer_params[j] and saved[k + 1] == saved[j] \
                    and copies[k + 1] == copies[j] and saved_eff[k + 1] == saved_eff[j]:
                k += 1
            if k - j + 1 >= 6:
                mid = list(range(j + 2, k - 1))
                bulk_of[mid[0]] = mid
                skip.update(mid[1:])
            j = k + 1
    # Bytes per (token × MLP width) alive together in the MLP's backward beyond d(product): gated MLPs
    # hold d(act) and d(up) (2c); GPT-2's gelu_new under autocast differentiates its fp32 formula
    # (three fp32 gradients of width i and a 16-bit one, measured by tracing).
    # The input norm's backward: RMSNorm differentiates its fp32 arithmetic (three fp32 tensors of
    # width h alive together, traced); nn.LayerNorm's fused backward makes one input gradient.
    norm_bwd = (12 if spec.norm == "rmsnorm" else r) * T_tok * h // (s.tp if s.sp else 1)
    mlp_bwd_extra = 2 * c if spec.mlp_gated else c  # a plain MLP: d(act) only
    final_norm_bwd = (16 if spec.norm == "rmsnorm" else r) * T_tok * h // (s.tp if s.sp else 1)
    if spec.hidden_act == "gelu_new" and amp:
        mlp_bwd_extra = 14 - c
    a_, kv_, d_, dv_ = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    o_frac = a_ * dv_ / (a_ * d_ + kv_ * d_ + kv_ * dv_ + a_ * dv_)  # o_proj's share of the attention weights
    attn_transient = c * T_tok * (h + spec.num_attention_heads * spec.head_dim
                                  + 2 * spec.num_kv_heads * spec.head_dim) // s.tp
    if s.attn == "eager" or sdpa_math_fallback(spec, s):
        # eager attention's backward: the probabilities' gradient upcast to fp32 and softmax's input
        # gradient (fp32), both b·a·s² (compute dtype for families whose softmax is not upcast)
        sm = 4 if spec.model_type not in ("gpt2", "bert", "roberta", "falcon") else c
        attn_transient += 2 * sm * s.micro_batch * spec.num_attention_heads * (s.seq_len // s.cp) * s.seq_len // s.tp

    ue = st.unsharded_elem

    def ag_bytes(n_params: int, experts: int) -> int:
        """FSDP2's all-gather output: every rank's padded shard (dp × local), in param_dtype."""
        return ue * fdp * fsdp_shard_elems(n_params, experts, spec.num_experts // s.ep, fdp)

    def unit_gather(key: str, n_params: int, experts: int = 0) -> None:
        """Unshard a unit. FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py): unshard()
        first frees the previous all-gather's output (kept as ``all_gather_state`` for stream order),
        all-gathers into a new flat output, and wait_for_unshard() copies it out into the unsharded
        parameters; that output then stays alive until the next unshard. A prefetched unit already has
        its output (``ag_pending``) and only copies out."""
        if not (fsdp or zero3) or tl.has(key):
            return
        if zero3:
            if ds_keep_all:
                # stage3_max_reuse_distance: a parameter used again within 1e9 gathered elements is not
                # released (partitioned_param_coordinator.py:634-664): for a model of under 5e8 parameters
                # the whole gathered model stays from its forward to its backward
                if not tl.has("ds_gathered"):
                    tl.alloc("ds_gathered", "parameters", ue * rp.total)
                return
            tl.alloc(key, "parameters", ue * n_params)
            return
        pending = "ag_pending:" + key
        if not tl.has(pending):
            tl.free("ag_state")
            tl.alloc(pending, "communication_buffers", ag_bytes(n_params, experts))
        # (the unsharded parameters are views of the padded per-parameter all-gather outputs)
        tl.alloc(key, "parameters", ag_bytes(n_params, experts))
        tl.free("ag_state")
        tl.rename(pending, "ag_state")

    def fsdp_prefetch(key: str, n_params: int, experts: int = 0) -> None:
        """FSDP2 backward prefetch: all-gather the next unit now, copy it out at its pre-backward."""
        if tl.has(key) or tl.has("ag_pending:" + key):
            return
        tl.free("ag_state")
        tl.alloc("ag_pending:" + key, "communication_buffers", ag_bytes(n_params, experts))

    rs_elem = 2 if s.precision == "bf16" else 4  # reduce_dtype: fp32 under the mixed policy

    def fsdp_reduce(keys: list[str], n: int, experts_in: int = 0) -> None:
        """post_backward: free the previous reduce-scatter input (``reduce_scatter_state``), copy the
        unsharded grads into a new reduce-scatter input in reduce_dtype, free them, and accumulate the
        sharded output into the sharded gradient (created at the first micro-batch)."""
        if n <= 0:
            return
        local = fsdp_shard_elems(n, experts_in, spec.num_experts // s.ep, fdp)
        tl.free("rs_state")
        tl.alloc("rs_in", "communication_buffers", rs_elem * fdp * local)
        for k in keys:
            tl.free(k + ":unsharded")
        shard = keys[0] + ":sharded"
        if not tl.has(shard):
            tl.alloc(shard, "gradients", st.grad_elem * local)
        else:
            tl.spike(shard + ":new", "temporaries", st.grad_elem * local)
        tl.rename("rs_in", "rs_state")

    produced = [0]

    def grad_alloc(key: str, n: int, mb: int) -> None:
        """Gradients of n (trainable) parameters produced in backward of micro-batch mb."""
        if n <= 0:
            return
        if e == "megatron":
            # main_grad += grad (16-bit grad freed right away)
            tl.spike(key + ":bf16", "temporaries", 2 * n)
            return
        if e == "deepspeed":
            if s.zero >= 2:
                # contiguous_gradients: each grad is copied into the ipg bucket and freed; the 16-bit
                # partition buffer (grads_in_partition) is created at the first bucket reduction, i.e.
                # once reduce_bucket_size elements have been produced (or at the end of backward).
                tl.spike(key + ":bf16", "temporaries", 2 * n)
                produced[0] += n
                if produced[0] >= DS_REDUCE_BUCKET and not tl.has("grad_partition"):
                    tl.alloc("grad_partition", "gradients", 2 * _zero_shard_elems(rp.trainable, _local_experts(spec, s, rp), s.dp, s.ep))
                return
            if not tl.has(key):
                tl.alloc(key, "gradients", 2 * n)
            else:
                tl.spike(key + ":new", "temporaries", 2 * n)
            return
        if fsdp:
            # autograd writes the unsharded grad (param_dtype) of the gathered parameter; the unit's
            # post_backward (fsdp_reduce) turns it into the sharded gradient.
            if tl.has(key + ":unsharded"):  # a tied weight's second contribution is added in place
                tl.spike(key + ":new", "temporaries", ue * n)
            else:
                tl.alloc(key + ":unsharded", "temporaries", ue * n)
            return
        # torch engine: AccumulateGrad steals the first gradient; later ones are added in place.
        if amp and not s.is_lora:
            tl.alloc(key + ":16", "temporaries", 2 * n)
        if not tl.has(key):
            tl.alloc(key, "gradients", st.grad_elem * n)
        else:
            tl.spike(key + ":new", "temporaries", st.grad_elem * n)
        tl.free(key + ":16")

    # -- micro-batches ---------------------------------------------------------------------------
    def forward(mb: int) -> None:
        tl.mark(f"forward mb{mb}")
        if first:
            if fsdp and not tl.has("root"):
                unit_gather("root", rp.embedding + rp.lm_head)
            tl.alloc(f"emb{mb}", "activations", embedding_saved(spec, s))
        tl.alloc(f"wide{mb}", "activations", wide)
        fwd_tmp = 2 * r * T_tok * h
        if s.qlora:
            # bitsandbytes dequantises each NF4 weight to a 16-bit temporary for its matmul: the largest
            # (an MLP projection, h × i) is alive with the layer's working tensors
            fwd_tmp += 2 * h * max(spec.intermediate_size, spec.moe_intermediate_size) // s.tp
        for j, idx in enumerate(layer_ids):
            if j in skip:
                continue
            if j in bulk_of:
                bulk_forward(mb, bulk_of[j])
                continue
            unit_gather(f"unit{idx}", layer_params[j], layer_experts[j])
            lora_tmp = lora_forward_frame_bytes(spec, s, idx) if s.is_lora else 0  # (inside its adapted down_proj)
            tl.spike(f"fwdtmp{mb}.{idx}", "activations", (max(fwd_tmp, lora_tmp) + saved[j]) if recompute == "full"
                     else fwd_tmp)
            if recompute != "full":
                prod, mlp_rest, early, attn = kept_parts(j)
                nrm = min(attn, norm_part) if recompute == "none" else 0
                tl.alloc(f"act{mb}.{idx}.p", "activations", prod)
                tl.alloc(f"act{mb}.{idx}.m", "activations", mlp_rest)
                tl.alloc(f"act{mb}.{idx}.e", "activations", early)
                tl.alloc(f"act{mb}.{idx}", "activations", attn - nrm)
                tl.alloc(f"act{mb}.{idx}.n", "activations", nrm)
            else:
                tl.alloc(f"act{mb}.{idx}", "activations", saved_eff[j])
            c_down, c_mlp, c_attn = copy_pieces(j)
            tl.alloc(f"wcopy{mb}.{idx}.d", "activations", c_down)
            tl.alloc(f"wcopy{mb}.{idx}.m", "activations", c_mlp)
            tl.alloc(f"wcopy{mb}.{idx}", "activations", c_attn)
            if lora_tmp and recompute != "full":
                tl.spike(f"lorafwd{mb}.{idx}", "activations", lora_tmp)
            if (fsdp and s.zero == 3) or zero3:
                tl.free(f"unit{idx}")
        if vpp_factor:
            tl.alloc(f"vpp{mb}", "activations", int(vpp_factor * sum(saved_eff)))
        if last:
            tl.mark(f"loss mb{mb}")
            fused = s.loss == "fused-linear"
            tl.alloc(f"head{mb}", "activations", head_saved(spec, s, lm_input=not fused))
            tl.alloc(f"hcopy{mb}", "activations", 0 if fused else head_copy)
            if fused and head_train:
                # Liger computes the LM head's weight gradient in the forward; it becomes its .grad
                grad_alloc("g_head", head_train, mb)
            tl.alloc(f"logits{mb}", "activations", loss.logits_bytes)
            tl.alloc(f"losskept{mb}", "activations", loss.kept_bytes)
            tl.spike(f"upcast{mb}", "activations", loss.forward_transient_bytes + lora_head_frame_bytes(spec, s))
            if s.loop == "trainer":
                # HF Trainer's compute_loss returns the loss only (torchtitan: ``del pred``; Megatron returns
                # the loss): the model output dies here; the loss graph keeps no reference to the logits
                # (``logits.float()`` saves nothing, log_softmax saves its output).
                tl.free(f"logits{mb}")
        if recompute == "full":
            # Checkpointed layers save no weights: their 16-bit copies were held only by autocast's
            # cast cache, which is cleared when the autocast region (forward + loss) ends.
            for idx in layer_ids:
                for suffix in ("", ".d", ".m"):
                    tl.free(f"wcopy{mb}.{idx}{suffix}")
            for j0 in bulk_of:
                tl.free(f"wcopybulk{mb}.{j0}")

    def bulk_forward(mb: int, js: list[int]) -> None:
        """Forward of a block of identical layers: what they leave behind, in one allocation."""
        n, j0 = len(js), js[0]
        if fsdp and s.zero == 2 and not tl.has(f"unitbulk{j0}"):
            tl.alloc(f"unitbulk{j0}", "parameters", _r(ag_bytes(layer_params[j0], layer_experts[j0])) * n)
        per = sum(_r(x) for x in kept_parts(j0)) if recompute != "full" else _r(saved_eff[j0])
        tl.alloc(f"actbulk{mb}.{j0}", "activations", per * n)
        tl.alloc(f"wcopybulk{mb}.{j0}", "activations", sum(_r(x) for x in copy_pieces(j0)) * n)

    def bulk_backward(mb: int, js: list[int]) -> None:
        """Backward of the same block: its activations go, its gradients come, collectives' state as
        after any layer of the block."""
        n, j0, j_below = len(js), js[0], js[0] - 1
        tl.free(f"actbulk{mb}.{j0}")
        tl.free(f"wcopybulk{mb}.{j0}")
        key = f"gbulk{j0}"
        if e == "megatron":
            pass
        elif e == "deepspeed" and s.zero >= 2:
            produced[0] += layer_train[j0] * n
            if produced[0] >= DS_REDUCE_BUCKET and not tl.has("grad_partition"):
                tl.alloc("grad_partition", "gradients", 2 * _zero_shard_elems(rp.trainable, _local_experts(spec, s, rp), s.dp, s.ep))
        elif fsdp:
            if not tl.has(key + ":sharded"):
                local = fsdp_shard_elems(layer_train[j0], layer_experts[j0], spec.num_experts // s.ep, fdp)
                tl.alloc(key + ":sharded", "gradients", _r(st.grad_elem * local) * n)
        elif not tl.has(key):
            elem = 2 if e == "deepspeed" else st.grad_elem
            tl.alloc(key, "gradients", sum(_r(elem * x) for x in grad_pieces(j0) if x > 0) * n)
        if fsdp and s.zero == 2:
            tl.free(f"unitbulk{j0}")
        if (fsdp and s.zero == 3) or zero3:
            tl.free(f"ag_pending:unit{layer_ids[js[-1]]}")
            tl.free(f"unit{layer_ids[js[-1]]}")
            if j_below >= 0:
                if fsdp:
                    fsdp_prefetch(f"unit{layer_ids[j_below]}", layer_params[j_below], layer_experts[j_below])
                else:
                    unit_gather(f"unit{layer_ids[j_below]}", layer_params[j_below], layer_experts[j_below])
        if recompute != "none" and j_below >= 0:
            recompute_layer(mb, j_below)

    def recompute_layer(mb: int, j: int) -> None:
        """The checkpointed layer's forward runs again: its saved tensors (and, under autocast, its
        16-bit weight copies) come back before its backward."""
        idx = layer_ids[j]
        # (selective: only what the policy dropped comes back; the kept part is already alive)
        if recompute == "full":
            prod, mlp_rest, early, attn = parts[j]
        else:
            prod, mlp_rest, early, attn = (a - b for a, b in zip(parts[j], kept_parts(j)))
        tl.alloc(f"rc{mb}.{idx}.p", "activations", prod)
        tl.alloc(f"rc{mb}.{idx}.m", "activations", mlp_rest)
        tl.alloc(f"rc{mb}.{idx}.e", "activations", early)
        tl.alloc(f"recomp{mb}.{idx}", "activations", attn)
        if s.is_lora and recompute == "full":  # the recomputed forward's frames at its early stop
            tl.spike(f"rcframe{mb}.{idx}", "activations", lora_recompute_frame_bytes(spec, s, idx))
        if recompute == "full":
            c_down, c_mlp, c_attn = copy_pieces(j)
            tl.alloc(f"wcopy{mb}.{idx}.d", "activations", c_down)
            tl.alloc(f"wcopy{mb}.{idx}.m", "activations", c_mlp)
            tl.alloc(f"wcopy{mb}.{idx}", "activations", c_attn)

    def backward(mb: int, boundary: bool) -> None:
        tl.mark(f"backward mb{mb}")
        tl.free("ag_state")  # FSDP2's root pre-backward waits for and drops the last all-gather output
        if fsdp and s.zero == 3 and layer_ids:
            # ... and, from the hook on the forward output, prefetches the last layer before the loss backward
            fsdp_prefetch(f"unit{layer_ids[-1]}", layer_params[-1], layer_experts[-1])
        if last:
            tl.spike(f"lossbwd{mb}", "temporaries", loss.backward_transient_bytes)
            tl.free(f"losskept{mb}")
            tl.alloc(f"glogits{mb}", "temporaries", loss.grad_logits_bytes)
            if s.loss != "fused-linear":
                grad_alloc("g_head", head_train, mb)
            if spec.tie_word_embeddings and first:
                # tied LM head: the embedding's gradient is created here, at the head's backward,
                # and the embedding's own backward adds to it at the very end
                grad_alloc("g_emb", emb_train, mb)
            tl.free(f"glogits{mb}")
            tl.free(f"hcopy{mb}")
            # the final norm's backward, its saved tensors still alive: RMSNorm differentiates its fp32
            # arithmetic with the LM head's input gradient upcast (four fp32 b·s·h tensors, traced)
            tl.spike(f"finalnormbwd{mb}", "temporaries", final_norm_bwd)
            tl.free(f"head{mb}")
        tl.alloc(f"gstream{mb}", "temporaries", r * T_tok * h // (s.tp if s.sp else 1))
        if e == "deepspeed" and s.zero in (1, 2) and s.precision != "fp32" and not tl.has("ipg_buffer"):
            # contiguous_gradients: one 16-bit reduce bucket (ipg buffer) of reduce_bucket_size elements,
            # never capped by the model size, also at world size 1 (stage_1_and_2.py:2476, v0.19.5): stage 2
            # allocates it in every micro-batch's backward, stage 1 at the first backward until the boundary
            tl.alloc("ipg_buffer", "communication_buffers", 2 * DS_REDUCE_BUCKET)
        for j in reversed(range(n_layers)):
            if j in skip:
                continue
            if j in bulk_of:
                bulk_backward(mb, bulk_of[j])
                continue
            idx = layer_ids[j]
            if (fsdp and s.zero == 3) or zero3:
                unit_gather(f"unit{idx}", layer_params[j], layer_experts[j])
                if j > 0:
                    if fsdp:
                        fsdp_prefetch(f"unit{layer_ids[j - 1]}", layer_params[j - 1], layer_experts[j - 1])
                    else:
                        unit_gather(f"unit{layer_ids[j - 1]}", layer_params[j - 1], layer_experts[j - 1])
            if recompute != "none" and j == n_layers - 1:
                recompute_layer(mb, j)
            n_down, n_mlp_rest, n_o, n_attn_rest = grad_pieces(j)
            # MLP backward: the output projection's grads, then its saved input and weight copy go
            # (the gradient stream and d(product) first; then d(act), d(up) once down_proj is done)
            tl.alloc(f"bwdtmp{mb}.{idx}", "temporaries", c * T_tok * i_eff)
            grad_alloc(f"g{idx}d", n_down, mb)
            tl.free(f"act{mb}.{idx}.p")
            tl.free(f"rc{mb}.{idx}.p")
            tl.free(f"wcopy{mb}.{idx}.d")
            tl.spike(f"bwdtmp{mb}.{idx}.b", "temporaries", mlp_bwd_extra * T_tok * i_eff)
            grad_alloc(f"g{idx}m", n_mlp_rest, mb)
            tl.free(f"act{mb}.{idx}.m")
            tl.free(f"rc{mb}.{idx}.m")
            tl.free(f"wcopy{mb}.{idx}.m")
            tl.free(f"bwdtmp{mb}.{idx}")
            # attention (and norms) backward: o_proj's grads first and its input released, then the
            # core's backward (dq, dk, dv; eager: the s² gradients), then the q/k/v projections' grads
            grad_alloc(f"g{idx}o", n_o, mb)
            tl.free(f"act{mb}.{idx}.e")
            tl.free(f"rc{mb}.{idx}.e")
            tl.spike(f"bwdtmp{mb}.{idx}", "temporaries", attn_transient)
            grad_alloc(f"g{idx}", n_attn_rest, mb)
            tl.free(f"act{mb}.{idx}")
            tl.free(f"recomp{mb}.{idx}")
            tl.free(f"wcopy{mb}.{idx}")
            # the input norm's backward, its own saved tensors still alive
            tl.spike(f"normbwd{mb}.{idx}", "temporaries", norm_bwd)
            tl.free(f"act{mb}.{idx}.n")
            if recompute != "none" and j > 0 and (j - 1) not in skip and (j - 1) not in bulk_of:
                # non-reentrant checkpointing recomputes the layer below once autograd reaches a node
                # of it that unpacks a saved tensor
                recompute_layer(mb, j - 1)
            if fsdp:
                fsdp_reduce([f"g{idx}", f"g{idx}d", f"g{idx}m", f"g{idx}o"], layer_train[j], layer_experts[j])
            if fsdp or zero3:
                tl.free(f"unit{idx}")
        tl.free(f"gstream{mb}")
        tl.free(f"logits{mb}")  # loop "script": ``outputs`` goes out of scope after backward()
        if first:
            grad_alloc("g_emb", emb_train, mb)
            tl.free(f"emb{mb}")
        tl.free(f"wide{mb}")
        tl.free(f"vpp{mb}")
        tl.free("ds_gathered")
        if e == "deepspeed" and s.zero == 2:
            tl.free("ipg_buffer")
        if fsdp:
            # the root unit (embedding, final norm, LM head) reduces last; the final callback then
            # waits for the outstanding collectives and drops their buffers
            fsdp_reduce(["g_emb", "g_head"], emb_train + head_train)
            tl.free("rs_state")
            tl.free("ag_state")

    if s.pp == 1:
        # Micro-batches run one after another. Every micro-batch after the second sees exactly the state
        # the second saw (gradients exist, nothing else carried over), so the first, the second and the
        # last (the boundary, where DeepSpeed reduces) are simulated and the rest are repeats of the second.
        # Only DeepSpeed treats the last one differently; elsewhere it repeats the second too.
        boundary_differs = e == "deepspeed"
        sim = sorted({0, min(1, m - 1)} | ({m - 1} if boundary_differs else set()))
        last_rep = m - 1 if boundary_differs else m
        for mb in sim:
            start = len(tl.points)
            forward(mb)
            backward(mb, boundary=mb == m - 1)
            if mb == 1 and last_rep > 2:
                seg = tl.points[start:]
                for rep in range(2, last_rep):
                    tl.points.extend((ph.replace("mb1", f"mb{rep}"), v) for ph, v in seg)
    else:
        # 1F1B: warm-up forwards fill the pipeline, then the stage holds `in_flight` micro-batches at
        # the first backward; the steady phase alternates one forward / one backward at that level.
        for mb in range(in_flight):
            forward(mb)
        for mb in range(in_flight):
            backward(mb, boundary=mb == in_flight - 1)
    if e == "deepspeed" and s.zero >= 2 and not tl.has("grad_partition"):
        tl.alloc("grad_partition", "gradients", 2 * _zero_shard_elems(rp.trainable, _local_experts(spec, s, rp), s.dp, s.ep))
    tl.free("root")
    if not zero3:
        tl.free("ipg_buffer")
    # -- optimizer step ----------------------------------------------------------------------------
    tl.mark("optimizer step")
    if e == "deepspeed" and st.step_grad_fp32:
        tl.alloc("fp32_grad_partition", "temporaries", st.step_grad_fp32)
    tl.spike("opt_tmp", "temporaries", st.step_temp)
    tl.free("fp32_grad_partition")
    tl.mark("zero_grad")
    for k in [k for k in list(tl.live) if k.startswith("g") and tl.live[k][0] == "gradients"
              and k != "grad_buffer" and not (zero3 and k == "grad_partition")]:
        tl.free(k)
    if not zero3:  # stage 3's gradient partition is a buffer from init, zeroed in place
        tl.free("grad_partition")
    tl.mark("step end")
    return tl, rp, st, act_per_layer


_ATTN_EARLY = ("o_input", "probs_16bit", "v_repeated", "attn_dropout_out")


def _layer_parts(spec: ModelSpec, s: TrainingSetup, ls: LayerSaved) -> tuple[int, int, int, int]:
    """A layer's saved bytes as (MLP output projection's input, rest of the MLP block, attention
    tensors released before the attention core's backward (o_proj input; eager: probabilities'
    16-bit copy and v), the rest of attention and norms)."""
    total = ls.total_bytes
    mlp = sum(t.bytes for t in ls.terms if t.component in ("mlp", "experts", "router"))
    early = sum(t.bytes for t in ls.terms if t.name in _ATTN_EARLY)
    prod = 0
    for t in ls.terms:
        if s.is_lora:  # frozen output projection: only its adapter's input and rank activation (activations.py)
            prod += t.bytes if t.name == "lora_down_input" else 0
        elif t.name == "mlp_intermediate":
            prod = t.bytes // (4 if spec.mlp_gated else (5 if spec.hidden_act == "gelu_new" else 2))
            if spec.hidden_act == "gelu_new" and is_amp(s):
                prod = t.bytes // 8  # the 2-byte cast out of 16 B per element
        elif t.name == "expert_intermediate":
            prod = t.bytes // 4
    return prod, mlp - prod, early, total - mlp - early


def _mlp_param_fraction(spec: ModelSpec, idx: int) -> float:
    lp = spec.params.layers[idx]
    tot = lp.total
    return (lp.mlp + lp.experts + lp.shared_experts + lp.router) / tot if tot else 0.0


def _mlp_copy_fraction(spec: ModelSpec, idx: int) -> float:
    """Share of a layer's autocast weight copies that belong to the MLP block (routed experts excluded)."""
    lp = spec.params.layers[idx]
    mlp = lp.mlp + lp.shared_experts + lp.router
    return mlp / (mlp + lp.attention) if (mlp + lp.attention) else 0.0


def _selective(s: TrainingSetup, ls: LayerSaved) -> int:
    """Selective recomputation. Megatron (--recompute-granularity selective): the core attention
    (the s² softmax/dropout terms) is recomputed; with flash/sdpa nothing else changes.
    torch/fsdp2: torchtitan's op-level policy keeps matmul and attention outputs and recomputes the
    rest (norms, activations, products), modelled as dropping the norm copies and half the MLP terms."""
    out = 0
    for t in ls.terms:
        if t.name in ("softmax_fp32", "probs_16bit", "attn_dropout_mask", "attn_dropout_out", "softcap_tanh"):
            continue
        if s.engine in ("torch", "fsdp2"):
            if t.component == "norm":
                continue
            if t.name == "mlp_intermediate":
                out += t.bytes // 2
                continue
        out += t.bytes
    return out


def estimate(spec: ModelSpec, setup: TrainingSetup) -> MemoryEstimate:
    """Peak memory of one steady-state optimizer step on the most loaded rank."""
    validate_for_model(setup, spec)
    gpu: GPU = get_gpu(setup.gpu)
    if setup.gpu_memory:
        import dataclasses
        gpu = dataclasses.replace(gpu, memory_bytes=setup.gpu_memory)
    if setup.precision in ("bf16", "amp-bf16", "mixed-bf16") and not gpu.bf16:
        from trainmem.errors import ConfigError
        raise ConfigError(f"gpu {gpu.name} has no bfloat16 support; use fp16 recipes (amp-fp16, mixed-fp16) or fp32")
    notes: list[str] = []
    stages = [0] if setup.pp == 1 else sorted({0, setup.pp - 1})
    best = None
    for stg in stages:
        local_notes: list[str] = []
        tl, rp, st, act = _simulate(spec, setup, stg, local_notes)
        if best is None or tl.peak > best[0].peak:
            best = (tl, rp, st, act, stg, local_notes)
    assert best is not None
    tl, rp, st, act, stg, local_notes = best
    if tl.debug:
        for k, (cat, n) in sorted(tl.peak_live.items(), key=lambda kv: -kv[1][1]):
            print(f"{n:>14,d} {cat:22s} {k}")
    notes.extend(local_notes)
    cuda_only = cuda_only_allocated_bytes(gpu)
    breakdown = dict(tl.peak_breakdown) or {c: 0 for c in CATEGORIES}
    breakdown["other"] = breakdown.get("other", 0) + cuda_only
    peak = tl.peak + cuda_only
    reserved = reserved_bytes(peak, tl.current + cuda_only, cuda_only)
    total = device_total_bytes(reserved, setup)
    static = tl.current + cuda_only
    notes.extend(_base_assumptions(spec, setup))
    if setup.pp > 1:
        notes.append(f"pipeline: the most loaded stage is stage {stg} of {setup.pp} (1F1B keeps min(p - i, m) micro-batches in flight)")
    return MemoryEstimate(
        model=spec.name, gpu=gpu.name, peak_allocated_bytes=peak, peak_reserved_bytes=reserved,
        device_total_bytes=total, gpu_memory_bytes=gpu.memory_bytes, static_bytes=static,
        breakdown_at_peak_bytes={c: breakdown.get(c, 0) for c in CATEGORIES},
        category_peak_bytes=dict(tl.category_peak), peak_phase=tl.peak_phase,
        host_memory_bytes=st.host, fits=total <= gpu.memory_bytes, headroom_bytes=gpu.memory_bytes - total,
        timeline=list(tl.points), n_params=spec.n_params,
        n_trainable_params=_n_trainable(spec, setup), stage=stg, activation_bytes_per_layer=act,
        cuda_only_bytes=cuda_only, assumptions=notes, setup=setup.model_dump(mode="json"))


def _n_trainable(spec: ModelSpec, setup: TrainingSetup) -> int:
    if not setup.is_lora:
        return spec.n_params
    from trainmem.memory.states import lora_param_count
    return lora_param_count(spec, setup)


_LOOP_NOTE = {
    "trainer": "loop trainer: loss = compute_loss(model, batch) returns the loss only, so the model output (logits) "
               "is freed before (loss / grad_accum).backward(), as in HF Trainer/TRL, torchtitan and Megatron; "
               "optimizer.step(); optimizer.zero_grad(set_to_none=True)",
    "script": "loop script: outputs = model(input_ids, labels=labels); (outputs.loss / grad_accum).backward(): the "
              "model output (logits) stays alive through backward and is dropped after it; optimizer.step(); "
              "optimizer.zero_grad(set_to_none=True)",
}


def _base_assumptions(spec: ModelSpec, s: TrainingSetup) -> list[str]:
    out = [
        "steady state: an optimizer step after the first (optimizer states exist), all micro-batches included",
        _LOOP_NOTE[s.loop],
        "sizes rounded up to 512 B per allocation (CUDA caching allocator)",
    ]
    if s.engine in ("torch", "fsdp2"):
        out.append(f"optimizer torch.optim {s.optimizer} with foreach=True (the CUDA default), weight decay 0.01")
    out.extend(s.notes)
    if getattr(spec, "alias_note", ""):
        out.append(spec.alias_note)
    if s.gpu_memory:
        out.append(f"gpu memory {s.gpu_memory / 2**30:.2f} GiB (--gpu-memory), not the catalog's {s.gpu}")
    if spec.approximate_shape:
        out.append(f"{spec.name}: " + spec.source)
    if s.attn == "flash":
        out.append("attn flash: flash-attention-2 kernels keep q, k, v, output and logsumexp (no s² buffer), native GQA")
    return out
