"""Context parallelism (torch's ring attention over SDPA) as torchtitan runs it, on rank 0 of a fake world.

torchtitan 0.2.2 (``train.py`` → ``distributed/context_parallel.py``): the model's SDPA modules are wrapped
with ``_ContextParallel`` (module-wrapper mode, ``apply_cp_to_attention_module``), and each micro-batch's
``inputs``, ``labels`` and ``positions = arange(s).expand(b, s)`` are sharded on the sequence with the
head-tail load balancer (``prepare_context_parallel_input`` → ``cp_shard`` → torch's
``_context_parallel_shard``: rank r keeps chunks r and 2·cp − 1 − r of 2·cp). FSDP2 shards over the
flattened ``dp_shard × cp`` mesh (``dp_shard_cp``); CP's ring runs over the ``cp`` axis.

Torch 2.13 (``torch/distributed/tensor/experimental/_context_parallel/_attention.py``): DTensor routes
``_scaled_dot_product_flash_attention`` (and its backward) on Shard(2) q/k/v to
``_templated_ring_attention[_backward]`` on the local tensors; autograd saves q, k, v, the merged output
and logsumexp, as for a plain flash call. Here the same two torch functions run as they are, on the
local fake tensors, with the fake process group's functional collectives (``all_gather_single``: the
default ``allgather`` rotation, one all-gather of the cp k/v chunks; ``permute_tensor`` for the dk/dv
ring, always all-to-all), whose fake implementations allocate exactly the real outputs. What is emulated:

* DTensor's wrap/unwrap (``from_local``/``to_local``, aliases, nothing allocated) is skipped: SDPA calls
  go straight to the ring (:class:`RingSdpaMode`), so no global-shape sharding propagation runs;
* the per-chunk attention op is CUDA's flash kernel: the forward allocates its output ``[b, s_q, a, d]``
  (returned transposed) and the fp32 ``logsumexp [b, a, s_q]``; the backward makes ``grad_out`` and
  ``out`` contiguous in ``[b, s, a, d]`` first (aten/src/ATen/native/transformers/cuda/attention_backward.cu
  ``_flash_attention_backward``: ``grad_out.contiguous()``, ``out.contiguous()``), then the kernel's
  dq/dk/dv and temporaries as in ``trace/sdpa.py``;
* on the fake CPU device ``log_sigmoid_forward`` (the merge's ``F.logsigmoid``) also returns a full-size
  buffer (CUDA's is empty): a logsumexp-half-sized transient, freed before the merge's peak.

The DTensor trap (trace/tp.py): slicing a 2-D ``DeviceMesh`` and ``distribute_tensor`` (the batch sharding)
read real rank tensors, so a CP trace runs under ``tp.untracked_propagation`` too, and the ring's process
group is taken with ``DeviceMesh.get_group("cp")`` (no slicing).

Traced: fsdp2, causal decoder-only llama-style families, 16-bit attention (flash), cp without tp/pp.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["CP_FAMILIES", "unsupported", "fsdp_mesh", "shard_batch", "RingSdpaMode", "ring_attention"]

#: model_types traced with CP (HF modules call SDPA with is_causal and no mask; tests/trace/test_cp_trace.py).
CP_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def unsupported(spec: "ModelSpec", setup: "TrainingSetup") -> str | None:
    """Why this CP setup cannot be traced (None when it can)."""
    s = setup
    if spec.model_type not in CP_FAMILIES or spec.is_moe or spec.sliding_window or spec.attention_dropout:
        return f"cp({s.cp}) with {spec.model_type} (traced for causal {', '.join(CP_FAMILIES)} without " \
               "sliding window, MoE or attention dropout)"
    if s.tp > 1 or s.pp > 1 or s.is_lora or s.loss != "hf" or spec.head != "lm":
        return f"cp({s.cp}) with tp, pp, LoRA, a chunked/fused loss or a task head"
    if s.attn != "sdpa" or s.precision == "fp32":
        return f"cp({s.cp}) with --attn {s.attn} / {s.precision} (the ring is traced over CUDA's flash SDPA, " \
               "16-bit attention)"
    return None


def fsdp_mesh(mesh: Any) -> Any:
    """The mesh FSDP2 shards over with CP: the flattened ``dp_shard × cp`` axis, ``dp_shard_cp`` (made by
    ``fake_world``; ``DeviceMesh._flatten`` returns the cached one)."""
    return mesh._flatten("dp_shard_cp")


def shard_batch(mesh: Any, ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torchtitan's ``prepare_context_parallel_input``: positions ``arange(s)`` (int32) expanded to the
    batch, then ids, labels and positions sharded on dim 1 by torch's ``_context_parallel_shard`` with
    the ``_HeadTailLoadBalancer`` (a gather into the balanced order, then this rank's contiguous chunk)."""
    from torch.distributed.tensor.experimental._context_parallel._attention import _context_parallel_shard
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    cp = mesh["cp"]
    positions = torch.arange(0, ids.shape[1], dtype=torch.int32).expand(ids.shape)
    balancer = _HeadTailLoadBalancer(ids.shape[1], cp.size(0), cp.device_type)
    return tuple(_context_parallel_shard(mesh=cp, buffers=(ids, labels, positions), seq_dims=(1, 1, 1),
                                         load_balancer=balancer))


def _flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool, **_: Any) -> tuple:
    """``aten._scaled_dot_product_flash_attention`` on CUDA (attention.cu, torch 2.13): the output is
    allocated ``[b, s_q, a, dv]`` and returned as its transpose, with the fp32 ``logsumexp [b, a, s_q]``;
    the philox seed/offset are host tensors without dropout (not device memory: None here)."""
    b, a, s_q, _ = q.shape
    out = q.new_empty((b, s_q, a, v.shape[-1])).transpose(1, 2)
    lse = q.new_empty((b, a, s_q), dtype=torch.float32)
    return out, lse, None, None, s_q, k.shape[2], None, None, None


def _flash_backward(*, grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    out: torch.Tensor, logsumexp: torch.Tensor, **_: Any) -> tuple:
    """``aten._scaled_dot_product_flash_attention_backward`` on CUDA: ``_flash_attention_backward`` makes
    the transposed ``grad_out`` and ``out`` contiguous (a copy unless they already are ``[b, s, a, d]``),
    then the kernel allocates what ``trace/sdpa.py`` emulates (dq, dk, dv, fp32 softmax_d and dq_accum)."""
    from trainmem.trace.sdpa import _FusedAttention

    g = grad_out.transpose(1, 2).contiguous()  # noqa: F841 (alive during the kernel, as in C++)
    o = out.transpose(1, 2).contiguous()  # noqa: F841
    ctx = types.SimpleNamespace(saved_tensors=(query, key, value, out, logsumexp), backend="flash")
    dq, dk, dv, *_rest = _FusedAttention.backward(ctx, grad_out)
    return dq, dk, dv


class _RingFlashAttention(torch.autograd.Function):
    """The autograd node of ``_scaled_dot_product_flash_attention`` on CP DTensors: saves q, k, v, the
    merged output and logsumexp; forward and backward are torch's own ring functions."""

    @staticmethod
    def forward(ctx, q, k, v, scale, group):  # noqa: ANN001, ANN205
        from torch.distributed.tensor.experimental._context_parallel._attention import _templated_ring_attention

        out, lse, *_ = _templated_ring_attention(group, 2, _flash_forward, q, k, v, is_causal=True,
                                                 dropout_p=0.0, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.group = scale, group
        return out

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        from torch.distributed.tensor.experimental._context_parallel._attention import (
            _templated_ring_attention_backward)

        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv, *_ = _templated_ring_attention_backward(
            ctx.group, 2, _flash_backward, grad_out, "grad_out", q, k, v, out, lse, is_causal=True,
            cum_seq_q=None, cum_seq_k=None, max_q=q.shape[2], max_k=k.shape[2], dropout_p=0.0,
            philox_seed=None, philox_offset=None, scale=ctx.scale)
        return dq, dk, dv, None, None


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,  # noqa: ANN001
               enable_gqa=False):  # noqa: ANN001, ANN202
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


class RingSdpaMode(TorchFunctionMode):
    """Routes ``F.scaled_dot_product_attention`` to torch's ring attention over the ``cp`` group."""

    def __init__(self, group: Any) -> None:
        super().__init__()
        self.group = group
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") != "scaled_dot_product_attention":
            return func(*args, **kwargs)
        q, k, v, mask, p, is_causal, scale, _gqa = _sdpa_args(*args, **kwargs)
        if mask is not None or not is_causal or p:
            raise RuntimeError("context parallel SDPA needs is_causal=True, no mask and no dropout (load balancing)")
        self.calls += 1
        return _RingFlashAttention.apply(q, k, v, scale, self.group)


@contextlib.contextmanager
def ring_attention(mesh: Any) -> Iterator[RingSdpaMode]:
    """Ring attention for every SDPA call while open (enter it inside ``cuda_sdpa``), with torchtitan's
    options: load balancing on, ``allgather`` k/v rotation (``context_parallel_rotate_method`` default)."""
    from torch.distributed.tensor.experimental._context_parallel import _attention as att

    opts = att._cp_options
    saved = (opts.enable_load_balance, opts.rotate_method, opts.convert_to_f32, att._dispatch_mode)
    opts.enable_load_balance, opts.rotate_method, opts.convert_to_f32 = True, att._RotateMethod.ALL_GATHER, True
    mode = RingSdpaMode(mesh.get_group("cp"))  # (no slicing: a sliced DeviceMesh reads rank tensors)
    try:
        with mode:
            yield mode
    finally:
        opts.enable_load_balance, opts.rotate_method, opts.convert_to_f32, att._dispatch_mode = saved
