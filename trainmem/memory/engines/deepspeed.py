"""DeepSpeed ZeRO 0–3 (deepspeed 0.19.5: runtime/engine.py, runtime/zero/stage_1_and_2.py, stage3.py,
partition_parameters.py, fp16/fused_optimizer.py). bf16/fp16: 16-bit parameters (÷ dp at stage 3), fp32 master
weights and optimizer states (÷ dp from stage 1; experts ÷ dp/ep). fp32 with ZeRO ≥ 1: the same ZeRO optimizer
with fp32 in place of the 16-bit dtype (a separate fp32 master clone, a 4-byte reduce bucket); fp32 ZeRO-0 is
the bare FusedAdam. A reduce bucket of ``reduce_bucket_size`` elements, the gradient partition (stage ≥ 2),
the fp32 gradient copy ``step()`` builds, ZeRO-0's flattened all-reduce bucket, and stage 3's persistent
(never re-partitioned) small parameters. Checked against DeepSpeed itself on its CPU accelerator
(benchmarks/deepspeed_cpu.py, docs/deepspeed_cpu.md)."""

from __future__ import annotations

from trainmem.memory.engines.base import Engine, ModelStates, lora_base, local_experts, zero_shard_elems
from trainmem.memory.states import optimizer_state_bytes
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["DeepSpeedEngine", "DS_REDUCE_BUCKET", "DS_MAX_REUSE_DISTANCE", "DS_ALLREDUCE_BUCKET",
           "ds_persistent_elems", "ds_largest_param_elems"]

#: DeepSpeed defaults (deepspeed/runtime/zero/config.py, v0.19.5), elements.
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_PARAM_PERSISTENCE = 100_000  # stage3_param_persistence_threshold
DS_MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance (zero/config.py:244)
#: ZeRO-0's gradient all-reduce bucket, MEMORY_OPT_ALLREDUCE_SIZE (runtime/engine.py:157), elements.
DS_ALLREDUCE_BUCKET = 500_000_000


def ds_persistent_elems(spec: ModelSpec, layer_idx: int | None) -> int:
    """Elements of the parameters that ZeRO-3 keeps gathered on every rank: those of at most
    ``stage3_param_persistence_threshold`` (1e5) elements (deepspeed 0.19.5 runtime/zero/parameter_offload.py:311-323
    ``mark_persistent_parameters``: ``param.ds_numel <= param_threshold``; stage3_model_persistence_threshold
    is unbounded by default, zero/config.py:228). Of decoder layer ``layer_idx``:
    its linear weights under the threshold, its norms, biases (and other vectors) and a router under it;
    ``layer_idx`` None: the parameters outside the layers (final norm; embedding / LM head only when under
    the threshold). Routed experts (stacked 3-D weights) are never under it."""
    from trainmem.model.lora_targets import layer_linears

    t = DS_PARAM_PERSISTENCE
    norm_ok = spec.hidden_size <= t  # a norm's weight (and bias) has hidden_size elements
    if layer_idx is None:
        p = spec.params
        return (p.final_norm if norm_ok else 0) + sum(x for x in (p.embedding, p.lm_head) if x <= t)
    lp = spec.params.layers[layer_idx]
    weights = [lin.fin * lin.fout for lin in layer_linears(spec, layer_idx)]
    vectors = max(0, lp.attention + lp.mlp + lp.shared_experts - sum(weights))  # biases, q/k and MLA norms
    router = lp.router if lp.router <= t else 0
    return sum(w for w in weights if w <= t) + vectors + (lp.norms if norm_ok else 0) + router


def ds_largest_param_elems(spec: ModelSpec, s: TrainingSetup) -> int:
    """Elements of the largest trainable parameter tensor, whose gradient the ZeRO step's per-tensor
    checks copy whole (full fine-tuning: the embedding / LM head, a layer's largest linear weight or,
    in an MoE layer, its stacked routed-expert weight over ep ranks, transformers 5.x ``experts.gate_up_proj``;
    LoRA: the largest adapter matrix, rank · max(in, out))."""
    from trainmem.model.lora_targets import layer_linears, targeted_head_linear, targeted_layer_linears

    ep = s.ep
    if s.is_lora:  # (an adapted output head: its lora_B, V × r)
        head = targeted_head_linear(spec, s.lora_targets)
        return max([s.lora_rank * max(lin.fin, lin.fout) for i in range(spec.num_layers)
                    for lin in targeted_layer_linears(spec, s.lora_targets, i)]
                   + ([s.lora_rank * head.fout] if head else []), default=0)
    p = spec.params
    out = max(p.embedding, p.lm_head)
    for i, lp in enumerate(p.layers):
        out = max(out, max((lin.fin * lin.fout for lin in layer_linears(spec, i)), default=0))
        if lp.experts:
            out = max(out, (lp.experts * 2 // 3 if spec.mlp_gated else lp.experts // 2) // ep)
    return out


class DeepSpeedEngine(Engine):
    boundary_differs = True  # the boundary micro-batch reduces

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.zero3 = self.s.zero == 3
        self.keep_all = self.zero3 and 2 * self.rp.total < DS_MAX_REUSE_DISTANCE
        self.boundary = True
        self.in_bucket = 0    # gradient elements in the stage 1/2 reduce bucket
        self.unreduced = 0    # stage 1's epilogue: gradient elements still in .grad
        self.produced = 0     # gradient elements put into buckets in this backward (epilogue)
        self.partition_set = False  # grads_in_partition is set (from a bucket reduction to the epilogue)

    def model_states(self, notes: list[str]) -> ModelStates:
        s, rp, spec, z = self.s, self.rp, self.spec, self.s.zero
        _, base = lora_base(spec, s, rp, notes)
        T, experts = rp.trainable, local_experts(spec, s, rp)
        # MoE: expert parameters are partitioned over the expert-data-parallel group (dp / ep), dense ones
        # over dp (deepspeed/utils/groups.py _create_expert_and_data_parallel; stage_1_and_2.py
        # partitions each param group over its own ``dp_process_group``)
        T_sh = zero_shard_elems(T, experts, s.dp if z >= 1 else 1, s.ep)
        if s.precision == "fp32" and z == 0:
            # no ZeRO, no 16-bit: the bare basic optimizer steps the fp32 parameters and their .grad
            # (engine.py:1966-1968 returns no wrapper, 2026-2027)
            return ModelStates(params=4 * rp.total, grad_elem=4, states=optimizer_state_bytes(s, T_sh, 4, spec))
        # the ZeRO optimizers' "16-bit" dtype is the model's: 2 B with bf16/fp16, 4 B with fp32
        lp = 4 if s.precision == "fp32" else 2
        # (LoRA: the frozen base as stored, NF4 with --qlora; the engine casts adapters to the model's dtype)
        p16 = base + lp * T if s.is_lora else lp * rp.total
        st = ModelStates(params=zero_shard_elems(p16, lp * experts, s.dp, s.ep) if z == 3 else p16,
                         # a separate fp32 master partition also with fp32 parameters: stage_1_and_2.py:486-506
                         # (.to(master dtype) then .clone()), stage3.py:1088-1091 (its alias branch compares a
                         # tensor's device with a device-name string, which is never equal)
                         master=4 * T_sh, states=optimizer_state_bytes(s, T_sh, 4, spec), grad_elem=lp,
                         unsharded_elem=lp, step_grad_fp32=self._step_grad_bytes(lp, T_sh))
        if s.offload != "none":
            st.host = st.master + st.states + st.step_grad_fp32 + (st.params if s.offload == "optimizer+params" else 0)
            st.master = st.states = st.step_grad_fp32 = 0
            if s.offload == "optimizer+params":
                st.params = 0
            notes.append("DeepSpeed ZeRO-Offload: fp32 master weights, optimizer states and the fp32 gradient partition in pinned host memory; DeepSpeedCPUAdam steps on the CPU")
        notes.append(f"DeepSpeed 0.19 defaults: reduce_bucket_size=allgather_bucket_size={DS_REDUCE_BUCKET:.0e} elements "
                     "(the 16-bit reduce bucket is allocated at that size whatever the model and world size), "
                     "FusedAdam (no foreach temporaries), contiguous_gradients=true, overlap_comm=false (true for "
                     "stage 3)")
        return st

    def _step_grad_bytes(self, lp: int, T_sh: int) -> int:
        """The gradient copies ``step()`` builds. ZeRO-0's FP16_Optimizer: per-parameter fp32 copies and a
        flat fp32 copy of every gradient (fused_optimizer.py:288-292). Stages 1-3: the averaged gradients
        are flattened (a copy in the model's dtype) and cast to fp32 (a second copy, none when already
        fp32: ``Tensor.to`` returns its input): stage_1_and_2.py:2324-2333, stage3.py:2368-2372."""
        if self.s.zero == 0:
            return 8 * T_sh
        if self.s.offload != "none" and lp == 2:  # (ZeRO-Offload, not measured here: the copies as before)
            return 4 * T_sh if self.s.zero == 3 else 6 * T_sh
        return lp * T_sh + (4 * T_sh if lp != 4 else 0)

    def _partition_bytes(self) -> int:
        """The gradient partition (grads_in_partition / stage 3's grad buffer), in the parameters' dtype."""
        return self.st.grad_elem * zero_shard_elems(self.rp.trainable, local_experts(self.spec, self.s, self.rp), self.s.dp, self.s.ep)

    def _persistent(self, layer_idx: int | None) -> int:
        """Elements of the always-gathered small parameters (stage 3 with dp > 1; full fine-tuning only)."""
        if not self.zero3 or self.s.dp <= 1 or self.s.is_lora:
            return 0
        return ds_persistent_elems(self.spec, layer_idx)

    def _persistent_total(self) -> int:
        return self._persistent(None) + sum(self._persistent(i) for i in range(self.spec.num_layers))

    def alloc_static(self) -> None:
        super().alloc_static()
        if self.zero3:
            # stage 3 allocates its reduce bucket and the gradient partition at init (stage3.py:702, 711), in
            # the model's dtype
            self.tl.alloc("ipg_buffer", "communication_buffers", self.st.grad_elem * DS_REDUCE_BUCKET)
            self.tl.alloc("grad_partition", "gradients", self._partition_bytes())
            # parameters under stage3_param_persistence_threshold stay gathered between steps (gathered again
            # in _post_step, stage3.py:2540-2542)
            self.tl.alloc("ds_persistent", "parameters", self.st.unsharded_elem * self._persistent_total())

    # -- stage 3 parameter gathering ---------------------------------------------------------------
    def gather(self, key: str, n: int) -> None:
        tl = self.tl
        if tl.has(key) or self.s.dp <= 1:
            # at a partition world size of 1 nothing is gathered: the parameter aliases its partition
            # (partition_parameters.py:1514-1515 _no_gather_coalesced, NoGather(Coalesced)Handle:61-93)
            return
        if self.keep_all:
            # stage3_max_reuse_distance: a parameter used again within 1e9 gathered elements is not
            # released (partitioned_param_coordinator.py:634-664): for a model of under 5e8 parameters
            # the whole gathered model stays from its forward to its backward
            if not tl.has("ds_gathered"):
                n_all = self.rp.total - self._persistent_total()
                # a coalesced all-gather lands in one flat buffer, then each parameter gets its own copy
                # (torch.cat of its partitions, partition_parameters.py:1298, 773); the flat buffer lives
                # until the last parameter of the fetch is consumed (the handle stays in the coordinator's
                # inflight registry, partitioned_param_coordinator.py:404-407): through the forward, for a
                # first fetch that prefetches up to stage3_prefetch_bucket_size elements
                tl.alloc("ds_ag_staging", "temporaries",
                         self.st.unsharded_elem * min(n_all, DS_PREFETCH_BUCKET))
                tl.alloc("ds_gathered", "parameters", self.st.unsharded_elem * n_all)
            return
        tl.alloc(key, "parameters", self.st.unsharded_elem * n)

    def _unit(self, j: int) -> tuple[str, int]:
        """A layer's key and the elements its gather allocates (the persistent ones are always there)."""
        idx = self.plan.layer_ids[j]
        return f"unit{idx}", self.plan.layer_params[j] - self._persistent(idx)

    def layer_forward_start(self, j: int) -> None:
        if self.zero3:
            self.gather(*self._unit(j))

    def layer_forward_end(self, j: int) -> None:
        if self.zero3:
            self.tl.free(self._unit(j)[0])
            if j == len(self.plan.layer_ids) - 1:
                self.tl.free("ds_ag_staging")

    def layer_backward_start(self, j: int) -> None:
        if self.zero3:
            self.gather(*self._unit(j))
            if j > 0:
                self.gather(*self._unit(j - 1))

    def layer_backward_end(self, j: int) -> None:
        if self.zero3:
            self.tl.free(self._unit(j)[0])

    def bulk_backward_end(self, js: list[int]) -> None:
        if self.zero3:
            self.tl.free(f"ag_pending:unit{self.plan.layer_ids[js[-1]]}")
            self.tl.free(self._unit(js[-1])[0])
            if js[0] > 0:
                self.gather(*self._unit(js[0] - 1))

    # -- gradients ---------------------------------------------------------------------------------
    def after_gradient_stream(self, mb: int, boundary: bool) -> None:
        self.boundary = boundary
        if self.s.zero in (1, 2) and not self.tl.has("ipg_buffer"):
            # contiguous_gradients: one reduce bucket (ipg buffer) of reduce_bucket_size elements in the model's
            # dtype, never capped by the model size, also at world size 1 (stage_1_and_2.py:2476): stage 2
            # allocates it in every micro-batch's backward, stage 1 at the first backward until the boundary
            self.tl.alloc("ipg_buffer", "communication_buffers", self.st.grad_elem * DS_REDUCE_BUCKET)

    def _bucket_add(self, n: int) -> None:
        """``n`` gradient elements are copied into the reduce bucket; a full bucket is reduced first
        (reduce_independent_p_g_buckets_and_remove_grads, stage_1_and_2.py:1172-1183, stage3.py:1488-1508)."""
        while n > 0:
            if self.in_bucket >= DS_REDUCE_BUCKET:
                self._reduce_bucket()
            take = min(n, DS_REDUCE_BUCKET - self.in_bucket)
            self.in_bucket += take
            self.produced += take
            n -= take
            if self.unreduced:  # stage 1's epilogue: the gradient leaves .grad for the bucket
                self.unreduced = max(0, self.unreduced - take)
                self.tl.free("g_unreduced")
                self.tl.alloc("g_unreduced", "gradients", self.st.grad_elem * self.unreduced)

    def _reduce_bucket(self) -> None:
        """Stages 1/2, reduce_ipg_grads: average_tensor all-reduces the bucket through a flattened copy of its
        slices (use_multi_rank_bucket_allreduce, allreduce_bucket's flatten, stage_1_and_2.py:1412-1433, 1814),
        then this rank's gradients are copied into the partition buffer (1745-1753). Stage 3,
        __reduce_and_partition_ipg_grads: reduce_scatter_coalesced interleaves the bucket's gradients (padded
        per rank) into one new buffer for the reduce-scatter (runtime/comm/coalesced_collectives.py:184-199),
        alive until partition_grads has copied this rank's part into the gradient buffer (stage3.py:1539-1577)."""
        if self.in_bucket:
            if self.zero3 or self._bucket_spans_ranks():
                self.tl.spike("reduce_flat", "temporaries", self.st.grad_elem * self.in_bucket)
            if not self.zero3:
                self._partition_copy()
        self.in_bucket = 0

    def _bucket_spans_ranks(self) -> bool:
        """Stages 1/2: does the bucket hold gradients of more than one rank's partition? average_tensor merges
        consecutive slices bound for the same rank (stage_1_and_2.py:1398-1406), and flattening a single
        tensor returns a view of it: a bucket within one partition is reduced without a copy. The bucket's
        place in the flat parameter buffer (one parameter group, in registration order): backward produces
        the gradients in reverse order (the LM head first, the embedding last); stage 1's epilogue walks the
        group in order."""
        if self.s.dp <= 1:
            return False
        T = self.rp.trainable
        if self.unreduced or self.s.zero == 1:  # stage 1's epilogue: [produced - in_bucket, produced)
            lo, hi = self.produced - self.in_bucket, self.produced
        else:  # stage 2: the bucket's gradients came last-parameter first
            lo, hi = T - self.produced, T - self.produced + self.in_bucket
        part = -(-T // self.s.dp)
        return max(0, lo) // part != (min(T, hi) - 1) // part

    def _partition_copy(self) -> None:
        """``copy_grads_in_partition`` creates ``grads_in_partition`` when it is None (stage_1_and_2.py:1643-
        1653). The epilogue's ``_release_ipg_buffers`` sets it to None (807-812) while ``all_grad_tensors``
        keeps the views (898-939): the next micro-batch creates a new one next to it, adds it into the kept
        one and drops it. (ZeRO-Offload is not measured here: it keeps one partition, as before.)"""
        if self.s.offload != "none":
            if self.s.zero == 2 and not self.tl.has("grad_partition"):
                self.tl.alloc("grad_partition", "gradients", self._partition_bytes())
            return
        if self.partition_set:
            return
        self.partition_set = True
        if not self.tl.has("grad_partition"):
            self.tl.alloc("grad_partition", "gradients", self._partition_bytes())
        else:
            self.tl.alloc("grad_partition_mb", "temporaries", self._partition_bytes())

    def grad(self, key: str, n: int, mb: int) -> None:
        if n <= 0:
            return
        if self.s.zero >= 2:
            # contiguous_gradients: each grad is copied into the ipg bucket and freed
            self.tl.spike(key + ":bf16", "temporaries", self.st.grad_elem * n)
            self._bucket_add(n)
            return
        # gradients in the parameters' dtype: 16-bit with bf16/fp16, fp32 with --precision fp32
        if not self.tl.has(key):
            self.tl.alloc(key, "gradients", self.st.grad_elem * n)
        else:
            self.tl.spike(key + ":new", "temporaries", self.st.grad_elem * n)

    def bulk_grads(self, j0: int, n: int) -> None:
        if self.s.zero >= 2:
            self._bucket_add(self.plan.layer_train[j0] * n)
            return
        from trainmem.units import round_up_bytes as _r

        key = f"gbulk{j0}"
        if not self.tl.has(key):
            self.tl.alloc(key, "gradients", sum(_r(self.st.grad_elem * x) for x in self.plan.grad_pieces(j0) if x > 0) * n)

    def backward_end(self, mb: int) -> None:
        self.tl.free("ds_gathered")
        if self.s.zero == 0 and self.boundary:
            # ZeRO-0 all-reduces the gradients at the boundary through flattened copies of up to
            # MEMORY_OPT_ALLREDUCE_SIZE elements, freed after the copy back (engine.py:2935-2937 ->
            # allreduce_gradients 2846-2868 -> allreduce_no_retain 3645-3656 -> allreduce_bucket's flatten 3614)
            self.tl.spike("allreduce_flat", "temporaries",
                          self.st.grad_elem * min(self.rp.trainable, DS_ALLREDUCE_BUCKET))
        if self.s.zero == 1 and self.boundary:
            self.produced = 0
            # stage 1 reduces at the boundary only: every gradient moves from .grad into the bucket
            # (reduce_gradients -> reduce_independent_p_g_buckets_and_remove_grads, stage_1_and_2.py:840-860)
            for k in [k for k, (cat, _) in self.tl.live.items() if cat == "gradients" and k.startswith("g")
                      and k != "grad_buffer"]:
                self.tl.free(k)
            self.unreduced = self.rp.trainable
            self.tl.alloc("g_unreduced", "gradients", self.st.grad_elem * self.unreduced)
            self._bucket_add(self.rp.trainable)
        if self.zero3:  # the epilogue reduces what is left in the bucket (stage3.py:1326-1329)
            self._reduce_bucket()
        if self.s.zero in (1, 2) and (self.s.zero == 2 or self.boundary):
            # the epilogue reduces the last bucket into the partition, then releases the bucket and .grad
            # (independent_gradient_partition_epilogue, stage_1_and_2.py:898-946)
            self._reduce_bucket()
            self.tl.free("g_unreduced")
            self.tl.free("ipg_buffer")
            self.tl.free("grad_partition_mb")
            self.partition_set = False
        self.produced = self.in_bucket = 0

    # -- optimizer ---------------------------------------------------------------------------------
    def before_step(self) -> None:
        if self.s.zero >= 2 and not self.tl.has("grad_partition"):
            self.tl.alloc("grad_partition", "gradients", self._partition_bytes())
        if not self.zero3:
            self.tl.free("ipg_buffer")

    def _check_spikes(self) -> None:
        """The step's per-tensor passes over the averaged gradients, before the flat copy: the overflow check
        of 16-bit stages 1/2 (check_grad_overflow, on by default: ``x.float()``, ``isnan``, ``isinf``, their
        ``logical_or`` and its ``.float()``, 4 + 1 + 1 + 1 + 4 B per element, stage_1_and_2.py:2264, 2436-2466;
        stage 3 checks fp16 only, two bool maps of its partition, stage3.py:2521, 2697-2705) and the gradient
        norm (``g.double()``, 8 B per element: stage_1_and_2.py:2062-2064, stage3.py:2253-2255). Stages 1/2
        see each gradient's part in this rank's partition, stage 3 its partition of each parameter."""
        s, z = self.s, self.s.zero
        T_sh = zero_shard_elems(self.rp.trainable, local_experts(self.spec, s, self.rp), s.dp, s.ep)
        largest = ds_largest_param_elems(self.spec, s)
        n = min(largest, T_sh) if z in (1, 2) else -(-largest // s.dp)
        if z in (1, 2) and s.precision != "fp32":
            self.tl.spike("overflow_check", "temporaries", 11 * n)
        if z == 3 and s.precision == "mixed-fp16":
            self.tl.spike("overflow_check", "temporaries", T_sh)
        self.tl.spike("grad_norm", "temporaries", 8 * n)

    def step(self) -> None:
        # stage 3 releases every gathered parameter, the persistent ones too, before the step
        # (stage3.py:2576-2577 -> coordinator release_and_reset_all) and gathers those again after it (2540-2542)
        persistent = self.tl.live.get("ds_persistent", ("", 0))[1]
        self.tl.free("ds_persistent")
        if self.s.zero >= 1 and self.s.offload == "none":
            self._check_spikes()
        if self.st.step_grad_fp32:
            self.tl.alloc("fp32_grad_partition", "temporaries", self.st.step_grad_fp32)
        super().step()
        self.tl.free("fp32_grad_partition")
        self.tl.alloc("ds_persistent", "parameters", persistent)

    def _freed_at_zero_grad(self, key: str) -> bool:
        # stage 3's gradient partition is a buffer from init, zeroed in place
        return key != "grad_buffer" and not (self.zero3 and key == "grad_partition")
