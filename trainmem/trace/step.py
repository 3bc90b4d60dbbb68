"""``trace_step``: run a warm-up and a steady optimizer step of the real transformers model on fake
tensors, and record every device allocation and free of the steady step.

The loop is the recipe's own (per micro-batch: forward with labels under autocast → loss /
grad_accum → backward; then ``optimizer.step()`` and ``zero_grad(set_to_none=True)``), with the
batch moved to the device per micro-batch. ``setup.loop``: "trainer" drops the model output (and so
the logits) before ``backward()``, as HF Trainer's ``compute_loss`` does; "script" holds it through
``backward()`` and drops it after, as ``out = model(**batch); out.loss.backward()`` does. CUDA behaviour that the CPU does not have is emulated
(``autocast.py``, ``sdpa.py``, ``moe.py``, foreach optimizers in ``optim.py``).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from trainmem.trace.allocator import simulate_lives
from trainmem.trace.classify import Roles, breakdown_at, category_peaks
from trainmem.trace.losses import run_loss
from trainmem.trace.optim import build_optimizer, host_state_tensors
from trainmem.trace.result import CATEGORIES, TraceResult
from trainmem.trace.support import check_traceable
from trainmem.trace.tracker import MODULE_KEY, StorageTracker

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["trace_step"]

Progress = Callable[[int, int, str], None]
MAX_TIMELINE_POINTS = 2000

_MODEL_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                "amp-bf16": torch.float32, "amp-fp16": torch.float32}
_AMP_DTYPE = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}


class _NoSkipGradScaler(torch.amp.GradScaler):
    """GradScaler whose step never skips: the inf check's result is data (``.item()`` on a fake
    tensor); we trace the common case, finite gradients, so the optimizer always steps."""

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):  # noqa: ANN001, ANN202
        return optimizer.step(*args, **kwargs)


def _labels(spec: "ModelSpec", ids: torch.Tensor) -> torch.Tensor:
    """Labels the model's own loss takes: the input ids (causal / masked LM), one class per sequence,
    or one class per token."""
    if spec.head == "seq_cls":
        return torch.randint(0, spec.num_labels, (ids.shape[0],))
    if spec.head == "tok_cls":
        return torch.randint(0, spec.num_labels, ids.shape)
    return ids.clone()


def _build_model(spec: "ModelSpec", setup: "TrainingSetup") -> nn.Module:
    import transformers

    cfg = copy.deepcopy(spec.hf_config)  # (transformers edits nested dicts, e.g. rope_parameters, in place)
    model_type = cfg.pop("model_type", spec.model_type)
    for k in ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "auto_map"):
        cfg.pop(k, None)
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config.use_cache = False
    if spec.head == "seq_cls" and getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = 0  # pools the last non-pad token; batches > 1 need a pad id
    cls = getattr(transformers, spec.architecture)
    dtype = _MODEL_DTYPE[setup.precision]
    if setup.is_lora:  # LoRA: the frozen base is loaded in 16 bits for autocast recipes too (trace/lora.py)
        from trainmem.trace.lora import lora_base_dtype
        dtype = lora_base_dtype(setup)
    model = cls._from_config(config, attn_implementation=setup.attn, dtype=dtype)
    model.train()
    if setup.recompute == "full":
        # transformers 5.24: activation_checkpointing_enable (gradient_checkpointing_enable is its
        # deprecated alias) checkpoints every decoder layer (GradientCheckpointingLayer).
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:  # pragma: no cover - older transformers
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if setup.recompute_layers is not None:
            # block method: only the first N layers stay checkpointed (GradientCheckpointingLayer reads
            # its instance's ``gradient_checkpointing`` at each call, transformers/modeling_layers.py)
            from transformers.modeling_layers import GradientCheckpointingLayer
            layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
            for layer in layers[setup.recompute_layers:]:
                layer.gradient_checkpointing = False
    if setup.is_lora:
        from trainmem.trace.lora import apply_lora
        model = apply_lora(model, spec, setup)
    return model


@contextlib.contextmanager
def _module_hooks(model: nn.Module, root: str, tracker: StorageTracker) -> Iterator[None]:
    """Keep the tracker's forward module stack and tag each module output's grad_fn with the module."""
    handles = []

    def pre(name: str) -> Callable:
        def hook(mod: nn.Module, args: Any) -> None:
            tracker.module_stack.append(name)
        return hook

    def post(name: str) -> Callable:
        def hook(mod: nn.Module, args: Any, out: Any) -> None:
            for t in torch.utils._pytree.tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    t.grad_fn.metadata.setdefault(MODULE_KEY, name)
            if tracker.module_stack:
                tracker.module_stack.pop()
        return hook

    for name, mod in model.named_modules():
        qual = f"{root}.{name}" if name else root
        handles.append(mod.register_forward_pre_hook(pre(qual)))
        handles.append(mod.register_forward_hook(post(qual)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        tracker.module_stack.clear()


def _wrap_checkpointing(model: nn.Module, tracker: StorageTracker, function_modes: list) -> None:
    """Mark a checkpoint's recomputation (birth phase ``recompute[i]``) and run it under the CUDA
    emulations: the autograd engine runs backward with an empty torch-function-mode stack, so the
    recomputation would otherwise escape them (and recompute other tensors than the forward saved).
    Non-reentrant checkpointing stops the recomputation early by raising, so all state is restored
    in ``finally`` (module hooks' post-hooks do not run then)."""

    def wrap(orig_ckpt: Callable) -> Callable:
        def ckpt(fn: Callable, *args: Any, **kwargs: Any) -> Any:
            def run(*a: Any, **k: Any) -> Any:
                if not tracker.phase.startswith("backward"):
                    return fn(*a, **k)
                depth, prev = len(tracker.module_stack), tracker.birth_phase
                tracker.birth_phase = "recompute" + tracker.phase[len("backward"):]
                try:
                    with contextlib.ExitStack() as modes:
                        for m in function_modes:
                            modes.enter_context(m)
                        return fn(*a, **k)
                finally:
                    del tracker.module_stack[depth:]
                    tracker.birth_phase = prev
            return orig_ckpt(run, *args, **kwargs)
        return ckpt

    for mod in model.modules():
        orig = getattr(mod, "_gradient_checkpointing_func", None)
        if orig is not None:
            mod._gradient_checkpointing_func = wrap(orig)


class _HeadGradInPlace(TorchDispatchMode):
    """Gradients of a weight used more than once — a tied LM head and embedding, the LM head of a chunked
    loss applied to every chunk — meet in autograd's InputBuffer, which adds each new one into the first
    *in place* when that is a plain dense tensor held by the buffer alone (torch/csrc/autograd/
    input_buffer.cpp ``accumulate`` / ``can_accumulate_inplace``, torch 2.13; checked on real CPU tensors,
    Liger's fused loss included). A fake tensor is a tensor subclass there, so on fake tensors every such
    add is out of place: a V·h gradient-sized temporary that no GPU makes. Emulated for the LM head
    weight's shape: in backward, ``add(a, b)`` of two plain fake tensors of that shape and dtype runs as
    ``a.add_(b)`` (the first gradient then becomes the .grad, as on a GPU; under autocast the adds are of
    the 16-bit cast's gradients, before its ToCopyBackward). DTensors (TP) are subclasses on a GPU too
    and keep the out-of-place add."""

    def __init__(self, phase: Callable[[], str]) -> None:
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()
        self.phase = phase
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.ops.aten.add.Tensor and not kwargs and len(args) == 2 and self.shapes:
            from torch._prims_common import is_non_overlapping_and_dense_or_false as dense
            from torch._subclasses.fake_tensor import FakeTensor

            a, b = args
            if (type(a) is FakeTensor and type(b) is FakeTensor and tuple(a.shape) in self.shapes
                    and a.shape == b.shape and a.dtype == b.dtype and not torch.is_grad_enabled()
                    and self.phase().startswith("backward") and dense(a)):
                self.calls += 1
                return a.add_(b)
        return func(*args, **kwargs)


def _debug_dump(lives: list, roles: Any, event: int, phase_events: dict[str, int]) -> None:
    """Developer aid: with TRAINMEM_TRACE_DUMP=path, write every storage alive at the peak (size, birth
    phase, module, tag, category), largest first; TRAINMEM_TRACE_DUMP_PHASE=name dumps that phase's peak."""
    import os

    path = os.environ.get("TRAINMEM_TRACE_DUMP")
    if not path:
        return
    event = phase_events.get(os.environ.get("TRAINMEM_TRACE_DUMP_PHASE", ""), event)
    from trainmem.trace.classify import classify

    alive = [lf for lf in lives if lf.born <= event and (lf.died is None or lf.died > event) and lf.nbytes]
    with open(path, "w") as f:
        for lf in sorted(alive, key=lambda lf: -lf.nbytes):
            f.write(f"{lf.nbytes}\t{lf.phase}\t{lf.module}\t{lf.tag}\t{classify(lf, roles)}\n")


def _downsample(points: list[tuple[str, int]], limit: int = MAX_TIMELINE_POINTS) -> list[tuple[str, int]]:
    """Keep at most ~``limit`` points: the highest of each bucket (so the peak survives), plus the last."""
    if len(points) <= limit:
        return list(points)
    step = -(-len(points) // (limit - 1))
    out = [max(points[i:i + step], key=lambda p: p[1]) for i in range(0, len(points), step)]
    if out[-1] is not points[-1]:
        out.append(points[-1])
    return out


def trace_step(spec: "ModelSpec", setup: "TrainingSetup", *, progress: Progress | None = None,
               _emulate: bool = True) -> TraceResult:
    """Trace one steady optimizer step of ``spec`` trained with ``setup`` (rank 0), on fake tensors;
    with pipeline parallelism, the first and the last stage, and report the more loaded one.

    Raises :class:`trainmem.errors.UnsupportedError` for setups that cannot be traced.
    ``_emulate=False`` (tests only) switches the CUDA emulations off to show what they change.
    """
    check_traceable(spec, setup)
    if setup.pp == 1:
        return _trace_stage(spec, setup, 0, progress=progress, _emulate=_emulate)
    results = [_trace_stage(spec, setup, st, progress=progress, _emulate=_emulate) for st in sorted({0, setup.pp - 1})]
    best = max(results, key=lambda r: r.peak_allocated_bytes)
    st = results.index(best) * (setup.pp - 1)
    best.notes.append(f"pipeline: stage {st} of {setup.pp} is the more loaded of the first and the last "
                      f"(1F1B with min(p - i, m) = {min(setup.pp - st, setup.grad_accum)} micro-batches in flight)")
    return best


class _Modes:
    """The dispatch modes and context managers one trace runs under, entered on ``stack`` in this order (see
    :func:`_enter_modes`)."""

    mesh: Any = None
    sdpa: Any = None
    amp: Any = None
    dropout: Any = None
    cp: Any = None
    head_grads: Any = None


def _enter_modes(stack: contextlib.ExitStack, setup: "TrainingSetup", *, fsdp: bool, tp: bool, cp: bool,
                 emulate: bool) -> tuple[_Modes, StorageTracker]:
    """Enter the fake world, a new tracker and the CUDA emulations, in the order they must nest."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace import cp as cp_plan
    from trainmem.trace import tp as tp_plan
    from trainmem.trace.autocast import cuda_autocast
    from trainmem.trace.dropout import cuda_dropout
    from trainmem.trace.fsdp import fake_world, tag_collectives
    from trainmem.trace.hf_eager import eager_branches
    from trainmem.trace.mamba import cuda_mamba2
    from trainmem.trace.moe import cuda_grouped_mm
    from trainmem.trace.sdpa import cuda_sdpa

    m = _Modes()
    m.mesh = stack.enter_context(fake_world(setup.gpus // setup.pp, setup.tp, setup.cp)) if (fsdp or tp) else None
    stack.enter_context(FakeTensorMode())
    tracker = StorageTracker()
    stack.callback(tracker.close)
    stack.enter_context(tracker)
    if emulate:
        m.dropout = stack.enter_context(cuda_dropout())
        m.sdpa = stack.enter_context(cuda_sdpa())
        m.amp = stack.enter_context(cuda_autocast(lambda t: tracker.tag_tensor(t, "amp_weight_copy")))
    # (innermost: SDPA calls reach torch's ring attention before the CUDA SDPA emulation, trace/cp.py)
    m.cp = stack.enter_context(cp_plan.ring_attention(m.mesh)) if cp else None
    stack.enter_context(cuda_grouped_mm())
    stack.enter_context(cuda_mamba2())  # (Mamba-2 mixers: what mamba_ssm's fused CUDA function saves, trace/mamba.py)
    stack.enter_context(eager_branches())
    m.head_grads = stack.enter_context(_HeadGradInPlace(lambda: tracker.phase))
    if fsdp:
        stack.enter_context(tag_collectives(tracker))
    if tp or cp:  # (cp: DeviceMesh slicing and distribute_tensor in the batch sharding, trace/cp.py)
        stack.enter_context(tp_plan.untracked_propagation())
    return m, tracker


def _build_stage(stack: contextlib.ExitStack, spec: "ModelSpec", setup: "TrainingSetup", stage: int,
                 tracker: StorageTracker, m: _Modes, *, fsdp: bool, tp: bool, cp: bool) -> nn.Module:
    """The model of pipeline stage ``stage`` built on fake tensors, tensor-parallel and sharded as the recipe
    does, its LM head's gradient shapes noted."""
    import transformers

    from trainmem.trace import cp as cp_plan
    from trainmem.trace import pipeline
    from trainmem.trace import tp as tp_plan
    from trainmem.trace.fsdp import shard_model

    tracker.phase = "build"
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # config-validation chatter would corrupt --json users' logs
    stack.callback(transformers.logging.set_verbosity, verbosity)
    if setup.pp > 1:
        model = _build_model(pipeline.stage_spec(spec, setup, stage), setup)
        pipeline.make_stage(model, setup, stage)
    else:
        model = _build_model(spec, setup)
    if tp:
        tp_plan.apply(model, m.mesh, setup)
    if fsdp:
        shard_model(model, cp_plan.fsdp_mesh(m.mesh) if cp else tp_plan.fsdp_mesh(m.mesh, setup), setup)
    out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(getattr(out_emb, "weight", None), torch.Tensor) and out_emb.weight.requires_grad:
        m.head_grads.shapes.add(tuple(out_emb.weight.shape))
    return model


def _micro_batches(name: str, model: nn.Module, spec: "ModelSpec", setup: "TrainingSetup", tracker: StorageTracker,
                   m: _Modes, amp_ctx: Callable[[], Any], scaler: Any, tick: Callable[[str], None]) -> None:
    """The forward, loss and backward of each micro-batch of one step (pp = 1), as the recipe's loop runs them."""
    from trainmem.trace import cp as cp_plan
    from trainmem.trace import tp as tp_plan

    ga = setup.grad_accum
    vocab = int(spec.hf_config.get("vocab_size", spec.vocab_size))
    for i in range(ga):
        tracker.phase = f"forward[{i}]"
        ids = torch.randint(0, vocab, (setup.micro_batch, setup.seq_len))
        labels = _labels(spec, ids) if setup.target_len is None else torch.randint(  # (encoder–decoder: the target)
            0, vocab, (setup.micro_batch, setup.target_len))
        extra: dict[str, Any] = {}
        if setup.cp > 1:  # torchtitan's prepare_context_parallel_input: this rank's head-tail shards
            ids, labels, extra["position_ids"] = cp_plan.shard_batch(m.mesh, ids, labels)
        with amp_ctx(), tp_plan.loss_context(setup):
            if setup.loss == "hf":
                outputs = model(input_ids=ids, labels=labels, use_cache=False, **extra)
                loss = outputs.loss
            else:  # --loss chunked | fused-linear | fused-ce (trainmem/trace/losses.py)
                outputs, loss = run_loss(model, setup, ids, labels, on_loss=lambda: setattr(
                    tracker, "phase", "loss" + tracker.phase[len("forward"):]))
        if setup.loop == "trainer":
            del outputs  # HF Trainer's compute_loss returns the loss only
            outputs = None
        if ga > 1:
            loss = loss / ga
        tick(f"{name}: forward {i + 1}/{ga}")
        tracker.phase = f"backward[{i}]"
        with tp_plan.loss_context(setup):
            (scaler.scale(loss) if scaler is not None else loss).backward()
        del loss, outputs, ids, labels, extra
        tick(f"{name}: backward {i + 1}/{ga}")


def _trace_stage(spec: "ModelSpec", setup: "TrainingSetup", stage: int, *, progress: Progress | None,
                 _emulate: bool) -> TraceResult:
    """Trace pipeline stage ``stage`` (the whole model when pp = 1)."""
    from trainmem.trace import pipeline

    t0 = time.perf_counter()
    ga = setup.grad_accum
    total = 1 + 2 * (2 * ga + 1)
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    fsdp = setup.fsdp_applied  # fsdp2 without fully_shard at tp > 1, dp = 1 (torchtitan; trace/tp.py)
    tp, cp = setup.tp > 1, setup.cp > 1
    with contextlib.ExitStack() as stack:
        m, tracker = _enter_modes(stack, setup, fsdp=fsdp, tp=tp, cp=cp, emulate=_emulate)
        model = _build_stage(stack, spec, setup, stage, tracker, m, fsdp=fsdp, tp=tp, cp=cp)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = build_optimizer(setup.optimizer, params, setup.optimizer_impl)
        scaler = _NoSkipGradScaler("cpu") if (setup.precision == "amp-fp16" and not fsdp) else None
        # (tp without fully_shard: torchtitan's maybe_enable_amp disables mixed precision, fp32 compute)
        amp_dtype = _AMP_DTYPE.get(setup.precision) if not (fsdp or tp) else None
        if setup.accelerate_autocast:
            amp_dtype = _accelerate_native_amp(model)
        stack.enter_context(_module_hooks(model, spec.architecture, tracker))
        if setup.recompute == "full":
            _wrap_checkpointing(model, tracker, [x for x in (m.dropout, m.sdpa, m.amp, m.cp) if x is not None])
        grad_keys: set[int] = set()

        def mark_grad(g: torch.Tensor | None) -> None:
            if g is not None:
                grad_keys.add(tracker.observe_tensor(g))

        hook_handles = [p.register_post_accumulate_grad_hook(lambda p: mark_grad(p.grad))
                        for p in params if not fsdp]
        stack.callback(lambda: [h.remove() for h in hook_handles])
        if hasattr(type(model), "loss_function"):
            orig_loss = model.loss_function

            def loss_function(*args: Any, **kwargs: Any) -> Any:
                tracker.phase = "loss" + tracker.phase[len("forward"):]
                return orig_loss(*args, **kwargs)

            model.loss_function = loss_function
        tick("build")

        def amp_ctx() -> Any:
            return torch.autocast("cpu", dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()

        def one_step(name: str) -> None:
            if setup.pp > 1:
                pipeline.micro_batches(model, spec, setup, stage, tracker, amp_ctx, lambda ids: _labels(spec, ids))
            else:
                _micro_batches(name, model, spec, setup, tracker, m, amp_ctx, scaler, tick)
            tracker.phase = "optimizer.step"
            for p in params:
                mark_grad(p.grad)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            tracker.phase = "zero_grad"
            opt.zero_grad(set_to_none=True)
            tick(f"{name}: optimizer step")

        # The allocator replay starts here (the model as built, see allocator.py); for FSDP2 at the steady
        # step: DTensor's first (uncached) sharding propagation makes global-shape fake tensors in warm-up.
        origin = tracker.event
        one_step("warm-up")
        for t in host_state_tensors(opt):
            tracker.forget_tensor(t)
        host = {tracker.key_of(t.untyped_storage()) for t in host_state_tensors(opt)}
        # Safety net: anything made outside the dispatch mode is registered now.
        for t in list(model.parameters()) + list(model.buffers()):
            tracker.observe_tensor(t)
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor) and tracker.observe_tensor(v) in host:
                    tracker.forget_tensor(v)
        static = tracker.allocated
        grad_keys.clear()
        start = tracker.start_recording("forward[0]")
        one_step("steady")
        end = tracker.stop_recording()
        static_after = tracker.allocated
        emulations, notes = _run_notes(spec, setup, m, emulate=_emulate, amp=amp_dtype is not None,
                                       scaler=scaler is not None, static=static, static_after=static_after)
        return _stage_result(tracker, model, params, opt, Roles(grads=grad_keys), host, fsdp=fsdp,
                             window=(origin, start, end), static=(static, static_after), emulations=emulations,
                             notes=notes, t0=t0)


def _accelerate_native_amp(model: nn.Module) -> torch.dtype:
    """``--accelerate-autocast``: accelerate's own ``convert_outputs_to_fp32`` around the model's forward, as
    ``Accelerator.prepare_model`` sets it with native AMP (accelerate src/accelerate/accelerator.py, v0.25.0 to
    1.x: ``MethodType(convert_outputs_to_fp32(forward.__func__), model)`` over the autocast-wrapped forward); the
    autocast itself is the step's (its casts do not touch ``.float()``). Returns the autocast dtype, bfloat16."""
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32  # (a dependency of peft, trace's extra)
    model.forward = MethodType(convert_outputs_to_fp32(model.forward.__func__), model)
    return torch.bfloat16


def _run_notes(spec: "ModelSpec", setup: "TrainingSetup", m: _Modes, *, emulate: bool, amp: bool, scaler: bool,
               static: int, static_after: int) -> tuple[list[str], list[str]]:
    """(what was emulated, what to know) of one traced stage."""
    fsdp, tp, cp = setup.fsdp_applied, setup.tp > 1, setup.cp > 1
    emulations: list[str] = ["allocator: every block rounded up to 512 B (CUDACachingAllocator kMinBlockSize); "
                             "reserved memory from a replay of the caching allocator (trace/allocator.py)"]
    notes: list[str] = []
    if emulate:
        emulations.append("transformers: eager branches on fake tensors (unpacked batch → is_causal SDPA, no s×s mask)")
        emulations.append("optimizer: foreach=True (the CUDA default); Adam's step counters kept on the host")
        used = ", ".join(f"{k}×{v}" for k, v in sorted(m.sdpa.calls.items())) or "not called"
        emulations.append(f"sdpa: CUDA fused attention kernels (flash / memory-efficient; {used})")
        if m.dropout is not None and m.dropout.calls:
            emulations.append("dropout: CUDA's fused native_dropout (bool mask)")
        if amp:
            emulations.append("autocast: CUDA op lists and weight-cast cache (autocast_mode.h)")
    if m.head_grads.calls:
        emulations.append("autograd: the LM head weight's gradients (tied embedding, chunked loss) summed in "
                          "place in the InputBuffer, as for plain tensors (fake ones add out of place)")
    if spec.is_moe or "expert" in str(spec.hf_config).lower():
        emulations.append("moe: grouped_mm experts (routing-independent shapes; non-bf16 via transformers' fallback op)")
    if "mamba" in str(spec.hf_config).lower() or spec.model_type in ("falcon_h1", "bamba", "granitemoehybrid",
                                                                      "nemotron_h", "zamba2"):
        emulations.append("mamba-2: mamba_ssm's fused split-conv1d-scan function's saved tensors (its backward's "
                          "recomputation temporaries are not emulated)")
    if scaler:
        notes.append("GradScaler never skips a step (finite gradients assumed)")
    if fsdp:
        notes.append("FSDP2 on a fake process group: collectives allocate their buffers but move no data; "
                     "unsharded gradients before the reduce-scatter count as temporaries")
    if tp:
        notes.append(f"TP {setup.tp} (torchtitan's Llama plan, trace/tp.py): SequenceParallel "
                     f"{'on' if setup.sp else 'off'}, loss parallel {'on' if setup.loss_parallel else 'off'}"
                     f"{', FSDP2 over dp_shard' if fsdp else ', no fully_shard (fp32 compute for amp recipes)'}; "
                     "DTensor's global-shape sharding propagation is not counted")
    if cp:
        emulations.append(f"context parallel: torch's ring attention (load-balanced, allgather k/v, all-to-all "
                          f"dk/dv) over CUDA's flash kernel, {m.cp.calls} calls (trace/cp.py)")
        notes.append(f"CP {setup.cp} (torchtitan: FSDP2 over dp_shard × cp, head-tail sharded ids, labels and "
                     "positions); DTensor's wrapping of q/k/v is not run (aliases only)")
    if static_after != static:
        notes.append(f"static memory changed over the step: {static} -> {static_after} bytes")
    notes.append("host-side scalar tensors made during the step (< 1 KiB each) are counted as device memory")
    notes.append("reserved: the allocation stream replayed through the caching allocator's rules (a pool per "
                 "stream, no memory pressure), from the " + ("steady step" if fsdp else "warm-up step") + " on")
    return emulations, notes


def _stage_result(tracker: StorageTracker, model: nn.Module, params: list, opt: Any, roles: Roles, host: set,
                  *, fsdp: bool, window: tuple[int, int, int], static: tuple[int, int], emulations: list[str],
                  notes: list[str], t0: float) -> TraceResult:
    """The traced stage's result: the breakdown at the peak by role, each category's peak over the steady
    step, and the allocator replay from ``origin`` (``window`` = origin, start and end events)."""
    import transformers

    from trainmem.trace.fsdp import fsdp_param_tensors

    origin, start, end = window
    param_tensors = list(model.parameters()) + (fsdp_param_tensors(model) if fsdp else [])
    roles.params = {tracker.observe_tensor(t) for t in param_tensors}
    roles.buffers = {tracker.observe_tensor(t) for t in model.buffers()}
    roles.states = {tracker.observe_tensor(v) for st in opt.state.values() for v in st.values()
                    if isinstance(v, torch.Tensor)} - host
    lives = tracker.lives
    breakdown, amp_bytes = breakdown_at(lives, roles, tracker.peak_event)
    cat_peaks = category_peaks(lives, roles, start, end)
    alloc_stats, alloc_exp = simulate_lives(lives, start, start if fsdp else origin)
    one_stream = simulate_lives(lives, start, start, streams=False)[0] if fsdp else alloc_stats
    _debug_dump(lives, roles, tracker.peak_event, tracker.phase_peak_event)
    if sum(breakdown.values()) != tracker.peak:
        raise RuntimeError(f"trace accounting error: breakdown {sum(breakdown.values())} != peak {tracker.peak}")
    return TraceResult(
        peak_allocated_bytes=tracker.peak,
        breakdown_at_peak_bytes=breakdown,
        category_peak_bytes={c: cat_peaks[c] for c in CATEGORIES},
        peak_phase=tracker.peak_phase,
        peak_module=tracker.peak_module or ("optimizer" if tracker.peak_phase.startswith("optimizer") else ""),
        timeline=_downsample(tracker.timeline),
        static_bytes=static[0],
        static_bytes_after=static[1],
        amp_weight_copies_at_peak_bytes=amp_bytes,
        phase_peak_bytes=dict(tracker.phase_peak),
        peak_reserved_bytes=alloc_stats.peak_reserved_bytes,
        peak_reserved_expandable_bytes=alloc_exp.peak_reserved_bytes,
        peak_reserved_one_stream_bytes=one_stream.peak_reserved_bytes,
        allocator_peak_allocated_bytes=alloc_stats.peak_allocated_bytes,
        reserved_segments=alloc_stats.n_segments,
        fragmentation_at_peak=round(alloc_stats.fragmentation_at_peak, 4),
        n_params=sum(p.numel() for p in model.parameters()),
        n_trainable_params=sum(p.numel() for p in params),
        emulations=emulations,
        notes=notes,
        wall_seconds=round(time.perf_counter() - t0, 3),
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
    )
