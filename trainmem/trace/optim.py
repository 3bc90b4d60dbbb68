"""The optimizers of the recipes, as a CUDA run builds them.

``foreach=True`` everywhere a ``torch.optim`` optimizer has it: that is the default for CUDA
tensors (``torch/optim/optimizer.py: _default_to_fused_or_foreach``), not for CPU ones, and the
foreach path allocates list-wide temporaries (AdamW: ``_foreach_sqrt(exp_avg_sq)`` for the whole
group; Adam with weight decay: a grad-sized ``_foreach_add``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from trainmem.errors import UnsupportedError

__all__ = ["build_optimizer", "Lion", "host_state_tensors"]

LR = 1e-4
WEIGHT_DECAY = 0.01


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), one momentum buffer.

    A minimal per-parameter (no foreach) implementation that allocates what lion-pytorch's
    ``update_fn`` does: one parameter-sized ``update`` temporary at a time.
    """

    def __init__(self, params: Iterable, lr: float = LR, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = WEIGHT_DECAY) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.clone().mul_(b1).add_(p.grad, alpha=1 - b1).sign_()
                p.add_(update, alpha=-group["lr"])
                del update
                exp_avg.mul_(b2).add_(p.grad, alpha=1 - b2)
        return None


def build_optimizer(name: str, params: list[torch.nn.Parameter], impl: str = "foreach") -> torch.optim.Optimizer:
    """The setup's optimizer; ``impl`` ``fused`` runs torch's fused kernels (``fused=True``: HF Trainer's
    ``adamw_torch_fused``, torchtitan's ``implementation = "fused"``), else ``foreach=True``."""
    kind = {"fused": True} if impl == "fused" else {"foreach": True}
    if name == "adamw":
        return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, **kind)
    if name == "adam":
        return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY, **kind)
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR, weight_decay=WEIGHT_DECAY, **kind)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=LR, momentum=0.9, weight_decay=WEIGHT_DECAY, **kind)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=LR, weight_decay=WEIGHT_DECAY, foreach=True)
    if name == "hf-adafactor":  # transformers' own, as HF Trainer optim="adafactor" builds it (trainer_optimizer.py)
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=LR, weight_decay=WEIGHT_DECAY, scale_parameter=False, relative_step=False)
    if name == "lion":
        return Lion(params)
    raise UnsupportedError(f"optimizer {name} cannot be traced; use `trainmem estimate`")


def host_state_tensors(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """State tensors that live on the host in a CUDA run: ``step`` counters of non-capturable,
    non-fused torch.optim optimizers (``torch.tensor(0.0)`` on the CPU)."""
    out = []
    for group in opt.param_groups:
        if group.get("capturable") or group.get("fused"):
            continue
        for p in group["params"]:
            st = opt.state.get(p, {})
            step = st.get("step")
            if isinstance(step, torch.Tensor):
                out.append(step)
    return out
