"""FSDP2 (``torch.distributed.fsdp.fully_shard``, torch/distributed/fsdp/_fully_shard/): parameters
stored as dim-0 shards over dp×cp, each decoder layer a unit all-gathered before its forward and its
backward (prefetched one unit ahead in backward), the root unit (embedding, final norm, LM head) kept
gathered through the step, unsharded gradients reduce-scattered into sharded fp32 (or bf16) gradients.
zero 3 = ``reshard_after_forward=True``, zero 2 = False (units stay gathered from forward to backward)."""

from __future__ import annotations

from trainmem.memory.engines.base import Engine, ModelStates, lora_base
from trainmem.memory.fp8_compile import fsdp_float8_gathered_bytes
from trainmem.memory.states import (
    nf4_packed_bytes,
    nf4_quant_state_bytes,
    optimizer_state_bytes,
    optimizer_step_temp_bytes,
    qlora_base_bytes,
)
from trainmem.setup import TrainingSetup
from trainmem.units import round_up_bytes as _r

__all__ = ["FSDP2Engine", "fsdp_shard_elems", "fsdp_replicated_quant_state_bytes", "fsdp_gathered_nf4_bytes",
           "fsdp2_offload_allgather_input_bytes", "fsdp2_offload_copy_in_pool_bytes"]


def fsdp_shard_elems(n: int, experts: int, n_experts: int, dp: int) -> int:
    """Elements FSDP2 keeps on one rank for ``n`` parameters, ``experts`` of them routed experts stacked
    as ``(E, ·, ·)`` tensors. ``fully_shard`` chunks every tensor on dim 0 and pads each chunk to
    ``ceil(dim0 / dp)`` rows (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): dense weights
    (dim 0 ≥ hidden) shard evenly, but with more ranks than experts each rank still holds a whole
    expert (ceil(E / dp) of E)."""
    if not experts or not n_experts:
        return -(-n // dp)
    return -(-(n - experts) // dp) + -(-n_experts // dp) * (experts // n_experts)


def fsdp_replicated_quant_state_bytes(s: TrainingSetup, n_quantized: int) -> int:
    """QLoRA bytes FSDP leaves whole on every rank: bitsandbytes' ``QuantState`` (absmax, nested absmax) is not
    a parameter — only the packed data, stored as ``bnb_4bit_quant_storage`` floats, is flattened and sharded
    (bitsandbytes PR #970 "Selectable Quantization Storage"; FSDP2 replicates non-parameter tensors, bitsandbytes
    issue #1945) — while torchao's ``NF4Tensor`` shards its scalers with its data (``fsdp_pre_all_gather``
    returns quantized_scalers, quantization_factor and quantized_data; torchao/dtypes/nf4tensor.py)."""
    return nf4_quant_state_bytes(n_quantized) if s.qlora and s.qlora_impl in ("bnb", "bnb-legacy") else 0


def fsdp_gathered_nf4_bytes(s: TrainingSetup, n_quantized: int) -> int:
    """What FSDP all-gathers for ``n_quantized`` NF4 weights: the packed 4-bit data (bitsandbytes: its scales are
    already on every rank), with the double-quantised scales for torchao — ≈ 0.5–0.52 B per weight, not the
    2 B of a 16-bit gather."""
    if s.qlora_impl == "torchao":
        return qlora_base_bytes(n_quantized)
    return nf4_packed_bytes(n_quantized)


def fsdp2_offload_allgather_input_bytes(allgather_output_bytes: int, dp: int) -> int:
    """Bytes of the GPU copies of a unit's sharded parameters that ``CPUOffloadPolicy`` makes for its all-gather:
    one rank's share of the all-gather output. torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
    ``foreach_all_gather``: under the all-gather copy-in stream ``_get_param_all_gather_inputs`` skips the
    foreach-copy fast path for offloaded parameters (``use_foreach_copy``: ``not fsdp_param.offload_to_cpu``) and
    takes ``FSDPParam.all_gather_inputs`` (_fsdp_param.py): ``_sharded_param_data.to(self.device,
    non_blocking=True)`` cast to param_dtype, one tensor per parameter; the all-gather output is allocated next,
    ``all_gather_copy_in`` copies the inputs into its local slice, and ``del param_all_gather_inputs`` drops them.
    Without offload the copy-in reads the GPU shards directly (nothing extra)."""
    return allgather_output_bytes // dp


def fsdp2_offload_copy_in_pool_bytes(s: TrainingSetup, root_params: int) -> int:
    """Bytes ``CPUOffloadPolicy`` adds to the all-gather copy-in stream's pool, free at the compute stream's peak
    (rounded up to the 2 MiB ``kRoundLarge``): the root unit's GPU copies of its sharded parameters
    (:func:`fsdp2_offload_allgather_input_bytes` of the root's all-gather output: ``root_params`` embedding + LM
    head elements on this rank before FSDP sharding, in param_dtype) are allocated on that stream before, and alive with, the root's all-gather output, so the pool
    holds both at once; the caching allocator keeps each stream's segments for that stream and never returns
    them without memory pressure (c10/cuda/CUDACachingAllocator.cpp, torch 2.13). The output's own block is
    :func:`trainmem.memory.overhead.stream_pool_reserve_bytes`' ``root_allgather_bytes``; later units' copies
    reuse these blocks and are dropped after their copy-in. 0 without offload, for FSDP1 (its copies go to the
    pre-unshard stream: :func:`trainmem.memory.engines.fsdp1.fsdp1_pre_unshard_pool_bytes`) and on one rank."""
    if s.engine != "fsdp2" or s.fsdp_version != 2 or s.offload != "optimizer+params" or s.fsdp_shard_degree <= 1:
        return 0
    elem = 4 if s.precision == "fp32" else 2
    raw = fsdp2_offload_allgather_input_bytes(elem * root_params, s.fsdp_shard_degree)
    return -(-raw // (2 * 1024 * 1024)) * (2 * 1024 * 1024)


class FSDP2Engine(Engine):
    amp_weight_copies = False  # MixedPrecisionPolicy(param_dtype=bf16) gathers 16-bit weights directly

    def model_states(self, notes: list[str]) -> ModelStates:
        s, rp, spec = self.s, self.rp, self.spec
        train_elem, base = lora_base(spec, s, rp, notes)
        T, dp = rp.trainable, s.fsdp_shard_degree
        experts = 0 if s.is_lora else spec.params.expert_total // s.ep // s.tp
        T_local = fsdp_shard_elems(T, experts, spec.num_experts // s.ep, dp)
        replicated = fsdp_replicated_quant_state_bytes(s, rp.frozen_quantized)
        shard_param = (base - replicated) // dp + replicated + T_local * train_elem
        if replicated:
            notes.append("QLoRA (bitsandbytes) under FSDP: only the packed 4-bit data is a parameter (sharded, "
                         "all-gathered); each rank keeps the whole quant state (absmax)")
        states = optimizer_state_bytes(s, T_local, train_elem, spec)
        st = ModelStates(unsharded_elem=4 if s.precision == "fp32" else 2, grad_elem=train_elem)
        if s.offload == "optimizer+params":
            # CPUOffloadPolicy moves the sharded parameters (DTensors) to the host; bitsandbytes' quant state is
            # not a parameter and stays where the model was loaded, on the GPU (_fsdp_param.py _init_sharded_param)
            st.params = replicated
            st.host = shard_param - replicated + T * train_elem // dp + states
            notes.append("FSDP2 CPUOffloadPolicy: sharded parameters, gradients and optimizer states live in pinned host memory; the step runs on the CPU")
            return st
        st.params, st.states = shard_param, states
        st.step_temp = optimizer_step_temp_bytes(s, T_local, train_elem, train_elem)
        return st

    # -- collectives -------------------------------------------------------------------------------
    def _local(self, n: int, experts: int) -> int:
        return fsdp_shard_elems(n, experts, self.spec.num_experts // self.s.ep, self.s.fsdp_shard_degree)

    def _ag_bytes(self, n: int, experts: int, quantized: int = 0) -> int:
        """The all-gather output: every rank's padded shard (dp × local), in param_dtype; a QLoRA unit's
        ``quantized`` NF4 weights are gathered packed (:func:`fsdp_gathered_nf4_bytes`), the rest 16-bit."""
        dp = self.s.fsdp_shard_degree
        if quantized and self.s.fp8_allgather:  # (``quantized``: the unit's Float8Linear weights, gathered in fp8)
            return dp * -(-fsdp_float8_gathered_bytes(n, quantized) // dp)
        if quantized:
            return dp * -(-(fsdp_gathered_nf4_bytes(self.s, quantized) + 2 * (n - quantized)) // dp)
        return self.st.unsharded_elem * dp * self._local(n, experts)

    def gather(self, key: str, n: int, experts: int = 0, quantized: int = 0) -> None:
        """Unshard a unit (_fsdp_param_group.py): unshard() first frees the previous all-gather's output
        (kept as ``all_gather_state`` for stream order), all-gathers into a new flat output, and
        wait_for_unshard() copies it out into the unsharded parameters; that output then stays alive
        until the next unshard. A prefetched unit already has its output (``ag_pending``)."""
        tl = self.tl
        if tl.has(key):
            return
        pending = "ag_pending:" + key
        if not tl.has(pending):
            tl.free("ag_state")
            self._all_gather_out(pending, self._ag_bytes(n, experts, quantized))
        # (the unsharded parameters are views of the padded per-parameter all-gather outputs)
        tl.alloc(key, "parameters", self._ag_bytes(n, experts, quantized))
        tl.free("ag_state")
        tl.rename(pending, "ag_state")

    def prefetch(self, key: str, n: int, experts: int = 0, quantized: int = 0) -> None:
        """Backward prefetch: all-gather the next unit now, copy it out at its pre-backward."""
        tl = self.tl
        if tl.has(key) or tl.has("ag_pending:" + key):
            return
        tl.free("ag_state")
        self._all_gather_out("ag_pending:" + key, self._ag_bytes(n, experts, quantized))

    def _offloaded(self) -> bool:
        return self.s.offload == "optimizer+params"

    def _all_gather_out(self, pending: str, size: int) -> None:
        """``foreach_all_gather`` on the copy-in stream: with ``CPUOffloadPolicy`` first the GPU copies of the
        sharded parameters (:func:`fsdp2_offload_allgather_input_bytes`), then the all-gather output; the
        copies are dropped after the copy-in."""
        tl = self.tl
        h2d = fsdp2_offload_allgather_input_bytes(size, self.s.fsdp_shard_degree) if self._offloaded() else 0
        tl.alloc(pending + ":h2d", "communication_buffers", h2d, side_stream=True)
        tl.alloc(pending, "communication_buffers", size, side_stream=True)
        tl.free(pending + ":h2d")

    def reduce(self, keys: list[str], n: int, experts: int = 0) -> None:
        """post_backward: free the previous reduce-scatter input (``reduce_scatter_state``), copy the
        unsharded grads into a new reduce-scatter input in reduce_dtype (fp32 under the mixed policy),
        free them, and accumulate the sharded output into the sharded gradient (made at the first
        micro-batch)."""
        if n <= 0:
            return
        tl, local = self.tl, self._local(n, experts)
        rs_elem = 2 if self.s.precision == "bf16" else 4
        tl.free("rs_state")
        tl.alloc("rs_in", "communication_buffers", rs_elem * self.s.fsdp_shard_degree * local)
        for k in keys:
            tl.free(k + ":unsharded")
        shard = keys[0] + ":sharded"
        if self.s.offload == "optimizer+params":
            # CPUOffloadPolicy: foreach_reduce copies each new sharded gradient (a view of the reduce-scatter
            # output, reduce_dtype) to the pinned host gradient (``new_sharded_grad.to("cpu")``) and keeps no
            # GPU reference: the output is freed when foreach_reduce returns, and accumulation (grad_accum > 1)
            # adds on the CPU (_fsdp_collectives.py foreach_reduce, torch 2.13)
            tl.spike(shard + ":rs_out", "communication_buffers", rs_elem * local, side_stream=True)
        elif not tl.has(shard):
            tl.alloc(shard, "gradients", self.st.grad_elem * local, side_stream=True)  # reduce-scatter stream
        else:
            tl.spike(shard + ":new", "temporaries", self.st.grad_elem * local, side_stream=True)
        tl.rename("rs_in", "rs_state")

    # -- hooks -------------------------------------------------------------------------------------
    def _unit(self, j: int) -> tuple[str, int, int, int]:
        """(key, parameters, routed-expert parameters, NF4-quantised weights — or, with ``fp8_allgather``, the weights
        gathered in fp8) of layer j's unit."""
        p = self.plan
        quantized = self.rp.layer_matmul[j] if (self.s.qlora or self.s.fp8_allgather) else 0
        return f"unit{p.layer_ids[j]}", p.layer_params[j], p.layer_experts[j], quantized

    def forward_start(self, mb: int) -> None:
        if not self.tl.has("root"):
            self.gather("root", self.rp.embedding + self.rp.lm_head)

    def layer_forward_start(self, j: int) -> None:
        self.gather(*self._unit(j))

    def layer_forward_end(self, j: int) -> None:
        if self.s.zero == 3:
            self.tl.free(self._unit(j)[0])

    def bulk_forward_start(self, js: list[int]) -> None:
        j0, n = js[0], len(js)
        if self.s.zero == 2 and not self.tl.has(f"unitbulk{j0}"):
            _, params, experts, quantized = self._unit(j0)
            self.tl.alloc(f"unitbulk{j0}", "parameters", _r(self._ag_bytes(params, experts, quantized)) * n)

    def backward_start(self, mb: int) -> None:
        self.tl.free("ag_state")  # the root pre-backward waits for and drops the last all-gather output
        if self.s.zero == 3 and self.plan.layer_ids:
            # ... and, from the hook on the forward output, prefetches the last layer before the loss backward
            self.prefetch(*self._unit(len(self.plan.layer_ids) - 1))

    def layer_backward_start(self, j: int) -> None:
        if self.s.zero == 3:
            self.gather(*self._unit(j))
            # in backward wait_for_unshard keeps no all_gather_state (only the forward's implicit prefetch
            # does): the output is freed right after its copy-out (_fsdp_param_group.py wait_for_unshard,
            # torch 2.13); seen at layer 0 and the embedding backward, where no prefetch follows (traced)
            self.tl.free("ag_state")
            if j > 0:
                self.prefetch(*self._unit(j - 1))

    def grad(self, key: str, n: int, mb: int) -> None:
        """Autograd writes the unsharded grad (param_dtype) of the gathered parameter; the unit's
        post_backward (:meth:`reduce`) turns it into the sharded gradient."""
        if n <= 0:
            return
        size = self.st.unsharded_elem * n
        if self.tl.has(key + ":unsharded"):  # a tied weight's second contribution is added in place
            self.tl.spike(key + ":new", "temporaries", size, aggregate=True)
        else:  # (a unit part's gradients in one block: one tensor per parameter in torch, never one cudaMalloc)
            self.tl.alloc(key + ":unsharded", "temporaries", size, aggregate=True)

    def layer_backward_end(self, j: int) -> None:
        p = self.plan
        idx = p.layer_ids[j]
        # post_backward reshards (frees the unsharded parameters) before foreach_reduce allocates the
        # reduce-scatter input (_fsdp_param_group.py post_backward, torch 2.13; traced)
        self.tl.free(f"unit{idx}")
        self.reduce([f"g{idx}", f"g{idx}d", f"g{idx}m", f"g{idx}o"], p.layer_train[j], p.layer_experts[j])

    def _sharded_grads_on_host(self) -> bool:
        """CPUOffloadPolicy keeps no sharded gradient on the GPU (see :meth:`reduce`)."""
        return self.s.offload == "optimizer+params"

    def bulk_grads(self, j0: int, n: int) -> None:
        key = f"gbulk{j0}:sharded"
        if self._sharded_grads_on_host():
            return  # the sharded gradients live on the host (see :meth:`reduce`)
        if not self.tl.has(key):
            local = self._local(self.plan.layer_train[j0], self.plan.layer_experts[j0])
            self.tl.alloc(key, "gradients", _r(self.st.grad_elem * local) * n, side_stream=True)

    def bulk_backward_end(self, js: list[int]) -> None:
        tl, p = self.tl, self.plan
        if self.s.zero == 2:
            tl.free(f"unitbulk{js[0]}")
            return
        tl.free(f"ag_pending:unit{p.layer_ids[js[-1]]}")
        tl.free(f"unit{p.layer_ids[js[-1]]}")
        if js[0] > 0:
            self.prefetch(*self._unit(js[0] - 1))

    def backward_end(self, mb: int) -> None:
        # the root unit (embedding, final norm, LM head) reduces last; the final callback then waits for
        # the outstanding collectives and drops their buffers
        p = self.plan
        self.tl.free("root")  # resharded after backward, before its reduce-scatter (as a layer's unit)
        self.reduce(["g_emb", "g_head", "g_pos", "g_vis"], p.emb_train + p.head_train + p.vision_train)
        self.tl.free("rs_state")
        self.tl.free("ag_state")
