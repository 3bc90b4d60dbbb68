"""What one eager decoder block keeps under torchtitan's op-level selective checkpointing, on fake tensors.

The step tracer does not run ``--recompute selective`` (trace/support.py); this traces the block alone, as
trace/compiled.py does for the compiled block: a two-layer copy of the model on fake tensors (no memory, any size),
its first decoder layer wrapped in ``torch.utils.checkpoint.checkpoint(use_reentrant=False)`` with torchtitan's
policy as its ``context_fn`` (:func:`trainmem.trace.compiled.torchtitan_op_sac_context`: torchtitan 0.2.2
``distributed/activation_checkpoint.py`` ``_apply_op_sac``), one forward. A dispatch mode under the policy's
caching mode sees every op the block runs (after ``F.linear``'s decomposition into ``aten.mm`` / ``aten.addmm``)
and records each new storage; what is still alive once the forward is done and autocast's weight cache is gone —
the policy's MUST_SAVE cache — plus the block's input (held by the checkpoint to recompute from) is what the
block keeps. The layer's outputs (the next layer's input) and storages the block did not make (parameters and
their views, rotary cos/sin) are left out. CPU autocast stands in for CUDA's; the CPU's SDPA flash kernel for
CUDA's (both in the save list).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["OpSacLayerTrace", "trace_op_sac_layer"]


@dataclass(frozen=True)
class OpSacLayerTrace:
    model: str
    tokens: int
    saved_bytes: int
    """The block's input plus the storages the policy's cache keeps (bytes of one micro-batch)."""
    linear_ops: list[str] = field(default_factory=list)
    """The matmul ops the block ran, in order (``aten.mm`` / ``aten.addmm``)."""
    tensors: list[tuple[str, tuple[int, ...], str, int]] = field(default_factory=list)
    """(op, shape, dtype, bytes) of each kept storage, the input first."""


def trace_op_sac_layer(spec: "ModelSpec", setup: "TrainingSetup") -> OpSacLayerTrace:
    """Run layer 0 of a two-layer copy of ``spec`` at ``setup``'s micro-batch under torchtitan's op-SAC policy."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import checkpoint

    from trainmem.memory.layers.base import is_amp
    from trainmem.trace.compiled import _two_layer_model, torchtitan_op_sac_context
    from trainmem.trace.hf_eager import eager_branches
    from trainmem.trace.moe import cuda_grouped_mm  # (MoE experts: CUDA's choice of grouped_mm or its fallback)

    made: dict[StorageWeakRef, tuple[str, tuple[int, ...], str, int]] = {}
    before: set[StorageWeakRef] = set()
    linear_ops: list[str] = []

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            for t in torch.utils._pytree.tree_leaves((args, kwargs)):
                if isinstance(t, torch.Tensor) and StorageWeakRef(t.untyped_storage()) not in made:
                    before.add(StorageWeakRef(t.untyped_storage()))
            out = func(*args, **(kwargs or {}))
            if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                linear_ops.append(str(func.overloadpacket.__name__))
            for t in torch.utils._pytree.tree_leaves(out):
                key = StorageWeakRef(t.untyped_storage()) if isinstance(t, torch.Tensor) else None
                if key is not None and key not in before and key not in made:
                    made[key] = (str(func).removeprefix("aten."), tuple(t.shape), str(t.dtype).removeprefix("torch."),
                                 t.untyped_storage().nbytes())
            return out

    seen: dict[str, object] = {}
    with FakeTensorMode(), eager_branches(), cuda_grouped_mm():
        model, layers, config = _two_layer_model(spec, setup)
        layer = layers[0]

        def block(*args, _f=layer.forward, **kwargs):  # noqa: ANN002, ANN003, ANN202
            seen["input"] = args[0] if args else kwargs["hidden_states"]
            with _Record():
                out = checkpoint(_f, *args, use_reentrant=False, context_fn=torchtitan_op_sac_context, **kwargs)
            seen["output"] = out
            return out
        layer.forward = block
        ids = torch.randint(0, int(config.vocab_size), (setup.micro_batch, setup.seq_len))
        amp_dtype = torch.float16 if setup.precision == "amp-fp16" else torch.bfloat16
        with torch.autocast("cpu", dtype=amp_dtype, enabled=is_amp(setup)):
            result = model(input_ids=ids, use_cache=False)
        outputs = {StorageWeakRef(t.untyped_storage()) for t in torch.utils._pytree.tree_leaves(seen["output"])
                   if isinstance(t, torch.Tensor)}
        kept = [v for k, v in made.items() if not k.expired() and k not in outputs]
        x = seen["input"]
        first = ("input", tuple(x.shape), str(x.dtype).removeprefix("torch."), x.untyped_storage().nbytes())
        del result
    tensors = [first] + sorted(kept, key=lambda v: -v[3])
    return OpSacLayerTrace(model=spec.name, tokens=setup.micro_batch * setup.seq_len,
                           saved_bytes=sum(v[3] for v in tensors), linear_ops=linear_ops, tensors=tensors)
