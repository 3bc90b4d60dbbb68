"""Plain PyTorch (DDP when dp > 1), and fsdp2 with tensor parallelism alone (torchtitan applies no
``fully_shard`` at dp = cp = 1): every rank holds its (TP-local) parameters, gradients and optimizer
states whole."""

from __future__ import annotations

from trainmem.memory.layers.base import is_amp
from trainmem.memory.engines.base import Engine, ModelStates, lora_base
from trainmem.memory.hf_adafactor import HF_ADAFACTOR, hf_adafactor_bytes
from trainmem.memory.states import optimizer_state_bytes, optimizer_step_temp_bytes, paged_optimizer_state_bytes

__all__ = ["TorchEngine"]


class TorchEngine(Engine):
    def model_states(self, notes: list[str]) -> ModelStates:
        s, rp = self.s, self.rp
        train_elem, base = lora_base(self.spec, s, rp, notes)
        if s.engine == "fsdp2":
            notes.append("fsdp2 with tensor parallelism only (dp = cp = 1): no fully_shard, as torchtitan runs it; "
                         "each rank holds its TP shard of parameters, gradients and optimizer states")
            if s.precision in ("amp-bf16", "amp-fp16"):  # layers.base.tp_only_fp32
                notes.append("fsdp2 with tensor parallelism only: torchtitan disables mixed precision without "
                             "FSDP (maybe_enable_amp), so the amp recipe computes in fp32")
        T = rp.trainable
        st = ModelStates(params=base + T * train_elem, grad_elem=train_elem,
                         states=optimizer_state_bytes(s, T, train_elem, self.spec),
                         step_temp=optimizer_step_temp_bytes(s, T, train_elem, train_elem))
        if s.optimizer == HF_ADAFACTOR:  # transformers' Adafactor: fp32 factored state, a per-tensor step
            st.states, st.step_temp = hf_adafactor_bytes(self.spec, s, train_elem)
        if s.optimizer_in_backward:
            st.step_temp = 0  # each parameter is stepped in its own backward (Engine.step_in_backward)
            notes.append("optimizer in backward (torchtune optimizer_in_bwd): one optimizer per parameter, stepped in "
                         "its post-accumulate-grad hook, which then frees the gradient; no gradient outlives its "
                         "parameter's backward")
        st.paged = paged_optimizer_state_bytes(self.spec, s)
        if st.paged:
            st.states -= st.paged
            notes.append(f"{s.optimizer} (bitsandbytes): the state buffers of parameters of >= 1e5 elements "
                         f"({st.paged / 2**30:.2f} GiB) are CUDA managed memory (cudaMallocManaged), outside torch's "
                         "allocator: not in max_memory_allocated/reserved; nvidia-smi shows them while resident; "
                         "paged out to host RAM when the GPU is full, so they never cause an OOM")
        if s.dp > 1:
            # DDP Reducer allocates one flat bucket tensor per bucket (gradient_as_bucket_view=False):
            # together a second copy of every trainable gradient (torch/csrc/distributed/c10d/reducer.cpp).
            st.comm_static = T * train_elem
            notes.append("DDP: bucket buffers hold a second copy of the gradients (gradient_as_bucket_view=False, the default)")
        return st

    def grad(self, key: str, n: int, mb: int) -> None:
        """Under autocast the 16-bit gradient of a weight's cast copy exists until it is accumulated into
        the fp32 ``.grad``."""
        if n <= 0:
            return
        amp16 = is_amp(self.s) and not self.s.is_lora
        if amp16:
            self.tl.alloc(key + ":16", "temporaries", 2 * n)
        super().grad(key, n, mb)
        self.tl.free(key + ":16")
