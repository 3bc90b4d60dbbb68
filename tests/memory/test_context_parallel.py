"""fsdp2 context parallelism in the estimator, by hand from torch 2.13's ring attention
(torch/distributed/tensor/experimental/_context_parallel/_attention.py; trainmem/memory/context_parallel.py).
Traced counterpart: tests/trace/test_cp_trace.py."""

from __future__ import annotations

from tests.memory.tiny_configs import TINY
from trainmem.memory.activations import layer_saved
from trainmem.memory.layers.model_wide import model_wide_saved_bytes
from trainmem.memory.context_parallel import RingShape, ring_backward_peak, ring_forward_peak
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

# b = 1, 1024 local positions (seq 2048, cp 2), 8 heads of 32 (A = 256 q elements per token), 2 kv heads
# (K = 64): per token, bf16 q/out 512 B, k 128 B, fp32 lse 32 B; every tensor here is a multiple of 512 B.
R = RingShape(b=1, s=1024, a=8, kv=2, d=32, cp=2)
T = 1024


def test_ring_forward_peak_by_hand() -> None:
    # step 1's merge on rank 0, at the cat of the new fp32 output: all-gathered k/v (cp·2·128 = 512), merged
    # lse (32), the chunk's bf16 half output (256) and lse (16), its fp32 copy (512), the merged half (512)
    # and its lse (16), the old and the new fp32 output (2 × 1024)
    assert ring_forward_peak(R) == (512 + 32 + 256 + 16 + 512 + 512 + 16 + 2 * 1024) * T


def test_ring_backward_peak_by_hand() -> None:
    # step 1 (second half of q against the other chunk), inside the flash backward: fp32 dq/dk/dv
    # accumulators (1024 + 2 × 256), all-gathered k/v and its cat (512 + 256), the dk/dv ring's cat and
    # all-to-all output (2 × 512), step 0's dq, dk, dv (512 + 2 × 128), the contiguous lse and out halves
    # (16 + 256), then the kernel: softmax_d (16), dq_accum (512), dq (256), GQA dk/dv at 8 heads
    # (2 × 512), dk, dv (2 × 128)
    step1 = (1024 + 512) + (512 + 256) + 1024 + (512 + 256) + (16 + 256) + (16 + 512 + 256 + 1024 + 256)
    assert ring_backward_peak(R) == step1 * T


def test_cp_keeps_the_attention_output_copy_and_batched_rotary() -> None:
    """The ring's merged output is a new contiguous (b, a, s, d) tensor: HF's transpose(1, 2).contiguous()
    copies it and o_proj keeps the copy (c·a·d per token); torchtitan passes the sharded positions
    (b, s/cp), so rotary cos/sin are (b, s/cp, d)."""
    spec = spec_from_hf_config(TINY["llama-gqa"], name="llama-gqa")
    kw = dict(engine="fsdp2", precision="bf16", seq_len=2048, micro_batch=2)
    cp, ref = make_setup(gpus=2, cp=2, **kw), make_setup(gpus=2, **dict(kw, seq_len=1024))
    tokens, a_d = 2 * 1024, 8 * 32
    extra = layer_saved(spec, cp, 0).total_bytes - layer_saved(spec, ref, 0).total_bytes
    assert extra == 2 * a_d * tokens
    assert model_wide_saved_bytes(spec, cp) == 2 * model_wide_saved_bytes(spec, ref) == 2 * (2 * 1024 * 32 * 2)
