"""Mamba-2 mixers on fake tensors as the CUDA kernels run them in training.

transformers 5.24 (models/mamba2/modeling_mamba2.py ``Mamba2Mixer.forward``; the same in bamba, falcon_h1,
granitemoehybrid, nemotron_h, zamba2) calls ``mamba2_split_conv1d_scan_combined`` when ``self.training`` and no
cache: with the mamba_ssm / causal-conv1d kernels on CUDA that is mamba_ssm's fused
``MambaSplitConv1dScanCombinedFn`` (mamba_ssm 2.3.2.post1, mamba_ssm/ops/triton/ssd_combined.py); on CPU the hub
function returns None and the module falls back to its torch path ("slow path"), which keeps the chunked scan's
``b × chunks × heads × head_dim × d_state`` states and every intermediate for autograd. The CUDA function does not:
its ``forward`` ends with ``ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias,
initial_states, seq_idx, rmsnorm_weight, rstd, outproj_weight, outproj_bias)`` and ``backward`` recomputes the
convolution, the scan's states and the gated norm's output from them (``recompute_output``). Per token that is

* ``zxbcdt``, the in_proj output: ``2·d_inner + 2·n_groups·d_state + n_heads`` elements (its dtype);
* ``out_x``, the scan's output before the gated RMSNorm: ``d_inner`` elements (the same dtype);
* ``rstd``, the gated RMSNorm's reciprocal std: ``n_groups`` fp32 values;

plus, under autocast, the 16-bit copy of ``out_proj``'s weight it casts (``outproj_weight.to(dtype)``: once per
layer, not per token). The in_proj ``nn.Linear`` in front saves its input (``hidden_size`` elements) as any linear.

:func:`cuda_mamba2` replaces the modules' ``mamba2_split_conv1d_scan_combined`` by a stand-in autograd Function that
makes the same output and saves exactly those tensors, so a probe on fake tensors sees what CUDA keeps.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

__all__ = ["MAMBA2_MODULES", "cuda_mamba2", "mamba2_fused_saved_bytes_per_token"]

MAMBA2_MODULES = ("mamba2", "bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "zamba2")
"""transformers 5.24 model folders whose mixers call ``mamba2_split_conv1d_scan_combined``."""


def mamba2_fused_saved_bytes_per_token(d_inner: int, n_groups: int, d_state: int, n_heads: int,
                                       act_bytes: int) -> int:
    """Bytes ``MambaSplitConv1dScanCombinedFn`` saves per token (mamba_ssm 2.3.2.post1 ssd_combined.py, its
    ``ctx.save_for_backward``): ``zxbcdt`` (2·d_inner + 2·n_groups·d_state + n_heads elements) and ``out_x``
    (d_inner) in the activations' dtype, ``rstd`` (n_groups fp32). The in_proj's saved input is the linear's, apart."""
    d_in_proj = 2 * d_inner + 2 * n_groups * d_state + n_heads
    return act_bytes * (d_in_proj + d_inner) + 4 * n_groups


def _autocast_dtype(torch: Any) -> Any:
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return torch.get_autocast_dtype(device)
        except (TypeError, RuntimeError):  # pragma: no cover - older torch signatures
            continue
    return None


def _fused_function(torch: Any) -> Any:
    class _SplitConv1dScanCombined(torch.autograd.Function):
        """Saves what mamba_ssm's MambaSplitConv1dScanCombinedFn saves; its output is out_proj's (b, s, hidden)."""

        @staticmethod
        def forward(ctx, zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight,  # noqa: ANN001, ANN205, N803
                    outproj_bias, dim, ngroups):
            b, s, _ = zxbcdt.shape
            out_x = zxbcdt.new_empty(b, s, dim)
            rstd = torch.empty(ngroups, b * s, dtype=torch.float32, device=zxbcdt.device) \
                if rmsnorm_weight is not None else None
            y = zxbcdt.new_empty(b, s, dim)
            w, bias = outproj_weight, outproj_bias
            dtype = _autocast_dtype(torch)
            if dtype is not None:  # ``if torch.is_autocast_enabled(): out, outproj_weight = out.to(dtype), ...``
                y, w = y.to(dtype), w.to(dtype)
                bias = bias.to(dtype) if bias is not None else None
            with torch.autocast("cpu", enabled=False):
                out = torch.nn.functional.linear(y, w, bias)
            ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, rmsnorm_weight, rstd,
                                  w, bias)
            ctx.shapes = [t.shape if t is not None else None for t in (zxbcdt, conv1d_weight, conv1d_bias, dt_bias,
                                                                        A, D, rmsnorm_weight, outproj_weight,
                                                                        outproj_bias)]
            return out

        @staticmethod
        def backward(ctx, dout):  # noqa: ANN001, ANN205 - gradients of the right shapes (what the kernel returns)
            grads = [dout.new_zeros(sh) if sh is not None else None for sh in ctx.shapes]
            return (*grads, None, None)

    return _SplitConv1dScanCombined


@contextlib.contextmanager
def cuda_mamba2() -> Iterator[None]:
    """Patch each model module's ``mamba2_split_conv1d_scan_combined`` with the stand-in; restored on exit."""
    import torch

    fn = _fused_function(torch)

    def fused(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, initial_states=None,  # noqa: ANN001, ANN202, N803
              dt_limit=(0.0, float("inf")), return_final_states=False, activation="silu", rmsnorm_weight=None,
              rmsnorm_eps=1e-6, outproj_weight=None, outproj_bias=None, headdim=None, ngroups=1,
              norm_before_gate=True, **kwargs):
        if outproj_weight is None or return_final_states or initial_states is not None:
            return None  # (not the training call: the module's torch path)
        dim = D.shape[0] * headdim if D.dim() == 1 else D.numel()
        return fn.apply(zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, rmsnorm_weight, outproj_weight,
                        outproj_bias, dim, ngroups)

    patched: list[tuple[Any, Any]] = []
    for name in MAMBA2_MODULES:
        try:
            mod = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:  # pragma: no cover - a transformers without that family
            continue
        orig = getattr(mod, "mamba2_split_conv1d_scan_combined", None)
        if orig is not None:
            patched.append((mod, orig))
            mod.mamba2_split_conv1d_scan_combined = fused
    try:
        yield
    finally:
        for mod, orig in patched:
            mod.mamba2_split_conv1d_scan_combined = orig
