"""Emulation of CUDA autocast (``torch.autocast("cuda")``) on fake CPU tensors.

CUDA behaviour mirrored: ``aten/src/ATen/autocast_mode.cpp`` registers, for the ``Autocast``
(CUDA) dispatch key, the op lists of ``aten/src/ATen/autocast_mode.h`` (torch 2.13):

* ``lower_precision_fp``: cast floating inputs to the autocast dtype (linear, matmul, bmm, addmm,
  baddbmm, conv*, scaled_dot_product_attention, ...);
* ``fp32``: cast to float32 (exp, log, pow, rsqrt, softplus, layer_norm, rms_norm, group_norm,
  losses, cdist, logsumexp, ...);
* ``fp32_set_opt_dtype``: pass ``dtype=float32`` if unset (softmax, log_softmax, sum, prod,
  cumsum, cumprod, linalg norms);
* ``promote``: cast to the widest floating input (addcmul, addcdiv, atan2, dot, index_put, ...);
* the **weight-cast cache** (``cached_cast``): a lower-precision cast of a float32 leaf that
  requires grad (a parameter) is cached and reused until the outermost autocast region exits
  (``torch.clear_autocast_cache()``). The cached 16-bit copies therefore live until the end of
  the forward pass even when no op saved them, and those saved by matmuls live until backward.

Where the lists come from: torch's own CUDA autocast kernels, read at run time
(:func:`trainmem.trace.autocast_policy.cuda_autocast_policies`: every build registers them; each is run on fake
CUDA tensors and its casts read), for every op torch registers one for. The hand copies below (``LOWER``, ``FP32``,
``FP32_SET_OPT_DTYPE``, ``PROMOTE``) serve the Python-level names that are no aten autocast op (``cross_entropy``,
``square``, ``vector_norm``, ...) and the ops whose kernel cannot be run with generic arguments (einsum, the RNN
cells, prelu, cosine_embedding_loss); where both exist, torch's reading wins (torch 2.13: ``norm`` is
``fp32_append_dtype`` — fp32 compute without an fp32 copy of the input — not the hand list's ``fp32``; torch adds
the antialiased/exact upsamplings and the cudnn convolutions).

CPU autocast has *different* lists (softmax, layer_norm, exp, pow... are not fp32 ops there), so
we keep CPU autocast's *state* (``torch.autocast("cpu", ...)`` stands in for ``"cuda"``: it keeps
``torch.is_autocast_enabled("cpu")``, the nesting count and activation checkpointing's
recomputation working) but switch off its *kernels* (``AutocastCPU`` dispatch key excluded) and
apply the CUDA lists in a ``TorchFunctionMode``, above autograd, so casts are recorded by
autograd exactly as CUDA's are.

Limitation: a ``TorchFunctionMode`` sees Python-level calls. Ops that a C++ composite dispatches
internally are not re-examined (CUDA autocast would examine them); the Python functional wrappers
that matter are mapped by name (``F.cross_entropy`` → fp32, like its ``log_softmax``/``nll_loss``;
``torch.square`` → fp32: ``aten::square`` is CompositeImplicitAutograd, ``at::pow(self, 2)``
(aten/src/ATen/native/UnaryOps.cpp), and ``pow.Tensor_Scalar`` has an ``AutocastCUDA`` kernel of the fp32
list while ``square`` has none, so on CUDA ``square`` of a 16-bit tensor computes and returns fp32 —
transformers' ``relu2``, ``ReLUSquaredActivation``).

``torch.is_autocast_enabled()`` without a device type asks about CUDA (torch 2.x); code that calls it that
way (transformers' ``NemotronLayerNorm1P`` via ``_cast_if_autocast_enabled``) answers for the CPU region that
stands in for CUDA's here: the no-argument form is redirected to ``torch.is_autocast_enabled("cpu")`` while
the emulation is active.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["CudaAutocastMode", "cuda_autocast", "cuda_policy", "LOWER", "FP32", "FP32_SET_OPT_DTYPE", "PROMOTE"]

#: autocast_mode.h AT_FORALL_LOWER_PRECISION_FP (+ cudnn convolutions), by Python-level name.
LOWER = frozenset({
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "vecdot", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "multi_dot",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
})
#: autocast_mode.h AT_FORALL_FP32 (+ norm's fp32_append_dtype, + F.cross_entropy, see module doc).
FP32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm",
    "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_trilinear3d", "upsample_bicubic2d", "norm", "cross_entropy", "square",
})
#: autocast_mode.h AT_FORALL_FP32_SET_OPT_DTYPE.
FP32_SET_OPT_DTYPE = frozenset({
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "vector_norm",
    "linalg_matrix_norm", "matrix_norm", "sum",
})
#: autocast_mode.h AT_FORALL_PROMOTE.
PROMOTE = frozenset({
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
})

_DUNDER = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow"}
_NO_CPU_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
_LOWER_DTYPES = (torch.float16, torch.bfloat16)


def cuda_policy() -> dict[str, str]:
    """``{Python-level name: CUDA autocast policy}`` the emulation applies: the hand lists above, overridden and
    extended by torch's own kernels read at run time (module docstring; trainmem/trace/autocast_policy.py)."""
    from trainmem.trace.autocast_policy import cuda_autocast_policies

    hand = {name: policy for policy, names in (("lower_precision_fp", LOWER), ("fp32", FP32),
                                                ("fp32_set_opt_dtype", FP32_SET_OPT_DTYPE), ("promote", PROMOTE))
            for name in names}
    return {**hand, **cuda_autocast_policies()}


def _eligible(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _map_tensors(fn: Callable[[torch.Tensor], torch.Tensor], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    def m(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return fn(a)
        if isinstance(a, (list, tuple)) and a and any(isinstance(x, torch.Tensor) for x in a):
            return type(a)(m(x) for x in a)
        return a
    return tuple(m(a) for a in args), {k: m(v) for k, v in kwargs.items()}


class CudaAutocastMode(TorchFunctionMode):
    """Applies CUDA's autocast policies whenever ``torch.is_autocast_enabled("cpu")``.

    ``on_weight_cast(t)`` is called with each new cached 16-bit copy of a weight.
    """

    def __init__(self, on_weight_cast: Callable[[torch.Tensor], None] | None = None) -> None:
        super().__init__()
        self.policy = cuda_policy()
        self.cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self.on_weight_cast = on_weight_cast
        self.n_cast_ops = 0

    def clear_cache(self) -> None:
        self.cache.clear()

    def _cached_cast(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``at::autocast::cached_cast`` for a lower-precision target."""
        if not _eligible(t) or t.dtype == dtype:
            return t
        if (t.dtype == torch.float32 and t.requires_grad and t.is_leaf and not t._is_view()
                and torch.is_autocast_cache_enabled()):
            hit = self.cache.get(id(t))
            if hit is not None and hit[0]() is t:
                return hit[1]
            out = t.to(dtype)
            self.cache[id(t)] = (weakref.ref(t), out)
            if self.on_weight_cast is not None:
                self.on_weight_cast(out)
            return out
        return t.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if not torch.is_autocast_enabled("cpu"):
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        name = _DUNDER.get(name, name)
        policy = self.policy.get(name)
        if policy == "lower_precision_fp":
            dtype = torch.get_autocast_dtype("cpu")
            args, kwargs = _map_tensors(lambda t: self._cached_cast(t, dtype), args, kwargs)
            self.n_cast_ops += 1
        elif policy == "fp32":
            args, kwargs = _map_tensors(lambda t: t.float() if _eligible(t) and t.dtype != torch.float32 else t,
                                        args, kwargs)
            self.n_cast_ops += 1
        elif policy == "fp32_set_opt_dtype":
            first = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if first is not None and _eligible(first) and kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": torch.float32}
                self.n_cast_ops += 1
        elif policy == "promote":
            floats = [a for a in list(args) + list(kwargs.values()) if _eligible(a)]
            if any(a.dtype == torch.float32 for a in floats):
                args, kwargs = _map_tensors(lambda t: t.float() if _eligible(t) else t, args, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_NO_CPU_AUTOCAST):
            return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_autocast(on_weight_cast: Callable[[torch.Tensor], None] | None = None) -> Iterator[CudaAutocastMode]:
    """Enter the emulation; ``torch.autocast("cpu", dtype=...)`` regions then behave like CUDA's.

    ``torch.clear_autocast_cache`` (called by ``torch.autocast.__exit__`` when the outermost region
    exits) is wrapped to clear the emulated cache too; restored on exit.
    """
    mode = CudaAutocastMode(on_weight_cast)
    orig_clear = torch.clear_autocast_cache
    orig_enabled = torch.is_autocast_enabled

    def clear_autocast_cache() -> None:
        mode.clear_cache()
        orig_clear()

    def is_autocast_enabled(*args: Any, **kwargs: Any) -> bool:
        # the no-argument form means CUDA; the CPU region stands in for CUDA's (module docstring)
        return orig_enabled(*args, **kwargs) if (args or kwargs) else orig_enabled("cpu")

    torch.clear_autocast_cache = clear_autocast_cache
    torch.is_autocast_enabled = is_autocast_enabled
    try:
        with mode:
            yield mode
    finally:
        torch.clear_autocast_cache = orig_clear
        torch.is_autocast_enabled = orig_enabled
        mode.clear_cache()
