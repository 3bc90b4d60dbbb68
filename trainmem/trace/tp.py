"""Tensor parallelism (``torch.distributed.tensor.parallel``) as torchtitan applies it, on rank 0 of a
fake world.

The plan is torchtitan's for Llama (v0.2.2, torchtitan/models/llama3/infra/parallelize.py ``apply_tp``)
mapped onto transformers' module names:

================================  =========================================================================
module                            style (SequenceParallel on: the default; ``setup.sp`` False: Megatron-style)
================================  =========================================================================
model.embed_tokens                RowwiseParallel(input Replicate, output Shard(1)) (no SP: Replicate)
layers.*.input_layernorm          SequenceParallel (no SP: not parallelised, full sequence)
layers.*.self_attn                PrepareModuleInput(hidden_states Shard(1) → Replicate) (SP only)
self_attn.q_proj/k_proj/v_proj    ColwiseParallel (local output: heads/tp heads per rank)
self_attn.o_proj                  RowwiseParallel(output Shard(1)) (no SP: Replicate)
layers.*.post_attention_layernorm SequenceParallel (no SP: not parallelised)
layers.*.mlp                      PrepareModuleInput(Shard(1) → Replicate) (SP only)
mlp.gate_proj/up_proj             ColwiseParallel
mlp.down_proj                     RowwiseParallel(output Shard(1)) (no SP: Replicate)
model.norm                        SequenceParallel (local output; HF slices the hidden states before the head)
lm_head                           ColwiseParallel(input Shard(1), output Shard(-1) as a DTensor with loss
                                  parallel; no loss parallel: Replicate, a local full-vocabulary tensor)
================================  =========================================================================

HF attention reshapes with ``view(*input_shape, -1, head_dim)``, so the colwise-sharded projections'
local outputs give heads/tp local heads without patching the config (``num_key_value_groups`` is a ratio,
unchanged). FSDP2 over the ``dp_shard`` mesh axis follows (``trace/fsdp.py``, 2-D FSDP2 × TP) when
``setup.fsdp_applied``; with tp alone torchtitan applies no ``fully_shard``.

Known limitation: DTensor's sharding propagation under an ambient ``FakeTensorMode`` is never cached
(``_are_we_tracing()`` is true) and runs every op on *global*-shape fake tensors
(``_sharding_prop._propagate_tensor_meta_non_cached``); a real run allocates nothing there, so
:func:`untracked_propagation` hides those tensors from the tracker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trainmem.errors import UnsupportedError

if TYPE_CHECKING:
    from torch import nn

    from trainmem.setup import TrainingSetup

__all__ = ["TP_FAMILIES", "apply", "loss_context", "untracked_propagation", "fsdp_mesh"]

#: model_types whose modules carry the Llama names above (verified by tracing, tests/trace/test_tp_trace.py).
TP_FAMILIES = ("llama", "mistral", "qwen2")


def fsdp_mesh(mesh: Any, setup: "TrainingSetup") -> Any:
    """The mesh FSDP2 shards over: the ``dp_shard`` axis of the 2-D (dp_shard, tp) mesh when tp > 1."""
    return mesh["dp_shard"] if setup.tp > 1 else mesh


def _plan(model: nn.Module, sp: bool, loss_parallel: bool) -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    seq = Shard(1) if sp else Replicate()  # (b, s/tp, h) residual stream with SP; (b, s, h) without
    plan: dict[str, Any] = {
        # with SP the residual stream stays a (b, s, h) DTensor, Shard(1): HF derives position_ids (rotary
        # cos/sin) from the embedding output's sequence length, which must be the global one
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq, use_local_output=not sp),
        "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                   use_local_output=not loss_parallel),
    }
    if sp:
        plan["model.norm"] = SequenceParallel(use_local_output=True)
    for i, _ in enumerate(model.model.layers):
        p = f"model.layers.{i}"
        plan.update({
            f"{p}.self_attn.q_proj": ColwiseParallel(),
            f"{p}.self_attn.k_proj": ColwiseParallel(),
            f"{p}.self_attn.v_proj": ColwiseParallel(),
            f"{p}.self_attn.o_proj": RowwiseParallel(output_layouts=seq, use_local_output=not sp),
            f"{p}.mlp.gate_proj": ColwiseParallel(),
            f"{p}.mlp.up_proj": ColwiseParallel(),
            f"{p}.mlp.down_proj": RowwiseParallel(output_layouts=seq, use_local_output=not sp),
        })
        if sp:
            plan.update({
                f"{p}.input_layernorm": SequenceParallel(),
                # the decoder layer passes hidden_states by keyword
                f"{p}.self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                     desired_input_kwarg_layouts={"hidden_states": Replicate()},
                                                     use_local_output=True),
                f"{p}.post_attention_layernorm": SequenceParallel(),
                f"{p}.mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                               use_local_output=True),
            })
    return plan


def apply(model: nn.Module, mesh: Any, setup: "TrainingSetup") -> None:
    """``parallelize_module`` with torchtitan's plan on the ``tp`` axis of ``mesh``; re-ties tied embeddings."""
    from torch.distributed.tensor.parallel import parallelize_module

    cfg = model.config
    if cfg.model_type not in TP_FAMILIES:
        raise UnsupportedError(f"cannot trace tp with {cfg.model_type} (TP plan verified for "
                               f"{', '.join(TP_FAMILIES)}); use `trainmem estimate`")
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    parallelize_module(model, mesh["tp"], _plan(model, bool(setup.sp), bool(setup.loss_parallel)))
    _replicate_rest(model, mesh["tp"])
    if tied:
        # embedding (RowwiseParallel) and head (ColwiseParallel) both shard the (V, h) weight on dim 0
        model.lm_head.weight = model.model.embed_tokens.weight


def _replicate_rest(model: "nn.Module", tp_mesh: Any) -> None:
    """Without SP the norms are not in the plan: their weights become Replicate DTensors (a foreach
    optimizer, like ``clip_grad_norm_``, cannot mix DTensor and plain parameters), their inputs are
    wrapped as Replicate (a view) and their outputs unwrapped again."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    def to_replicate(mod: Any, inputs: tuple, mesh: Any) -> tuple:
        return tuple(DTensor.from_local(t, mesh, [Replicate()], run_check=False)
                     if isinstance(t, torch.Tensor) and not isinstance(t, DTensor) else t for t in inputs)

    def to_local(mod: Any, out: Any, mesh: Any) -> Any:
        return out.to_local() if isinstance(out, DTensor) else out

    import torch
    for mod in list(model.modules()):
        own = list(mod.parameters(recurse=False))
        if own and not any(isinstance(p, DTensor) for p in own):
            distribute_module(mod, tp_mesh, input_fn=to_replicate, output_fn=to_local)


def loss_context(setup: "TrainingSetup") -> contextlib.AbstractContextManager:
    """``loss_parallel()`` (vocab-parallel cross-entropy on the Shard(-1) logits) around the loss and its
    backward, as torchtitan's train context does; a null context otherwise."""
    if setup.tp > 1 and setup.loss_parallel:
        from torch.distributed.tensor.parallel import loss_parallel
        return loss_parallel()
    return contextlib.nullcontext()


@contextlib.contextmanager
def untracked_propagation() -> Iterator[None]:
    """DTensor bookkeeping outside the traced step, for as long as the context is open:

    * output-metadata propagation runs with every mode off (tracker, fake mode, the CUDA emulations)
      and a private ``FakeTensorMode``: the global-shape fake tensors it makes are not memory of the rank;
    * ``DeviceMesh.__init__`` and ``DeviceMesh.mesh`` (the rank layout, computed from real int tensors;
      FSDP2 × TP builds a concatenated dp × tp mesh inside the step) run with every mode off too.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.utils._python_dispatch import _disable_current_modes

    orig = ShardingPropagator._propagate_tensor_meta_non_cached
    orig_mesh, orig_init = DeviceMesh.mesh, DeviceMesh.__init__
    private = FakeTensorMode(allow_non_fake_inputs=True)

    def quiet(self: Any, op_schema: Any) -> Any:
        with _disable_current_modes(), torch._C.DisableTorchFunction(), private:
            return orig(self, op_schema)

    def mesh(self: Any) -> Any:
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            return orig_mesh.fget(self)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            orig_init(self, *args, **kwargs)

    ShardingPropagator._propagate_tensor_meta_non_cached = quiet  # type: ignore[method-assign]
    DeviceMesh.mesh = property(mesh)  # type: ignore[method-assign, assignment]
    DeviceMesh.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = orig  # type: ignore[method-assign]
        DeviceMesh.mesh = orig_mesh  # type: ignore[method-assign]
        DeviceMesh.__init__ = orig_init  # type: ignore[method-assign]
