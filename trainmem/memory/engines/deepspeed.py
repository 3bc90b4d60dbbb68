"""DeepSpeed ZeRO 0–3 with bf16/fp16 (deepspeed 0.19.5: runtime/zero/stage_1_and_2.py, stage3.py,
fp16/fused_optimizer.py): 16-bit parameters (÷ dp at stage 3), fp32 master weights and optimizer states
(÷ dp from stage 1; experts ÷ dp/ep), a 16-bit reduce bucket of ``reduce_bucket_size`` elements, the
16-bit gradient partition (stage ≥ 2) and the fp32 gradient copy ``step()`` builds."""

from __future__ import annotations

from trainmem.memory.engines.base import Engine, ModelStates, lora_base, local_experts, zero_shard_elems
from trainmem.memory.states import optimizer_state_bytes

__all__ = ["DeepSpeedEngine", "DS_REDUCE_BUCKET", "DS_MAX_REUSE_DISTANCE"]

#: DeepSpeed defaults (deepspeed/runtime/zero/config.py, v0.19.5), elements.
DS_REDUCE_BUCKET = 500_000_000
DS_PREFETCH_BUCKET = 50_000_000
DS_PARAM_PERSISTENCE = 100_000
DS_MAX_REUSE_DISTANCE = 1_000_000_000  # stage3_max_reuse_distance (zero/config.py:244)


class DeepSpeedEngine(Engine):
    boundary_differs = True  # the boundary micro-batch reduces

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.produced = 0
        self.zero3 = self.s.zero == 3
        self.keep_all = self.zero3 and 2 * self.rp.total < DS_MAX_REUSE_DISTANCE

    def model_states(self, notes: list[str]) -> ModelStates:
        s, rp, spec, z = self.s, self.rp, self.spec, self.s.zero
        _, base = lora_base(spec, s, rp, notes)
        T, experts = rp.trainable, local_experts(spec, s, rp)
        # MoE: expert parameters are partitioned over the expert-data-parallel group (dp / ep), dense ones
        # over dp (deepspeed/utils/groups.py _create_expert_and_data_parallel; stage_1_and_2.py
        # partitions each param group over its own ``dp_process_group``)
        T_sh = zero_shard_elems(T, experts, s.dp if z >= 1 else 1, s.ep)
        if s.precision == "fp32":
            return ModelStates(params=4 * rp.total, grad_elem=4, states=optimizer_state_bytes(s, T_sh, 4, spec))
        # (LoRA: the frozen base as stored, NF4 with --qlora; the engine casts adapters to 16 bits)
        p16 = base + 2 * T if s.is_lora else 2 * rp.total
        st = ModelStates(params=zero_shard_elems(p16, 2 * experts, s.dp, s.ep) if z == 3 else p16,
                         master=4 * T_sh, states=optimizer_state_bytes(s, T_sh, 4, spec), grad_elem=2,
                         unsharded_elem=2,
                         # step(): stages 1/2 build the fp32 gradient partition next to a 16-bit flat copy
                         # of it (stage_1_and_2.py:2324-2336); ZeRO-0's FP16_Optimizer makes per-parameter
                         # fp32 copies and a flat fp32 copy of every gradient (fused_optimizer.py:288-292)
                         step_grad_fp32=8 * T_sh if z == 0 else (4 + 2) * T_sh if z in (1, 2) else 4 * T_sh)
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

    def _partition_bytes(self) -> int:
        """The gradient partition (grads_in_partition / stage 3's grad buffer), in the parameters' dtype."""
        return self.st.grad_elem * zero_shard_elems(self.rp.trainable, local_experts(self.spec, self.s, self.rp), self.s.dp, self.s.ep)

    def _sixteen_bit(self) -> bool:
        return self.s.precision != "fp32"

    def alloc_static(self) -> None:
        super().alloc_static()
        if self.zero3 and self._sixteen_bit():
            # stage 3 allocates its reduce bucket and the 16-bit gradient partition at init (stage3.py:702, 711)
            self.tl.alloc("ipg_buffer", "communication_buffers", 2 * DS_REDUCE_BUCKET)
            self.tl.alloc("grad_partition", "gradients", self._partition_bytes())

    # -- stage 3 parameter gathering ---------------------------------------------------------------
    def gather(self, key: str, n: int) -> None:
        tl = self.tl
        if tl.has(key):
            return
        if self.keep_all:
            # stage3_max_reuse_distance: a parameter used again within 1e9 gathered elements is not
            # released (partitioned_param_coordinator.py:634-664): for a model of under 5e8 parameters
            # the whole gathered model stays from its forward to its backward
            if not tl.has("ds_gathered"):
                tl.alloc("ds_gathered", "parameters", self.st.unsharded_elem * self.rp.total)
            return
        tl.alloc(key, "parameters", self.st.unsharded_elem * n)

    def _unit(self, j: int) -> tuple[str, int]:
        return f"unit{self.plan.layer_ids[j]}", self.plan.layer_params[j]

    def layer_forward_start(self, j: int) -> None:
        if self.zero3:
            self.gather(*self._unit(j))

    def layer_forward_end(self, j: int) -> None:
        if self.zero3:
            self.tl.free(self._unit(j)[0])

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
        if self.s.zero in (1, 2) and self._sixteen_bit() and not self.tl.has("ipg_buffer"):
            # contiguous_gradients: one 16-bit reduce bucket (ipg buffer) of reduce_bucket_size elements,
            # never capped by the model size, also at world size 1 (stage_1_and_2.py:2476): stage 2
            # allocates it in every micro-batch's backward, stage 1 at the first backward until the boundary
            self.tl.alloc("ipg_buffer", "communication_buffers", 2 * DS_REDUCE_BUCKET)

    def _count_produced(self, n: int) -> None:
        """The 16-bit partition buffer (grads_in_partition) is created at the first bucket reduction,
        once reduce_bucket_size elements have been produced (or at the end of backward)."""
        self.produced += n
        if self.produced >= DS_REDUCE_BUCKET and not self.tl.has("grad_partition"):
            self.tl.alloc("grad_partition", "gradients", self._partition_bytes())

    def grad(self, key: str, n: int, mb: int) -> None:
        if n <= 0:
            return
        if self.s.zero >= 2:
            # contiguous_gradients: each grad is copied into the ipg bucket and freed
            self.tl.spike(key + ":bf16", "temporaries", self.st.grad_elem * n)
            self._count_produced(n)
            return
        # gradients in the parameters' dtype: 16-bit with bf16/fp16, fp32 with --precision fp32
        if not self.tl.has(key):
            self.tl.alloc(key, "gradients", self.st.grad_elem * n)
        else:
            self.tl.spike(key + ":new", "temporaries", self.st.grad_elem * n)

    def bulk_grads(self, j0: int, n: int) -> None:
        if self.s.zero >= 2:
            self._count_produced(self.plan.layer_train[j0] * n)
            return
        from trainmem.units import round_up_bytes as _r

        key = f"gbulk{j0}"
        if not self.tl.has(key):
            self.tl.alloc(key, "gradients", sum(_r(self.st.grad_elem * x) for x in self.plan.grad_pieces(j0) if x > 0) * n)

    def backward_end(self, mb: int) -> None:
        self.tl.free("ds_gathered")
        if self.s.zero == 2:
            self.tl.free("ipg_buffer")

    # -- optimizer ---------------------------------------------------------------------------------
    def before_step(self) -> None:
        if self.s.zero >= 2 and not self.tl.has("grad_partition"):
            self.tl.alloc("grad_partition", "gradients", self._partition_bytes())
        if not self.zero3:
            self.tl.free("ipg_buffer")

    def step(self) -> None:
        if self.st.step_grad_fp32:
            self.tl.alloc("fp32_grad_partition", "temporaries", self.st.step_grad_fp32)
        super().step()
        self.tl.free("fp32_grad_partition")

    def _freed_at_zero_grad(self, key: str) -> bool:
        # stage 3's gradient partition is a buffer from init, zeroed in place
        return key != "grad_buffer" and not (self.zero3 and key == "grad_partition")
