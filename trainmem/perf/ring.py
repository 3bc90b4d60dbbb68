"""Context parallelism as ring attention runs it: one attention kernel per ring step on that step's chunk,
and, in torch's implementation, the fp32 merges and gradient accumulations around those kernels.

Sources:

- torch ``torch/distributed/tensor/experimental/_attention.py`` (``_templated_ring_attention``,
  ``_templated_ring_attention_backward``, ``_SDPAMerger``; torchtitan v0.2.2 and 9dec370 run it through
  ``context_parallel`` with ``context_parallel_rotate_method = "allgather"``): with causal load balancing
  (``enable_load_balance``, the default) each rank holds chunks r and 2·cp − 1 − r of the 2·cp chunks of the
  sequence. Step 0 runs causal attention on the local s/cp tokens; each of the cp − 1 other steps runs one
  non-causal kernel, either all local queries against half a rotated KV block (i ≤ rank) or the second half
  of the queries against a whole block (i > rank) — equal FLOPs, so the FLOPs per rank are the causal
  total / cp, but spread over cp kernels on short key ranges. The last rank runs only the first kind (keys
  s/(2·cp) per query), the least efficient, and the steps synchronise on their collectives, so it sets the
  pace.
- Forward (``_SDPAMerger``, ``convert_to_f32`` on): each step's output is cast to fp32 and merged into the
  running output, ``out - sigmoid(lse_new - lse) * (out - out_new)``; the result is cast back at the end.
  The local K and V are concatenated for the rotater each step (``torch.cat``), all-gathered once
  (``_AllGatherRotater``) right before step 0 and waited for at step 1.
- Backward: fp32 ``zeros_like`` accumulators for dQ, dK, dV; each step adds its dQ, adds its dK/dV into the
  (half of the) rotating fp32 gradient block (``_partial_update``: an add and a ``torch.cat``), concatenates
  dK and dV (``torch.cat``) and sends them to the next rank (``_AllToAllRotater``, fp32); K and V are
  all-gathered again; the last dK/dV exchange is waited for at the end, exposed.
- Transformer Engine (Megatron) runs the same per-step kernels (``AttnFuncWithCPAndKVP2P``,
  ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``: q, k, v viewed as two
  load-balanced halves, one fused-attention call per step, alternate steps on two streams "to resolve wave
  quantization" — which fills the GPU but does not lengthen a step's key loop, so the per-step efficiency
  still applies); its point-to-point ring is the existing model of trainmem.perf.step.

Every function is one formula, pure, with its unit in its name.
"""

from __future__ import annotations

from trainmem.perf.kernels import attention_backward_seconds, attention_forward_seconds

__all__ = ["ring_step_keys", "ring_attention_seconds", "MERGE_FP32_BYTES_PER_ELEMENT", "sdpa_merge_hbm_bytes",
           "ring_backward_hbm_bytes", "MERGE_KERNELS_PER_STEP", "BACKWARD_KERNELS_PER_STEP",
           "torch_cp_forward_exposed_seconds", "torch_cp_backward_exposed_seconds"]

#: HBM bytes per fp32 output element of one merge (``_SDPAMerger._merge_one``): ``out - block_out`` reads 4 + 4 and
#: writes 4, the product with the sigmoid reads 4 and writes 4, the subtraction reads 4 + 4 and writes 4 (the
#: row-wise lse terms are b·h·s, negligible); the cast of the step's output to fp32 comes on top.
MERGE_FP32_BYTES_PER_ELEMENT = 32.0
#: Kernels of one merge step (cast of out and lse, sub, sigmoid, mul, sub, and the lse update's two).
MERGE_KERNELS_PER_STEP = 8
#: Kernels of one backward step besides the attention kernel (dQ add, dK/dV add and cat, the kv cat).
BACKWARD_KERNELS_PER_STEP = 8


def ring_step_keys(seq_len: int, cp: int) -> tuple[float, float]:
    """(keys per query of step 0, keys per query of every other step) on the pace-setting rank: the causal
    local block ((s/cp + 1)/2) and half a rotated block (s/(2·cp))."""
    local = seq_len / cp
    return (local + 1.0) / 2.0, local / 2.0


def ring_attention_seconds(tokens: int, heads: int, d_qk: int, d_v: int, seq_len: int, cp: int, kernel: str,
                           peak_flops: float) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's ring attention on one rank: step 0 causal over the local
    tokens, cp − 1 non-causal steps over half a block each, every kernel at the efficiency of its own key
    range (trainmem.perf.kernels). Same FLOPs in total as one causal kernel over the whole sequence ÷ cp."""
    k0, k1 = ring_step_keys(seq_len, cp)
    per_key = 2.0 * tokens * heads * (d_qk + d_v)
    f0, f1 = per_key * k0, per_key * k1
    fwd = (attention_forward_seconds(f0, kernel, k0, peak_flops)
           + (cp - 1) * attention_forward_seconds(f1, kernel, k1, peak_flops))
    bwd = (attention_backward_seconds(f0, kernel, k0, peak_flops)
           + (cp - 1) * attention_backward_seconds(f1, kernel, k1, peak_flops))
    return fwd, bwd


def sdpa_merge_hbm_bytes(out_elements: int, kv_elements: int, cp: int, act_bytes: int) -> float:
    """HBM bytes of one layer's forward ring around its kernels (torch, module docstring): step 0's output
    cast to fp32 (c + 4 per element), cp − 1 merges (cast + MERGE_FP32_BYTES_PER_ELEMENT), the final cast
    back (4 + c), and the K/V concatenation of each of the cp − 1 sending steps (2·c per K/V element)."""
    c = float(act_bytes)
    out = out_elements * ((c + 4) + (cp - 1) * (c + 4 + MERGE_FP32_BYTES_PER_ELEMENT) + (4 + c))
    return out + kv_elements * (cp - 1) * 2 * c


def ring_backward_hbm_bytes(q_elements: int, kv_elements: int, cp: int, act_bytes: int) -> float:
    """HBM bytes of one layer's backward ring around its kernels (torch, module docstring), pace-setting rank
    (every step i ≤ rank): fp32 zeros for dQ, dK, dV (4 each); per step the dQ add (8 + c); step 0's dK/dV add
    (8 + c), each later step's half-block add ((8 + c)/2) and ``torch.cat`` (8); the fp32 dK/dV concatenation
    for sending (8) and the K/V concatenation (2·c) each step; the final casts to 16 bits (4 + c)."""
    c = float(act_bytes)
    q = q_elements * (4 + cp * (8 + c) + (4 + c))
    kv = kv_elements * (4 + (8 + c) + (cp - 1) * ((8 + c) / 2 + 8) + cp * 8 + (cp - 1) * 2 * c + (4 + c))
    return q + kv


def torch_cp_forward_exposed_seconds(allgather_seconds: float, step0_seconds: float,
                                     contention_seconds: float) -> float:
    """Exposed seconds of the forward's one K/V all-gather: what step 0's kernel does not cover, plus the
    contention of the covered part (``contention_seconds``, trainmem.perf.overlap)."""
    return max(0.0, allgather_seconds - step0_seconds) + contention_seconds


def torch_cp_backward_exposed_seconds(allgather_seconds: float, step0_seconds: float, exchange_seconds: float,
                                      step_seconds: float, cp: int, contention_seconds: float) -> float:
    """Exposed seconds of the backward's collectives: the K/V all-gather under step 0, each of the cp − 1
    fp32 dK/dV exchanges under the next step's kernel, and the last exchange, waited for right after it is
    sent; plus the contention of what is covered (``contention_seconds``)."""
    hidden = max(0.0, allgather_seconds - step0_seconds) + (cp - 1) * max(0.0, exchange_seconds - step_seconds)
    return hidden + exchange_seconds + contention_seconds
