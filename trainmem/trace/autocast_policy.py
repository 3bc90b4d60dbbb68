"""CUDA autocast's op lists read from the running torch (issue 17 item 4): which ops CUDA autocast casts, and how.

Every torch build, CPU-only ones too, registers CUDA autocast's kernels: ``aten/src/ATen/autocast_mode.cpp`` (torch
2.13) ``TORCH_LIBRARY_IMPL(aten, Autocast, m)`` over the lists of ``autocast_mode.h`` (``AT_FORALL_LOWER_PRECISION_FP``,
``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` — norm's
``fp32_append_dtype`` — and ``AT_FORALL_PROMOTE``); ``torch._C._dispatch_has_kernel_for_dispatch_key(op,
"AutocastCUDA")`` names the ops. Each kernel's policy is read by running it: under ``FakeTensorMode`` a CPU-only torch
makes CUDA-device fake tensors, and with CUDA autocast on (``torch.set_autocast_enabled("cuda", True)``) the real
kernel casts them. A ``TorchDispatchMode``, below autocast, sees the casts (``aten._to_copy``) and stops the call at
the first other op, before any kernel computes, so the arguments need the schema's types and rarely valid shapes:

* fp32 inputs cast to the 16-bit dtype: ``lower_precision_fp``;
* 16-bit inputs cast to fp32: ``fp32`` — unless the op takes a ``dtype`` and a given 16-bit ``dtype`` stops the cast,
  ``fp32_set_opt_dtype`` (norm's ``fp32_append_dtype`` reads the same: fp32 compute, the input not copied);
* a 16-bit with an fp32 input, both cast to fp32: ``promote``.

Ops whose composite code checks shapes before the dispatch (einsum's equation, the RNN cells, prelu,
cosine_embedding_loss) and banned ones (binary_cross_entropy) give no reading: the emulation keeps the hand-copied
policy for them (trainmem/trace/autocast.py). The readings are cached on disk per torch version
(``$TRAINMEM_CACHE_DIR``, default ``~/.cache/trainmem``): probing takes ~2 s.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["POLICIES", "cuda_autocast_policies", "probe_cuda_autocast"]

#: The policies, named as ``at::autocast::CastPolicy`` (autocast_mode.h).
POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote")
_VERSION = 1
_SHAPES = ((2, 2), (1, 1, 1, 1), (1, 1, 1, 1, 1), (3, 3), (1, 1))
_LOW = torch.bfloat16
_log = logging.getLogger(__name__)


class _Reached(Exception):
    """The call reached the op below autocast: stop before it computes."""


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.casts: list[torch.dtype | None] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default:
            self.casts.append(kwargs.get("dtype"))
            return func(*args, **kwargs)
        if func.namespace == "prim":  # device / layout queries
            return func(*args, **kwargs)
        raise _Reached


def _value(kind: str, tensor: Any) -> Any:
    """A value of the schema type ``kind`` (str of a ``torch._C`` type); ``tensor()`` makes a float tensor."""
    simple = {"int": 1, "SymInt": 1, "List[int]": [1], "List[SymInt]": [1], "float": 1.0, "List[float]": [1.0],
              "bool": False, "List[bool]": [False, False, False], "number": 2, "str": "none",
              "ScalarType": _LOW}
    if kind == "Tensor":
        return tensor()
    if kind == "List[Tensor]":
        return [tensor(), tensor()]
    if kind == "List[Optional[Tensor]]":
        return [torch.zeros(2, dtype=torch.long, device="cuda")]
    if kind.startswith("Optional["):
        return None
    if kind in simple:
        return simple[kind]
    raise TypeError(kind)


def _arguments(op: torch._ops.OpOverload, dtypes: list[torch.dtype], shape: tuple[int, ...],
               dtype_arg: torch.dtype | None) -> tuple[list, dict]:
    """Arguments for ``op`` from its schema: tensors of ``shape`` in ``dtypes``' order, defaults left out."""
    it = iter(dtypes)
    args, kwargs = [], {}
    for a in op._schema.arguments:
        kind = str(a.type)
        if a.name == "dtype" and dtype_arg is not None:
            v: Any = dtype_arg
        elif kind not in ("Tensor", "List[Tensor]", "List[Optional[Tensor]]") and a.has_default_value():
            continue
        else:
            v = _value(kind, lambda: torch.empty(shape, device="cuda", dtype=next(it, torch.float32)))
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return args, kwargs


def _casts(op: torch._ops.OpOverload, dtypes: list[torch.dtype], dtype_arg: torch.dtype | None = None) -> list:
    """The dtypes CUDA autocast's kernel of ``op`` casts its inputs to (tried over a few shapes)."""
    error: Exception | None = None
    for shape in _SHAPES:
        rec = _Recorder()
        args, kwargs = _arguments(op, dtypes, shape, dtype_arg)
        try:
            with rec:
                op(*args, **kwargs)
        except _Reached:
            return rec.casts
        except Exception as e:  # noqa: BLE001 - a shape the composite refuses: try the next
            error = e
            continue
        return rec.casts
    raise error  # type: ignore[misc]


def _policy(op: torch._ops.OpOverload) -> str | None:
    """``op``'s CUDA autocast policy, read from its kernel (module docstring); None: it casts nothing."""
    if _LOW in _casts(op, [torch.float32] * 8):
        return "lower_precision_fp"
    up = _casts(op, [_LOW] * 8)
    if up[:1] == [torch.float32]:
        takes_dtype = any(a.name == "dtype" for a in op._schema.arguments)
        if takes_dtype and _casts(op, [_LOW] * 8, dtype_arg=_LOW)[:1] != [torch.float32]:
            return "fp32_set_opt_dtype"
        return "fp32"
    if not up and _sets_dtype(op):
        return "fp32_set_opt_dtype"
    if torch.float32 in _casts(op, [_LOW] + [torch.float32] * 7):
        return "promote"
    return None


def _sets_dtype(op: torch._ops.OpOverload) -> bool:
    """Whether the kernel hands ``dtype=float32`` down (sum, prod, cumsum, norms: no input cast to see)."""
    seen: list[Any] = []

    class _Args(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func.namespace == "prim":
                return func(*args, **(kwargs or {}))
            seen.extend(v for v in [*args, *(kwargs or {}).values()] if isinstance(v, torch.dtype))
            raise _Reached

    for shape in _SHAPES:
        args, kwargs = _arguments(op, [_LOW] * 8, shape, None)
        try:
            with _Args():
                op(*args, **kwargs)
        except _Reached:
            return torch.float32 in seen
        except Exception:  # noqa: BLE001
            continue
    return False


def probe_cuda_autocast() -> dict[str, str]:
    """``{aten op name without overload: policy}`` for every op the running torch registers a CUDA autocast kernel
    for and whose kernel could be run (module docstring). Needs torch; ~2 s."""
    names = [n for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(n, "AutocastCUDA")]
    found: dict[str, str] = {}
    was_on, was_dtype = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    with FakeTensorMode(allow_non_fake_inputs=True):
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", _LOW)
        try:
            for name in sorted(names):  # the default overload first: it names the op
                base, _, overload = name[len("aten::"):].partition(".")
                op = getattr(getattr(torch.ops.aten, base), overload or "default")
                try:
                    policy = _policy(op)
                except Exception:  # noqa: BLE001 - shape checks before the dispatch, or banned under autocast
                    continue
                if policy is not None:
                    found.setdefault(base, policy)
        finally:
            torch.set_autocast_enabled("cuda", was_on)
            torch.set_autocast_dtype("cuda", was_dtype)
            torch.clear_autocast_cache()
    return found


def _cache_path() -> Path:
    root = Path(os.environ.get("TRAINMEM_CACHE_DIR") or Path.home() / ".cache" / "trainmem")
    return root / f"autocast-cuda-{torch.__version__}-v{_VERSION}.json"


@functools.lru_cache(maxsize=1)
def cuda_autocast_policies() -> dict[str, str]:
    """:func:`probe_cuda_autocast`, cached on disk per torch version; ``{}`` if probing fails (logged)."""
    path = _cache_path()
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    try:
        found = probe_cuda_autocast()
    except Exception as e:  # noqa: BLE001 - the emulation falls back to its hand-copied lists
        _log.warning("CUDA autocast's op lists could not be read from torch (%s); using trainmem's copies", e)
        return {}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(found, sort_keys=True), encoding="utf-8")
    except OSError:
        pass
    return found
