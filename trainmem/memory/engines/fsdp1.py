"""FSDP1 (``torch.distributed.fsdp.FullyShardedDataParallel``, torch 2.13): ``--engine fsdp2 --fsdp-version 1``.

What differs from FSDP2 (:mod:`trainmem.memory.engines.fsdp2`), each from torch 2.13's sources under
torch/distributed/fsdp/:

* one ``FlatParameter`` per wrapped unit (every decoder layer, the root holding embedding, final norm and LM
  head), flattened and padded to a multiple of the world size (``_flat_param.py`` ``FlatParamHandle._get_shard``):
  ``ceil(numel / dp)`` elements per rank, experts included (no per-tensor dim-0 chunks);
* the sharded flat parameter keeps the dtype the model was loaded in (``flatten_tensors`` requires a uniform
  dtype per unit): fp32 under a ``MixedPrecision`` recipe (``amp-*``: the model loaded fp32, frozen base
  included — PEFT's FSDP example), 16-bit for ``bf16`` (no policy, no fp32 master);
* unshard (``_flat_param.py`` ``pre_unshard``/``unshard``/``post_unshard``): under mixed precision
  ``_use_low_precision_shard`` allocates ``_mp_shard`` (the local shard in param_dtype) and frees it after the
  all-gather; the all-gather writes straight into ``_full_param_padded``, whose views are the parameters — no
  separate all-gather output as FSDP2's ``all_gather_state``. ``_free_unsharded_flat_param`` calls
  ``record_stream`` before freeing; the caching allocator lowers ``allocated_bytes`` at ``free()`` all the same
  (c10/cuda/CUDACachingAllocator.cpp ``DeviceCachingAllocator::free``), so in forward one unit is allocated at a
  time; ``limit_all_gathers``' rate limiter (``_limiter_utils.py``, 2 in flight) bounds only the cached blocks;
* backward (``_runtime_utils.py``): ``_pre_backward_hook`` unshards the unit and, with ``BACKWARD_PRE``,
  prefetches the next (``_prefetch_handle``); ``BACKWARD_POST`` prefetches in ``_post_backward_reshard`` after
  freeing the current unit. ``_post_backward_hook`` → ``_reduce_grad``: the unsharded gradient (param_dtype,
  the unit's trainable elements) is reduce-scattered into ``new_sharded_grad`` (reduce_dtype = param_dtype when
  not given: ``_init_param_reduce_dtypes``), cast to the sharded dtype (``_cast_grad_to_param_dtype``) and kept
  as ``_saved_grad_shard`` (accumulated across micro-batches without ``no_sync``);
* LoRA: with ``use_orig_params=False`` a flat parameter cannot mix ``requires_grad`` (``_validate_tensors_to_flatten``
  raises), so PEFT's ``fsdp_auto_wrap_policy`` (and fsdp_qlora's lambda policy) wrap each adapter as its own unit:
  the layer's frozen unit has no gradient, the adapters' units carry the gradients. HF Trainer applies that policy
  to every PEFT model itself (transformers 5.24 distributed/fsdp.py ``update_fsdp_plugin_peft``, called from
  trainer.py), whatever ``use_orig_params`` says. (``use_orig_params=True`` with adapters inside the layer's unit
  — a custom wrap policy — is not modelled: the views of a requires_grad flat parameter make autograd compute
  the frozen weights' gradients too, as the FullyShardedDataParallel docstring warns);
* ``CPUOffload(offload_params=True)``: sharded parameters pinned on the host (``init_flat_param_attributes``),
  copied to the GPU before each all-gather (``flat_param_to``; with mixed precision ``_local_shard.to(device)``
  into ``_mp_shard``); the sharded gradient is still made on the GPU as ``_saved_grad_shard`` and copied into the
  pinned ``_cpu_grad`` (``_offload_grad``); ``_saved_grad_shard`` is deleted only in the final callback
  (``_finalize_params`` → ``prepare_gradient_for_optim``): every unit's sharded gradient is on the GPU until the
  end of backward;
* the GPU copies ``pre_unshard`` makes (``_mp_shard``; with offload the shard's H2D copy) are allocated under the
  pre-unshard stream (``_runtime_utils.py`` ``_unshard``), a pool of its own in the caching allocator: its largest
  set of blocks — usually the root unit's, which unshards first — stays reserved and free at the compute peak
  (:func:`fsdp1_pre_unshard_pool_bytes`, added to the reserve by :func:`trainmem.memory.estimate.estimate`).
"""

from __future__ import annotations

from trainmem.memory.engines.base import ModelStates, lora_base
from trainmem.memory.engines.fsdp2 import FSDP2Engine, fsdp_replicated_quant_state_bytes
from trainmem.memory.states import optimizer_state_bytes, optimizer_step_temp_bytes
from trainmem.setup import TrainingSetup
from trainmem.units import round_up_bytes as _r

__all__ = ["FSDP1Engine", "fsdp1_shard_elems", "fsdp1_storage_elem_bytes", "fsdp1_param_dtype_bytes",
           "fsdp1_uses_mixed_precision", "fsdp1_pre_unshard_bytes", "fsdp1_pre_unshard_pool_bytes",
           "fsdp1_no_sync"]


def fsdp1_shard_elems(n: int, dp: int) -> int:
    """Elements of a ``FlatParameter`` of ``n`` elements that one of ``dp`` ranks holds: the flat parameter is
    padded to a multiple of ``dp`` and chunked evenly (torch 2.13 torch/distributed/fsdp/_flat_param.py
    ``FlatParamHandle._get_unpadded_shard`` / ``_get_shard``: ``numel_to_pad = chunk.numel() * world_size - numel``)."""
    return -(-n // dp)


def fsdp1_storage_elem_bytes(s: TrainingSetup) -> int:
    """Bytes of one element of the sharded flat parameter: the dtype the model was loaded in. A MixedPrecision
    recipe (amp-*) runs on an fp32-loaded model (4; ``MixedPrecision.param_dtype`` only changes what is gathered),
    fp32 4, pure bf16 2 (torch 2.13 _flat_param.py ``init_flat_param_attributes``: ``_local_shard = flat_param.data``)."""
    return 2 if s.precision in ("bf16", "fp16") else 4


def fsdp1_uses_mixed_precision(s: TrainingSetup) -> bool:
    """``MixedPrecision(param_dtype=16-bit)`` on fp32 shards: ``_uses_param_mixed_precision`` is
    ``_fwd_bwd_param_dtype != _orig_param_dtype`` (torch 2.13 _flat_param.py ``_init_param_reduce_dtypes``)."""
    return s.precision in ("amp-bf16", "amp-fp16")


def fsdp1_param_dtype_bytes(s: TrainingSetup) -> int:
    """Bytes of one element of ``_full_param_padded`` (and of the unsharded gradient): param_dtype under
    mixed precision, else the flat parameter's own dtype (torch 2.13 _flat_param.py ``init_flat_param_attributes``)."""
    return 2 if fsdp1_uses_mixed_precision(s) else fsdp1_storage_elem_bytes(s)


def fsdp1_pre_unshard_bytes(gathered_shard_bytes: int, load_shard_bytes: int, mixed_precision: bool,
                            offload: bool) -> int:
    """Bytes one unit's ``pre_unshard`` holds at once on FSDP1's pre-unshard stream (torch 2.13
    torch/distributed/fsdp/_runtime_utils.py ``_unshard``: ``with state._device_handle.stream(pre_unshard_stream):
    handle.pre_unshard()``; _flat_param.py ``pre_unshard``). ``gathered_shard_bytes``: the local shard in
    param_dtype (what is all-gathered); ``load_shard_bytes``: the same shard in the dtype it is stored in.

    * mixed precision: ``_use_low_precision_shard`` allocates ``_mp_shard`` (param_dtype) and, with offload,
      copies into it from ``_local_shard.to(self.device, non_blocking=True)`` — a GPU copy of the pinned shard in
      the stored dtype, alive with ``_mp_shard`` during the ``copy_``;
    * offload without mixed precision: ``flat_param_to(self.device, non_blocking=True)``, one GPU copy of the
      pinned shard (``flat_param.data``, dropped once ``_use_unsharded_flat_param`` points the data at
      ``_full_param_padded``);
    * neither: a no-op (the shard is already on the GPU in the dtype gathered)."""
    if mixed_precision:
        return gathered_shard_bytes + (load_shard_bytes if offload else 0)
    return load_shard_bytes if offload else 0


def fsdp1_no_sync(s: TrainingSetup) -> bool:
    """Whether the micro-batches before the last run under ``FullyShardedDataParallel.no_sync()``, where
    ``_post_backward_hook`` reshards and returns before ``_reduce_grad`` (``if not state._sync_gradients``), so
    each unit's unsharded gradient stays in ``flat_param.grad`` on the GPU and the next backward accumulates into
    it (``prepare_gradient_for_backward`` keeps an unsharded-size ``.grad``), until the last micro-batch's
    reduce-scatter (torch 2.13 fsdp/_runtime_utils.py, _flat_param.py; the ``no_sync`` docstring: "FSDP will
    accumulate the full model gradients (instead of gradient shards) until the eventual sync"). Taken when:

    * loop ``trainer``: HF Trainer enters ``accelerator.no_sync(model)`` for every micro-batch but the last
      (transformers 5.24 trainer.py ``_inner_training_loop``), which is FSDP1's ``model.no_sync`` (accelerate
      1.15 accelerator.py ``no_sync``). Lightning's Trainer does not (lightning 2.6 strategies/parallel.py
      ``block_backward_sync`` enters ``no_sync`` only for DDP): its FSDP1 runs are ``loop`` ``script`` here;
    * ``CPUOffload(offload_params=True)``: accumulation outside ``no_sync`` does not work with CPU offloading
      (``_finalize_params`` deletes ``_saved_grad_shard`` after copying it into ``_cpu_grad``, which the next
      micro-batch's copy overwrites: the TODO in ``prepare_gradient_for_backward``), so offloaded runs accumulate
      under it (fsdp_qlora train.py: ``no_sync`` set when ``use_cpu_offload`` and gradient accumulation).

    Only with ``grad_accum`` > 1."""
    return s.grad_accum > 1 and (s.loop == "trainer" or s.offload == "optimizer+params")


def fsdp1_pre_unshard_pool_bytes(largest_bytes: int, live_at_peak_bytes: int) -> int:
    """Bytes of the pre-unshard stream's pool cached and free at the compute stream's peak, where the compute
    stream cannot use them (rounded up to the 2 MiB ``kRoundLarge``). The caching allocator serves a request
    only from blocks of the request's stream (c10/cuda/CUDACachingAllocator.cpp, torch 2.13: ``get_free_block``,
    ``BlockComparatorSize`` orders by stream first) and never returns a segment without memory pressure, so the
    largest set of blocks ``pre_unshard`` ever held at once (:func:`fsdp1_pre_unshard_bytes`; usually the root
    unit's, which unshards first: embedding and LM head) stays reserved for that stream; smaller units split
    it. ``live_at_peak_bytes``: what of it is allocated at the peak (counted there already). A lower bound:
    ``record_stream`` (the all-gather on the unshard stream reads the copy) can hold a block past its free
    while the next unit's pre-unshard allocates another."""
    raw = max(0, largest_bytes - live_at_peak_bytes)
    return -(-raw // (2 * 1024 * 1024)) * (2 * 1024 * 1024)


class FSDP1Engine(FSDP2Engine):
    """FSDP1 FULL_SHARD (zero 3) / SHARD_GRAD_OP (zero 2), ``use_orig_params=False``, ``limit_all_gathers=True``."""

    def model_states(self, notes: list[str]) -> ModelStates:
        s, rp, spec = self.s, self.rp, self.spec
        train_elem, base = lora_base(spec, s, rp, notes)
        store = fsdp1_storage_elem_bytes(s)
        if s.is_lora and not s.qlora:
            base = (rp.total - rp.trainable) * store  # the frozen base keeps the load dtype (fp32 under amp)
        if not s.is_lora:
            train_elem = store
        dp = s.fsdp_shard_degree
        T_local = fsdp1_shard_elems(rp.trainable, dp)
        replicated = fsdp_replicated_quant_state_bytes(s, rp.frozen_quantized)
        shard_param = (base - replicated) // dp + replicated + T_local * train_elem
        notes.append(f"FSDP1: one FlatParameter per unit, padded to a multiple of {dp} ranks; shards kept in the "
                     f"load dtype, {store} B per element")
        if fsdp1_uses_mixed_precision(s):
            notes.append("FSDP1 MixedPrecision: each unit's local shard is copied to 16 bits (_mp_shard) for its "
                         "all-gather into the 16-bit unsharded flat parameter")
        if s.is_lora:
            notes.append("FSDP1 LoRA (use_orig_params=False): adapters wrapped as their own units (PEFT "
                         "fsdp_auto_wrap_policy); frozen units have no gradient")
        if fsdp1_no_sync(s):
            notes.append("FSDP1 no_sync on every micro-batch but the last (HF Trainer / accelerate; CPU offload needs "
                         "it): each unit's unsharded gradient stays on the GPU until the last micro-batch's "
                         "reduce-scatter")
        states = optimizer_state_bytes(s, T_local, train_elem, spec)
        st = ModelStates(unsharded_elem=fsdp1_param_dtype_bytes(s), grad_elem=train_elem)
        if s.offload == "optimizer+params":
            # CPUOffload moves FlatParameters only; bitsandbytes' quant state (absmax) is module state that the
            # dequantize kernel reads beside the gathered packed data on the GPU, so it stays there, whole
            st.params = replicated
            st.host = shard_param - replicated + T_local * train_elem + states
            notes.append("FSDP1 CPUOffload(offload_params=True): sharded parameters, _cpu_grad and the optimizer on "
                         "the host; each unit's sharded gradient (_saved_grad_shard) stays on the GPU until the end "
                         "of backward")
            return st
        st.params, st.states = shard_param, states
        st.step_temp = optimizer_step_temp_bytes(s, T_local, train_elem, train_elem)
        return st

    # -- collectives -------------------------------------------------------------------------------
    def _local(self, n: int, experts: int) -> int:
        return fsdp1_shard_elems(n, self.s.fsdp_shard_degree)

    def _offloaded(self) -> bool:
        return self.s.offload == "optimizer+params"

    def gather(self, key: str, n: int, experts: int = 0, quantized: int = 0) -> None:
        """``_unshard``: ``pre_unshard`` puts the local shard on the GPU in param_dtype (``_mp_shard`` under mixed
        precision; with offload a GPU copy of the pinned shard, and under mixed precision first an fp32 copy
        ``_local_shard.to(device)`` consumed by ``_mp_shard.copy_``), ``unshard`` all-gathers into
        ``_full_param_padded``, ``post_unshard`` frees ``_mp_shard``. A prefetched unit is already unsharded."""
        tl = self.tl
        if tl.has(key):
            return
        full = self._ag_bytes(n, experts, quantized)
        mp, off = fsdp1_uses_mixed_precision(self.s) and not quantized, self._offloaded()
        shard = full // self.s.fsdp_shard_degree  # (the local shard, as gathered: param_dtype)
        load = shard * fsdp1_storage_elem_bytes(self.s) // 2 if mp else shard  # (as stored)
        # on the pre-unshard stream (a side stream: its own pool, fsdp1_pre_unshard_pool_bytes)
        kept = fsdp1_pre_unshard_bytes(shard, load, mp, off) - (load if mp and off else 0)
        tl.alloc(key + ":mp_shard", "communication_buffers", kept, side_stream=True)
        self._pre_unshard_live(kept)
        if mp and off:
            tl.alloc(key + ":h2d", "temporaries", load, side_stream=True)
            self._pre_unshard_live(kept + load)
            tl.free(key + ":h2d")
        tl.alloc(key, "parameters", full)
        self._pre_unshard_live(kept)
        tl.free(key + ":mp_shard")

    def _pre_unshard_live(self, live: int) -> None:
        """Record what the pre-unshard stream holds now: its largest total, and its share of the peak when the
        timeline is at its peak now (``ModelStates.pre_unshard_max`` / ``pre_unshard_at_peak``)."""
        st, tl = self.st, self.tl
        st.pre_unshard_max = max(st.pre_unshard_max, live)
        if tl.current == tl.peak:
            st.pre_unshard_at_peak = (tl.peak, live)

    def prefetch(self, key: str, n: int, experts: int = 0, quantized: int = 0) -> None:
        """``_prefetch_handle``: the same ``_unshard``, issued early."""
        self.gather(key, n, experts, quantized)

    def reduce(self, keys: list[str], n: int, experts: int = 0) -> None:
        """``_reduce_grad``: ``new_sharded_grad`` (reduce_dtype = param_dtype, the local chunk) is reduce-scattered
        from the unsharded gradient (padded by ``F.pad`` when the unit's numel is not a multiple of dp), the
        unsharded gradient is dropped, ``_cast_grad_to_param_dtype`` makes a copy in the shard's dtype when they
        differ, and ``_accumulate_sharded_grad`` keeps it as (or adds it to) ``_saved_grad_shard``."""
        if n <= 0 or self._in_no_sync():  # (no_sync: the unsharded gradient stays, see fsdp1_no_sync)
            return
        tl, dp = self.tl, self.s.fsdp_shard_degree
        local, g16 = self._local(n, experts), self._grad_elem_unsharded()
        if n % dp:
            tl.spike(keys[0] + ":padded", "temporaries", g16 * local * dp)
        tl.alloc("rs_out", "communication_buffers", g16 * local)
        for k in keys:
            tl.free(k + ":unsharded")
        shard, elem = keys[0] + ":sharded", self.st.grad_elem
        if tl.has(shard):
            tl.spike(shard + ":new", "temporaries", elem * local if elem != g16 else 0)
            tl.free("rs_out")
        else:  # (same dtype: new_sharded_grad itself is kept; counted as a gradient from here on)
            tl.alloc(shard, "gradients", elem * local) if elem != g16 else None
            tl.free("rs_out")
            if elem == g16:
                tl.alloc(shard, "gradients", elem * local)

    def _grad_elem_unsharded(self) -> int:
        """The unsharded gradient's element: param_dtype under mixed precision, else the trainable flat
        parameter's own dtype (fp32 adapters of a bf16 base are their own fp32 units)."""
        return 2 if fsdp1_uses_mixed_precision(self.s) else self.st.grad_elem

    def grad(self, key: str, n: int, mb: int) -> None:
        """Autograd writes the unit's unsharded gradient (``flat_param.grad``) for its trainable elements."""
        if n <= 0:
            return
        size = self._grad_elem_unsharded() * n
        if self.tl.has(key + ":unsharded"):
            self.tl.spike(key + ":new", "temporaries", size)
        else:
            self.tl.alloc(key + ":unsharded", "temporaries", size)

    def _in_no_sync(self) -> bool:
        """This micro-batch runs under ``no_sync`` (:func:`fsdp1_no_sync`): every one but the last."""
        return getattr(self, "_mb", self.s.grad_accum - 1) < self.s.grad_accum - 1 and fsdp1_no_sync(self.s)

    def _keeps_units(self) -> bool:
        """SHARD_GRAD_OP (zero 2) in a ``no_sync`` micro-batch: no reshard in backward (torch 2.13
        _runtime_utils.py ``_should_free_in_backward``)."""
        return self.s.zero == 2 and self._in_no_sync()

    def bulk_backward_end(self, js: list[int]) -> None:
        if not self._keeps_units():
            super().bulk_backward_end(js)

    def bulk_grads(self, j0: int, n: int) -> None:
        """A block of layers' gradients: under ``no_sync`` their unsharded gradients, kept (and accumulated into)
        until the last micro-batch, whose reduce-scatters drop them and keep the sharded ones."""
        key = f"gbulk{j0}:unsharded"
        if self._in_no_sync():
            if not self.tl.has(key):
                size = _r(self._grad_elem_unsharded() * self.plan.layer_train[j0]) * n
                self.tl.alloc(key, "gradients", size, aggregate=True)
            return
        self.tl.free(key)
        super().bulk_grads(j0, n)

    # -- hooks -------------------------------------------------------------------------------------
    def backward_start(self, mb: int) -> None:
        """The root's ``_pre_backward_hook`` (on the loss) prefetches the last unit in post-forward order."""
        self._mb = mb
        if self.s.zero == 3 and self.plan.layer_ids and self.s.backward_prefetch == "pre":
            self.prefetch(*self._unit(len(self.plan.layer_ids) - 1))

    def layer_backward_start(self, j: int) -> None:
        if self.s.zero == 3:
            self.gather(*self._unit(j))
            if j > 0 and self.s.backward_prefetch == "pre":
                self.prefetch(*self._unit(j - 1))

    def layer_backward_end(self, j: int) -> None:
        """``_post_backward_hook``: reshard (free the unit), BACKWARD_POST's prefetch, then ``_reduce_grad``.
        SHARD_GRAD_OP under ``no_sync`` keeps the unit unsharded (``_should_free_in_backward``: only when syncing
        or resharding after forward) for the next micro-batch's forward."""
        p = self.plan
        idx = p.layer_ids[j]
        if not self._keeps_units():
            self.tl.free(f"unit{idx}")
        if j > 0 and self.s.zero == 3 and self.s.backward_prefetch == "post":
            self.prefetch(*self._unit(j - 1))
        self.reduce([f"g{idx}", f"g{idx}d", f"g{idx}m", f"g{idx}o"], p.layer_train[j], p.layer_experts[j])

    def _sharded_grads_on_host(self) -> bool:
        """Even with offload each unit's ``_saved_grad_shard`` stays on the GPU until backward ends
        (:meth:`backward_end`). (bulk_grads / bulk_backward_end are FSDP2's: FSDP1 makes no ``ag_pending`` keys.)"""
        return False

    def backward_end(self, mb: int) -> None:
        """The root reshards and reduces last; with offload the final callback (``_finalize_params``) points
        ``.grad`` at ``_cpu_grad`` and deletes every ``_saved_grad_shard``."""
        p = self.plan
        self.tl.free("root")
        self.reduce(["g_emb", "g_head", "g_pos"], p.emb_train + p.head_train)
        if self._offloaded() and not self._in_no_sync():  # (no_sync: _finalize_params returns first)
            for k in [k for k in list(self.tl.live) if k.endswith(":sharded")]:
                self.tl.free(k)
