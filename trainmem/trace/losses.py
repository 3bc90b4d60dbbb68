"""The loss implementations of ``--loss`` run on the traced model: torchtune's chunked cross-entropy and a
fused linear cross-entropy with Liger-Kernel's memory behaviour.

- ``chunked``: torchtune ``CEWithChunkedOutputLoss`` (torchtune/modules/loss/ce_chunked_output_loss.py,
  with ``TransformerDecoder.chunked_output``): the LM head runs on ``k`` sequence chunks of the final hidden
  state, all chunk logits are returned (the recipe ``del``-s them before backward, loop "trainer"), and each
  chunk is upcast and cross-entropied on its own, summed and divided by the token count.
- ``fused-linear``: Liger-Kernel ``LigerFusedLinearCrossEntropyFunction`` (Liger-Kernel v0.8.2,
  src/liger_kernel/ops/fused_linear_cross_entropy.py ``fused_linear_cross_entropy_forward``, called by
  ``LigerForCausalLMLoss`` in transformers/model/loss_utils.py) runs Triton kernels that a CPU cannot;
  ``_FusedLinearCE`` is a pure-PyTorch function that makes the same allocations, statement by statement:
  ``grad_input = zeros_like(_input)`` (the final hidden state's dtype: fp32 under autocast) and
  ``grad_weight = zeros_like(weight)`` (accum_dtype None: the weight's dtype) and ``loss_1d`` (fp32, BT) are
  allocated first; per chunk of ``next_power_of_2(cdiv(BT, cdiv(V, H)))`` rows the logits are
  ``_input_chunk @ weight.t()`` under the caller's autocast (``amp_custom_fwd`` keeps it; ``weight.t()`` is
  a view, so its 16-bit cast is not cached and is made again for every chunk), the cross-entropy kernel
  turns them into their gradient in place, ``grad_input[chunk] = grad_logits @ weight`` (the weight's
  16-bit cast *is* cached: a leaf parameter, alive until autocast exits) and ``grad_weight`` is accumulated:
  with an fp32 ``grad_weight`` and 16-bit logits (autocast over fp32 weights) by ``torch.addmm(...,
  out_dtype=torch.float32, out=grad_weight)`` with no V·H temporary (torch >= 2.8 on CUDA sm >= 8.0, PR
  #1239/#1283/#1316), otherwise by ``grad_weight += torch.mm(grad_logits.t(), _input_chunk).float()`` (a
  V·H product and, for a 16-bit product, its fp32 copy). Only ``grad_input`` and ``grad_weight`` are saved;
  backward scales them in place and hands them out. It traces the memory timeline, not Liger's
  arithmetic.
- ``fused-ce``: flash-attn's ``CrossEntropyLoss`` (flash_attn/ops/triton/cross_entropy.py, v2.x; llm-foundry's
  ``fused_crossentropy``) on the LM head's logits as they are (no fp32 upcast). Its Triton kernels keep the
  fp32 arithmetic in registers; ``_FlashCE`` allocates what they allocate — ``losses``, ``lse`` and
  ``z_losses`` (fp32, per token) in forward, saving ``(logits, lse, labels)``, and ``dlogits =
  empty_like(logits)`` in backward — and does the arithmetic a few rows at a time (chunks of 1/1024 of the
  logits, at least 2^16 elements: fp32 temporaries of 0.4 % of the logits).

The final hidden state is computed by the model's own decoder (``model.base_model``), so everything before the
LM head is the real transformers code. Labels are shifted as transformers does (pad with -100, drop the
first).
"""

from __future__ import annotations

import types
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
    """Forward with ``setup.loss``; returns (what the caller holds as the model output, the loss).

    The loss runs inside the model's own ``forward`` (temporarily replaced, as Liger's ``lce_forward`` and
    torchtune's chunked-output decoder replace it), so module hooks on the model — FSDP2's root unit, which
    gathers the embedding, final norm and LM head — run around it as they do for the HF loss."""

    def forward(self: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, Any]:
        hidden = self.base_model(input_ids=input_ids, use_cache=False).last_hidden_state
        head = self.get_output_embeddings()
        if on_loss is not None:
            on_loss()
        target = _shift(labels)
        n_tokens = (target != IGNORE).sum()
        if setup.loss == "chunked":
            k = setup.loss_chunks or 8
            logits = [head(h) for h in hidden.chunk(k, dim=1)]
            loss = sum(F.cross_entropy(lg.float().flatten(0, 1), t.flatten(), ignore_index=IGNORE, reduction="sum")
                       for lg, t in zip(logits, target.chunk(k, dim=1)))
            return loss / n_tokens, logits
        if setup.loss == "fused-ce":
            logits = head(hidden)
            losses = _FlashCE.apply(logits.flatten(0, 1), target.flatten())
            return losses.sum() / n_tokens, logits
        b, s, h = hidden.shape
        w = head.weight
        rows = liger_chunk_rows(b * s, w.shape[0], h, setup.loss_chunks)
        return _FusedLinearCE.apply(hidden.reshape(b * s, h), w, target.flatten(), rows), None

    model.forward = types.MethodType(forward, model)
    try:
        loss, outputs = model(input_ids=ids, labels=labels)
    finally:
        del model.forward
    return outputs, loss


class _FusedLinearCE(torch.autograd.Function):
    """Liger's fused linear cross-entropy, allocation for allocation (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, rows: int) -> torch.Tensor:  # noqa: D102
        bt = x.shape[0]
        grad_x = torch.zeros_like(x)
        grad_w = torch.zeros_like(w) if w.requires_grad else None
        loss_1d = torch.zeros(bt, dtype=torch.float32)
        n = max(1, int((target != IGNORE).sum()))
        for start in range(0, bt, rows):
            xs, ts = x[start:start + rows], target[start:start + rows]
            logits = (xs @ w.t()).contiguous()                     # (rows, V); autocast: compute dtype
            # liger_cross_entropy_kernel: loss_1d[chunk] and d loss / d logits, in place
            logits.sub_(logits.amax(-1, keepdim=True)).exp_()
            logits.div_(logits.sum(-1, keepdim=True))
            valid = ts != IGNORE
            picked = logits.gather(1, ts.clamp(min=0)[:, None]).squeeze(1)
            loss_1d[start:start + rows] = -(picked.float().clamp_min(1e-30).log() * valid) / n
            logits.scatter_add_(1, ts.clamp(min=0)[:, None], -valid[:, None].to(logits.dtype))
            logits.mul_(1.0 / n)
            grad_x[start:start + rows] = logits @ w
            if grad_w is None:
                continue
            if grad_w.dtype == torch.float32 and logits.dtype in (torch.float16, torch.bfloat16):
                # torch.addmm(grad_weight, grad_logits.t(), input_chunk, out_dtype=float32, out=grad_weight);
                # the out= overload is not an autocast op (called as the OpOverload, the emulation's lists
                # hold the functional name only)
                xb = xs.to(logits.dtype) if xs.dtype != logits.dtype else xs
                torch.ops.aten.addmm.dtype_out(grad_w, logits.t(), xb, torch.float32, out=grad_w)
            else:
                grad_w += torch.mm(logits.t(), xs).float()
            del logits
        loss = torch.sum(loss_1d)
        ctx.save_for_backward(grad_x.detach(), grad_w.detach() if grad_w is not None else None)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # noqa: D102
        grad_x, grad_w = ctx.saved_tensors
        # element_mul_kernel scales them in place when grad_out is not 1 (a scaled or accumulated loss)
        grad_x.mul_(grad_out)
        if grad_w is not None:
            grad_w.mul_(grad_out)
        return grad_x, grad_w, None, None


def _rows_per_chunk(n_rows: int, n_cols: int) -> int:
    return max(1, max(2 ** 16, n_rows * n_cols // 1024) // n_cols)


class _FlashCE(torch.autograd.Function):
    """flash-attn's cross-entropy, allocation for allocation (see the module docstring); per-token losses."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: D102
        n_rows, n_cols = logits.shape
        losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        z_losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
        step = _rows_per_chunk(n_rows, n_cols)
        for start in range(0, n_rows, step):
            rows, ts = logits[start:start + step].float(), target[start:start + step]
            lse[start:start + step] = torch.logsumexp(rows, -1)
            picked = rows.gather(1, ts.clamp(min=0)[:, None]).squeeze(1)
            losses[start:start + step] = torch.where(ts == IGNORE, 0.0, lse[start:start + step] - picked)
            del rows, picked
        z_losses.zero_()
        ctx.save_for_backward(logits, lse, target)
        return losses

    @staticmethod
    def backward(ctx: Any, grad_losses: torch.Tensor) -> tuple[Any, ...]:  # noqa: D102
        logits, lse, target = ctx.saved_tensors
        dlogits = torch.empty_like(logits)
        step = _rows_per_chunk(*logits.shape)
        for start in range(0, logits.shape[0], step):
            ts = target[start:start + step]
            probs = (logits[start:start + step].float() - lse[start:start + step, None]).exp_()
            probs.scatter_add_(1, ts.clamp(min=0)[:, None], -torch.ones_like(probs[:, :1]))
            probs.mul_(torch.where(ts == IGNORE, 0.0, grad_losses[start:start + step])[:, None])
            dlogits[start:start + step] = probs
            del probs
        return dlogits, None
