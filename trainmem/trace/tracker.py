"""A light allocation tracker: one record per device storage, from its birth to its death.

``StorageTracker`` is a ``TorchDispatchMode`` that sits on top of a ``FakeTensorMode``. Every op's
outputs pass through it; each *new* untyped storage is registered once, its size rounded up to the
CUDA caching allocator's 512 B granule (``c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize``),
and a weakref callback on the storage's Python object records its free (PyTorch preserves a
storage's Python object for as long as the C++ ``StorageImpl`` lives, so the callback fires exactly
when the memory would go back to the caching allocator). ``UntypedStorage.resize_`` is not seen by
dispatch modes, so it is patched while the tracker is active (FSDP2 frees and re-allocates its
unsharded parameters that way), as PyTorch's own ``mem_tracker.py`` does.

Each allocation becomes a :class:`StorageLife` (birth event, death event, birth phase, module,
tag); the running ``allocated`` counter, the timeline and the peak come from the same events, so
the alive set at any event can be rebuilt afterwards and classified (``trainmem.trace.classify``).

Known limitations (as for PyTorch's MemTracker):

* caching-allocator fragmentation and reserved-but-unallocated memory are not modelled here: this is
  ``torch.cuda.memory_allocated``; ``trace/allocator.py`` replays ``lives`` (each birth and death has
  its own event index, so they sort into program order) through the allocator for ``memory_reserved``;
* memory that a CUDA kernel allocates internally without a tensor (cuBLAS workspaces, NCCL
  buffers) is not seen; kernels whose temporaries matter are emulated (``sdpa.py``);
* host tensors that live on the CPU in a CUDA run (e.g. Adam's ``step`` counters) are on the same
  fake CPU device here; the tracer ``forget``s the known ones.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from trainmem.units import round_up_bytes

__all__ = ["StorageLife", "StorageTracker", "MODULE_KEY"]

#: Key under which a forward module's name is stored in ``grad_fn.metadata``.
MODULE_KEY = "trainmem.module"


@dataclass(slots=True)
class StorageLife:
    """One allocation: a storage from the moment it holds bytes until it is freed or resized."""

    key: int
    """Identity of the storage object (the same across FSDP's free/re-alloc resizes)."""
    nbytes: int
    """Size rounded up to 512 B."""
    born: int
    """Event index of the allocation."""
    died: int | None
    """Event index of the free (None: alive at the end)."""
    phase: str
    """Phase in which it was allocated (``forward[0]``, ``recompute[0]``, ``backward[0]`` ...)."""
    module: str
    tag: str | None = None
    """``amp_weight_copy``, ``comm`` or None."""
    stream: int = 0
    """Allocation stream: 0 = the default (compute) stream; FSDP2's collective streams are tagged by
    ``trainmem.trace.fsdp.tag_collectives`` (the allocator replay keeps a pool per stream)."""


def _is_mutable(func: Any, cache: dict) -> bool:
    m = cache.get(func)
    if m is None:
        try:
            m = bool(func._schema.is_mutable)
        except AttributeError:
            m = True
        cache[func] = m
    return m


class StorageTracker(TorchDispatchMode):
    """Tracks device storages; enter it *after* (inside) the ``FakeTensorMode``."""

    def __init__(self) -> None:
        super().__init__()
        self.lives: list[StorageLife] = []
        self._keys: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: dict[int, weakref.ref] = {}
        self._alive: dict[int, StorageLife] = {}
        self._next_key = 0
        self._mutable: dict = {}
        self.event = 0
        self.allocated = 0
        self.phase = "setup"
        """Phase shown on the timeline."""
        self.birth_phase: str | None = None
        """Overrides ``phase`` as the birth phase of new storages (recomputation in backward)."""
        self.tag: str | None = None
        """Tag given to storages born now (``comm`` inside FSDP collectives)."""
        self.stream = 0
        """Stream of storages born now (0: default; set inside FSDP2's ``with stream(...)`` blocks)."""
        self.recording = False
        self.timeline: list[tuple[str, int]] = []
        self.phase_peak_event: dict[str, int] = {}
        self.peak = 0
        self.peak_event = -1
        self.peak_phase = ""
        self.peak_module = ""
        self.phase_peak: dict[str, int] = {}
        self.module_stack: list[str] = []
        self._bw_module = ""
        self._closed = False
        self._orig_resize = None
        self._dtensor_type: type | None = None

    # -- context --------------------------------------------------------------------------------
    def __enter__(self) -> "StorageTracker":
        try:
            from torch.distributed.tensor import DTensor

            self._dtensor_type = DTensor
        except ImportError:  # pragma: no cover - torch built without distributed
            self._dtensor_type = None
        self._orig_resize = torch.UntypedStorage.resize_
        orig, tracker = self._orig_resize, self

        def resize_(st: torch.UntypedStorage, size: int):  # noqa: ANN202 - mirrors the original
            out = orig(st, size)
            tracker.observe_storage(st, changed=True)
            return out

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            if self._orig_resize is not None:
                torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]
                self._orig_resize = None

    def close(self) -> None:
        """Stop listening to frees (weakref callbacks become no-ops) and drop storage references."""
        self._closed = True
        self._refs.clear()
        self._keys = WeakIdKeyDictionary()

    # -- dispatch ---------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        # Let DTensor desugar into local ops first; the local ops come back through this mode.
        if self._dtensor_type is not None and any(t is self._dtensor_type for t in types):
            return NotImplemented
        if func is torch.ops._c10d_functional.wait_tensor.default:
            # The meta kernel of wait_tensor returns a new tensor; eager returns its input.
            return args[0]
        if func is torch.ops.aten._local_scalar_dense.default:
            # ``.item()`` on a fake tensor has no value to give (Adafactor reads its step counter and
            # parameter norms). Values never change what is allocated, so a neutral 1 stands in.
            dt = args[0].dtype
            return True if dt is torch.bool else (1.0 if dt.is_floating_point else 1)
        out = func(*args, **(kwargs or {}))
        changed = _is_mutable(func, self._mutable)
        if isinstance(out, torch.Tensor):
            self.observe_storage(out.untyped_storage(), changed)
        else:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.observe_storage(t.untyped_storage(), changed)
        return out

    # -- storages ---------------------------------------------------------------------------------
    def key_of(self, st: torch.UntypedStorage) -> int | None:
        return self._keys.get(st)

    def observe_storage(self, st: torch.UntypedStorage, changed: bool = False) -> int:
        """Register ``st`` if new; with ``changed``, re-read its size (resize). Returns its key."""
        key = self._keys.get(st)
        if key is None:
            key = self._next_key
            self._next_key += 1
            self._keys[st] = key
            self._refs[key] = weakref.ref(st, partial(self._on_free, key))
            size = round_up_bytes(st.nbytes())
            if size:
                self._birth(key, size)
            return key
        if changed:
            size = round_up_bytes(st.nbytes())
            life = self._alive.get(key)
            if (life.nbytes if life else 0) != size:
                if life is not None:
                    self._death(key)
                if size:
                    self._birth(key, size)
        return key

    def observe_tensor(self, t: torch.Tensor) -> int:
        """Register the storage of a tensor made outside the mode (DTensors: their local shard)."""
        if self._dtensor_type is not None and isinstance(t, self._dtensor_type):
            t = t._local_tensor
        return self.observe_storage(t.untyped_storage())

    def tag_tensor(self, t: torch.Tensor, tag: str) -> None:
        key = self._keys.get(t.untyped_storage())
        life = self._alive.get(key) if key is not None else None
        if life is not None:
            life.tag = tag

    def forget_tensor(self, t: torch.Tensor) -> None:
        """Treat ``t``'s storage as host memory (it is not on the GPU in a CUDA run)."""
        key = self._keys.get(t.untyped_storage())
        life = self._alive.pop(key, None) if key is not None else None
        if life is not None:
            self.allocated -= life.nbytes
            life.nbytes = 0
            life.died = self.event

    def _on_free(self, key: int, _ref: weakref.ref) -> None:
        if self._closed:
            return
        self._refs.pop(key, None)
        if key in self._alive:
            self._death(key)

    def _birth(self, key: int, size: int) -> None:
        self.event += 1
        life = StorageLife(key=key, nbytes=size, born=self.event, died=None,
                           phase=self.birth_phase or self.phase, module=self.current_module(), tag=self.tag,
                           stream=self.stream)
        self.lives.append(life)
        self._alive[key] = life
        self.allocated += size
        self._after_event()

    def _death(self, key: int) -> None:
        life = self._alive.pop(key)
        self.event += 1
        life.died = self.event
        self.allocated -= life.nbytes
        self._after_event()

    def _after_event(self) -> None:
        if not self.recording:
            return
        a, phase = self.allocated, self.phase
        self.timeline.append((phase, a))
        if a > self.phase_peak.get(phase, -1):
            self.phase_peak[phase] = a
            self.phase_peak_event[phase] = self.event
        if a > self.peak:
            self.peak, self.peak_event, self.peak_phase = a, self.event, phase
            self.peak_module = self.current_module()

    # -- modules ----------------------------------------------------------------------------------
    def current_module(self) -> str:
        if self.module_stack:
            return self.module_stack[-1]
        node = torch._C._current_autograd_node()
        if node is not None:
            name = node.metadata.get(MODULE_KEY)
            if name:
                self._bw_module = name
            return self._bw_module
        return ""

    # -- recording --------------------------------------------------------------------------------
    def start_recording(self, phase: str) -> int:
        """Start the recorded window; returns the event index of its start."""
        self.phase = phase
        self.recording = True
        self.timeline.append((phase, self.allocated))
        self.peak, self.peak_event, self.peak_phase = self.allocated, self.event, phase
        self.peak_module = ""
        return self.event

    def stop_recording(self) -> int:
        self.recording = False
        return self.event
