"""Megatron-LM (megatron-core DDP + optimizer): bf16 parameters, a persistent main-grad buffer
(``param_and_grad_buffer.py``), FusedAdam; ``--use-distributed-optimizer`` (zero 1) shards fp32 master
weights and Adam states over dp·cp for dense parameters and over the expert-data-parallel group for
experts.

Two dtype knobs, as Megatron-Core r0.15 (commit 92c8482e6d, Megatron-Bridge 97ad8cc6fb27's submodule) has them:

- the main-grad buffer is fp32 unless ``grad_reduce_16bit``: ``distributed_data_parallel.py`` builds one
  buffer per (param dtype, grad dtype) with ``grad_dtype = torch.float if ddp_config.grad_reduce_in_fp32 else
  param.dtype``. Megatron-LM's ``arguments.py`` turns it on for ``--bf16`` unless ``--grad-reduce-in-bf16``;
  NeMo / Megatron-Bridge performance recipes turn it off. With a 16-bit buffer the optimizer makes fp32
  gradients at ``step()``: ``shard_main_param.grad = shard_model_grad.float()`` for the owned shard
  (``distrib_optimizer.py`` ``_copy_model_grads_to_main_grads``), ``main_param.grad =
  model_param.main_grad.float()`` for every parameter without it (``optimizer.py``).
- ``fp8_params`` (``--fp8-param-gather``, the model built under TE ``fp8_model_init``): the layers' linear
  weights are TE Float8Tensors, whose data live in a uint8 parameter buffer (``distributed_data_parallel.py``:
  ``param_dtype = torch.uint8`` for a Float8Tensor), 1 B per weight; embeddings, output layer and norms stay
  16-bit. Hopper keeps each weight's fp8 transpose on the tensor as well (see
  :func:`trainmem.memory.estimate.fp8_weight_cache_bytes`).
"""

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
        g = 2 if s.grad_reduce_16bit else 4
        params = 2 * rp.total
        if s.fp8_params:
            fp8 = sum(rp.layer_matmul)
            params = 2 * (rp.total - fp8) + fp8
        st = ModelStates(params=params, grads_static=g * T,  # main-grad buffer, full size, persistent
                         grad_elem=g, master=4 * T_sh, states=optimizer_state_bytes(s, T_sh, 4, spec),
                         step_grad_fp32=4 * T_sh if s.grad_reduce_16bit else 0)
        if s.offload == "optimizer":
            st.host = st.master + st.states + st.step_grad_fp32
            st.master = st.states = st.step_grad_fp32 = 0
            notes.append("Megatron --optimizer-cpu-offload: fp32 master weights and Adam states on the host")
        notes.append(("Megatron: bf16 params, persistent 16-bit main-grad buffer, FusedAdam; " if s.grad_reduce_16bit
                      else "Megatron: bf16 params, persistent fp32 main-grad buffer, FusedAdam; ")
                     + ("distributed optimizer shards master+states over dp·cp" if s.zero == 1 else "optimizer replicated"))
        if s.grad_reduce_16bit:
            notes.append("Megatron grad_reduce_in_fp32=False: gradients accumulate and reduce in 16 bits; the optimizer "
                         "casts the gradients of the parameters it owns to fp32 for step()")
        if s.fp8_params:
            notes.append("Megatron --fp8-param-gather: the layers' linear weights are stored in fp8 (1 B each, "
                         "uint8 parameter buffer) with their fp8 transpose (Hopper), not as bf16 plus an fp8 copy")
        return st

    def grad(self, key: str, n: int, mb: int) -> None:
        """``main_grad += grad``: the 16-bit gradient is freed right away."""
        if n > 0:
            self.tl.spike(key + ":bf16", "temporaries", 2 * n)

    def bulk_grads(self, j0: int, n: int) -> None:
        """Gradients accumulate into the persistent main-grad buffer: nothing new."""

    def step(self) -> None:
        """With a 16-bit main-grad buffer the optimizer casts the gradients of the parameters it owns to
        fp32 for the update (alive through ``step()``)."""
        self.tl.alloc("fp32_main_grads", "temporaries", self.st.step_grad_fp32)
        super().step()
        self.tl.free("fp32_main_grads")
