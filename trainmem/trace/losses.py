"""The loss implementations of ``--loss`` run on the traced model: torchtune's chunked cross-entropy and a
fused linear cross-entropy with Liger-Kernel's memory behaviour.

- ``chunked``: torchtune ``CEWithChunkedOutputLoss`` (torchtune/modules/loss/ce_chunked_output_loss.py,
  with ``TransformerDecoder.chunked_output``): the LM head runs on ``k`` sequence chunks of the final hidden
  state, all chunk logits are returned (the recipe ``del``-s them before backward, loop "trainer"), and each
  chunk is upcast and cross-entropied on its own, summed and divided by the token count.
- ``fused-linear``: Liger-Kernel ``LigerFusedLinearCrossEntropyFunction``
  (liger_kernel/ops/fused_linear_cross_entropy.py) runs Triton kernels that a CPU cannot; ``_FusedLinearCE``
  is a pure-PyTorch function with the same allocations: per chunk of rows, the logits (compute dtype) are
  turned into their gradient in place, the input gradient is written into a preallocated b·s·h buffer and
  the weight gradient accumulated into a preallocated V·h buffer in the weight's dtype (through a 16-bit
  product and its fp32 copy, as Liger's default path does); backward only hands them out. It traces the
  memory timeline, not Liger's arithmetic.

The final hidden state is computed by the model's own decoder (``model.base_model``), so everything before the
LM head is the real transformers code. Labels are shifted as transformers does (pad with -100, drop the
first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn import functional as F

from trainmem.memory.loss import liger_chunk_rows

if TYPE_CHECKING:
    from trainmem.setup import TrainingSetup

__all__ = ["run_loss", "supports"]

IGNORE = -100


def supports(model: nn.Module) -> str | None:
    """Why ``model`` cannot run the chunked/fused losses here (None when it can)."""
    if not isinstance(model.get_output_embeddings(), nn.Linear) or model.base_model is model:
        return "a causal LM with an nn.Linear output projection on its base model"
    if getattr(model.config, "final_logit_softcapping", None):
        return "a model without final logit softcapping"
    return None


def _shift(labels: torch.Tensor) -> torch.Tensor:
    return F.pad(labels, (0, 1), value=IGNORE)[..., 1:]


def run_loss(model: nn.Module, setup: "TrainingSetup", ids: torch.Tensor, labels: torch.Tensor,
             on_loss: Any = None) -> tuple[Any, torch.Tensor]:
    """Forward with ``setup.loss``; returns (what the caller holds as the model output, the loss)."""
    hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state
    head = model.get_output_embeddings()
    if on_loss is not None:
        on_loss()
    target = _shift(labels)
    n_tokens = (target != IGNORE).sum()
    if setup.loss == "chunked":
        k = setup.loss_chunks or 8
        logits = [head(h) for h in hidden.chunk(k, dim=1)]
        loss = sum(F.cross_entropy(lg.float().flatten(0, 1), t.flatten(), ignore_index=IGNORE, reduction="sum")
                   for lg, t in zip(logits, target.chunk(k, dim=1)))
        return logits, loss / n_tokens
    b, s, h = hidden.shape
    w = head.weight
    rows = liger_chunk_rows(b * s, w.shape[0], h, setup.loss_chunks)
    loss = _FusedLinearCE.apply(hidden.reshape(b * s, h), w, target.flatten(), rows)
    return None, loss


class _FusedLinearCE(torch.autograd.Function):
    """Liger's fused linear cross-entropy, memory-for-memory (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, rows: int) -> torch.Tensor:  # noqa: D102
        dt = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype
        xc, wc = x.to(dt), w.to(dt)
        grad_x = torch.zeros_like(xc)
        grad_w = torch.zeros_like(w)
        total = x.new_zeros((), dtype=torch.float32)
        n = max(1, int((target != IGNORE).sum()))
        for start in range(0, x.shape[0], rows):
            xs, ts = xc[start:start + rows], target[start:start + rows]
            logits = xs @ wc.t()                                   # (rows, V), compute dtype
            logits.sub_(logits.amax(-1, keepdim=True)).exp_()
            logits.div_(logits.sum(-1, keepdim=True))              # softmax, in place
            valid = ts != IGNORE
            picked = logits.gather(1, ts.clamp(min=0)[:, None]).squeeze(1)
            total = total - (picked.float().clamp_min(1e-30).log() * valid).sum()
            logits.scatter_add_(1, ts.clamp(min=0)[:, None], -valid[:, None].to(logits.dtype))
            logits.mul_(1.0 / n)                                   # d loss / d logits, in place
            grad_x[start:start + rows] = logits @ wc
            grad_w.add_((logits.t() @ xs).float())                 # 16-bit product, fp32 copy
            del logits
        ctx.save_for_backward(grad_x, grad_w)
        ctx.x_dtype = x.dtype
        return total / n

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # noqa: D102
        grad_x, grad_w = ctx.saved_tensors
        # Liger multiplies in place when grad_out is not 1 (a scaled or accumulated loss)
        return grad_x.mul_(grad_out).to(ctx.x_dtype), grad_w.mul_(grad_out), None, None
