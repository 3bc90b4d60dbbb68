"""Megatron-LM (megatron-core DDP + optimizer): bf16 parameters, a persistent fp32 main-grad buffer
(``param_and_grad_buffer.py``), FusedAdam; ``--use-distributed-optimizer`` (zero 1) shards fp32 master
weights and Adam states over dp·cp for dense parameters and over the expert-data-parallel group for
experts."""

from __future__ import annotations

from trainmem.memory.engines.base import Engine, ModelStates, lora_base, local_experts, zero_shard_elems
from trainmem.memory.states import optimizer_state_bytes

__all__ = ["MegatronEngine"]


class MegatronEngine(Engine):
    def model_states(self, notes: list[str]) -> ModelStates:
        s, rp, spec = self.s, self.rp, self.spec
        lora_base(spec, s, rp, notes)
        T = rp.trainable
        # distributed optimizer: dense parameters shard over dp·cp, expert parameters over the
        # expert-data-parallel group, world / (etp·ep·pp) = dp·cp/ep with etp = tp
        # (megatron/core/parallel_state.py, expert data parallel group; distributed_data_parallel.py
        # builds expert buffers on it)
        T_sh = zero_shard_elems(T, local_experts(spec, s, rp), s.dp * s.cp if s.zero == 1 else 1, s.ep)
        if s.precision == "fp32":
            return ModelStates(params=4 * rp.total, grads_static=4 * T, grad_elem=4,
                               states=optimizer_state_bytes(s, T_sh, 4, spec))
        st = ModelStates(params=2 * rp.total, grads_static=4 * T,  # fp32 main-grad buffer, full size, persistent
                         grad_elem=4, master=4 * T_sh, states=optimizer_state_bytes(s, T_sh, 4, spec))
        if s.offload == "optimizer":
            st.host = st.master + st.states
            st.master = st.states = 0
            notes.append("Megatron --optimizer-cpu-offload: fp32 master weights and Adam states on the host")
        notes.append("Megatron: bf16 params, persistent fp32 main-grad buffer, FusedAdam; "
                     + ("distributed optimizer shards master+states over dp·cp" if s.zero == 1 else "optimizer replicated"))
        return st

    def grad(self, key: str, n: int, mb: int) -> None:
        """``main_grad += grad``: the 16-bit gradient is freed right away."""
        if n > 0:
            self.tl.spike(key + ":bf16", "temporaries", 2 * n)

    def bulk_grads(self, j0: int, n: int) -> None:
        """Gradients accumulate into the persistent main-grad buffer: nothing new."""
