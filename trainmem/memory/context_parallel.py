"""Context parallelism's ring attention (fsdp2 ``--cp``): what rank 0 allocates in one attention call.

torch 2.13 ``torch/distributed/tensor/experimental/_context_parallel/_attention.py``, as torchtitan 0.2.2
runs it (head-tail load balancing, ``context_parallel_rotate_method="allgather"``); each rank holds
``T = b·s/cp`` tokens of q, k, v (``a``/``kv`` heads of ``d``), CUDA's flash kernel per k/v chunk.

Forward, ``_templated_ring_attention``: k and v ``.contiguous()`` (copies: HF's k/v are transposed
views unless kv = 1), ``cat(k, v)`` all-gathered once from every rank (``_AllGatherRotater``: cp·2·kv·d
per token, alive to the end). Rank 0 runs all its queries against its own chunk, then, at every later
step, the second half of its queries against a whole chunk; ``_SDPAMerger`` upcasts each chunk's output
to fp32 and ``_partial_update`` ``torch.cat``s the merged half into new full fp32 output and logsumexp
tensors; ``results()`` casts the output back: a new, contiguous ``[b, a, s, d]`` tensor, so HF's
``transpose(1, 2).contiguous()`` copies it for o_proj (one more ``c·a·d`` per token kept per layer, see
activations.py). Backward, ``_templated_ring_attention_backward``: fp32 ``zeros_like`` dq/dk/dv
accumulators, k/v contiguous and all-gathered again, ``cat(dk, dv)`` (fp32) rotated by all-to-all
(``_AllToAllRotater``: the received buffer, the next cat and its all-to-all output alive together);
CUDA's flash backward first makes the transposed ``out`` (and a non-contiguous ``grad_out`` chunk, b > 1)
contiguous (aten/src/ATen/native/transformers/cuda/attention_backward.cu ``_flash_attention_backward``),
then allocates dq, dk, dv, fp32 ``softmax_d`` / ``dq_accum`` and, with GQA, dk/dv at full head count
(flash_api.cpp ``mha_bwd``). Peaks traced allocation by allocation (trainmem/trace/cp.py, which runs these
torch functions; tests/trace/test_cp_trace.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmem.units import round_up_bytes as _r

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["RingShape", "ring_forward_peak", "ring_backward_peak", "ring_shape", "ring_transients"]


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


@dataclass(frozen=True, slots=True)
class RingShape:
    """One rank's attention call: ``s`` is the local sequence length (s / cp), ``c`` bytes of q/k/v."""

    b: int
    s: int
    a: int
    kv: int
    d: int
    cp: int
    c: int = 2

    def q(self, s: int) -> int:
        """Bytes of a q/out-shaped 16-bit tensor of ``s`` positions (fp32: ``2 * q``)."""
        return self.c * self.b * s * self.a * self.d

    @property
    def k(self) -> int:
        return self.c * self.b * self.s * self.kv * self.d

    def lse(self, s: int) -> int:
        return 4 * self.b * self.a * s


def _flash_backward_kernel(r: RingShape, s_q: int) -> int:
    """What CUDA's flash backward allocates for ``s_q`` queries against a whole chunk, alive at its end:
    softmax_d and dq_accum (fp32, s rounded to 128, d to 8, as trace/sdpa.py), dq, dk_expanded and
    dv_expanded at full heads with GQA, dk and dv."""
    sr = _up(s_q, 128)
    out = _r(4 * r.b * r.a * sr) + _r(4 * r.b * sr * r.a * _up(r.d, 8)) + _r(r.q(s_q)) + 2 * _r(r.k)
    if r.kv != r.a:
        out += 2 * _r(r.q(r.s))
    return out


def ring_forward_peak(r: RingShape) -> int:
    """Peak above the call's start of rank 0's ``_templated_ring_attention`` (cp ≥ 2): at a later step's
    merge, the new full fp32 output being ``cat`` while the old one, the half being merged, the chunk's
    fp32 copy, its 16-bit output and logsumexp, the merged logsumexp and the all-gathered k/v are alive
    (k/v's contiguous copies die before the second step's kernel)."""
    h, agg = r.s // 2, _r(r.cp * 2 * r.k)
    merge = agg + _r(r.lse(r.s)) + _r(r.q(h)) + 2 * _r(r.lse(h)) + 2 * _r(2 * r.q(h)) + 2 * _r(2 * r.q(r.s))
    if r.cp == 2:
        return merge
    # cp > 2: step 1 makes ``cat(k, v)`` again (dropped at once) while the contiguous k/v copies, step 0's
    # output, logsumexp and fp32 merged output are alive
    kv_copies = 2 * _r(r.k) if r.kv > 1 else 0
    return max(merge, kv_copies + agg + _r(r.q(r.s)) + _r(r.lse(r.s)) + _r(2 * r.q(r.s)) + _r(2 * r.k))


def ring_backward_peak(r: RingShape) -> int:
    """Peak above the call's start of rank 0's ``_templated_ring_attention_backward`` (cp ≥ 2): inside the
    flash backward of the first step, or of a later one (half of the queries, with the fp32 dk/dv ring's
    three buffers and the previous step's dq/dk/dv still alive)."""
    h, kv_copies = r.s // 2, (2 * _r(r.k) if r.kv > 1 else 0)
    acc = _r(2 * r.q(r.s)) + 2 * _r(2 * r.k)  # fp32 dq, dk, dv accumulators (or dk/dv received views)
    kv = _r(r.cp * 2 * r.k) + _r(2 * r.k)  # the all-gathered k/v and the cat that was gathered
    first = acc + kv + kv_copies + _r(r.q(r.s)) + _flash_backward_kernel(r, r.s)  # (+ out made contiguous)
    # step 1 (the largest later step: step 0's full dq is still held): + the dk/dv ring's received buffer's
    # successor cat and its all-to-all output (fp32), step 0's dq/dk/dv, the contiguous logsumexp and out
    # halves (and grad_out's, b > 1)
    later = (acc + kv + 2 * _r(4 * r.k) + _r(r.q(r.s)) + 2 * _r(r.k) + _r(r.lse(h)) + _r(r.q(h))
             + (_r(r.q(h)) if r.b > 1 else 0) + _flash_backward_kernel(r, h))
    return max(first, later)


def ring_shape(spec: "ModelSpec", setup: "TrainingSetup") -> RingShape:
    """This rank's attention call: s/cp positions, tp-local heads, 16-bit q/k/v (flash)."""
    return RingShape(b=setup.micro_batch, s=setup.seq_len // setup.cp, a=spec.num_attention_heads // setup.tp,
                     kv=max(spec.num_kv_heads // setup.tp, 1), d=spec.head_dim, cp=setup.cp)


def ring_transients(spec: "ModelSpec", setup: "TrainingSetup", pre_attention: int) -> tuple[int, int]:
    """(forward, backward) spikes of a layer with ring attention, as the walk places them: the forward's
    at the layer's start (``pre_attention``: what the layer has saved when SDPA runs: input norm, q, k,
    v); the backward's after o_proj's backward (+ its input gradient, SDPA's grad_out)."""
    r = ring_shape(spec, setup)
    grad_out = _r(r.c * r.b * r.s * r.a * spec.v_head_dim)
    return pre_attention + ring_forward_peak(r), grad_out + ring_backward_peak(r)
