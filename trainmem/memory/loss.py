"""Logits and the loss: often the largest single buffer (b·s·V elements).

``transformers`` (loss/loss_utils.py ``ForCausalLMLoss``) upcasts the logits to fp32 (``logits.float()``)
and runs ``cross_entropy``: log_softmax keeps its fp32 output; the 16-bit logits stay alive while the
caller holds the model output. At the loss backward, nll_loss's gradient (fp32) and log_softmax's input
gradient (fp32) are alive together: 2 + 4 + 4 + 4 = 14 B per b·s·V element (16 with fp32 logits).
Megatron's fused vocab-parallel cross entropy keeps one fp32 softmax buffer and computes the gradient in
place (megatron/core/tensor_parallel/cross_entropy.py): about 2 + 4 (+2 for the bf16 gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory.activations import compute_bytes, is_amp
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["LossBuffers", "loss_buffers"]


@dataclass(frozen=True, slots=True)
class LossBuffers:
    logits_bytes: int
    """Logits in the compute dtype, alive from the LM head until the step drops the model output."""
    kept_bytes: int
    """Other loss tensors kept from the loss forward to its backward (log-softmax output, softcap tanh)."""
    forward_transient_bytes: int
    """The fp32 upcast of the logits, alive only during the loss forward."""
    backward_transient_bytes: int
    """Gradients alive together at the loss backward (on top of logits and kept)."""
    grad_logits_bytes: int
    """The logits' gradient in the compute dtype, alive through the LM head backward."""


def loss_buffers(spec: ModelSpec, setup: TrainingSetup) -> LossBuffers:
    """Bytes of the logits/loss buffers for one micro-batch on the last stage."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    V = spec.vocab_size // setup.tp if setup.loss_parallel else spec.vocab_size
    c = compute_bytes(setup)
    n = T * V
    if setup.engine == "megatron":
        return LossBuffers(logits_bytes=c * n, kept_bytes=4 * n, forward_transient_bytes=0,
                           backward_transient_bytes=0, grad_logits_bytes=c * n if c == 2 else 0)
    if spec.is_encoder and c == 2 and not is_amp(setup):
        # *ForMaskedLM calls CrossEntropyLoss on the logits as they are (no fp32 upcast): in pure
        # 16-bit, log_softmax keeps a 16-bit output and its backward makes 16-bit gradients
        return LossBuffers(logits_bytes=c * n, kept_bytes=c * n, forward_transient_bytes=0,
                           backward_transient_bytes=2 * c * n, grad_logits_bytes=0)
    if setup.loss_parallel:
        return _dtensor_loss_parallel(spec, setup, n, c)
    kept = 4 * n
    if spec.final_logit_softcapping:
        kept += c * n  # tanh output kept for backward; division by the cap keeps nothing
    fwd = 4 * n if c == 2 else 0
    return LossBuffers(logits_bytes=c * n, kept_bytes=kept, forward_transient_bytes=fwd,
                       backward_transient_bytes=8 * n, grad_logits_bytes=c * n if c == 2 else 0)


def _dtensor_loss_parallel(spec: ModelSpec, setup: TrainingSetup, n: int, c: int) -> LossBuffers:
    """torchtitan's loss parallel (fsdp2 + tp): the output projection keeps logits vocab-sharded
    (``Shard(-1)``) and ``F.cross_entropy`` runs on the DTensor inside ``loss_parallel()``
    (torch/distributed/tensor/parallel/loss.py ``_log_softmax``/``_nll_loss_forward`` handlers, torch 2.13):
    the fp32 upcast (``pred.float()``), the shifted logits and their ``exp`` exist together in forward; the
    log-softmax (fp32) is kept; ``_log_softmax_backward_data`` makes ``exp(output)`` and the input gradient
    on top of the nll gradient: three fp32 V/t buffers at the loss backward (traced with MemTracker)."""
    kept = 4 * n + (c * n if spec.final_logit_softcapping else 0)
    return LossBuffers(logits_bytes=c * n, kept_bytes=kept, forward_transient_bytes=(8 if c == 2 else 4) * n,
                       backward_transient_bytes=12 * n, grad_logits_bytes=c * n if c == 2 else 0)
