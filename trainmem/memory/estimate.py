"""Simulate one steady-state optimizer step on the most loaded rank and report its peak.

The step is a timeline of allocations and frees (``Timeline``): every micro-batch's forward layer by
layer, the loss, the backward layer by layer (with the gradients each engine creates, accumulates or
reduces), the optimizer step with its temporaries, and ``zero_grad``. The peak is the largest total
along that timeline, not a sum of per-category maxima.

Layout: :mod:`~trainmem.memory.plan` computes what each layer saves and makes,
:mod:`~trainmem.memory.engines` holds one unit per engine (model states, gather/reduce, gradients,
optimizer step), :mod:`~trainmem.memory.walk` is the one timeline walk that calls them; this module
runs the walk on the most loaded pipeline stage and builds the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.hardware import GPU, get_gpu
from trainmem.memory.layers.base import is_amp
from trainmem.memory.engines import ModelStates, engine_for
from trainmem.memory.engines.fsdp1 import fsdp1_pre_unshard_pool_bytes
from trainmem.memory.engines.fsdp2 import fsdp2_offload_copy_in_pool_bytes
from trainmem.memory.loss import loss_buffers
from trainmem.memory.overhead import (CUDA_CONTEXT_BYTES, cuda_only_allocated_bytes, device_total_bytes,
                                      fsdp2_stream_pools_bytes, post_peak_segment_bytes,
                                      reserved_bytes)
from trainmem.memory.plan import build_plan
from trainmem.memory.states import RankParams, rank_params
from trainmem.memory.timeline import CATEGORIES, Timeline
from trainmem.memory.walk import StepWalk
from trainmem.model.spec import ModelSpec
from trainmem.errors import ConfigError
from trainmem.setup import FP8_BASE, TrainingSetup, validate_for_model

__all__ = ["MemoryEstimate", "estimate", "record_step_events"]

#: Simulate the middle of runs of identical layers as one block (tests switch it off to compare).
_BULK = True

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
    """(phase, allocated bytes at its start) of the simulated rank, without ``cuda_only_bytes``."""
    n_params: int
    n_trainable_params: int
    stage: int
    activation_bytes_per_layer: int
    cuda_only_bytes: int
    """Allocated on a GPU but invisible to a CPU trace (cuBLAS workspace)."""
    assumptions: list[str] = field(default_factory=list)
    setup: dict = field(default_factory=dict)
    timeline_categories: list[dict[str, int]] = field(default_factory=list)
    """Per timeline point: allocated bytes per category (they sum to the point's allocated bytes)."""
    timeline_phase_max: list[int] = field(default_factory=list)
    """Per timeline point: the largest allocated total inside its phase (transients included)."""
    paged_optimizer_bytes: int = 0
    """Optimizer state in CUDA managed memory (bitsandbytes paged optimizers): outside the allocator's figures;
    counted in ``device_total_bytes`` as far as the GPU has room, never against ``fits``."""
    peak_reserved_over_run_bytes: int | None = None
    """With ``sample_lengths``: ``max_memory_reserved()`` over the run of variable-length micro-batches —
    ``peak_reserved_bytes`` plus what the allocator replay over the run reserves beyond the same replay at one
    repeated ``seq_len`` (at most the allocator's capacity; :mod:`trainmem.memory.run_reserve`). None otherwise."""
    run_reserve: dict = field(default_factory=dict)
    """With ``sample_lengths``: the run replay's figures (bytes) that ``peak_reserved_over_run_bytes`` rests on."""
    device_map: dict = field(default_factory=dict)
    """``--device-map auto``: the split and each GPU's figures (:func:`trainmem.memory.device_map.per_gpu_report`);
    the estimate's own figures are the most loaded GPU's."""

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
            "timeline": [{"phase": p, "allocated_bytes": b, **({"by_category": dict(self.timeline_categories[i]),
                                                                   "phase_max_bytes": self.timeline_phase_max[i]}
                                                                  if i < len(self.timeline_categories) else {})}
                         for i, (p, b) in enumerate(self.timeline)],
            "n_params": self.n_params, "n_trainable_params": self.n_trainable_params,
            "pipeline_stage": self.stage,
            "activation_bytes_per_layer": self.activation_bytes_per_layer,
            "cuda_only_bytes": self.cuda_only_bytes,
            "paged_optimizer_bytes": self.paged_optimizer_bytes,
            **({"device_map": dict(self.device_map)} if self.device_map else {}),
            **({"peak_reserved_over_run_bytes": self.peak_reserved_over_run_bytes, "run_reserve": dict(self.run_reserve)}
               if self.peak_reserved_over_run_bytes is not None else {}),
            "assumptions": list(self.assumptions),
            "setup": dict(self.setup),
        }


def _simulate(spec: ModelSpec, s: TrainingSetup, stage: int, notes: list[str],
              fp8_cache: int = 0, fp8: bool = False,
              record: bool = False) -> tuple[Timeline, RankParams, ModelStates, int]:
    """Walk one steady step of pipeline ``stage`` (see :mod:`trainmem.memory.walk`); ``fp8_cache``
    bytes of fp8 weight copies live through the whole step; ``fp8``: an fp8 run (``s`` holds its 16-bit
    base recipe), whose Transformer Engine linears save fp8 inputs (megatron); ``record``: every layer walked
    on its own (no bulk blocks) and the timeline's calls kept in ``Timeline.events`` (an allocator replay)."""
    import os

    rp = rank_params(spec, s, stage)
    engine = engine_for(spec, s, rp, notes)
    # (optimizer in backward: every layer's gradients come and go one by one; no block of them to walk)
    plan = build_plan(spec, s, rp, amp_copy=is_amp(s) and engine.amp_weight_copies,
                      bulk=_BULK and not record and not s.optimizer_in_backward and not s.offload_activations, fp8=fp8)
    tl = Timeline(debug=bool(os.environ.get("TRAINMEM_ESTIMATE_DEBUG")), events=[] if record else None)
    if fp8_cache:
        tl.alloc("fp8 weight cache", "parameters", fp8_cache)
    if s.flex_attention:  # (one causal BlockMask per batch, shared by the layers: memory/flex_attention.py)
        from trainmem.memory.flex_attention import flex_block_mask_tensor_bytes
        counts, indices = flex_block_mask_tensor_bytes(s.seq_len)
        tl.alloc("flex block mask counts", "activations", counts, count=4)
        tl.alloc("flex block mask indices", "activations", indices, count=4)
    StepWalk(spec, s, stage, plan, engine, loss_buffers(spec, s.for_target()), tl).run()  # (the decoder's tokens)
    tl.finish()
    return tl, rp, engine.st, plan.act_per_layer


def record_step_events(spec: ModelSpec, s: TrainingSetup, stage: int, fp8_cache: int = 0,
                       fp8: bool = False) -> list[tuple]:
    """The timeline calls of one steady step of ``stage``, every layer walked on its own (``Timeline.events``:
    what :mod:`trainmem.memory.run_reserve` replays through the caching allocator)."""
    events = _simulate(spec, s, stage, [], fp8_cache, fp8=fp8, record=True)[0].events
    assert events is not None
    return events


def estimate(spec: ModelSpec, setup: TrainingSetup, stages: tuple[int, ...] | None = None) -> MemoryEstimate:
    """Peak memory of one steady-state optimizer step on the most loaded rank; ``stages``: the pipeline
    stages to simulate (default: those that can be the most loaded, :func:`candidate_stages`; the planner
    asks for one stage of an uneven split)."""
    validate_for_model(setup, spec)
    if spec.vision is not None or setup.image_tokens or setup.train_vision or setup.train_projector:
        from trainmem.memory.vision import vision_refusal  # (vision-language models: trainmem/model/vlm.py)
        why = vision_refusal(spec, setup)
        if why:
            from trainmem.errors import UnsupportedError
            raise UnsupportedError(why)
    gpu: GPU = get_gpu(setup.gpu)
    if setup.gpu_memory:
        import dataclasses
        gpu = dataclasses.replace(gpu, memory_bytes=setup.gpu_memory)
    if setup.precision in ("bf16", "amp-bf16", "mixed-bf16") and not gpu.bf16:
        raise ConfigError(f"gpu {gpu.name} has no bfloat16 support; use fp16 recipes (amp-fp16, mixed-fp16) or fp32")
    notes: list[str] = []
    asked = setup
    fp8_stage_bytes: tuple[int, ...] = ()
    if setup.precision == "fp8":
        if not gpu.fp8_tflops:
            raise ConfigError(f"gpu {gpu.name} has no fp8 tensor cores; use mixed-bf16 or amp-bf16")
        setup = setup.model_copy(update={"precision": FP8_BASE[setup.engine]})
        fp8_stage_bytes = tuple(fp8_weight_cache_bytes(spec, setup, stg) for stg in range(setup.pp))
        notes.append(_FP8_NOTE["te-fsdp2" if (setup.engine == "fsdp2" and setup.fp8_backend == "te") else setup.engine])
    sim, split, per_gpu = setup, None, []
    if setup.device_map:
        from trainmem.memory.device_map import device_split, split_setup
        split = device_split(spec, setup, gpu.memory_bytes - CUDA_CONTEXT_BYTES)
        sim, stages = split_setup(setup, split), tuple(range(len(split.layers_per_gpu)))
    if stages is None:
        stages = candidate_stages(spec, setup)
    best = None
    for stg in stages:
        local_notes: list[str] = []
        tl, rp, st, act = _simulate(spec, sim, stg, local_notes, fp8_stage_bytes[stg] if fp8_stage_bytes else 0,
                                    fp8=asked.precision == "fp8")
        per_gpu.append((tl.peak, tl.current))
        if best is None or tl.peak > best[0].peak:
            best = (tl, rp, st, act, stg, local_notes)
    assert best is not None
    tl, rp, st, act, stg, local_notes = best
    if tl.debug:
        print("\n".join(f"{n:>14,d} {cat:22s} {k}" for k, (cat, n) in sorted(tl.peak_live.items(), key=lambda kv: -kv[1][1])))
    notes.extend(local_notes)
    cuda_only = cuda_only_allocated_bytes(gpu)
    breakdown = dict(tl.peak_breakdown) or {c: 0 for c in CATEGORIES}
    breakdown["other"] = breakdown.get("other", 0) + cuda_only
    peak = tl.peak + cuda_only
    pools = fsdp2_stream_pools_bytes(setup, rp.embedding + rp.lm_head, tl.category_peak, tl.peak_breakdown)
    pools += post_peak_segment_bytes(setup, tl.post_peak_segment_bytes)
    pools += fsdp1_pre_unshard_pool_bytes(st.pre_unshard_max,  # (FSDP1's pre-unshard stream: engines/fsdp1.py)
                                          st.pre_unshard_at_peak[1] if st.pre_unshard_at_peak[0] == tl.peak else 0)
    pools += fsdp2_offload_copy_in_pool_bytes(setup, rp.embedding + rp.lm_head)
    reserved = reserved_bytes(peak, tl.current + cuda_only, cuda_only, pools)
    total = device_total_bytes(reserved, setup)
    fits, headroom = total <= gpu.memory_bytes, gpu.memory_bytes - total
    # paged optimizer state: resident while the GPU has room (nvidia-smi counts it), else paged out
    total += min(st.paged, max(0, gpu.memory_bytes - total))
    static = tl.current + cuda_only
    notes.extend(_base_assumptions(spec, setup))
    dm: dict = {}
    if split is not None:
        from trainmem.memory.device_map import device_map_note, per_gpu_report
        dm = per_gpu_report(split, per_gpu, cuda_only)
        notes.append(device_map_note(split, stg))
    run = _over_run(spec, sim, stg, setup, gpu, reserved, fp8_stage_bytes, asked.precision == "fp8", notes)
    if setup.pp > 1:
        notes.append(f"pipeline: the most loaded stage is stage {stg} of {setup.pp} (1F1B keeps min(p - i, m) micro-batches in flight)")
    return MemoryEstimate(
        model=spec.name, gpu=gpu.name, peak_allocated_bytes=peak, peak_reserved_bytes=reserved,
        device_total_bytes=total, gpu_memory_bytes=gpu.memory_bytes, static_bytes=static,
        breakdown_at_peak_bytes={c: breakdown.get(c, 0) for c in CATEGORIES},
        category_peak_bytes=dict(tl.category_peak), peak_phase=tl.peak_phase,
        host_memory_bytes=st.host, fits=fits, headroom_bytes=headroom, paged_optimizer_bytes=st.paged,
        timeline=list(tl.points), timeline_categories=list(tl.point_categories),
        timeline_phase_max=list(tl.phase_max), n_params=spec.n_params,
        n_trainable_params=_n_trainable(spec, setup), stage=stg, activation_bytes_per_layer=act,
        cuda_only_bytes=cuda_only, assumptions=notes, setup=asked.model_dump(mode="json"), device_map=dm, **run)


def _over_run(spec: ModelSpec, sim: TrainingSetup, stg: int, setup: TrainingSetup, gpu: GPU, reserved: int,
              fp8_stage_bytes: tuple[int, ...], fp8: bool, notes: list[str]) -> dict:
    """``peak_reserved_over_run_bytes`` and ``run_reserve`` for ``setup.sample_lengths`` ({} without):
    ``reserved`` + (replay over the run − replay at one repeated ``seq_len``), at most the capacity (the GPU less
    the CUDA context and NCCL buffers: what ``cudaMalloc`` can give)."""
    if setup.sample_lengths is None:
        return {}
    from trainmem.memory.run_reserve import run_reserved

    capacity = gpu.memory_bytes - device_total_bytes(0, setup)
    cache = fp8_stage_bytes[stg] if fp8_stage_bytes else 0
    rr = run_reserved(lambda sp, st, g: record_step_events(sp, st, g, cache, fp8), spec, sim, stg, capacity)
    over = min(capacity, reserved + rr.peak_reserved_bytes - rr.uniform_reserved_bytes)
    notes.extend(rr.notes)
    notes.append("peak_reserved_over_run_bytes = peak_reserved_bytes + (the run replay's peak reserved − the same "
                 "replay with every micro-batch at --seq-len), at most the capacity")
    return {"peak_reserved_over_run_bytes": over, "run_reserve": {"replay_peak_reserved_bytes": rr.peak_reserved_bytes,
                  "replay_uniform_reserved_bytes": rr.uniform_reserved_bytes, "capacity_bytes": rr.capacity_bytes,
                  "micro_batches": rr.n_micro_batches, "longest_tokens": rr.longest_tokens,
                  "releases": rr.releases, "oom_micro_batch": rr.oom_micro_batch}}


_FP8_NOTE = {
    "megatron": "fp8 (Transformer Engine, Megatron --fp8-format hybrid): bf16 parameters, fp32 main grads and "
                "master weights as mixed-bf16; each transformer-layer weight keeps an fp8 copy and its fp8 "
                "transpose across the micro-batches of a step (TE weight workspace, is_first_microbatch), 2 B per "
                "weight; the TE linears save their inputs in fp8 (1 B per element), the attention core and the fused "
                "activation in bf16 (trainmem/memory/megatron_activations.py)",
    "fsdp2": "fp8 (torchao Float8Linear, torchtitan [float8]): amp-bf16 memory; weights are cast to fp8 in each "
             "forward and backward (transient) and the linears save their bf16 inputs, so no fp8 copy persists",
    "te-fsdp2": "fp8 (Transformer Engine te.Linear in place of nn.Linear: Accelerate's TE backend, llm-foundry "
                "fc_type te): amp-bf16 memory; each linear saves an fp8 copy of its input (1 B per element) and "
                "an fp8 copy and transpose of its unsharded weight for backward (2 B per weight, every layer "
                "alive from its forward to its backward: counted for the whole step); the LM head stays bf16",
}


def candidate_stages(spec: ModelSpec, setup: TrainingSetup) -> tuple[int, ...]:
    """The pipeline stages that can hold a step's peak. Even split: the first (the most micro-batches in
    flight, the embedding) and the last (the head and the logits). An explicit ``stage_layers`` split also
    the middle stages an earlier middle stage does not dominate: under 1F1B an earlier stage has at least as
    many micro-batches in flight (min(pp - i, m)), so a later one matters only with more layers (alike layers)
    or other layers (a model whose layers differ)."""
    if setup.pp == 1:
        return (0,)
    out = {0, setup.pp - 1}
    if setup.stage_layers:
        from trainmem.memory.states import layers_alike, layers_of_stage
        layers, alike = spec.params.layers, layers_alike(spec)
        most, seen = 0, set()
        for j in range(1, setup.pp - 1):
            kinds = tuple(layers[i] for i in layers_of_stage(spec, setup, j))
            if (alike and len(kinds) > most) or (not alike and kinds not in seen):
                out.add(j)
            most = max(most, len(kinds))
            seen.add(kinds)
    return tuple(sorted(out))


def fp8_weight_cache_bytes(spec: ModelSpec, setup: TrainingSetup, stage: int) -> int:
    """Persistent fp8 weight copies of one pipeline stage's rank: Transformer Engine caches an fp8
    rowwise and columnwise (transposed) copy of every transformer-layer linear weight for the step
    (``transformer_engine/pytorch/module/linear.py`` weight workspace, reused while
    ``is_first_microbatch`` is False; TE 2.x), 1 + 1 B per local matmul parameter. The output layer
    is a Megatron ColumnParallelLinear and stays bf16. torchao's dynamic float8 caches nothing (0).
    With ``fp8_params`` the fp8 weight is the parameter itself (counted by the engine) and only its
    transpose is extra: TE 2.9 ``Float8TensorStorage.update_usage(columnwise_usage=True)`` creates
    ``_transpose`` on the tensor where ``is_non_tn_fp8_gemm_supported()`` is False (Hopper), 1 B per
    weight (Blackwell sm100 needs none: counted anyway, an upper bound there).

    fsdp2 with ``--fp8-backend te`` (``te.Linear`` without ``is_first_microbatch``, as Accelerate and llm-foundry
    call it): the copies are made from the all-gathered weight in every forward and saved for backward — TE
    v0.x–1.x's per-module ``weight1_fp8`` / ``weight1_t_fp8`` workspaces (full weight shape), TE 2.x's
    quantized weight with row- and column-wise usage on Hopper — 2 B per unsharded layer weight, all alive at
    the turn from forward to backward, where the step peaks."""
    if setup.engine != "megatron" and setup.fp8_backend != "te":
        return 0
    return (1 if setup.fp8_params else 2) * sum(rank_params(spec, setup, stage).layer_matmul)


def _n_trainable(spec: ModelSpec, setup: TrainingSetup) -> int:
    if not setup.is_lora:
        from trainmem.memory.vision import vision_frozen_params
        return spec.n_params - vision_frozen_params(spec, setup)
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
        if s.optimizer_impl == "fused":
            out.append(f"optimizer torch.optim {s.optimizer} with fused=True (no step temporaries), weight decay 0.01")
        else:
            out.append(f"optimizer torch.optim {s.optimizer} with foreach=True (the CUDA default), weight decay 0.01")
    if s.offload_activations:
        from trainmem.memory.act_offload import OFFLOAD_NOTE
        out.append(OFFLOAD_NOTE)
    if s.kernels == "unsloth" or s.loss == "unsloth":
        from trainmem.memory.unsloth import KERNELS_NOTE, LOSS_NOTE
        out.extend(n for n, on in ((KERNELS_NOTE, s.kernels == "unsloth"), (LOSS_NOTE, s.loss == "unsloth")) if on)
    out.extend(s.notes)
    if getattr(spec, "alias_note", ""):
        out.append(spec.alias_note)
    if s.gpu_memory:
        out.append(f"gpu memory {s.gpu_memory / 2**30:.2f} GiB (--gpu-memory), not the catalog's {s.gpu}")
    if spec.approximate_shape:
        out.append(f"{spec.name}: " + spec.source)
    if spec.derived is not None:  # (trainmem/model/derive.py)
        out.append(spec.derived.note)
    if s.target_len is not None:  # (an encoder–decoder: trainmem/model/derive_seq2seq.py)
        out.append(f"encoder–decoder: source {s.seq_len} tokens (--seq-len) through the encoder, target {s.target_len} "
                   "tokens (--target-len) through the decoder, its cross-attention, the LM head and the loss")
    if spec.vision is not None:  # (trainmem/model/vlm.py, memory/vision.py)
        from trainmem.memory.vision import vision_notes
        out.extend(vision_notes(spec, s))
    layerdrop = spec.hf_config.get("layerdrop") if spec.model_type == "opt" else None
    if isinstance(layerdrop, (int, float)) and not isinstance(layerdrop, bool) and layerdrop > 0:
        out.append(f"opt layerdrop {layerdrop}: every layer is counted (OPTDecoder skips each layer with that "
                   "probability in training; the peak is that of a step that skips none)")
    if s.compile:
        from trainmem.memory.compile import compile_assumptions
        out.extend(compile_assumptions(s))
    if s.flex_attention:
        from trainmem.memory.flex_attention import FLEX_NOTE
        out.append(FLEX_NOTE)
    if s.attn == "flash":
        out.append("attn flash: flash-attention-2 kernels keep q, k, v, output and logsumexp (no s² buffer), native GQA")
    if s.loss == "fused-ce":
        out.append("loss fused-ce: flash-attn's CrossEntropyLoss saves the 16-bit logits for its backward (they outlive "
                   "a dropped model output until the loss backward) and writes a 16-bit gradient; no fp32 copy")
    return out
