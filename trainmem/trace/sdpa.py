"""Emulation of CUDA's fused ``scaled_dot_product_attention`` kernels on fake CPU tensors.

CUDA behaviour mirrored (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``, torch 2.13,
an sm90 GPU such as the H100; priority flash → memory-efficient → math):

* **flash** (``_scaled_dot_product_flash_attention``, FlashAttention-2): fp16/bf16, no
  ``attn_mask``, equal q/k/v head dims ≤ 256, dropout allowed, native GQA (``enable_gqa``).
  Saves q, k, v, the output (allocated ``[b, s, a, d]`` and returned transposed, so HF's
  ``transpose(1, 2).contiguous()`` is free) and the fp32 ``logsumexp [b, a, s]`` (+ a 2-element
  philox seed/offset when dropout > 0). Backward allocates dq, dk, dv (``[b, s, a, d]``; with GQA
  dk/dv at full head count, then summed), and fp32 temporaries ``softmax_d [b, a, s₁₂₈]`` and
  ``dq_accum [b, s₁₂₈, a, d]`` (s rounded up to 128).
* **memory-efficient** (``_scaled_dot_product_efficient_attention``, xformers/cutlass): fp32
  (or a mask) without GQA; saves q, k, v, bias, output and fp32 ``logsumexp [b, a, s₃₂]`` (s
  rounded up to 32); backward allocates dq, dk, dv and an fp32 ``delta [b, a, s]``.
* **math** otherwise (e.g. fp32 + ``enable_gqa``): the composite ``_scaled_dot_product_attention_math``
  (keeps the b·a·s² probabilities, and a dropout mask), run as is.

No fused kernel keeps a b·a·s² matrix. On the CPU, SDPA with dropout falls back to the math kernel
(and the CPU flash kernel keeps other shapes), so every SDPA call is routed here instead.
The emulated kernels produce uninitialised values: only shapes, dtypes and lifetimes matter.
GQA: transformers' own choice (``enable_gqa`` or ``repeat_kv``) is kept; it is made the same way
on CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["cuda_backend", "CudaSdpaMode", "cuda_sdpa"]


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def cuda_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None,
                 enable_gqa: bool) -> str:
    """The kernel CUDA's SDPA dispatcher picks for these inputs: ``flash``, ``efficient`` or ``math``."""
    gqa = enable_gqa and k.shape[-3] != q.shape[-3]
    d, dv = q.shape[-1], v.shape[-1]
    if (q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None and d == dv and d <= 256
            and q.dim() == 4):
        return "flash"
    if not gqa and q.dim() == 4 and q.dtype in (torch.float16, torch.bfloat16, torch.float32):
        return "efficient"
    return "math"


class _FusedAttention(torch.autograd.Function):
    """What a fused CUDA attention kernel allocates and saves (values are not computed)."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask, dropout_p, backend):  # noqa: ANN001, ANN205
        b, a, s, _ = q.shape
        dv = v.shape[-1]
        out_bsad = q.new_empty((b, s, a, dv))  # returned as its [b, a, s, dv] transpose
        # Save the base, not the returned view: same storage, and saved-tensor packing then happens
        # in the same order in forward and in a checkpoint's recomputation.
        s_lse = s if backend == "flash" else _round_up(s, 32)
        lse = q.new_empty((b, a, s_lse), dtype=torch.float32)
        rng = q.new_empty((2,), dtype=torch.int64) if dropout_p > 0 else None
        ctx.backend = backend
        saved = [q, k, v, out_bsad, lse] + ([rng] if rng is not None else []) + (
            [attn_mask] if attn_mask is not None else [])
        ctx.save_for_backward(*saved)
        return out_bsad.transpose(1, 2)

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001, ANN205
        q, k, v, _out, _lse, *_ = ctx.saved_tensors
        b, a, s, d = q.shape
        kv, s_k, dv = k.shape[1], k.shape[2], v.shape[-1]
        if ctx.backend == "flash":
            s_r = _round_up(s, 128)
            softmax_d = q.new_empty((b, a, s_r), dtype=torch.float32)
            dq_accum = q.new_empty((b, s_r, a, _round_up(d, 8)), dtype=torch.float32)
            dq = q.new_empty((b, s, a, d)).transpose(1, 2)
            if kv != a:  # GQA: expanded dk/dv, then summed over the group
                dk_exp = k.new_empty((b, s_k, a, d))
                dv_exp = v.new_empty((b, s_k, a, dv))
                dk = dk_exp.view(b, s_k, kv, a // kv, d).sum(3).transpose(1, 2)
                dv_ = dv_exp.view(b, s_k, kv, a // kv, dv).sum(3).transpose(1, 2)
                del dk_exp, dv_exp
            else:
                dk = k.new_empty((b, s_k, kv, d)).transpose(1, 2)
                dv_ = v.new_empty((b, s_k, kv, dv)).transpose(1, 2)
            del softmax_d, dq_accum
        else:
            delta = q.new_empty((b, a, s), dtype=torch.float32)
            dq = q.new_empty((b, s, a, d)).transpose(1, 2)
            dk = k.new_empty((b, s_k, kv, d)).transpose(1, 2)
            dv_ = v.new_empty((b, s_k, kv, dv)).transpose(1, 2)
            del delta
        return dq, dk, dv_, None, None, None


def _sdpa_args(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,  # noqa: ANN001
               enable_gqa=False):  # noqa: ANN001, ANN202
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


class CudaSdpaMode(TorchFunctionMode):
    """Routes ``F.scaled_dot_product_attention`` to the kernel CUDA would run."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") != "scaled_dot_product_attention":
            return func(*args, **kwargs)
        q, k, v, mask, p, is_causal, scale, gqa = _sdpa_args(*args, **kwargs)
        backend = cuda_backend(q, k, v, mask, gqa)
        self.calls[backend] = self.calls.get(backend, 0) + 1
        if backend == "math":
            return torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, mask, p, is_causal, None, scale=scale, enable_gqa=gqa)[0]
        return _FusedAttention.apply(q, k, v, mask, float(p), backend)


@contextlib.contextmanager
def cuda_sdpa() -> Iterator[CudaSdpaMode]:
    mode = CudaSdpaMode()
    with mode:
        yield mode
